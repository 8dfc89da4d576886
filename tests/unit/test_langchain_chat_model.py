"""CachedChatModel: every LangChain call style through the cache, streams included.

The inner model is ``tests.unit._fake_chat.FakeToolChatModel``: it streams word by word,
calls bound tools and numbers its replies, so a reply served from the cache is told
apart from a new one by its text, and ``calls`` lists every real call.
"""

from __future__ import annotations

import base64
import logging
from typing import Any, Callable, Optional

import pytest
from langchain_core.globals import set_llm_cache
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration
from langchain_core.runnables import RunnableBinding
from langchain_core.tools import tool
from pydantic import BaseModel

from mlc_integrations import CachedChatModel, InvalidRequestError, MLCEngine, MultimodalSemanticCache, PayloadError
from mlc_integrations.langchain.replay import CACHE_METADATA_KEY
from tests.helpers import png_bytes, record_answers, solid
from tests.unit._fake_chat import FakeToolChatModel, StreamBroke

RED_PNG = png_bytes(solid((220, 30, 30)))
QUESTION, PARAPHRASE = "What color is the shape?", "What's the color of the shape?"
STYLES = ["invoke", "ainvoke", "batch", "abatch", "stream", "astream", "astream_events"]


def ask(question: str, png: Optional[bytes] = RED_PNG) -> list[BaseMessage]:
    content: list[Any] = [{"type": "text", "text": question}]
    if png is not None:
        url = "data:image/png;base64," + base64.b64encode(png).decode()
        content.append({"type": "image_url", "image_url": {"url": url}})
    return [HumanMessage(content=content)]


def merged(chunks: list[AIMessageChunk]) -> AIMessageChunk:
    out = chunks[0]
    for c in chunks[1:]:
        out = out + c
    return out


async def call(runnable: Any, style: str, messages: Any) -> tuple[AIMessage, int]:
    """One call in ``style``: the reply (streams merged) and how many chunks it came in."""
    if style == "invoke":
        return runnable.invoke(messages), 1
    if style == "ainvoke":
        return await runnable.ainvoke(messages), 1
    if style == "batch":
        return runnable.batch([messages])[0], 1
    if style == "abatch":
        return (await runnable.abatch([messages]))[0], 1
    if style == "stream":
        chunks = list(runnable.stream(messages))
    elif style == "astream":
        chunks = [c async for c in runnable.astream(messages)]
    else:
        events = [e async for e in runnable.astream_events(messages, version="v2")]
        chunks = [e["data"]["chunk"] for e in events if e["event"] == "on_chat_model_stream"]
        assert {e["name"] for e in events if e["event"].startswith("on_chat_model")} == {"CachedChatModel"}
    return merged(chunks), len(chunks)


@pytest.fixture
def inner() -> FakeToolChatModel:
    return FakeToolChatModel()


@pytest.fixture
def cache(make_engine: Callable[..., MLCEngine]) -> MultimodalSemanticCache:
    return MultimodalSemanticCache(make_engine(image_encoder=None))


@pytest.fixture
def model(inner: FakeToolChatModel, cache: MultimodalSemanticCache) -> CachedChatModel:
    return CachedChatModel(inner, cache=cache)


@tool
def catalog_price(color: str, shape: str) -> str:
    """Look up the price of a shape of the given colour."""
    return "$3.40"


class Person(BaseModel):
    """A person."""

    name: str
    age: int


# ---------------------------------------------------------------------------- every call style
@pytest.mark.parametrize("style", STYLES)
async def test_every_call_style_misses_then_hits_exact_and_paraphrase(style: str, model: CachedChatModel,
                                                                      inner: FakeToolChatModel) -> None:
    first, _ = await call(model, style, ask(QUESTION))
    assert len(inner.calls) == 1 and model.last_hit is None
    assert inner.calls == ["stream" if "stream" in style else "generate"]  # a streaming caller streams the miss
    again, n_chunks = await call(model, style, ask(QUESTION))
    assert len(inner.calls) == 1 and again.content == first.content
    assert model.last_hit is not None and model.last_hit.tier == "L0.5"
    assert again.response_metadata[CACHE_METADATA_KEY]["tier"] == "L0.5"
    if "stream" in style:
        assert n_chunks == len(first.content.split(" "))  # replayed word by word, not as one block
    para, _ = await call(model, style, ask(PARAPHRASE))
    assert len(inner.calls) == 1 and para.content == first.content and model.last_hit.tier == "L1"
    other, _ = await call(model, style, ask("How many corners does it have?"))
    assert len(inner.calls) == 2 and other.content.startswith("Answer 2") and model.last_hit is None
    st = model.stats()["adapter"]
    assert (st["hits"], st["misses"], st["lookups"]) == (2, 2, 4)


@pytest.mark.parametrize("first_style,second_style", [("stream", "invoke"), ("invoke", "stream"),
                                                      ("astream", "ainvoke"), ("ainvoke", "astream_events")])
async def test_streamed_and_invoked_replies_share_one_entry(first_style: str, second_style: str,
                                                            model: CachedChatModel, inner: FakeToolChatModel) -> None:
    first, _ = await call(model, first_style, ask(QUESTION))
    second, _ = await call(model, second_style, ask(QUESTION))
    assert len(inner.calls) == 1 and second.content == first.content
    assert second.usage_metadata is not None and second.usage_metadata["total_cost"] == 0
    assert second.usage_metadata["output_tokens"] == first.usage_metadata["output_tokens"]


async def test_inside_a_chain_the_inner_run_sends_no_events_of_its_own(model: CachedChatModel,
                                                                    inner: FakeToolChatModel) -> None:
    from langchain_core.runnables import RunnableLambda

    chain = RunnableLambda(lambda q: ask(q)) | model
    for _ in range(2):  # a miss streamed from the model, then a hit replayed
        events = [e async for e in chain.astream_events(QUESTION, version="v2")]
        streamed = [e["data"]["chunk"].content for e in events if e["event"] == "on_chat_model_stream"]
        assert {e["name"] for e in events if e["event"].startswith("on_chat_model")} == {"CachedChatModel"}
        assert "".join(streamed) == "Answer 1: you asked 'What color is the shape?'."
    assert inner.calls == ["stream"]


@pytest.mark.parametrize("style", ["invoke", "stream", "astream"])
async def test_answer_given_to_the_engine_is_the_text_the_user_reads(style: str, model: CachedChatModel,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    answers = record_answers(model.engine, monkeypatch)
    reply, _ = await call(model, style, ask(QUESTION))
    assert answers == [reply.content] and reply.content.startswith("Answer 1")


def test_hit_reply_gets_this_runs_id_not_the_stored_one(model: CachedChatModel) -> None:
    first = model.invoke(ask(QUESTION))
    again = model.invoke(ask(QUESTION))
    assert again.id and again.id.startswith("lc_run--") and again.id != first.id


# ---------------------------------------------------------------------------- same keys as set_llm_cache
def test_shares_entries_with_set_llm_cache_both_ways(inner: FakeToolChatModel, cache: MultimodalSemanticCache) -> None:
    model = CachedChatModel(inner, cache=cache)
    set_llm_cache(cache)
    try:
        direct = inner.invoke(ask(QUESTION))  # stored by LangChain's own BaseCache path
        assert model.invoke(ask(QUESTION)).content == direct.content and inner.calls == ["generate"]
        streamed = merged(list(model.stream(ask("Is it round?"))))  # stored by the wrapper
        assert inner.invoke(ask("Is it round?")).content == streamed.content
        assert inner.calls == ["generate", "stream"] and cache.last_hit is not None
        bound = inner.bind_tools([catalog_price]).invoke(ask("What is the price?"))
        via_wrapper = model.bind_tools([catalog_price]).invoke(ask("What is the price?"))
        assert via_wrapper.tool_calls == bound.tool_calls and len(inner.calls) == 3
    finally:
        set_llm_cache(None)


# ---------------------------------------------------------------------------- streams that do not finish
def test_abandoned_stream_stores_nothing(model: CachedChatModel, inner: FakeToolChatModel) -> None:
    stream = model.stream(ask(QUESTION))
    next(stream)
    next(stream)
    stream.close()  # the caller stopped reading
    assert model.engine.count() == 0 and model.stats()["adapter"]["streams_unfinished"] == 1
    model.invoke(ask(QUESTION))
    assert len(inner.calls) == 2 and model.engine.count() == 1


@pytest.mark.parametrize("style", ["stream", "astream"])
async def test_failed_stream_raises_and_stores_nothing(style: str, cache: MultimodalSemanticCache) -> None:
    inner = FakeToolChatModel(fail_stream_after=2)
    model = CachedChatModel(inner, cache=cache)
    with pytest.raises(StreamBroke):
        await call(model, style, ask(QUESTION))
    assert model.engine.count() == 0 and model.stats()["adapter"]["streams_unfinished"] == 1
    with pytest.raises(StreamBroke):  # nothing half-finished is replayed: the model is asked again
        await call(model, style, ask(QUESTION))
    assert inner.calls == ["stream", "stream"]


async def test_async_abandoned_stream_stores_nothing(model: CachedChatModel) -> None:
    stream = model.astream(ask(QUESTION))
    await stream.__anext__()
    await stream.aclose()
    assert model.engine.count() == 0 and model.stats()["adapter"]["streams_unfinished"] == 1


# ---------------------------------------------------------------------------- tools, structured output
@pytest.mark.parametrize("style", ["invoke", "stream", "astream"])
async def test_bound_tools_are_keyed_and_tool_calls_replay_intact(style: str, model: CachedChatModel,
                                                                  inner: FakeToolChatModel) -> None:
    bound = model.bind_tools([catalog_price], tool_choice="any")
    assert isinstance(bound, RunnableBinding) and bound.bound is model and bound.kwargs["tool_choice"] == "any"
    first, _ = await call(bound, style, ask("What is the price?"))
    again, _ = await call(bound, style, ask("What is the price?"))
    assert len(inner.calls) == 1 and first.tool_calls and again.tool_calls == first.tool_calls
    assert again.tool_calls[0]["id"] == "call_1"  # the stored call id: the agent's next step matches again
    await call(model, style, ask("What is the price?"))  # no tools bound: another key
    await call(model.bind_tools([catalog_price]), style, ask("What is the price?"))  # another tool_choice
    assert len(inner.calls) == 3


@pytest.mark.parametrize("style", ["invoke", "ainvoke", "batch", "stream"])
async def test_with_structured_output_goes_through_the_cache(style: str, model: CachedChatModel,
                                                             inner: FakeToolChatModel) -> None:
    structured = model.with_structured_output(Person)
    runs = []
    for _ in range(2):
        if style == "stream":
            runs.append(list(structured.stream("Who wrote the first program?"))[-1])
        elif style == "batch":
            runs.append(structured.batch(["Who wrote the first program?"])[0])
        else:
            runs.append(structured.invoke("Who wrote the first program?") if style == "invoke"
                        else await structured.ainvoke("Who wrote the first program?"))
    assert runs[0] == runs[1] == Person(name="value-1", age=1) and len(inner.calls) == 1
    raw = model.with_structured_output(Person, include_raw=True).invoke("Who wrote the first program?")
    assert raw["parsed"] == runs[0] and raw["raw"].response_metadata[CACHE_METADATA_KEY]["hit"]


def test_a_binding_the_wrapper_cannot_take_over_is_refused(model: CachedChatModel,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from langchain_core.runnables import RunnableLambda

    monkeypatch.setattr(FakeToolChatModel, "bind_tools", lambda self, tools, **kw: RunnableLambda(self.invoke))
    with pytest.raises(NotImplementedError, match="would bypass the cache"):
        model.bind_tools([catalog_price])
    with pytest.raises(TypeError, match="wrap the model, then bind"):
        CachedChatModel(FakeToolChatModel().bind(stop=["x"]))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- why it missed, stats
def test_last_lookup_explains_a_refused_candidate_and_logs_it(model: CachedChatModel,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    model.invoke(ask("Is there a cat in the picture?", None))
    with caplog.at_level(logging.DEBUG, logger="mlc_integrations.langchain"):
        model.invoke(ask("Is there no cat in the picture?", None))
    record = model.last_lookup
    assert record.hit is None and record.refused is not None and record.refused.reason == "verifier"
    assert record.refused.matched_text == "Is there a cat in the picture?"
    assert record.tiers["L1"] == "refused" and record.refused.scores["verifier"] < record.refused.thresholds["verifier"]
    assert record.reason.startswith("refused tier=L1") and record.explain().startswith("miss: refused tier=L1")
    assert any("cache miss" in m and "refused tier=L1" in m for m in caplog.messages)
    model.invoke(ask("How far away is the moon?", None))
    assert model.last_lookup.reason.startswith("no stored entry cleared the similarity thresholds")


def test_stats_are_per_scope_and_namespace(model: CachedChatModel) -> None:
    model.invoke(ask(QUESTION))
    model.invoke(ask(QUESTION))
    model.bind_tools([catalog_price]).invoke(ask("What is the price?"))
    by_scope = model.stats()["adapter"]["by_scope"]
    assert len(by_scope) == 2
    plain = next(v for k, v in by_scope.items() if "catalog_price" not in k)
    with_tools = next(v for k, v in by_scope.items() if "catalog_price" in k)
    assert plain == {"default": {"lookups": 2, "hits": 1, "misses": 1}}
    assert with_tools == {"default": {"lookups": 1, "hits": 0, "misses": 1}}


# ---------------------------------------------------------------------------- fail-open and strict
def test_a_keying_fault_never_breaks_the_call(model: CachedChatModel, inner: FakeToolChatModel,
                                             monkeypatch: pytest.MonkeyPatch, make_engine: Callable[..., MLCEngine]) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("parser bug")

    monkeypatch.setattr(model.semantic_cache, "request", broken)
    assert model.invoke(ask(QUESTION)).content.startswith("Answer 1")
    assert "".join(c.content for c in model.stream(ask(QUESTION))).startswith("Answer 2")
    st = model.stats()["adapter"]
    assert st["bypassed"] == 2 and st["misses"] == 2 and model.engine.count() == 0
    assert model.last_lookup.kind == "invalid" and "could not be keyed" in model.last_lookup.reason
    strict = CachedChatModel(FakeToolChatModel(), make_engine(strict=True, image_encoder=None))
    monkeypatch.setattr(strict.semantic_cache, "request", broken)
    with pytest.raises(InvalidRequestError, match="parser bug"):
        strict.invoke(ask(QUESTION))


def test_unstorable_reply_is_returned_not_stored(model: CachedChatModel, inner: FakeToolChatModel,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    original = FakeToolChatModel._generate

    def with_handle(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        result.generations[0].generation_info = {"handle": object()}
        return result

    monkeypatch.setattr(FakeToolChatModel, "_generate", with_handle)
    assert model.invoke(ask(QUESTION)).content.startswith("Answer 1")
    assert model.engine.count() == 0 and model.stats()["adapter"]["unstorable_responses"] == 1


def test_unreadable_entry_is_removed_and_the_call_goes_on(model: CachedChatModel, inner: FakeToolChatModel) -> None:
    model.invoke(ask(QUESTION))
    entry = model.last_lookup
    req, _ = model.semantic_cache.request(*_prompt_and_scope(inner, ask(QUESTION)))
    model.engine.update(req, {"something": "else"})  # another program's entry under this key
    assert model.invoke(ask(QUESTION)).content.startswith("Answer 2") and entry.hit is None
    assert "unreadable" in model.last_lookup.reason and model.stats()["adapter"]["unreadable_entries"] == 1
    assert model.invoke(ask(QUESTION)).content.startswith("Answer 2")  # the new reply was stored in its place


def _prompt_and_scope(inner: FakeToolChatModel, messages: list[BaseMessage]) -> tuple[str, str]:
    from langchain_core.load import dumps

    return dumps(messages), inner._get_llm_string(stop=None)


# ---------------------------------------------------------------------------- construction
def test_constructor_forms(inner: FakeToolChatModel, make_engine: Callable[..., MLCEngine], tmp_path: Any) -> None:
    engine = make_engine(image_encoder=None)
    shared = CachedChatModel(inner, engine, namespace="tenant-a", tags=["cached"])
    assert shared.engine is engine and shared.semantic_cache.namespace == "tenant-a" and shared.tags == ["cached"]
    assert shared.cache is False  # LangChain's own BaseCache path is off: the wrapper caches every route
    own = CachedChatModel(inner, persist_directory=None, image_encoder=None)
    assert own.engine.storage_mode == "ephemeral"
    own.close()
    with pytest.raises(TypeError, match="uses that cache"):
        CachedChatModel(inner, cache=MultimodalSemanticCache(engine), l1_threshold=0.9)
    with pytest.raises(TypeError, match="cache= takes the MultimodalSemanticCache"):
        CachedChatModel(inner, cache=engine)  # type: ignore[arg-type]
    assert shared._get_ls_params()["ls_model_name"] == "fake-tool-model"
    assert isinstance(ChatGeneration(message=shared.invoke(ask(QUESTION))), ChatGeneration)


# ---------------------------------------------------------------------------- inside LangGraph
def test_langgraph_messages_stream_sends_each_token_once_and_replays_from_the_cache(
        model: CachedChatModel, inner: FakeToolChatModel) -> None:
    """LangGraph's ``stream_mode="messages"`` listens to every chat-model run: the inner
    model's run, nested under the wrapper's, must not send the tokens a second time."""
    import warnings

    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        agent = create_react_agent(model, [catalog_price])

    def run() -> list[str]:
        return [c.content for c, meta in agent.stream({"messages": ask("What is the price?")}, stream_mode="messages")
                if isinstance(c, AIMessageChunk) and c.content]

    first = run()
    assert inner.calls == ["stream", "stream"]  # tool call, then the answer, both streamed from the model
    answer = "Answer 2: the tool said $3.40."
    assert first == ["Answer", " 2:", " the", " tool", " said", " $3.40."] and "".join(first) == answer
    assert run() == first and inner.calls == ["stream", "stream"]  # second run: every token from the cache
    assert model.stats()["adapter"]["hits"] == 2
