"""MLCEngine: the facade of the three-tier cache (exact -> text-semantic -> image+text).

It holds the options, runs the tiers cheapest first, computes an update's vectors
before anything is written, and is the one place where failures become misses
(default) or typed errors (``strict=True``). The work itself lives in modules named
after it — keying (:mod:`.keys`), vectors (:mod:`.encoders`), tiers (:mod:`.tiers`),
the Chroma schema (:mod:`.entries`), expiry and eviction (:mod:`.eviction`), the
verifier (:mod:`.verify`) — see docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import uuid
import functools
import logging
import threading
import time
from typing import Any, Callable, Optional

from .store.dirlock import DirectoryLock
from .embed.encoders import TierEncoders
from .store.entries import NO_EXPIRY, EntryKeys, EntryMeta, EntryStore, NewEntry, answer_of, serialize_payload
from .errors import InvalidRequestError, MLCError, StorageError, first_time
from .store.eviction import Eviction
from .images import DecodedImage
from .keys import Keyer, KeyedRequest, model_label, scope_digest
from .embed.image_towers import DEFAULT_IMAGE_ENCODER, ImageEncoder
from .runtime.inflight import InFlight, coalesced_in_thread
from .embed.models import TextEmbedder
from .request import CacheControl, CacheRequest, Hit, Lookup, Refusal, is_empty_payload
from .runtime.stats import EngineStats, engine_stats
from .store.chroma import ChromaStore
from .config import Limits, StorageOptions, TierOptions, VerifierOptions, WriteOptions, resolve_options
from .tiers import (
    DEFAULT_L1_THRESHOLD,
    DEFAULT_L2_IMAGE_THRESHOLD,
    DEFAULT_L2_PROMPT_THRESHOLD,
    ExactTier,
    MultimodalTier,
    TextSemanticTier,
)
from .runtime import shutdown, telemetry
from .store.writebehind import PendingEntries
from .verify import VerificationPolicy, make_policy

__all__ = ["MLCEngine", "answer_of", "DEFAULT_L1_THRESHOLD", "DEFAULT_L2_IMAGE_THRESHOLD",
           "DEFAULT_L2_PROMPT_THRESHOLD"]

log = logging.getLogger(__name__)

# How long a closing engine waits for its write-behind queue (a server outage must not
# hang an exiting program forever; what is left is reported at WARNING with its count).
CLOSE_DRAIN_TIMEOUT_S = 60.0


def release_engine(pending: Optional[PendingEntries], eviction: Eviction, store: ChromaStore,
                   dir_lock: Optional[DirectoryLock], warm: Optional[threading.Thread],
                   warm_stop: threading.Event, keep_counters: Optional[Callable[[], None]] = None) -> None:
    """An engine's teardown, in order: the warm start (told to stop after its current
    step, then awaited: a model still loading in native code while the interpreter tears
    down crashed a script that exited right after building an engine), pending entries,
    last-access times, the store (a clean close: the next open need not check its
    indexes), the directory lock. Never raises: it also runs at interpreter exit (shutdown.py)."""
    warm_stop.set()
    if warm is not None and warm.is_alive() and warm is not threading.current_thread():
        warm.join(CLOSE_DRAIN_TIMEOUT_S)
    if pending is not None:
        if not pending.drain(CLOSE_DRAIN_TIMEOUT_S):
            log.warning("cache closing: %d acknowledged entries were not written within %.0f s (lost)",
                        len(pending), CLOSE_DRAIN_TIMEOUT_S)
        pending.close()
    steps = [("last-access times", eviction.flush), ("store", store.close)]
    if keep_counters is not None:
        steps.insert(0, ("traffic counters", keep_counters))
    for what, step in steps:
        try:
            step()
        except Exception as exc:
            log.warning("cache closing: %s not written/closed: %s: %s", what, type(exc).__name__, exc)
    if dir_lock is not None:
        dir_lock.release()


COUNTERS_EVERY = 1000  # lookups between two writes of the traffic counters (also written at release)


def _keep_counters(entries: EntryStore, stats: EngineStats, token: str) -> None:
    try:
        entries.write_counters(token, stats.persisted())
    except Exception as exc:  # counters are a view: a failed write never costs a call
        log.debug("traffic counters not written: %s", exc)


class MLCEngine:
    """Decide whether an earlier response can be reused for a multimodal request.

    Tiers run cheapest first and stop at the first hit:

    * ``L0.5`` exact: same scope, namespace, context, normalized text, image pixels.
    * ``L1`` text semantics: same scope, namespace, context and image pixels; text
      embedding cosine >= ``l1_threshold``, then the verifier accepts.
    * ``L2`` multimodal: same scope, namespace and context; every image's similarity
      >= ``l2_image_threshold`` *and* prompt similarity >= ``l2_prompt_threshold``,
      each on its own, then the verifier accepts.

    Everyday options are keywords: where entries live (in memory by default,
    ``persist_directory`` embedded and persistent, ``chroma_host``/``chroma_port`` a shared
    server), which models (``text_model``: a sentence-transformers name or path, a
    LangChain ``Embeddings``, a LlamaIndex ``BaseEmbedding`` or a callable from texts to
    vectors; ``image_encoder``: see :mod:`.image_encoders`, None switches L2 off), the
    thresholds, ``ttl``, ``max_entries``, ``strict``, ``durable``, ``warm_start`` and
    ``verifier``. Expert knobs live in small objects (:mod:`.config`): ``storage=``
    :class:`StorageOptions`, ``writes=`` :class:`WriteOptions`, ``limits=``
    :class:`Limits`, ``tiers=`` :class:`TierOptions`, ``verifier=`` :class:`VerifierOptions`.

    Default fail-open: a lookup error is a counted miss, an update error a logged,
    counted no-op. ``strict=True`` raises :class:`~mlc_integrations.errors.MLCError`
    subclasses instead. Updates are write-behind: ``update()`` returns once the entry is
    in memory (visible to lookups here) and a background thread writes it (at most
    ``WriteOptions.max_pending`` wait); ``flush()``, ``close()``, garbage collection and
    the process's exit drain it. ``durable=True`` (the default with ``strict=True``)
    writes before returning. ``clock`` (seconds) is injectable for tests of TTLs.
    """

    def __init__(
        self,
        *,
        persist_directory: Optional[str] = None,
        chroma_host: Optional[str] = None,
        chroma_port: int = 8000,
        text_model: Any = None,
        image_encoder: Any = DEFAULT_IMAGE_ENCODER,
        l1_threshold: float = DEFAULT_L1_THRESHOLD,
        l2_image_threshold: Optional[float] = None,
        l2_prompt_threshold: float = DEFAULT_L2_PROMPT_THRESHOLD,
        ttl: Optional[float] = None,
        max_entries: Optional[int] = None,
        strict: bool = False,
        durable: Optional[bool] = None,
        warm_start: Optional[bool] = None,
        verifier: Any = "default",
        storage: Optional[StorageOptions] = None,
        writes: Optional[WriteOptions] = None,
        limits: Optional[Limits] = None,
        tiers: Optional[TierOptions] = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        storage, writes, limits, tiers = resolve_options(storage, writes, limits, tiers)
        judge = VerifierOptions.of(verifier)
        self.encoders = TierEncoders(text_model=text_model, text_backend=tiers.text_backend,
                                     image_encoder=image_encoder, l2_prompt_encoder=tiers.l2_prompt_encoder,
                                     enable_l2=image_encoder is not None)
        if l2_image_threshold is None:  # each image tower is calibrated on its own (image_encoders.py)
            l2_image_threshold = self.encoders.image_threshold or DEFAULT_L2_IMAGE_THRESHOLD
        for name, v in (("l1_threshold", l1_threshold), ("l2_image_threshold", l2_image_threshold),
                        ("l2_prompt_threshold", l2_prompt_threshold)):
            if not (-1.0 <= float(v) <= 1.0):
                raise ValueError(f"{name} must be a cosine similarity in [-1, 1], got {v}")
        if ttl is not None and ttl <= 0:
            raise ValueError("ttl must be positive seconds or None")

        self.store = ChromaStore(persist_directory=persist_directory, chroma_host=chroma_host, chroma_port=chroma_port,
                                 **storage.store_arguments())
        self._dir_lock = DirectoryLock.acquire(persist_directory) if self.store.mode == "persistent" else None
        self.enable_exact = tiers.exact
        self.enable_l1 = tiers.l1
        self.ttl = ttl
        self.strict = strict
        self.store_prompts = writes.store_prompts
        self.max_response_bytes = limits.max_response_bytes
        self._clock = clock  # wall-clock seconds; injectable so TTL tests need no sleeping
        self._stats = EngineStats()
        self.keyer = Keyer(max_image_pixels=limits.max_image_pixels, max_image_bytes=limits.max_image_bytes,
                           max_prompt_chars=limits.max_prompt_chars)
        self.durable = strict if durable is None else bool(durable)
        self.pending: Optional[PendingEntries] = None
        evidence = tiers.image_evidence
        if evidence == "auto":  # where the cache lives: at rest unless the whole cache is in memory
            evidence = "memory" if self.store.mode == "ephemeral" else "store"
        self.entries = EntryStore(self.store, self._stats, on_deleted=self._forget, image_evidence=evidence,
                                  sole_writer=self._sole_writer, vectors_in_memory=storage.vectors_in_memory)
        self.eviction = Eviction(self.entries, self._stats, clock, max_entries=max_entries,
                                 policy=storage.eviction_policy)
        if not self.durable:
            self.pending = PendingEntries(
                self.entries.put_many, after_write=self.eviction.after_insert,
                max_pending=writes.max_pending, on_error=self._write_failed)
            self.entries.attach_pending(self.pending)
        # Verifier between retrieval and reuse (verify/, docs/verification.md); None = raw cosine only.
        self.verification: Optional[VerificationPolicy] = make_policy(
            judge.model, min_precision=judge.min_precision, max_false_hit_rate=judge.max_false_hit_rate,
            explore_rate=judge.explore_rate, text_model=self.encoders.text_model_name,
            embedding_head=judge.embedding_head, text_embedder=lambda: self.encoders.text_embedder,
            max_wrong_reuse=judge.max_wrong_reuse)
        if self.verification is None and l1_threshold < 0.95:
            log.warning("verifier is off and l1_threshold=%.2f: raw cosine alone reuses negated and reworded "
                        "questions below 0.95 (see docs/verification.md)", l1_threshold)
        access = self.eviction.access
        self.exact_tier = ExactTier(self.entries, access)
        common = (self.entries, access, self._stats, self.encoders, self.verification)
        self.text_tier = TextSemanticTier(*common, threshold=float(l1_threshold),
                                          prescreen_threshold=tiers.l1_prescreen)
        self.multimodal_tier = MultimodalTier(*common, image_threshold=float(l2_image_threshold),
                                              prompt_threshold=float(l2_prompt_threshold),
                                              prescreen_threshold=tiers.l2_prescreen,
                                              image_verifier=tiers.image_verifier)
        self.inflight = InFlight(tiers.inflight_wait_s)  # identical requests in flight wait for the first's answer (inflight.py)
        self._warm: Optional[threading.Thread] = None
        self._warm_stop = threading.Event()
        self._warm_models = bool(warm_start if warm_start is not None else self.store.mode != "ephemeral")
        if self._warm_models:
            # A long-lived cache opens its store (index check) and loads its models now, in the background.
            self._warm = threading.Thread(target=self._warm_start, name="mlc-warm-start", daemon=True)
        elif self.verification is not None:
            # An in-memory engine loads its models on first use, but the verifier's lexicon
            # (pure Python, ~0.5 s) loads now in the background: else the first L1 hit pays it.
            self._warm = threading.Thread(target=self._warm_verifier, name="mlc-warm-verifier", daemon=True)
        # Released once: close(), garbage collection, interpreter exit or SIGTERM (shutdown.py).
        # A persistent or shared cache keeps its traffic counters at rest (`mlc stats` reads them):
        # at release, and every COUNTERS_EVERY lookups from a short background thread.
        self._counters_token = uuid.uuid4().hex
        self._keep_counters = (functools.partial(_keep_counters, self.entries, self._stats, self._counters_token)
                               if self.store.mode != "ephemeral" else None)
        self._release = shutdown.register(self, release_engine, self.pending, self.eviction, self.store,
                                          self._dir_lock, self._warm, self._warm_stop, self._keep_counters)
        if self.pending is not None:
            shutdown.install_sigterm_handler()
        if self._warm is not None:
            self._warm.start()

    # ------------------------------------------------------------------ options, read-only views
    l1_threshold = property(lambda self: self.text_tier.threshold)
    l2_image_threshold = property(lambda self: self.multimodal_tier.image_threshold)
    l2_prompt_threshold = property(lambda self: self.multimodal_tier.prompt_threshold)
    max_entries = property(lambda self: self.eviction.max_entries)
    max_image_pixels = property(lambda self: self.keyer.max_image_pixels)
    max_image_bytes = property(lambda self: self.keyer.max_image_bytes)
    max_prompt_chars = property(lambda self: self.keyer.max_prompt_chars)
    enable_l2 = property(lambda self: self.encoders.l2_enabled)
    l2_status = property(lambda self: self.encoders.l2_status)
    text_embedder: TextEmbedder = property(lambda self: self.encoders.text_embedder)  # type: ignore[assignment]
    image_tower: Optional[ImageEncoder] = property(lambda self: self.encoders.image_tower)  # type: ignore[assignment]

    def _sole_writer(self) -> bool:
        """Whether no one else writes this engine's collections: an in-memory store (its own
        collections), or a directory no other engine of this process has opened meanwhile."""
        if self.store.mode == "ephemeral":
            return True
        return self._dir_lock is not None and self._dir_lock.sole_holder()

    @property
    def storage_mode(self) -> str:
        """Where entries live: "ephemeral", "persistent" or "server"."""
        return self.store.mode

    def warmup(self, *, images: bool = True) -> dict[str, float]:
        """Load every model the tiers and the verifier use now (seconds per model); the image
        tower only with ``images`` (warm start: when the store holds pictures)."""
        took = self.encoders.warmup(text=self.enable_l1 or self.enable_l2, image=images)
        if self.verification is not None:
            took["lexicon"] = self.verification.warmup()
        return took

    def _warm_verifier(self) -> None:
        if not self._warm_stop.is_set() and self.verification is not None:
            try:
                self.verification.warmup(judge=False)
            except Exception as exc:  # the first verified candidate loads it instead
                log.info("verifier warm-up failed: %s", exc)

    def _warm_start(self) -> None:
        # Store first (exact lookups need no model); calls meanwhile wait for its check (ChromaStore.open).
        try:
            self.store.call("open", self.store.open)
            self.entries.preload()  # exact repeats answered from memory from the first call on
            self.text_tier.warm()  # collections created now, not on the first call
            pictures = self.entries.count("l2_image") > 0  # no image tower for text-only traffic
        except Exception as exc:
            log.info("warm start: store not opened (%s); the first call opens it", exc)
            pictures = True
        if not self._warm_stop.is_set():  # closing (or exiting) already: no model loads now
            self.warmup(images=pictures)

    # ------------------------------------------------------------------ keying
    def decode_image(self, value: Any, what: str = "image") -> DecodedImage:
        """Decode an image under this engine's limits (memoized by its encoded form).

        Adapters call it to report a bad block by name; the result can be passed back
        in a :class:`CacheRequest` without being decoded again."""
        return self.keyer.decode(value, what)

    def key(self, request: CacheRequest) -> KeyedRequest:
        """Validate a request and compute its exact keys (memoized per request object)."""
        return self.keyer.key(request)

    def _l2_applicable(self, kr: KeyedRequest) -> bool:
        return bool(kr.images) and all(not im.is_remote for im in kr.images) and kr.embeddable

    # ------------------------------------------------------------------ lookup
    def lookup(self, request: CacheRequest, *, control: Any = None) -> Optional[Hit]:
        """Return a :class:`Hit` with a reusable response, or None.

        Never raises in the default mode: errors become counted misses. ``control``: a
        :class:`CacheControl` (or its mode name); ``"bypass"`` and ``"refresh"`` do not read.
        """
        return self.lookup_explained(request, control=control).hit

    async def alookup(self, request: CacheRequest, *, control: Any = None) -> Optional[Hit]:
        """Async :meth:`lookup`; model and storage work runs in a worker thread."""
        return await coalesced_in_thread(functools.partial(self.lookup, control=control), request)

    @telemetry.traced_lookup  # a span and metrics when an OpenTelemetry SDK is installed
    def lookup_explained(self, request: CacheRequest, *, control: Any = None) -> Lookup:
        """:meth:`lookup` with its reasons: the hit, or the best candidate that was refused
        (tier, scores, thresholds, what refused it) and each tier's outcome. A miss makes the
        caller its key's leader until its :meth:`update` (or :meth:`release`): an identical
        lookup meanwhile waits for that answer (bounded; :mod:`.runtime.inflight`)."""
        if not CacheControl.of(control).reads:  # bypass / refresh: not read, not waited for
            self._stats.incr("bypassed")
            return Lookup(hit=None, tiers={t.name: "bypassed" for t in (self.exact_tier, self.text_tier,
                                                                         self.multimodal_tier)})
        try:
            kr: Optional[KeyedRequest] = self.key(request)  # keyed once: the flight key and the lookup
            bad: Optional[BaseException] = None
        except Exception as exc:  # bad input: the lookup reports it
            kr, bad = None, exc
        return self.inflight.run(kr.entry_id if kr is not None else None, self._lookup_explained, (kr, bad))

    def _flight_key(self, request: CacheRequest) -> Optional[str]:
        try:
            return self.key(request).entry_id
        except Exception:  # bad input: nothing is in flight for it
            return None

    def release(self, request: CacheRequest) -> None:
        """The model call after this request's miss failed: identical requests waiting for
        its answer stop waiting and call the model themselves."""
        key = self._flight_key(request)
        if key is not None:
            self.inflight.release(key)

    def _lookup_explained(self, keyed: tuple[Optional[KeyedRequest], Optional[BaseException]]) -> Lookup:
        kr, bad = keyed
        t0 = time.perf_counter()
        self._stats.incr("lookups")
        trace = Lookup(hit=None)
        try:
            if bad is not None:
                raise bad
            assert kr is not None
            pending = self.pending
            if pending is None:
                trace = self._lookup(kr)
            else:
                pending.lookup_started()  # the background writer holds back meanwhile
                try:
                    trace = self._lookup(kr)
                finally:
                    pending.lookup_ended(missed=trace.hit is None)
        except Exception as exc:
            self._stats.incr("misses")
            trace.ms = self._record_latency(t0, None)
            trace.error = f"{type(exc).__name__}: {exc}"
            self._fail("lookup", exc, trace)
            return trace
        if trace.hit is None:
            self._stats.incr("misses")
        trace.ms = self._record_latency(t0, trace.hit)
        if self._keep_counters is not None and self._stats.count("lookups") % COUNTERS_EVERY == 0:
            threading.Thread(target=self._keep_counters, name="mlc-counters", daemon=True).start()
        if trace.hit is not None:
            trace.hit.lookup_ms = trace.ms
        elif trace.refused is not None:
            log.debug("cache miss: %s", trace.explain())
        return trace

    async def alookup_explained(self, request: CacheRequest) -> Lookup:
        return await coalesced_in_thread(self.lookup_explained, request)

    def _record_latency(self, t0: float, hit: Optional[Hit]) -> float:
        ms = (time.perf_counter() - t0) * 1000.0
        self._stats.latency("lookup", ms)
        self._stats.latency(f"lookup_{hit.tier}_hit" if hit else "lookup_miss", ms)
        return ms

    def _lookup(self, kr: KeyedRequest) -> Lookup:
        now = self._clock()
        trace = Lookup(hit=None)
        refusals: list[Refusal] = []
        for tier, enabled in (
            (self.exact_tier, self.enable_exact),
            (self.text_tier, self.enable_l1 and kr.embeddable and bool(kr.norm_text)),
            (self.multimodal_tier, self.enable_l2 and self._l2_applicable(kr)),
        ):
            if not enabled:
                status = "skipped"
            else:
                outcome = tier.lookup(kr, now, trace.verdicts)
                trace.hit = outcome.hit
                refusals.extend(outcome.refusals)
                for r in outcome.refusals:
                    self._stats.incr(f"refusals:{r.reason}")
                status = outcome.status
                if outcome.note:
                    trace.notes[tier.name] = outcome.note
            self._stats.tier(tier.name, status)
            trace.tiers[tier.name] = status
            if trace.hit is not None:
                return trace
        trace.refused = max(refusals, key=lambda r: r.scores.get("verifier", 0.0)) if refusals else None
        return trace

    # ------------------------------------------------------------------ update
    def update(self, request: CacheRequest, payload: Any, *, ttl: Optional[float] = None,
               answer: Optional[str] = None, control: Any = None) -> Optional[str]:
        """Store ``payload`` (JSON-serializable) as the response to ``request``.

        ``answer`` is the response's text as the user reads it (adapters pass it; by
        default :func:`answer_of` the payload): the verifier's error-bounded mode
        compares answers, never framework payload fields. ``ttl`` (or ``control.ttl``)
        is this entry's lifetime; ``control`` ``"bypass"``/``"no-store"`` stores nothing.
        An empty answer (no payload, or only blank text) is never stored.
        Returns the entry id, or None when nothing was stored (not wanted, empty, or the
        update failed in fail-open mode).
        Writes the response first and the tier vectors last, so a crash in between
        leaves at worst a response without vectors, never a vector without response.
        """
        ctl = CacheControl.of(control)
        if not ctl.writes or is_empty_payload(payload):
            self._stats.incr("not_stored_empty" if ctl.writes else "not_stored")
            self.release(request)  # identical calls waiting for this answer call the model themselves
            return None
        return self._store_update(request, payload, ttl=ttl if ttl is not None else ctl.ttl, answer=answer)

    @telemetry.traced_update  # a span and metrics when an OpenTelemetry SDK is installed
    def _store_update(self, request: CacheRequest, payload: Any, *, ttl: Optional[float],
                      answer: Optional[str]) -> Optional[str]:
        t0 = time.perf_counter()
        try:
            eid = self._update(request, payload, ttl, answer)
        except Exception as exc:
            self._stats.incr("updates_failed")
            self.release(request)
            self._fail("update", exc)
            return None
        self.inflight.stored(eid)
        self._stats.incr("updates")
        self._stats.latency("update", (time.perf_counter() - t0) * 1000.0)
        return eid

    async def aupdate(self, request: CacheRequest, payload: Any, *, ttl: Optional[float] = None,
                      answer: Optional[str] = None, control: Any = None) -> Optional[str]:
        """Async :meth:`update`, run in a worker thread."""
        return await asyncio.to_thread(self.update, request, payload, ttl=ttl, answer=answer, control=control)

    def _update(self, request: CacheRequest, payload: Any, ttl: Optional[float], answer: Optional[str]) -> str:
        kr = self.key(request)
        doc = serialize_payload(payload, self.max_response_bytes)
        now = self._clock()
        ttl = ttl if ttl is not None else self.ttl
        answer = answer_of(payload) if answer is None else str(answer)
        keys = EntryKeys(scope=kr.scope_key, ns=kr.namespace, ctx=kr.context_key, imgs=kr.images_key,
                         n_images=len(kr.images), expires_at=now + ttl if ttl else NO_EXPIRY)
        entry = NewEntry(entry_id=kr.entry_id, document=doc, partitions=kr.partitions(),
                         meta=EntryMeta(keys, created_at=now, last_access=now, answer=answer,
                                        text=kr.text if self.store_prompts else None,
                                        model=model_label(request.scope)))
        # Every vector before anything is written, so a model failure writes nothing.
        self.encoders.fill_vectors(entry, kr, l1=self.enable_l1 and kr.embeddable and bool(kr.norm_text),
                                   l2=self.enable_l2 and self._l2_applicable(kr),
                                   defer_images=self.pending is not None)
        self.eviction.access.touch(kr.entry_id, now)
        self.entries.census.add(kr.images_key)  # before the entry is visible to any lookup
        if self.pending is not None:
            self.pending.submit(entry)
        else:
            self.entries.put(entry)
            self.eviction.after_insert()
        if self.verification is not None:
            self.verification.observe(kr.entry_id, answer)  # labels refused/explored candidates
        return kr.entry_id

    # ------------------------------------------------------------------ delete, expire, clear
    def _write_failed(self, exc: BaseException, n: int) -> None:
        """The background writer lost a batch: counted and logged like a failed update."""
        self._stats.incr("updates_failed", n)
        self._stats.error(f"update:{type(exc).__name__}")
        log.warning("cache write-behind failed for %d entries (dropped; the LLM calls went on): %s: %s",
                    n, type(exc).__name__, exc)

    def _drain(self) -> None:
        """Pending writes reach the store before anything reads or deletes there directly."""
        if self.pending is not None:
            self.pending.drain()

    def _forget(self, ids: list[str]) -> None:
        """Deleted entries (by the user, eviction, expiry or repair) leave every in-memory record."""
        self.eviction.access.discard(ids)
        if self.verification is not None:
            for eid in ids:
                self.verification.forget_entry(eid)

    def delete(self, entry_id: str) -> bool:
        """Delete one entry (all tiers). Returns True when it existed."""
        self._drain()
        existed = self.entries.exists(entry_id)
        self.entries.delete([entry_id])
        return existed

    def purge_expired(self) -> int:
        """Delete every expired entry now (lookups already ignore them). Returns the count."""
        self._drain()
        return self.eviction.purge_expired()

    def clear(self, scope: Optional[str] = None, namespace: Optional[str] = None) -> None:
        """Delete every entry, or only those of one scope and/or namespace."""
        self._drain()
        self.entries.clear(None if scope is None else scope_digest(scope),
                           None if namespace is None else scope_digest(namespace))
        if scope is None and namespace is None:
            self.eviction.access.clear()

    async def aclear(self, scope: Optional[str] = None, namespace: Optional[str] = None) -> None:
        await asyncio.to_thread(self.clear, scope, namespace)

    def flush(self) -> None:
        """Write pending entries, then buffered last-access times (LRU across restarts)."""
        self._drain()
        self.eviction.flush()

    def close(self) -> None:
        """Write what is pending, release the store and the directory lock. Idempotent; a
        program that never calls it loses nothing either (shutdown.py)."""
        try:
            if self._release.alive:
                self.flush()
        except Exception as exc:  # closing never raises in fail-open mode
            self._fail("flush", exc)
        finally:
            self._release()

    def __enter__(self) -> "MLCEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ stats & errors
    def count(self) -> int:
        """Number of stored entries (responses), pending writes included."""
        self._drain()
        return self.entries.count()

    def stats(self) -> dict[str, Any]:
        """Per-tier hits/misses, lookup latency percentiles, errors, entries, configuration."""
        return engine_stats(self, self._stats, warm_start=self._warm_models)

    def reset_stats(self) -> None:
        self._stats.reset()
        if self.verification is not None:
            self.verification.reset_stats()

    def _fail(self, op: str, exc: BaseException, trace: Optional[Lookup] = None) -> None:
        """Count a failure; strict mode raises it typed (with ``trace``, the failed
        lookup, as ``exc.lookup``), otherwise it is logged and the call goes on."""
        kind = type(exc).__name__
        self._stats.error(f"{op}:{kind}")
        if self.strict:
            err = exc if isinstance(exc, MLCError) else StorageError(f"{op} failed: {kind}: {exc}")
            err.lookup = trace  # type: ignore[attr-defined]
            if err is exc:
                raise err
            raise err from exc
        if isinstance(exc, InvalidRequestError):
            # Each kind of bad input once at WARNING (visible by default), then at INFO.
            log.log(first_time(f"{op}:{kind}"), "cache %s skipped for bad input (a counted miss; "
                    "strict=True raises it): %s: %s", op, kind, exc)
        else:
            log.warning("cache %s failed (fail-open, the LLM call goes on): %s: %s", op, kind, exc)
