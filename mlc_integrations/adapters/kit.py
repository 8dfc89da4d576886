"""What the LangChain and LlamaIndex adapters share besides the conversation model
(:mod:`mlc_integrations.adapters.conversation`): one failure policy, their counters, and one
convention for per-call lookup tracking (``last_hit``, ``last_lookup``, ``track()``).

Failure policy (:class:`FailOpen`): input an adapter cannot key, a response it cannot
store, an entry it cannot read -- in strict mode a typed :class:`MLCError`; otherwise a
counted, logged no-op, and the user's LLM call goes on as if the cache were not there.

Outcomes (:class:`LookupRecord`): what one lookup did, as the caller's ``last_lookup``:
the hit, or why it missed -- the best candidate the verifier refused (its scores and the
reason), or that no candidate cleared the thresholds, or that the call could not be keyed.
:func:`note_lookup` records it, counts it per (scope, namespace) and logs a miss's reason
at DEBUG.

Tracking (:class:`LookupTracking`): ContextVars are created once, here, at module level
(a ContextVar per adapter instance would be kept alive, with its last value, by every
context that ever set it -- the main thread's for the life of the process).
The variable holds a mutable slot per context. A lookup made in a child task or thread
(LangChain's ``ainvoke``/``batch`` look up there, agents call LlamaIndex from theirs)
writes its record into its own slot and into every slot it inherited, so the context
that started the call sees it: ``last_hit`` after an ``ainvoke`` of a new question is
that question's outcome, never an earlier call's. A context holds a slot from its
first lookup on, or inherits one from the context it was started from; before that
there is nothing to report back to, and ``last_hit`` is None. Sibling tasks each read
their own lookups; callers that share one parent context and did no lookup themselves
see the latest of their children, so concurrent callers use :meth:`LookupTracking.track`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence, TypeVar

from ..errors import InvalidRequestError, MLCError, PayloadError
from ..request import DEFAULT_NAMESPACE, CacheControl, CacheRequest, Hit, Lookup, Refusal

if TYPE_CHECKING:
    from ..engine import MLCEngine

T = TypeVar("T")


# ---------------------------------------------------------------------------- counters
class Counters:
    """Thread-safe named counters of one adapter; ``names`` are reported even at zero.

    Lookups are also counted per (scope, namespace) (:meth:`lookup`), for at most
    ``MAX_SCOPES`` pairs; later pairs are pooled under the scope ``OTHER_SCOPES``.
    """

    MAX_SCOPES = 256  # a scope is a model configuration: thousands means a per-call field in it
    OTHER_SCOPES = "<other scopes>"

    def __init__(self, names: Sequence[str]) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {n: 0 for n in names}
        self._by_scope: dict[tuple[str, str], dict[str, int]] = {}

    def incr(self, name: str) -> None:
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + 1

    def lookup(self, scope: str, namespace: str, hit: bool) -> None:
        """Count one lookup as a hit or a miss, overall and for its (scope, namespace)."""
        outcome = "hits" if hit else "misses"
        with self._lock:
            self._counts[outcome] = self._counts.get(outcome, 0) + 1
            key = (scope, namespace)
            if key not in self._by_scope and len(self._by_scope) >= self.MAX_SCOPES:
                key = (self.OTHER_SCOPES, namespace)
            row = self._by_scope.setdefault(key, {"lookups": 0, "hits": 0, "misses": 0})
            row["lookups"] += 1
            row[outcome] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def by_scope(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{scope: {namespace: {"lookups", "hits", "misses"}}}`` (plain JSON)."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        with self._lock:
            for (scope, namespace), row in self._by_scope.items():
                out.setdefault(scope, {})[namespace] = dict(row)
        return out

    def merged(self, engine_stats: dict[str, Any], section: str, **extra: Any) -> dict[str, Any]:
        """``engine_stats`` with this adapter's counts under ``section``; ``lookups`` is
        ``hits + misses``, as in the engine's own numbers; ``by_scope`` splits them per
        scope and namespace (:meth:`by_scope`)."""
        counts: dict[str, Any] = dict(self.snapshot())
        counts["lookups"] = counts.get("hits", 0) + counts.get("misses", 0)
        counts["by_scope"] = self.by_scope()
        engine_stats[section] = {**counts, **extra}
        return engine_stats


# ---------------------------------------------------------------------------- one convention
def adapter_engine(who: str, engine: Optional["MLCEngine"], strict: Optional[bool],
                   engine_options: dict[str, Any]) -> tuple["MLCEngine", bool]:
    """The engine an adapter serves from, and whether the adapter owns it (then its
    ``close()`` closes it). The three adapters share this convention: ``engine=`` shares
    an engine whose settings -- ``strict`` included -- are its own, so giving both is a
    TypeError; otherwise the adapter builds one from ``strict`` and the engine options."""
    from ..engine import MLCEngine

    if engine is None:
        return MLCEngine(strict=bool(strict), **engine_options), True
    if not isinstance(engine, MLCEngine):
        raise TypeError(f"{who}(engine=...) takes an MLCEngine, got {type(engine).__name__}")
    given = sorted(engine_options) + (["strict"] if strict is not None else [])
    if given:
        raise TypeError(f"{who}(engine=...) uses that engine's settings; configure {', '.join(given)} on the "
                        "MLCEngine instead")
    return engine, False


# ---------------------------------------------------------------------------- failure policy
class FailOpen:
    """The adapters' one answer to "this cannot be cached": count it, then raise a typed
    error in strict mode or log and carry on.

    ``strict`` is read at each failure (a wrapper's setting may change after it is built).
    """

    def __init__(self, counters: Counters, strict: Callable[[], bool], log: logging.Logger) -> None:
        self.counters = counters
        self._strict = strict
        self._log = log

    def fail(self, what: str, exc: BaseException, *, counter: Optional[str] = None,
             error: type[MLCError] = InvalidRequestError, level: Optional[int] = None,
             outcome: str = "") -> None:
        """Handle the failure ``exc``. Strict: re-raise an :class:`MLCError` as is, wrap
        anything else in ``error``. Otherwise log ``what`` and the ``outcome`` (what
        happens instead) at ``level``: INFO for an expected :class:`MLCError`, WARNING
        for anything else (a bug here or in the framework)."""
        if counter is not None:
            self.counters.incr(counter)
        if self._strict():
            if isinstance(exc, MLCError):
                raise exc
            raise error(f"{what}: {type(exc).__name__}: {exc}") from exc
        if level is None:
            level = logging.INFO if isinstance(exc, MLCError) else logging.WARNING
        self._log.log(level, "%s%s: %s: %s", what, f" ({outcome})" if outcome else "", type(exc).__name__, exc)

    def attempt(self, what: str, fn: Callable[..., T], *args: Any, counter: Optional[str] = None,
                error: type[MLCError] = InvalidRequestError, level: Optional[int] = None,
                outcome: str = "") -> Optional[T]:
        """``fn(*args)``, or None after :meth:`fail` (fail-open mode)."""
        try:
            return fn(*args)
        except Exception as exc:
            self.fail(what, exc, counter=counter, error=error, level=level, outcome=outcome)
            return None

    def unreadable_entry(self, engine: "MLCEngine", hit: Hit, exc: BaseException) -> None:
        """A stored entry this adapter cannot read (another program's, an older format):
        delete it so that the call's answer can be stored in its place, then fail
        (counted in ``unreadable_entries``; strict raises :class:`PayloadError`)."""
        self.attempt("could not delete an unreadable cache entry", engine.delete, hit.entry_id,
                     error=PayloadError, level=logging.WARNING, outcome="the next lookup tries again")
        # always wrapped, even an MLCError: the error must name the entry, not only the reason
        unreadable = PayloadError(f"cache entry {hit.entry_id[:12]} is unreadable: {type(exc).__name__}: {exc}")
        unreadable.__cause__ = exc
        self.fail("cache entry not used", unreadable, counter="unreadable_entries", level=logging.WARNING,
                  outcome="treated as a miss")


# ---------------------------------------------------------------------------- lookup tracking
@dataclass(frozen=True)
class LookupRecord:
    """One lookup as an adapter saw it: ``hit`` is None on a miss; ``kind`` says what was
    looked up (``"chat"``, ``"text"``, ``"complete"``) or ``"invalid"`` (not keyable).

    On a miss, ``refused`` is the best candidate that cleared the similarity thresholds
    and was refused (its tier, scores, thresholds and ``reason``), ``tiers`` each tier's
    outcome (``hit``/``miss``/``refused``/``skipped``) and ``note`` what the adapter did
    (e.g. dropped an unreadable entry); :attr:`reason` says it in one sentence.
    """

    hit: Optional[Hit]
    kind: str
    text: str
    n_images: int
    scope: str
    namespace: str = DEFAULT_NAMESPACE
    refused: Optional[Refusal] = None
    tiers: Mapping[str, str] = field(default_factory=dict)
    note: str = ""
    error: str = ""  # the lookup failed: the error's type and message

    @property
    def llm_string(self) -> str:
        """LangChain's name for the scope."""
        return self.scope

    @property
    def reason(self) -> str:
        """Why this lookup missed ("" for a hit)."""
        if self.hit is not None:
            return ""
        if self.note:
            return self.note
        if self.kind == "invalid":
            return "the call could not be keyed (it went to the model uncached)"
        if self.error:
            return f"the lookup failed: {self.error} (counted in the engine's stats()['errors'])"
        if self.refused is not None:
            return self.refused.explain()
        if not self.tiers:
            return "the lookup failed (counted in the engine's stats()['errors'])"
        outcomes = " ".join(f"{t}:{o}" for t, o in self.tiers.items())
        if all(o == "skipped" for o in self.tiers.values()):
            return f"no tier applies to this request [{outcomes}]"
        return f"no stored entry cleared the similarity thresholds [{outcomes}]"

    def explain(self) -> str:
        """The hit's :meth:`Hit.explain`, or ``"miss: "`` and :attr:`reason`."""
        return self.hit.explain() if self.hit is not None else f"miss: {self.reason}"

    @classmethod
    def of(cls, request: Optional[CacheRequest], kind: str, scope: str, lookup: Optional[Lookup] = None, *,
           namespace: str = DEFAULT_NAMESPACE, note: str = "") -> "LookupRecord":
        """The record of ``lookup`` (the engine's :meth:`~MLCEngine.lookup_explained`)
        for ``request``; with a ``note`` the lookup's hit was not used."""
        hit = lookup.hit if lookup is not None and not note else None
        refused = lookup.refused if lookup is not None else None
        tiers = dict(lookup.tiers) if lookup is not None else {}
        error = lookup.error if lookup is not None else ""
        if request is None:
            return cls(hit, kind, "", 0, scope, namespace, refused, tiers, note, error)
        return cls(hit, kind, request.text if isinstance(request.text, str) else "",
                   len(request.images) if isinstance(request.images, (list, tuple)) else 0, scope,
                   request.namespace if isinstance(request.namespace, str) else namespace, refused, tiers, note,
                   error)


def explained_lookup(engine: "MLCEngine", request: CacheRequest, on_failure: Callable[[Lookup], None],
                     control: Optional[CacheControl] = None) -> Lookup:
    """``engine.lookup_explained(request)``; when it raises (strict mode), ``on_failure``
    first records the failed lookup, so ``last_lookup`` describes this call, not the one
    before it."""
    try:
        return engine.lookup_explained(request, control=control)
    except MLCError as exc:
        failed = getattr(exc, "lookup", None)
        on_failure(failed if isinstance(failed, Lookup) else Lookup(hit=None, error=f"{type(exc).__name__}: {exc}"))
        raise


T_restored = TypeVar("T_restored")

# The call keyword every adapter reads its per-call cache control from (removed before the
# call is keyed or passed on: it is not a model parameter).
CONTROL_KWARG = "cache_control"


def take_control(kwargs: dict[str, Any], default: Any = None) -> CacheControl:
    """Pop the call's ``cache_control`` (a :class:`CacheControl`, a mode name or a dict)
    from ``kwargs``; a bad value is a :class:`~mlc_integrations.ConfigurationError`."""
    return CacheControl.of(kwargs.pop(CONTROL_KWARG, default))


def lookup_and_restore(engine: "MLCEngine", fail_open: "FailOpen", request: CacheRequest,
                       restore: Callable[[Hit], T_restored], on_failure: Callable[[Lookup], None],
                       control: Optional[CacheControl] = None) -> tuple[Lookup, Optional[T_restored], str]:
    """The adapters' one lookup path: look up (``control`` may skip it), rebuild the
    framework's response from a hit, and delete an entry that cannot be rebuilt (another
    program's, an older format). Returns (lookup, restored response or None, note)."""
    found = explained_lookup(engine, request, on_failure, control)
    if found.hit is None:
        return found, None, ""
    try:
        return found, restore(found.hit), ""
    except Exception as exc:
        fail_open.unreadable_entry(engine, found.hit, exc)
        return found, None, f"entry {found.hit.entry_id[:12]} ({found.hit.tier}) was unreadable and is deleted"


def release(engine: "MLCEngine", request: Optional[CacheRequest]) -> None:
    """The model call for ``request`` failed or will not be stored: identical calls waiting
    for its answer call the model themselves (runtime/inflight.py)."""
    if request is not None:
        engine.release(request)


@contextmanager
def released_on_failure(engine: "MLCEngine", request: Optional[CacheRequest]) -> Iterator[None]:
    try:
        yield
    except BaseException:
        release(engine, request)
        raise


class StreamOutcome:
    """Counts an inner stream that raised or was abandoned (``GeneratorExit``: the caller
    stopped reading; ``keyed``: only streams the cache would have stored); such a stream
    is never stored, and identical calls waiting for it go on."""

    def __init__(self, counters: "Counters", keyed: bool, on_failure: Callable[[], None]) -> None:
        self._counters = counters
        self._keyed = keyed
        self._on_failure = on_failure

    def __enter__(self) -> "StreamOutcome":
        return self

    def __exit__(self, exc_type: Optional[type], exc: Optional[BaseException], tb: Any) -> None:
        if exc_type is not None and self._keyed:
            self._counters.incr("streams_unfinished")
            self._on_failure()


def _short(text: str, n: int = 60) -> str:
    text = re.sub(r"\s+", " ", text)
    return text if len(text) <= n else text[: n - 3] + "..."


def note_lookup(record: LookupRecord, counters: Counters, tracking: "LookupTracking", log: logging.Logger) -> None:
    """Record a lookup for the calling context (``last_lookup``), count it per scope and
    namespace, and say at DEBUG why a miss missed."""
    tracking.record(record)
    counters.lookup(record.scope, record.namespace, record.hit is not None)
    if record.hit is None and log.isEnabledFor(logging.DEBUG):
        log.debug("cache miss for %s %r (%d image(s)): %s", record.kind, _short(record.text), record.n_images,
                  record.reason)


def split_deltas(text: str) -> list[str]:
    """Pieces of ``text`` (a word and the whitespace before it) that join back to it
    exactly: how both adapters replay a stored answer as a stream."""
    if not text:
        return [""]
    return [p for p in re.split(r"(?<=\S)(?=\s)", text) if p] or [text]


@dataclass
class LookupTracker:
    """Every lookup of one adapter made inside :meth:`LookupTracking.track`, from any
    thread or asyncio task started inside the block (they inherit the context)."""

    records: list[LookupRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _add(self, record: LookupRecord) -> None:
        with self._lock:
            self.records.append(record)

    @property
    def hits(self) -> list[Hit]:
        return [r.hit for r in self.records if r.hit is not None]

    @property
    def misses(self) -> int:
        return sum(1 for r in self.records if r.hit is None)

    @property
    def last_hit(self) -> Optional[Hit]:
        return self.records[-1].hit if self.records else None


class _Slot:
    """The latest record per adapter, as seen by the context that owns this slot."""

    __slots__ = ("owner", "records", "parent")

    def __init__(self, owner: tuple[int, int], parent: "Optional[_Slot]") -> None:
        self.owner = owner
        self.records: dict[int, LookupRecord] = {}
        self.parent = parent


_SLOT: ContextVar[Optional[_Slot]] = ContextVar("mlc_adapter_lookups", default=None)
_TRACKERS: ContextVar[tuple[tuple[int, LookupTracker], ...]] = ContextVar("mlc_adapter_trackers", default=())
_slots_lock = threading.Lock()  # a parent's slot is written from its children's threads
_adapter_ids = itertools.count(1)


def _owner() -> tuple[int, int]:
    """Who runs now: the thread, and the asyncio task if any. A context copied into a new
    thread or task has another owner, so it gets a slot of its own (linked to the one it
    inherited); a context that stays where it is keeps writing its own slot."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running event loop in this thread
        task = None
    return threading.get_ident(), id(task) if task is not None else 0


class LookupTracking:
    """Per-call lookup tracking for one adapter instance (see the module docstring)."""

    def __init__(self) -> None:
        self._id = next(_adapter_ids)

    @staticmethod
    def _own_slot() -> _Slot:
        owner = _owner()
        slot = _SLOT.get()
        if slot is None or slot.owner != owner:
            slot = _Slot(owner, slot)
            _SLOT.set(slot)
        return slot

    def open(self) -> None:
        """Give the calling context its slot now, before its first lookup, so that the
        lookups of the tasks and threads it is about to start report back to it. An
        adapter that owns the call's entry point (``ainvoke``, ``batch``) calls this
        there; then ``last_hit`` is right even for a caller that never looked up before."""
        self._own_slot()

    def _write(self, record: LookupRecord) -> None:
        slot = self._own_slot()
        with _slots_lock:
            s: Optional[_Slot] = slot
            while s is not None:
                s.records[self._id] = record
                s = s.parent

    def record(self, record: LookupRecord) -> None:
        self._write(record)
        for owner, tracker in _TRACKERS.get():
            if owner == self._id:
                tracker._add(record)

    @property
    def last_lookup(self) -> Optional[LookupRecord]:
        slot = _SLOT.get()
        return slot.records.get(self._id) if slot is not None else None

    @property
    def last_hit(self) -> Optional[Hit]:
        record = self.last_lookup
        return record.hit if record is not None else None

    @contextmanager
    def track(self) -> Iterator[LookupTracker]:
        tracker = LookupTracker()
        token = _TRACKERS.set(_TRACKERS.get() + ((self._id, tracker),))
        try:
            yield tracker
        finally:
            _TRACKERS.reset(token)
