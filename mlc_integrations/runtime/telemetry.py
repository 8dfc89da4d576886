"""OpenTelemetry for the cache: a span per lookup and per update, and metrics.

Everything goes through ``opentelemetry-api`` (a dependency of Chroma): the
application's tracer and meter providers decide where it goes. Until an SDK provider is
installed (globally, or here with :func:`configure`) the engine's calls go straight to
the undecorated methods: one provider check per call and nothing else
(``benchmarks/telemetry_overhead.py`` measures it side by side with a build without the
hooks).

Spans (kind INTERNAL, tracer ``mlc_integrations``), each a child of the caller's
current span, so a lookup made through any adapter -- ``set_llm_cache``, where
LangChain hands the cache no run, included -- sits inside the application's trace:

* ``mlc.cache.lookup``: one per :meth:`MLCEngine.lookup_explained`;
* ``mlc.cache.update``: one per :meth:`MLCEngine.update`.

OpenTelemetry's GenAI semantic conventions define no attributes for response caches
(only a provider's prompt-cache token counts), so the attributes live in a namespace of
our own, ``mlc.cache.*`` (:data:`LOOKUP_ATTRIBUTES` lists them), plus the conventional
``error.type``. No prompt, answer, tenant or error-message text is recorded unless
content capture is switched on (``configure(capture_content=True)`` or the environment
variable ``MLC_TELEMETRY_CAPTURE_CONTENT=true``): the refusal detail (``"argument swap: Lyon <->
Nice"``) quotes prompt words, so it is content too.

Metrics (meter ``mlc_integrations``; :data:`METRICS` lists them with their units):
lookups by result and tier, each tier's outcome, lookup duration, refusals by reason,
updates, errors by operation and type, and -- read from the engines the application
still holds when a reader collects -- entries at rest and write-behind depth. A failure
of the background writer (after ``update`` returned) is in the engine's
``stats()["errors"]`` and its log, not in ``mlc.cache.errors``.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import weakref
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, TypeVar

from ..keys import model_label

try:
    from opentelemetry import metrics as _otel_metrics
    from opentelemetry import trace as _otel_trace
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # pragma: no cover - chromadb depends on opentelemetry-api
    _otel_trace = None  # type: ignore[assignment]
    _otel_metrics = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from ..engine import MLCEngine
    from ..request import CacheRequest, Lookup

log = logging.getLogger(__name__)

__all__ = ["configure", "reset", "traced_lookup", "traced_update", "decision", "capture_content",
           "ENV_CAPTURE_CONTENT", "INSTRUMENTATION_NAME", "LOOKUP_SPAN", "UPDATE_SPAN", "METRICS",
           "LOOKUP_ATTRIBUTES"]

INSTRUMENTATION_NAME = "mlc_integrations"
ENV_CAPTURE_CONTENT = "MLC_TELEMETRY_CAPTURE_CONTENT"
LOOKUP_SPAN = "mlc.cache.lookup"
UPDATE_SPAN = "mlc.cache.update"
# Captured text is cut here: a prompt is an attribute, not a log.
MAX_CONTENT_CHARS = 1000

# name -> (instrument, unit, what it counts); attribute keys in brackets.
METRICS: dict[str, tuple[str, str, str]] = {
    "mlc.cache.lookups": ("counter", "{lookup}",
                          "lookups [mlc.cache.result = hit|miss|error, mlc.cache.tier = L0.5|L1|L2|none]"),
    "mlc.cache.tier.outcomes": ("counter", "{lookup}",
                                "each tier's outcome per lookup [mlc.cache.tier, mlc.cache.outcome = "
                                "hit|miss|refused|skipped]"),
    "mlc.cache.lookup.duration": ("histogram", "s", "lookup latency [mlc.cache.result, mlc.cache.tier]"),
    "mlc.cache.refusals": ("counter", "{lookup}",
                           "misses whose best candidate cleared the thresholds and was refused "
                           "[mlc.cache.tier, mlc.cache.refusal.reason = verifier|image|explored]"),
    "mlc.cache.updates": ("counter", "{update}", "updates [mlc.cache.result = stored|error]"),
    "mlc.cache.entries": ("observable gauge", "{entry}", "entries at rest [mlc.cache.storage]"),
    "mlc.cache.write_behind.depth": ("observable gauge", "{entry}",
                                     "entries acknowledged, not yet written [mlc.cache.storage]"),
    "mlc.cache.errors": ("counter", "{error}",
                         "failed lookups and updates (fail-open ones included) [mlc.cache.operation = "
                         "lookup|update, error.type]"),
}

# Span attributes of mlc.cache.lookup (present when they apply).
LOOKUP_ATTRIBUTES: dict[str, str] = {
    "mlc.cache.hit": "bool: a stored response was reused",
    "mlc.cache.tier": "the tier that answered (L0.5 exact, L1 text, L2 image+text); on a miss the best "
                      "refused candidate's tier",
    "mlc.cache.tier_outcomes": "string[]: each tier's outcome, e.g. [\"L0.5:miss\", \"L1:hit\", \"L2:skipped\"]",
    "mlc.cache.entry_id": "the entry reused (or refused): a digest, no content",
    "mlc.cache.scores.<name>": "double: each similarity compared (text, prompt, image, verifier)",
    "mlc.cache.thresholds.<name>": "double: the threshold each score had to clear",
    "mlc.cache.verdict": "the verifier's outcome for that entry: accepted|refused|explored|unverified",
    "mlc.cache.verdict.probability": "double: the verifier's probability that the stored answer fits",
    "mlc.cache.verdict.model": "the verifier model that decided",
    "mlc.cache.refusal.reason": "on a miss: what refused the best candidate (verifier|image|explored)",
    "error.type": "the lookup failed (fail-open: a miss): the error's type (OpenTelemetry convention)",
    "mlc.cache.model": "the model the request's scope names",
    "mlc.cache.images": "int: images in the last user turn",
    "mlc.cache.context_messages": "int: earlier messages in the request",
    "mlc.cache.prompt": "content capture only: the last user turn's text",
    "mlc.cache.matched_text": "content capture only: the stored prompt that matched",
    "mlc.cache.refusal.detail": "content capture only: the difference the verifier saw",
    "mlc.cache.namespace": "content capture only: the tenant namespace",
    "mlc.cache.error": "content capture only: the error's message (it may quote the input)",
}

F = TypeVar("F", bound=Callable[..., Any])


def _env_capture() -> bool:
    return os.environ.get(ENV_CAPTURE_CONTENT, "").strip().lower() in ("1", "true", "yes", "on")


def _inactive_types() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """Provider types that record nothing: the API's proxies (no SDK installed yet) and no-ops."""
    if _otel_trace is None:
        return (), ()
    tps: list[type] = [_otel_trace.ProxyTracerProvider, _otel_trace.NoOpTracerProvider]
    mps: list[type] = [_otel_metrics.NoOpMeterProvider]
    proxy = getattr(__import__("opentelemetry.metrics._internal", fromlist=["_ProxyMeterProvider"]),
                    "_ProxyMeterProvider", None)
    if isinstance(proxy, type):
        mps.append(proxy)
    return tuple(tps), tuple(mps)


_INACTIVE_TP, _INACTIVE_MP = _inactive_types()


def _global_slots() -> Optional[tuple[Any, Any]]:
    """The API modules holding the global providers, for a check without the public
    getters: each of those reads ``os.environ`` on every call while no provider is set,
    2.5 us measured (``timeit(trace.get_tracer_provider)``), 5% of an exact hit. None (use
    the getters) when the providers come from environment variables or the API moved them."""
    if _otel_trace is None:
        return None
    import opentelemetry.metrics._internal as metrics_internal

    if "OTEL_PYTHON_TRACER_PROVIDER" in os.environ or "OTEL_PYTHON_METER_PROVIDER" in os.environ:
        return None
    if not hasattr(_otel_trace, "_TRACER_PROVIDER") or not hasattr(metrics_internal, "_METER_PROVIDER"):
        return None
    return _otel_trace, metrics_internal


_GLOBALS = _global_slots()


def _result(trace: "Lookup") -> tuple[str, str]:
    if trace.hit is not None:
        return "hit", trace.hit.tier
    return ("error" if trace.error else "miss"), "none"


def decision(trace: Optional["Lookup"] = None, *, record: Any = None) -> dict[str, Any]:
    """What a lookup decided, as JSON-ready data without content: ``hit``, ``tier``,
    ``entry_id``, ``scores``, ``thresholds``, ``tiers`` (each tier's outcome) and on a miss
    ``refusal`` (tier, reason, scores, thresholds) and ``reason`` (one sentence), or
    ``error``. Takes an engine :class:`Lookup` or an adapter's ``LookupRecord``
    (``record=``): what the LangChain custom event and the LlamaIndex event carry."""
    src = record if record is not None else trace
    hit = getattr(src, "hit", None)
    out: dict[str, Any] = {"hit": hit is not None, "tiers": dict(getattr(src, "tiers", {}) or {})}
    if hit is not None:
        out.update(tier=hit.tier, entry_id=hit.entry_id, scores=dict(hit.scores), thresholds=dict(hit.thresholds),
                   lookup_ms=round(float(hit.lookup_ms), 3))
        return out
    refused = getattr(src, "refused", None)
    out["tier"] = None
    if refused is not None:
        out["refusal"] = {"tier": refused.tier, "entry_id": refused.entry_id, "reason": refused.reason,
                          "scores": dict(refused.scores), "thresholds": dict(refused.thresholds)}
    error = getattr(src, "error", "")
    if error:
        out["error"] = error.partition(":")[0]  # the type: a message may quote the request
    if record is not None:
        out["kind"] = record.kind
        if record.note:
            out["note"] = record.note
    return out


class _Instruments:
    """The tracer and instruments of one (tracer provider, meter provider) pair."""

    def __init__(self, owner: "Telemetry", tp: Any, mp: Any) -> None:
        self.tp, self.mp = tp, mp
        self.tracing = not isinstance(tp, _INACTIVE_TP)
        self.metering = not isinstance(mp, _INACTIVE_MP)
        self.active = self.tracing or self.metering
        if not self.active:
            return
        self.owner = owner
        self.tracer = tp.get_tracer(INSTRUMENTATION_NAME)
        meter = mp.get_meter(INSTRUMENTATION_NAME)
        d = {name: spec[2] for name, spec in METRICS.items()}
        u = {name: spec[1] for name, spec in METRICS.items()}
        self.lookups = meter.create_counter("mlc.cache.lookups", u["mlc.cache.lookups"], d["mlc.cache.lookups"])
        self.tier_outcomes = meter.create_counter("mlc.cache.tier.outcomes", u["mlc.cache.tier.outcomes"],
                                                  d["mlc.cache.tier.outcomes"])
        # Buckets in seconds: an exact hit is ~1 ms on in-memory Chroma, a cold L2 miss seconds.
        self.duration = meter.create_histogram(
            "mlc.cache.lookup.duration", "s", d["mlc.cache.lookup.duration"],
            explicit_bucket_boundaries_advisory=[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                 0.5, 1.0, 2.5, 5.0])
        self.refusals = meter.create_counter("mlc.cache.refusals", u["mlc.cache.refusals"], d["mlc.cache.refusals"])
        self.updates = meter.create_counter("mlc.cache.updates", u["mlc.cache.updates"], d["mlc.cache.updates"])
        meter.create_observable_gauge("mlc.cache.entries", [owner.observe_entries], u["mlc.cache.entries"],
                                      d["mlc.cache.entries"])
        meter.create_observable_gauge("mlc.cache.write_behind.depth", [owner.observe_depth],
                                      u["mlc.cache.write_behind.depth"], d["mlc.cache.write_behind.depth"])
        self.errors = meter.create_counter("mlc.cache.errors", u["mlc.cache.errors"], d["mlc.cache.errors"])

    # ------------------------------------------------------------------ lookup
    def lookup(self, call: Callable[[], "Lookup"], engine: "MLCEngine", request: "CacheRequest") -> "Lookup":
        if self.metering:
            self.owner.watch(engine)
        if not self.tracing:
            trace = self._timed(call)
            self._count_lookup(trace)
            return trace
        with self.tracer.start_as_current_span(LOOKUP_SPAN, kind=SpanKind.INTERNAL, record_exception=False,
                                               set_status_on_exception=False) as span:
            try:
                trace = self._timed(call)
            except BaseException as exc:  # strict mode: the typed error goes on to the caller
                failed = getattr(exc, "lookup", None)
                if span.is_recording():
                    span.set_attributes(self._lookup_attributes(failed, request) if failed is not None
                                        else {"mlc.cache.hit": False})
                    span.set_attribute("error.type", type(exc).__name__)
                    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                raise
            if span.is_recording():
                span.set_attributes(self._lookup_attributes(trace, request))
                if trace.error:
                    span.set_status(Status(StatusCode.ERROR, trace.error.partition(":")[0]))
        self._count_lookup(trace)
        return trace

    def _timed(self, call: Callable[[], "Lookup"]) -> "Lookup":
        t0 = time.perf_counter()
        try:
            return call()
        except BaseException as exc:
            if self.metering:
                failed = getattr(exc, "lookup", None)
                result = {"mlc.cache.result": "error", "mlc.cache.tier": "none"}
                self.lookups.add(1, result)
                self.errors.add(1, {"mlc.cache.operation": "lookup", "error.type": type(exc).__name__})
                self.duration.record(time.perf_counter() - t0, result)
                if failed is not None:
                    self._count_tiers(failed)
            raise

    def _count_tiers(self, trace: "Lookup") -> None:
        for tier, outcome in trace.tiers.items():
            self.tier_outcomes.add(1, {"mlc.cache.tier": tier, "mlc.cache.outcome": outcome})

    def _count_lookup(self, trace: "Lookup") -> None:
        if not self.metering:
            return
        result, tier = _result(trace)
        attrs = {"mlc.cache.result": result, "mlc.cache.tier": tier}
        self.lookups.add(1, attrs)
        self.duration.record(trace.ms / 1000.0, attrs)
        self._count_tiers(trace)
        if trace.error:
            self.errors.add(1, {"mlc.cache.operation": "lookup", "error.type": trace.error.partition(":")[0]})
        if trace.refused is not None:
            self.refusals.add(1, {"mlc.cache.tier": trace.refused.tier,
                                  "mlc.cache.refusal.reason": trace.refused.reason})

    def _lookup_attributes(self, trace: "Lookup", request: "CacheRequest") -> dict[str, Any]:
        attrs: dict[str, Any] = {"mlc.cache.hit": trace.hit is not None,
                                 "mlc.cache.tier_outcomes": [f"{t}:{o}" for t, o in trace.tiers.items()]}
        chosen = trace.hit if trace.hit is not None else trace.refused
        if chosen is not None:
            attrs["mlc.cache.tier"] = chosen.tier
            attrs["mlc.cache.entry_id"] = chosen.entry_id
            for k, v in chosen.scores.items():
                attrs[f"mlc.cache.scores.{k}"] = float(v)
            for k, v in chosen.thresholds.items():
                attrs[f"mlc.cache.thresholds.{k}"] = float(v)
            verdict = trace.verdicts.get(chosen.entry_id) if trace.verdicts else None
            if verdict is not None:
                attrs["mlc.cache.verdict"] = str(getattr(verdict, "outcome", ""))
                attrs["mlc.cache.verdict.probability"] = float(getattr(verdict, "probability", 0.0))
                if getattr(verdict, "model", ""):
                    attrs["mlc.cache.verdict.model"] = str(verdict.model)
        if trace.hit is None and trace.refused is not None:
            attrs["mlc.cache.refusal.reason"] = trace.refused.reason
        if trace.error:
            attrs["error.type"] = trace.error.partition(":")[0]
        attrs.update(self._request_attributes(request))
        if self.owner.capture:
            if trace.error:  # a message may quote the input (a file path, a bad character)
                attrs["mlc.cache.error"] = trace.error[:MAX_CONTENT_CHARS]
            matched = chosen.matched_text if chosen is not None else None
            if matched:
                attrs["mlc.cache.matched_text"] = matched[:MAX_CONTENT_CHARS]
            if trace.hit is None and trace.refused is not None and trace.refused.detail:
                attrs["mlc.cache.refusal.detail"] = trace.refused.detail[:MAX_CONTENT_CHARS]
        return attrs

    def _request_attributes(self, request: "CacheRequest") -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        try:
            model = model_label(request.scope)
            if model:
                attrs["mlc.cache.model"] = model
            attrs["mlc.cache.images"] = len(request.images)
            attrs["mlc.cache.context_messages"] = len(request.context)
            if self.owner.capture:
                attrs["mlc.cache.prompt"] = str(request.text)[:MAX_CONTENT_CHARS]
                attrs["mlc.cache.namespace"] = str(request.namespace)
        except Exception as exc:  # a malformed request is the engine's to report, not the span's
            log.debug("telemetry: request attributes skipped: %s", exc)
        return attrs

    # ------------------------------------------------------------------ update
    def _update_failed(self, span: Any, error_type: str) -> None:
        if self.metering:
            self.updates.add(1, {"mlc.cache.result": "error"})
            self.errors.add(1, {"mlc.cache.operation": "update", "error.type": error_type})
        if span is not None and span.is_recording():
            span.set_attributes({"mlc.cache.stored": False, "error.type": error_type})
            span.set_status(Status(StatusCode.ERROR, error_type))

    def update(self, fn: Callable[..., Optional[str]], engine: "MLCEngine", request: "CacheRequest",
               args: tuple[Any, ...], kwargs: dict[str, Any]) -> Optional[str]:
        if self.metering:
            self.owner.watch(engine)
        span_cm = self.tracer.start_as_current_span(UPDATE_SPAN, kind=SpanKind.INTERNAL, record_exception=False,
                                                    set_status_on_exception=False) if self.tracing else nullcontext()
        with span_cm as span:
            try:
                eid = fn(engine, request, *args, **kwargs)
            except BaseException as exc:  # strict mode
                self._update_failed(span, type(exc).__name__)
                raise
            if eid is None:  # fail-open: the engine logged and counted why (stats()["errors"])
                self._update_failed(span, "_OTHER")
            elif self.metering:
                self.updates.add(1, {"mlc.cache.result": "stored"})
            if span is not None and span.is_recording():
                attrs: dict[str, Any] = {"mlc.cache.stored": eid is not None,
                                         "mlc.cache.write": "durable" if getattr(engine, "pending", None) is None
                                         else "write-behind"}
                if eid is not None:
                    attrs["mlc.cache.entry_id"] = eid
                if kwargs.get("ttl") is not None:
                    attrs["mlc.cache.ttl_s"] = float(kwargs["ttl"])
                attrs.update(self._request_attributes(request))
                span.set_attributes(attrs)
        return eid


class Telemetry:
    """Which providers the cache reports to (the global ones unless :meth:`configure`
    names others), the engines it reads gauges from, and whether content is captured."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tracer_provider: Any = None
        self._meter_provider: Any = None
        self.capture = _env_capture()
        self._current: Optional[_Instruments] = None
        self._idle: Optional[_Instruments] = None  # the instruments while no provider is installed
        self._engines: "weakref.WeakSet[MLCEngine]" = weakref.WeakSet()

    def configure(self, *, tracer_provider: Any = None, meter_provider: Any = None,
                  capture_content: Optional[bool] = None) -> None:
        with self._lock:
            self._tracer_provider = tracer_provider
            self._meter_provider = meter_provider
            if capture_content is not None:
                self.capture = bool(capture_content)
            self._current = None
            self._idle = None

    def reset(self) -> None:
        with self._lock:
            self._tracer_provider = self._meter_provider = None
            self.capture = _env_capture()
            self._current = None
            self._idle = None
            self._engines = weakref.WeakSet()

    def instruments(self) -> _Instruments:
        """The instruments for the providers in force now (rebuilt when they change: an
        application may install its SDK after the engine was built)."""
        tp, mp = self._tracer_provider, self._meter_provider
        if _GLOBALS is not None:
            if tp is None:
                tp = _GLOBALS[0]._TRACER_PROVIDER
            if mp is None:
                mp = _GLOBALS[1]._METER_PROVIDER
            if tp is None and mp is None and self._idle is not None:  # no SDK anywhere: the common case
                return self._idle
        if tp is None:
            tp = _otel_trace.get_tracer_provider()
        if mp is None:
            mp = _otel_metrics.get_meter_provider()
        cur = self._current
        if cur is not None and cur.tp is tp and cur.mp is mp:
            return cur
        with self._lock:
            cur = self._current
            if cur is None or cur.tp is not tp or cur.mp is not mp:
                cur = self._current = _Instruments(self, tp, mp)
                if not cur.active and self._tracer_provider is None and self._meter_provider is None:
                    self._idle = cur
            return cur

    def watch(self, engine: "MLCEngine") -> None:
        if engine not in self._engines:
            with self._lock:
                self._engines.add(engine)

    def _per_storage(self, read: Callable[["MLCEngine"], Optional[int]]) -> Iterable["Observation"]:
        totals: dict[str, int] = {}
        with self._lock:
            engines = list(self._engines)  # the engines the application still holds
        for eng in engines:
            try:
                n = read(eng)
            except Exception as exc:  # a store that went away: no observation for it
                log.debug("telemetry: gauge read failed: %s", exc)
                continue
            if n is not None:
                mode = str(getattr(eng, "storage_mode", "unknown"))
                totals[mode] = totals.get(mode, 0) + int(n)
        return [Observation(n, {"mlc.cache.storage": mode}) for mode, n in totals.items()]

    def observe_entries(self, options: "CallbackOptions") -> Iterable["Observation"]:
        return self._per_storage(lambda eng: eng.entries.count())

    def observe_depth(self, options: "CallbackOptions") -> Iterable["Observation"]:
        return self._per_storage(lambda eng: len(eng.pending) if eng.pending is not None else 0)

_TELEMETRY = Telemetry()


def configure(*, tracer_provider: Any = None, meter_provider: Any = None,
              capture_content: Optional[bool] = None) -> None:
    """Report to these providers instead of the global ones (None: the global provider
    in force at each call). ``capture_content=True`` records the prompt, the matched
    stored prompt, the refusal detail and the namespace on spans (default: the
    ``MLC_TELEMETRY_CAPTURE_CONTENT`` environment variable, else off)."""
    _TELEMETRY.configure(tracer_provider=tracer_provider, meter_provider=meter_provider,
                         capture_content=capture_content)


def reset() -> None:
    """Back to the global providers, content capture from the environment."""
    _TELEMETRY.reset()


def capture_content() -> bool:
    return _TELEMETRY.capture


def _active(state: Any, tslot: Any, mslot: Any) -> Any:
    """The instruments to report to, or None. No provider anywhere: None after four attribute
    reads (0.4 us over a bare call, timeit)."""
    if (tslot is not None and tslot._TRACER_PROVIDER is None and mslot._METER_PROVIDER is None
            and state._tracer_provider is None and state._meter_provider is None):
        return None
    inst = state.instruments()
    return inst if inst.active else None


def traced_lookup(fn: F) -> F:
    """Decorates ``MLCEngine._lookup_explained``: a ``mlc.cache.lookup`` span and the
    lookup metrics, or a plain call while no SDK provider is in force."""
    if _otel_trace is None:  # pragma: no cover
        return fn

    state = _TELEMETRY
    tslot, mslot = _GLOBALS if _GLOBALS is not None else (None, None)

    @functools.wraps(fn)
    def wrapper(engine: "MLCEngine", request: "CacheRequest", *args: Any, **kwargs: Any) -> "Lookup":
        inst = _active(state, tslot, mslot)
        if inst is None:
            return fn(engine, request, *args, **kwargs)
        return inst.lookup(functools.partial(fn, engine, request, *args, **kwargs), engine, request)

    return wrapper  # type: ignore[return-value]


def traced_update(fn: F) -> F:
    """Decorates ``MLCEngine.update``: a ``mlc.cache.update`` span and the update counter."""
    if _otel_trace is None:  # pragma: no cover
        return fn

    state = _TELEMETRY
    tslot, mslot = _GLOBALS if _GLOBALS is not None else (None, None)

    @functools.wraps(fn)
    def wrapper(engine: "MLCEngine", request: "CacheRequest", *args: Any, **kwargs: Any) -> Optional[str]:
        inst = _active(state, tslot, mslot)
        if inst is None:
            return fn(engine, request, *args, **kwargs)
        return inst.update(fn, engine, request, args, kwargs)

    return wrapper  # type: ignore[return-value]
