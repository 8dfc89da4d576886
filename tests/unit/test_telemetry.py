"""Decisions visible where each ecosystem looks: OpenTelemetry spans and metrics from
the engine (every adapter, ``set_llm_cache`` included), a LlamaIndex instrumentation
event and ``additional_kwargs`` on a hit, a LangChain custom callback event.

Providers are handed to the module with ``telemetry.configure`` and taken back after
each test: no global provider is installed.
"""

from __future__ import annotations

import re
import zlib
from typing import Any, Iterator
from uuid import UUID

import numpy as np
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.globals import get_llm_cache, set_llm_cache
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mlc_integrations import CacheRequest, CachedChatModel, CachedMultiModalLLM, MLCEngine, MultimodalSemanticCache
from mlc_integrations.errors import StorageError
from mlc_integrations.langchain.events import CACHE_EVENT
from mlc_integrations.llamaindex.events import CacheLookupEvent
from mlc_integrations.runtime import telemetry
from tests.unit._fake_llms import VisionEchoLLM

QUESTION = "Who wrote the play Hamlet?"
PARAPHRASE = "who wrote the play hamlet"


def bag_of_words(texts: list[str]) -> list[list[float]]:
    """A text model without model time: hashed word counts (a rewording with the same
    words is an L1 neighbour, another question is not)."""
    out = []
    for t in texts:
        v = np.zeros(64)
        for w in re.findall(r"\w+", t.lower()):
            v[zlib.crc32(w.encode()) % 64] += 1
        out.append((v / (np.linalg.norm(v) or 1.0)).tolist())
    return out


class Otel:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.tracer = self.tracer_provider.get_tracer("app")

    def finished(self, name: str) -> list[Any]:
        return [s for s in self.spans.get_finished_spans() if s.name == name]

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        out = []
        data = self.reader.get_metrics_data()
        for rm in data.resource_metrics if data else []:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == metric:
                        for p in m.data.data_points:
                            out.append((dict(p.attributes), getattr(p, "value", None)
                                        if hasattr(p, "value") else p.count))
        return out


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = Otel()
    global_tp, global_mp = trace.get_tracer_provider(), metrics.get_meter_provider()
    telemetry.configure(tracer_provider=o.tracer_provider, meter_provider=o.meter_provider)
    yield o
    telemetry.reset()
    o.tracer_provider.shutdown()
    o.meter_provider.shutdown()
    assert trace.get_tracer_provider() is global_tp and metrics.get_meter_provider() is global_mp


@pytest.fixture
def engine() -> Iterator[MLCEngine]:
    eng = MLCEngine(text_model=bag_of_words, image_encoder=None, verifier="off", l1_threshold=0.95)
    yield eng
    eng.close()


@pytest.fixture
def llm_cache() -> Iterator[None]:
    before = get_llm_cache()
    yield
    set_llm_cache(before)


def all_attribute_text(spans: list[Any]) -> str:
    return " ".join(f"{k}={v}" for s in spans for k, v in s.attributes.items())


# ---------------------------------------------------------------------- spans and metrics
def test_a_langchain_call_through_set_llm_cache_is_a_cache_span_inside_the_callers_span(
        otel: Otel, engine: MLCEngine, llm_cache: None) -> None:
    set_llm_cache(MultimodalSemanticCache(engine))
    model = FakeListChatModel(responses=["Shakespeare", "a second answer"])
    with otel.tracer.start_as_current_span("app.request") as parent:
        first = model.invoke(QUESTION)
        second = model.invoke(QUESTION)
    assert first.content == second.content == "Shakespeare"
    lookups = otel.finished("mlc.cache.lookup")
    assert len(lookups) == 2
    ctx = parent.get_span_context()
    for span in lookups:
        assert span.context.trace_id == ctx.trace_id
        assert span.parent is not None and span.parent.span_id == ctx.span_id
        assert span.kind == trace.SpanKind.INTERNAL
    miss, hit = lookups
    assert miss.attributes["mlc.cache.hit"] is False
    assert "mlc.cache.tier" not in miss.attributes
    assert list(miss.attributes["mlc.cache.tier_outcomes"]) == ["L0.5:miss", "L1:miss", "L2:skipped"]
    assert hit.attributes["mlc.cache.hit"] is True and hit.attributes["mlc.cache.tier"] == "L0.5"
    assert hit.attributes["mlc.cache.model"] == "fake-list-chat-model"  # what the llm_string names
    updates = otel.finished("mlc.cache.update")
    assert len(updates) == 1 and updates[0].parent.span_id == ctx.span_id
    assert updates[0].attributes["mlc.cache.stored"] is True
    assert updates[0].attributes["mlc.cache.entry_id"] == hit.attributes["mlc.cache.entry_id"]
    lookups_counted = dict((tuple(sorted(a.items())), v) for a, v in otel.points("mlc.cache.lookups"))
    assert lookups_counted[(("mlc.cache.result", "hit"), ("mlc.cache.tier", "L0.5"))] == 1
    assert lookups_counted[(("mlc.cache.result", "miss"), ("mlc.cache.tier", "none"))] == 1


def test_an_l1_hit_span_carries_its_scores_and_thresholds(otel: Otel, engine: MLCEngine) -> None:
    engine.update(CacheRequest(text=QUESTION, scope="m"), "Shakespeare")
    found = engine.lookup_explained(CacheRequest(text=PARAPHRASE, scope="m"))
    assert found.hit is not None and found.hit.tier == "L1"
    (span,) = otel.finished("mlc.cache.lookup")
    assert span.attributes["mlc.cache.tier"] == "L1"
    assert span.attributes["mlc.cache.scores.text"] == pytest.approx(found.hit.scores["text"])
    assert span.attributes["mlc.cache.thresholds.text"] == pytest.approx(0.95)
    assert span.attributes["mlc.cache.entry_id"] == found.hit.entry_id
    assert list(span.attributes["mlc.cache.tier_outcomes"]) == ["L0.5:miss", "L1:hit"]
    outcomes = {(a["mlc.cache.tier"], a["mlc.cache.outcome"]): v for a, v in otel.points("mlc.cache.tier.outcomes")}
    assert outcomes == {("L0.5", "miss"): 1, ("L1", "hit"): 1}
    (duration,) = otel.points("mlc.cache.lookup.duration")
    assert duration == ({"mlc.cache.result": "hit", "mlc.cache.tier": "L1"}, 1)


def test_a_refused_candidate_names_the_verifiers_verdict_and_reason(otel: Otel) -> None:
    eng = MLCEngine(text_model=bag_of_words, image_encoder=None, l1_threshold=0.9)  # the default verifier
    try:
        eng.update(CacheRequest(text="Is Paris the capital of France?", scope="m"), "Yes")
        found = eng.lookup_explained(CacheRequest(text="Is Paris not the capital of France?", scope="m"))
        telemetry.configure(tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider,
                            capture_content=True)
        eng.lookup_explained(CacheRequest(text="Is Paris not the capital of France?", scope="m"))
    finally:
        eng.close()
    assert found.hit is None and found.refused is not None
    span, captured = otel.finished("mlc.cache.lookup")
    attrs = span.attributes
    assert attrs["mlc.cache.hit"] is False
    assert attrs["mlc.cache.tier"] == found.refused.tier
    assert attrs["mlc.cache.refusal.reason"] == found.refused.reason == "verifier"
    assert attrs["mlc.cache.verdict"] == "refused"
    assert attrs["mlc.cache.scores.verifier"] < attrs["mlc.cache.thresholds.verifier"]
    assert attrs["mlc.cache.verdict.model"] == "lexical"
    assert "mlc.cache.refusal.detail" not in attrs  # it quotes the prompt's words: content
    assert "not" in captured.attributes["mlc.cache.refusal.detail"]
    assert otel.points("mlc.cache.refusals") == [
        ({"mlc.cache.tier": found.refused.tier, "mlc.cache.refusal.reason": "verifier"}, 2)]


def test_no_prompt_or_answer_text_is_recorded_unless_content_capture_is_on(
        otel: Otel, engine: MLCEngine, llm_cache: None) -> None:
    set_llm_cache(MultimodalSemanticCache(engine, namespace="tenant-42"))
    model = FakeListChatModel(responses=["Shakespeare"])
    model.invoke(QUESTION)
    model.invoke(PARAPHRASE)
    spans = otel.spans.get_finished_spans()
    assert spans
    text = all_attribute_text(spans).lower()
    for word in ("hamlet", "wrote", "shakespeare", "tenant-42"):
        assert word not in text
    otel.spans.clear()
    telemetry.configure(tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider,
                        capture_content=True)
    model.invoke(PARAPHRASE)
    (span,) = otel.finished("mlc.cache.lookup")
    assert "hamlet" in span.attributes["mlc.cache.prompt"].lower()
    assert span.attributes["mlc.cache.namespace"] == "tenant-42"
    assert "mlc.cache.matched_text" in span.attributes


def test_content_capture_follows_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(telemetry.ENV_CAPTURE_CONTENT, "true")
    telemetry.reset()
    try:
        assert telemetry.capture_content() is True
    finally:
        monkeypatch.delenv(telemetry.ENV_CAPTURE_CONTENT)
        telemetry.reset()
    assert telemetry.capture_content() is False


def test_gauges_read_entries_and_the_write_behind_depth_of_live_engines(otel: Otel, engine: MLCEngine) -> None:
    engine.update(CacheRequest(text=QUESTION, scope="m"), "Shakespeare")
    engine.update(CacheRequest(text="Who painted the Mona Lisa?", scope="m"), "Leonardo")
    engine.flush()
    assert otel.points("mlc.cache.entries") == [({"mlc.cache.storage": "ephemeral"}, 2)]
    assert otel.points("mlc.cache.write_behind.depth") == [({"mlc.cache.storage": "ephemeral"}, 0)]
    assert otel.points("mlc.cache.updates") == [({"mlc.cache.result": "stored"}, 2)]


def test_a_failed_lookup_is_an_error_span_and_an_error_count(otel: Otel, engine: MLCEngine,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(*args: Any) -> None:
        raise StorageError("chroma server unreachable")

    monkeypatch.setattr(engine.exact_tier, "lookup", unreachable)
    found = engine.lookup_explained(CacheRequest(text=QUESTION, scope="m"))
    assert found.error.startswith("StorageError")
    (span,) = otel.finished("mlc.cache.lookup")
    assert span.status.status_code == trace.StatusCode.ERROR
    assert span.attributes["error.type"] == "StorageError"
    assert "mlc.cache.error" not in span.attributes  # the message may quote the input: content
    assert otel.points("mlc.cache.lookups") == [({"mlc.cache.result": "error", "mlc.cache.tier": "none"}, 1)]
    assert otel.points("mlc.cache.errors") == [({"mlc.cache.operation": "lookup", "error.type": "StorageError"}, 1)]


def test_a_fail_open_update_that_stores_nothing_is_an_error_span_and_counts(otel: Otel, engine: MLCEngine) -> None:
    assert engine.update(CacheRequest(text=QUESTION, scope="m"), object()) is None  # not JSON: refused
    (span,) = otel.finished("mlc.cache.update")
    assert span.status.status_code == trace.StatusCode.ERROR and span.attributes["mlc.cache.stored"] is False
    assert otel.points("mlc.cache.updates") == [({"mlc.cache.result": "error"}, 1)]
    assert otel.points("mlc.cache.errors") == [({"mlc.cache.operation": "update", "error.type": "_OTHER"}, 1)]


def test_a_strict_engines_failed_lookup_raises_through_an_error_span(otel: Otel,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    eng = MLCEngine(text_model=bag_of_words, image_encoder=None, verifier="off", strict=True)

    def unreachable(*args: Any) -> None:
        raise StorageError("chroma server unreachable")

    monkeypatch.setattr(eng.exact_tier, "lookup", unreachable)
    try:
        with pytest.raises(StorageError):
            eng.lookup_explained(CacheRequest(text=QUESTION, scope="m"))
    finally:
        eng.close()
    (span,) = otel.finished("mlc.cache.lookup")
    assert span.status.status_code == trace.StatusCode.ERROR
    assert span.attributes["error.type"] == "StorageError"
    assert span.attributes["mlc.cache.hit"] is False
    assert otel.points("mlc.cache.lookups") == [({"mlc.cache.result": "error", "mlc.cache.tier": "none"}, 1)]


def test_without_an_sdk_provider_the_hooks_call_the_engine_straight_through(
        engine: MLCEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    import opentelemetry.metrics._internal as metrics_internal

    # as in a process where nothing installed a provider (whatever an earlier test did)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(metrics_internal, "_METER_PROVIDER", None)
    telemetry.reset()
    # The API's proxies (no SDK installed) record nothing: the hooks do no work.
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert telemetry._TELEMETRY.instruments().active is False
    engine.update(CacheRequest(text=QUESTION, scope="m"), "Shakespeare")
    assert engine.lookup_explained(CacheRequest(text=QUESTION, scope="m")).hit is not None
    assert len(telemetry._TELEMETRY._engines) == 0  # not even watched for gauges


# ---------------------------------------------------------------------- LlamaIndex
class Collect(BaseEventHandler):
    events: list = []

    @classmethod
    def class_name(cls) -> str:
        return "Collect"

    def handle(self, event: Any, **kwargs: Any) -> None:
        self.events.append(event)


@pytest.fixture
def root_events() -> Iterator[Collect]:
    root = get_dispatcher()
    handler = Collect(events=[])
    root.add_event_handler(handler)
    yield handler
    root.event_handlers.remove(handler)


def test_a_llamaindex_event_handler_on_the_root_dispatcher_sees_a_cache_event_on_a_hit(
        root_events: Collect, engine: MLCEngine) -> None:
    llm = CachedMultiModalLLM(llm=VisionEchoLLM(), engine=engine)
    messages = [ChatMessage(role="user", content=QUESTION)]
    first = llm.chat(messages)
    second = llm.chat(messages)
    assert second.message.content == first.message.content
    cache_events = [e for e in root_events.events if isinstance(e, CacheLookupEvent)]
    assert [(e.hit, e.tier, e.api) for e in cache_events] == [(False, None, "chat"), (True, "L0.5", "chat")]
    assert cache_events[1].decision["entry_id"] == second.additional_kwargs["mlc_cache"]["entry_id"]
    assert cache_events[1].class_name() == "CacheLookupEvent"
    # seen among the wrapper's own LLM events, between its start and end events
    names = [type(e).__name__ for e in root_events.events]
    assert names.index("CacheLookupEvent") > names.index("LLMChatStartEvent")
    assert second.additional_kwargs["mlc_cache"]["tier"] == "L0.5"
    assert second.additional_kwargs["mlc_cache"]["hit"] is True
    assert "mlc_cache" not in first.additional_kwargs
    assert first.additional_kwargs["usage"] == second.additional_kwargs["usage"]  # the stored kwargs are kept


async def test_a_llamaindex_stream_replay_names_the_tier_on_its_last_chunk(
        root_events: Collect, engine: MLCEngine) -> None:
    llm = CachedMultiModalLLM(llm=VisionEchoLLM(), engine=engine)
    await llm.acomplete(QUESTION)
    chunks = [c async for c in await llm.astream_complete(QUESTION)]
    assert chunks[-1].additional_kwargs["mlc_cache"]["tier"] == "L0.5"
    hits = [e for e in root_events.events if isinstance(e, CacheLookupEvent) and e.hit]
    assert [e.api for e in hits] == ["complete"]


def test_a_llamaindex_event_carries_no_prompt_text(root_events: Collect, engine: MLCEngine) -> None:
    llm = CachedMultiModalLLM(llm=VisionEchoLLM(), engine=engine)
    llm.complete(QUESTION)
    llm.complete(QUESTION)
    for e in root_events.events:
        if isinstance(e, CacheLookupEvent):
            assert "hamlet" not in repr(e.decision).lower()


# ---------------------------------------------------------------------- LangChain callbacks
class CustomEvents(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any, UUID]] = []
        self.llm_runs: list[UUID] = []

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID,
                            parent_run_id: Any = None, **kwargs: Any) -> None:
        if parent_run_id is None:  # the wrapper's run, not the inner model's on a miss
            self.llm_runs.append(run_id)

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.events.append((name, data, run_id))


def test_cached_chat_model_emits_a_custom_callback_event_with_the_decision(engine: MLCEngine) -> None:
    model = CachedChatModel(FakeListChatModel(responses=["Shakespeare", "another"]), engine=engine)
    handler = CustomEvents()
    first = model.invoke(QUESTION, config={"callbacks": [handler]})
    second = model.invoke(PARAPHRASE, config={"callbacks": [handler]})
    assert first.content == second.content == "Shakespeare"
    assert [name for name, _, _ in handler.events] == [CACHE_EVENT, CACHE_EVENT]
    (_, miss, miss_run), (_, hit, hit_run) = handler.events
    assert miss["hit"] is False and miss["tier"] is None and miss["tiers"]["L0.5"] == "miss"
    assert hit["hit"] is True and hit["tier"] == "L1" and hit["scores"]["text"] >= hit["thresholds"]["text"]
    assert hit["entry_id"] == second.response_metadata["mlc_cache"]["entry_id"]
    assert [miss_run, hit_run] == handler.llm_runs  # each on the wrapper's own run
    assert "hamlet" not in repr(handler.events).lower()


async def test_cached_chat_model_emits_the_event_on_async_and_streaming_calls(engine: MLCEngine) -> None:
    model = CachedChatModel(FakeListChatModel(responses=["Shakespeare"]), engine=engine)
    handler = CustomEvents()
    await model.ainvoke(QUESTION, config={"callbacks": [handler]})
    chunks = [c async for c in model.astream(QUESTION, config={"callbacks": [handler]})]
    assert "".join(c.content for c in chunks) == "Shakespeare"
    list(model.stream(QUESTION, config={"callbacks": [handler]}))
    assert [(d["hit"], d["tier"]) for _, d, _ in handler.events] == [(False, None), (True, "L0.5"), (True, "L0.5")]
    assert [run for _, _, run in handler.events] == handler.llm_runs  # streamed calls report to their own run


def test_a_stream_abandoned_after_its_first_chunk_leaves_no_run_behind(engine: MLCEngine) -> None:
    from mlc_integrations.langchain import events

    model = CachedChatModel(FakeListChatModel(responses=["Shakespeare wrote it"]), engine=engine)
    stream = model.stream(QUESTION)
    next(stream)
    assert events._STREAM_RUN.get() is None  # set only while a step of the stream runs
    stream.close()
    handler = CustomEvents()
    model.invoke(QUESTION, config={"callbacks": [handler]})
    assert [d["hit"] for _, d, _ in handler.events] == [False]  # the abandoned stream stored nothing


async def test_astream_events_shows_the_cache_decision(engine: MLCEngine) -> None:
    model = CachedChatModel(FakeListChatModel(responses=["Shakespeare"]), engine=engine)
    model.invoke(QUESTION)
    custom = [e async for e in model.astream_events(QUESTION, version="v2") if e["event"] == "on_custom_event"]
    assert [(e["name"], e["data"]["hit"], e["data"]["tier"]) for e in custom] == [(CACHE_EVENT, True, "L0.5")]
