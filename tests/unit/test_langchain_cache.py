"""MultimodalSemanticCache through real LangChain models (fake chat models / LLMs from
langchain-core that count their calls), plus prompt parsing and round trips."""

from __future__ import annotations

import asyncio
import base64
import logging
import threading
from typing import Any, Callable, Iterator, Optional

import pytest
from langchain_core.globals import get_llm_cache, set_llm_cache
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.load import dumps
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult, Generation
from PIL import PngImagePlugin
from pydantic import PrivateAttr

from mlc_integrations import (
    ImageDecodeError,
    InvalidRequestError,
    MLCEngine,
    MultimodalSemanticCache,
    PayloadError,
)
from mlc_integrations.langchain import PromptParser
from tests.helpers import jpeg_bytes, png_bytes, record_answers, solid

LLM_STRING = "fake-model---[('stop', None)]"


# ---------------------------------------------------------------------------- helpers
class CountingChatModel(GenericFakeChatModel):
    """GenericFakeChatModel that answers ``answer-1``, ``answer-2``, ... (or the scripted
    messages), counts its real calls, and has a temperature in its identity (``llm_string``).
    The counter is private state, so it does not change ``llm_string``."""

    messages: Iterator[Any] = iter(())
    temperature: float = 0.0
    script: list[AIMessage] = []
    _calls: int = PrivateAttr(default=0)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"temperature": self.temperature}

    @property
    def calls(self) -> int:
        return self._calls

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        with self._lock:
            self._calls += 1
            n = self._calls
        msg = self.script[n - 1] if n <= len(self.script) else AIMessage(content=f"answer-{n}")
        return ChatResult(generations=[ChatGeneration(message=msg.model_copy(), generation_info={"call": n})])


class CountingLLM(FakeListLLM):
    _calls: int = PrivateAttr(default=0)

    def _call(self, prompt: str, stop: Any = None, run_manager: Any = None, **kw: Any) -> str:
        self._calls += 1
        return super()._call(prompt, stop, run_manager, **kw)

    async def _acall(self, prompt: str, stop: Any = None, run_manager: Any = None, **kw: Any) -> str:
        self._calls += 1
        return await super()._acall(prompt, stop, run_manager, **kw)


def data_url(image: bytes) -> str:
    mime = "image/jpeg" if image[:2] == b"\xff\xd8" else "image/png"
    return f"data:{mime};base64," + base64.b64encode(image).decode()


def b64(png: bytes) -> str:
    return base64.b64encode(png).decode()


# Two pictures the random-weight test CLIP (conftest's tiny_clip_dir) also tells apart
# (cosine 0.84 < the L2 threshold): with L2 on, "another picture" must stay a miss.
RED_PNG = png_bytes(solid((220, 30, 30)))
BLUE_PNG = png_bytes(solid((30, 30, 220)))


def resaved(png_source: bytes) -> bytes:
    """Same pixels, other PNG bytes (compression level and a text chunk)."""
    from io import BytesIO

    from PIL import Image

    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", "re-saved by another tool")
    out = png_bytes(Image.open(BytesIO(png_source)), compress_level=0, pnginfo=info)
    assert out != png_source
    return out


def ask(question: str, png: Optional[bytes] = None, history: tuple[BaseMessage, ...] = ()) -> list[BaseMessage]:
    content: list[Any] = [{"type": "text", "text": question}]
    if png is not None:
        content.append({"type": "image_url", "image_url": {"url": data_url(png)}})
    return [*history, HumanMessage(content=content)]


# Every image block form the adapter reads, as (name, block builder).
IMAGE_FORMS: dict[str, Callable[[bytes], dict[str, Any]]] = {
    "openai_image_url": lambda png: {"type": "image_url", "image_url": {"url": data_url(png)}},
    "openai_image_url_detail": lambda png: {"type": "image_url", "image_url": {"url": data_url(png), "detail": "high"}},
    "openai_image_url_string": lambda png: {"type": "image_url", "image_url": data_url(png)},
    "openai_input_image": lambda png: {"type": "input_image", "image_url": data_url(png)},
    "lc_v1_base64": lambda png: {"type": "image", "base64": b64(png), "mime_type": "image/png"},
    "lc_v1_url_data": lambda png: {"type": "image", "url": data_url(png)},
    "lc_v0_source_type_base64": lambda png: {"type": "image", "source_type": "base64", "data": b64(png), "mime_type": "image/png"},
    "anthropic_source_base64": lambda png: {
        "type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(png)}},
}


def block_prompt(question: str, block: dict[str, Any]) -> list[BaseMessage]:
    return [HumanMessage(content=[{"type": "text", "text": question}, block])]


@pytest.fixture
def cache(make_engine: Callable[..., MLCEngine]) -> MultimodalSemanticCache:
    return MultimodalSemanticCache(make_engine())


@pytest.fixture
def global_cache(cache: MultimodalSemanticCache) -> Iterator[MultimodalSemanticCache]:
    set_llm_cache(cache)
    try:
        yield cache
    finally:
        set_llm_cache(None)


@pytest.fixture(params=["set_llm_cache", "model_cache"])
def wired(request: pytest.FixtureRequest, cache: MultimodalSemanticCache) -> Iterator[Callable[..., CountingChatModel]]:
    """A factory of counting models wired to ``cache`` globally or per model."""
    if request.param == "set_llm_cache":
        set_llm_cache(cache)
        try:
            yield lambda **kw: CountingChatModel(**kw)
        finally:
            set_llm_cache(None)
    else:
        yield lambda **kw: CountingChatModel(cache=cache, **kw)


# ---------------------------------------------------------------------------- chat flows
def test_same_image_and_question_twice_calls_model_once(wired: Callable[..., CountingChatModel], cache: MultimodalSemanticCache) -> None:
    model = wired()
    first = model.invoke(ask("What color is the shape?", RED_PNG))
    assert cache.last_hit is None  # the first call was a miss
    second = model.invoke(ask("What color is the shape?", RED_PNG))
    assert model.calls == 1
    assert second.content == first.content == "answer-1"
    assert cache.last_hit is not None and cache.last_hit.tier == "L0.5"


def test_paraphrase_about_same_image_is_an_l1_hit(wired: Callable[..., CountingChatModel], cache: MultimodalSemanticCache) -> None:
    model = wired()
    model.invoke(ask("What color is the shape?", RED_PNG))
    again = model.invoke(ask("What's the color of the shape?", RED_PNG))
    assert model.calls == 1 and again.content == "answer-1"
    hit = cache.last_hit
    assert hit is not None and hit.tier == "L1"
    assert hit.scores["text"] >= hit.thresholds["text"]
    assert hit.matched_text == "What color is the shape?"


def test_near_duplicate_image_is_an_l2_hit(cache: MultimodalSemanticCache) -> None:
    model = CountingChatModel(cache=cache)
    model.invoke(ask("What color is the shape?", RED_PNG))
    near = solid((220, 30, 30))
    near.putpixel((3, 3), (90, 90, 90))  # other pixels, same picture to a human (and to CLIP)
    model.invoke(ask("What color is the shape?", jpeg_bytes(near, quality=80)))
    hit = cache.last_hit
    assert model.calls == 1 and hit is not None and hit.tier == "L2"
    assert {"prompt", "image_changed"} <= set(hit.scores)  # the prompt and the local image comparison ...
    assert all(hit.scores[k] >= t for k, t in hit.thresholds.items())  # ... and every retrieval threshold held


def test_same_question_about_other_image_calls_model_again(wired: Callable[..., CountingChatModel], cache: MultimodalSemanticCache) -> None:
    model = wired()
    model.invoke(ask("What color is the shape?", RED_PNG))
    other = model.invoke(ask("What color is the shape?", BLUE_PNG))
    assert model.calls == 2 and other.content == "answer-2"
    assert cache.last_hit is None


def test_losslessly_resaved_image_hits_exactly(wired: Callable[..., CountingChatModel], cache: MultimodalSemanticCache) -> None:
    model = wired()
    model.invoke(ask("What color is the shape?", RED_PNG))
    model.invoke(ask("What color is the shape?", resaved(RED_PNG)))
    assert model.calls == 1
    assert cache.last_hit is not None and cache.last_hit.tier == "L0.5"


def test_other_temperature_is_another_scope(wired: Callable[..., CountingChatModel]) -> None:
    cold, warm = wired(temperature=0.0), wired(temperature=0.7)
    cold.invoke(ask("What color is the shape?", RED_PNG))
    reply = warm.invoke(ask("What color is the shape?", RED_PNG))
    assert (cold.calls, warm.calls) == (1, 1) and reply.content == "answer-1"  # warm's own first answer
    # and each model still hits its own entry
    cold.invoke(ask("What color is the shape?", RED_PNG))
    assert cold.calls == 1


def test_different_earlier_turn_is_another_context(wired: Callable[..., CountingChatModel]) -> None:
    model = wired()
    h1 = (HumanMessage("We talk about fruit."), AIMessage("OK."))
    h2 = (HumanMessage("We talk about traffic signs."), AIMessage("OK."))
    model.invoke(ask("What color is the shape?", RED_PNG, h1))
    model.invoke(ask("What color is the shape?", RED_PNG, h2))
    assert model.calls == 2
    model.invoke(ask("What color is the shape?", RED_PNG, h1))
    assert model.calls == 2


def test_image_in_an_earlier_turn_is_context_keyed_by_pixels(global_cache: MultimodalSemanticCache) -> None:
    model = CountingChatModel()
    history_red = (HumanMessage(content=[{"type": "text", "text": "Look at this."},
                                         {"type": "image_url", "image_url": {"url": data_url(RED_PNG)}}]),
                   AIMessage("I see it."))
    history_red_resaved = (HumanMessage(content=[{"type": "text", "text": "Look at this."},
                                                 {"type": "image", "base64": b64(resaved(RED_PNG)), "mime_type": "image/png"}]),
                           AIMessage("I see it."))
    history_blue = (HumanMessage(content=[{"type": "text", "text": "Look at this."},
                                          {"type": "image_url", "image_url": {"url": data_url(BLUE_PNG)}}]),
                    AIMessage("I see it."))
    model.invoke(ask("Is it round?", None, history_red))
    model.invoke(ask("Is it round?", None, history_red_resaved))
    assert model.calls == 1
    model.invoke(ask("Is it round?", None, history_blue))
    assert model.calls == 2


def test_system_prompt_is_context(global_cache: MultimodalSemanticCache) -> None:
    model = CountingChatModel()
    model.invoke(ask("What color is the shape?", RED_PNG, (SystemMessage("Answer in French."),)))
    model.invoke(ask("What color is the shape?", RED_PNG, (SystemMessage("Answer in German."),)))
    model.invoke(ask("What color is the shape?", RED_PNG))
    assert model.calls == 3


# ---------------------------------------------------------------------------- async
async def test_same_flows_through_ainvoke(global_cache: MultimodalSemanticCache) -> None:
    model = CountingChatModel()
    with global_cache.track() as seen:
        await model.ainvoke(ask("What color is the shape?", RED_PNG))
        assert (await model.ainvoke(ask("What color is the shape?", RED_PNG))).content == "answer-1"
        await model.ainvoke(ask("What's the color of the shape?", RED_PNG))
        await model.ainvoke(ask("What color is the shape?", resaved(RED_PNG)))
        await model.ainvoke(ask("What color is the shape?", BLUE_PNG))
        await CountingChatModel(temperature=0.5).ainvoke(ask("What color is the shape?", RED_PNG))
        await model.ainvoke(ask("What color is the shape?", RED_PNG, (HumanMessage("Earlier."), AIMessage("Yes."))))
    assert model.calls == 3  # first, other image, other earlier turn
    assert [r.hit.tier if r.hit else None for r in seen.records] == [None, "L0.5", "L1", "L0.5", None, None, None]
    assert seen.last_hit is None and seen.misses == 4


async def test_same_flows_through_abatch(cache: MultimodalSemanticCache) -> None:
    model = CountingChatModel(cache=cache)
    await model.ainvoke(ask("What color is the shape?", RED_PNG))
    with cache.track() as seen:
        out = await model.abatch([
            ask("What color is the shape?", RED_PNG),
            ask("What's the color of the shape?", RED_PNG),
            ask("What color is the shape?", resaved(RED_PNG)),
            ask("What color is the shape?", BLUE_PNG),
        ])
    assert [m.content for m in out][:3] == ["answer-1"] * 3
    assert out[3].content == "answer-2" and model.calls == 2
    assert sorted(h.tier for h in seen.hits) == ["L0.5", "L0.5", "L1"] and seen.misses == 1
    # a different temperature through abatch: its own scope
    warm = CountingChatModel(cache=cache, temperature=0.9)
    await warm.abatch([ask("What color is the shape?", RED_PNG)])
    assert warm.calls == 1


def test_batch_uses_the_cache_and_track_sees_worker_threads(cache: MultimodalSemanticCache) -> None:
    model = CountingChatModel(cache=cache)
    model.invoke(ask("What color is the shape?", RED_PNG))
    with cache.track() as seen:
        model.batch([ask("What color is the shape?", RED_PNG), ask("What color is the shape?", BLUE_PNG)])
    assert model.calls == 2 and len(seen.records) == 2 and len(seen.hits) == 1


def test_last_hit_is_per_thread(cache: MultimodalSemanticCache) -> None:
    model = CountingChatModel(cache=cache)
    model.invoke(ask("What color is the shape?", RED_PNG))
    results: dict[str, Any] = {}

    def worker(name: str, png: bytes) -> None:
        model.invoke(ask("What color is the shape?", png))
        results[name] = cache.last_hit

    threads = [threading.Thread(target=worker, args=("hit", RED_PNG)), threading.Thread(target=worker, args=("miss", BLUE_PNG))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["hit"] is not None and results["hit"].tier == "L0.5"
    assert results["miss"] is None
    assert cache.last_hit is None  # this thread's last lookup was the first call's miss


async def test_last_hit_after_ainvoke_is_that_calls_outcome(cache: MultimodalSemanticCache) -> None:
    """``ainvoke`` looks up in a task LangChain creates: the caller sees that lookup, never
    its own previous sync call's hit; and sync again after async."""
    model = CountingChatModel(cache=cache)
    model.invoke(ask("What color is the shape?", RED_PNG))
    model.invoke(ask("What color is the shape?", RED_PNG))
    assert cache.last_hit is not None
    await model.ainvoke(ask("How many corners does it have?", BLUE_PNG))  # a new question: a miss
    assert cache.last_hit is None and cache.last_lookup.text == "How many corners does it have?"
    await model.ainvoke(ask("How many corners does it have?", BLUE_PNG))
    assert cache.last_hit is not None and cache.last_hit.tier == "L0.5"
    model.invoke(ask("Describe the background.", BLUE_PNG))
    assert cache.last_hit is None and model.calls == 3


def test_last_hit_after_asyncio_run_is_that_calls_outcome(cache: MultimodalSemanticCache) -> None:
    model = CountingChatModel(cache=cache)
    model.invoke(ask("What color is the shape?", RED_PNG))
    model.invoke(ask("What color is the shape?", RED_PNG))
    assert cache.last_hit is not None
    asyncio.run(model.ainvoke(ask("How many corners does it have?", BLUE_PNG)))
    assert cache.last_hit is None and model.calls == 2


def test_answer_given_to_the_engine_is_the_text_the_user_reads(cache: MultimodalSemanticCache,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The verifier compares answers: the adapter hands the engine the generations' text,
    never LangChain's serialized payload."""
    answers = record_answers(cache.engine, monkeypatch)
    blocks = AIMessage(content=[{"type": "text", "text": "The shape is "},
                                {"type": "reasoning", "reasoning": "red dominates"}, {"type": "text", "text": "red."}])
    tool_call_only = AIMessage(content="", tool_calls=[_tool_call("Oslo", "c1")])
    model = CountingChatModel(cache=cache, script=[blocks, tool_call_only])
    reply = model.invoke(ask("What color is the shape?", RED_PNG))
    assert answers == [reply.text] == ["The shape is red."]
    model.invoke(ask("What is the weather in Oslo?"))
    assert answers[-1] == ""  # a tool call alone: nothing a user reads
    llm = CountingLLM(responses=["Paris"], cache=cache)
    assert llm.invoke("Capital of France?") == "Paris"
    assert answers == ["The shape is red.", "", "Paris"]


# ---------------------------------------------------------------------------- image forms
@pytest.mark.parametrize("form", sorted(IMAGE_FORMS))
def test_each_image_form_hits_through_a_model(form: str, global_cache: MultimodalSemanticCache) -> None:
    model = CountingChatModel()
    make = IMAGE_FORMS[form]
    model.invoke(block_prompt("What color is the shape?", make(RED_PNG)))
    model.invoke(block_prompt("What color is the shape?", make(resaved(RED_PNG))))
    assert model.calls == 1 and global_cache.last_hit.tier == "L0.5"
    model.invoke(block_prompt("What color is the shape?", make(BLUE_PNG)))
    assert model.calls == 2


def test_all_pixel_forms_share_one_key(cache: MultimodalSemanticCache) -> None:
    keys = {}
    for form, make in IMAGE_FORMS.items():
        req, kind = cache.request(dumps(block_prompt("What color is the shape?", make(RED_PNG))), LLM_STRING)
        assert kind == "chat" and req.text == "What color is the shape?" and len(req.images) == 1
        keys[form] = cache.engine.key(req)
    assert len({k.images_key for k in keys.values()}) == 1
    # `detail` changes what the model sees: compared exactly, so it is its own entry
    plain = {f: k.entry_id for f, k in keys.items() if f != "openai_image_url_detail"}
    assert len(set(plain.values())) == 1
    assert keys["openai_image_url_detail"].entry_id not in plain.values()


def test_detail_level_is_part_of_the_key(global_cache: MultimodalSemanticCache) -> None:
    model = CountingChatModel()
    high = {"type": "image_url", "image_url": {"url": data_url(RED_PNG), "detail": "high"}}
    low = {"type": "image_url", "image_url": {"url": data_url(RED_PNG), "detail": "low"}}
    auto = {"type": "image_url", "image_url": {"url": data_url(RED_PNG), "detail": "auto"}}
    none = {"type": "image_url", "image_url": {"url": data_url(RED_PNG)}}
    for block in (high, high, low, auto, none):
        model.invoke(block_prompt("Read the small print.", block))
    assert model.calls == 3  # high, low, auto (= no detail)


@pytest.mark.parametrize("block", [
    {"type": "image_url", "image_url": {"url": "https://images.example.invalid/cat.png"}},
    {"type": "image", "url": "https://images.example.invalid/cat.png"},
    {"type": "image", "source_type": "url", "url": "https://images.example.invalid/cat.png"},
    {"type": "image", "source": {"type": "url", "url": "https://images.example.invalid/cat.png"}},
], ids=["openai_image_url", "lc_v1_url", "lc_v0_url", "anthropic_url"])
def test_remote_url_keyed_by_string_never_fetched(block: dict[str, Any], cache: MultimodalSemanticCache,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def no_network(*a: Any, **k: Any) -> None:
        raise AssertionError("the cache tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    model = CountingChatModel(cache=cache)
    model.invoke(block_prompt("What animal is this?", block))
    model.invoke(block_prompt("What animal is this?", block))
    assert model.calls == 1 and cache.last_hit.tier == "L0.5"
    other = {"type": "image_url", "image_url": {"url": "https://images.example.invalid/dog.png"}}
    model.invoke(block_prompt("What animal is this?", other))
    assert model.calls == 2
    req, _ = cache.request(dumps(block_prompt("What animal is this?", block)), LLM_STRING)
    assert cache.engine.key(req).images[0].is_remote


def test_file_id_reference_is_keyed_exactly(cache: MultimodalSemanticCache) -> None:
    model = CountingChatModel(cache=cache)
    for fid in ("file-abc", "file-abc", "file-xyz"):
        model.invoke(block_prompt("Summarize.", {"type": "image", "file_id": fid}))
    assert model.calls == 2


# ---------------------------------------------------------------------------- tool calls
def _tool_call(city: str, call_id: str) -> dict[str, Any]:
    return {"name": "weather", "args": {"city": city}, "id": call_id, "type": "tool_call"}


def test_agent_next_step_never_reuses_first_step(cache: MultimodalSemanticCache) -> None:
    step1 = AIMessage("", tool_calls=[_tool_call("Paris", "call_1")], response_metadata={"finish_reason": "tool_calls"})
    model = CountingChatModel(cache=cache, script=[step1, AIMessage("It is sunny in Paris.")])
    q = ask("What is the weather where this photo was taken?", RED_PNG)
    first = model.invoke(q)
    assert first.tool_calls == step1.tool_calls
    after_tool = [*q, first, ToolMessage("sunny, 21C", tool_call_id="call_1")]
    final = model.invoke(after_tool)
    assert model.calls == 2 and final.content == "It is sunny in Paris."
    # re-running the agent replays both steps from the cache (tool call ids included)
    again = model.invoke(q)
    assert again.tool_calls == first.tool_calls
    assert model.invoke([*q, again, ToolMessage("sunny, 21C", tool_call_id="call_1")]).content == final.content
    assert model.calls == 2
    # another tool result, or another tool call id, is another context
    model.invoke([*q, first, ToolMessage("rain, 12C", tool_call_id="call_1")])
    other_call = AIMessage("", tool_calls=[_tool_call("Paris", "call_2")])
    model.invoke([*q, other_call, ToolMessage("sunny, 21C", tool_call_id="call_2")])
    assert model.calls == 4


def test_roundtrip_returns_equal_generations_with_tool_calls(cache: MultimodalSemanticCache) -> None:
    stored = [ChatGeneration(
        message=AIMessage(
            content="Let me check.",
            tool_calls=[_tool_call("Oslo", "call_9")],
            response_metadata={"model_name": "fake", "finish_reason": "tool_calls"},
            usage_metadata={"input_tokens": 12, "output_tokens": 3, "total_tokens": 15},
            id="run-1",
        ),
        generation_info={"finish_reason": "tool_calls", "logprobs": None},
    )]
    prompt = dumps(ask("Weather?", RED_PNG))
    cache.update(prompt, LLM_STRING, stored)
    got = cache.lookup(prompt, LLM_STRING)
    assert type(got) is list and got == stored
    assert got[0] is not stored[0] and got[0].message.tool_calls[0]["args"] == {"city": "Oslo"}
    assert cache.lookup(prompt, LLM_STRING + "-other") is None


def test_message_ids_never_affect_the_key(cache: MultimodalSemanticCache) -> None:
    with_ids = [SystemMessage("Be brief.", id="s-1"), HumanMessage("Hi", id="h-1"), AIMessage("Hello", id="a-1"),
                HumanMessage(content=[{"type": "text", "text": "Color?"},
                                      {"type": "image_url", "image_url": {"url": data_url(RED_PNG)}}], id="h-2")]
    without = [m.model_copy(update={"id": None}) for m in with_ids]
    other_ids = [m.model_copy(update={"id": f"x-{i}"}) for i, m in enumerate(with_ids)]
    cache.update(dumps(with_ids), LLM_STRING, [Generation(text="red")])
    assert cache.lookup(dumps(without), LLM_STRING) == [Generation(text="red")]
    assert cache.lookup(dumps(other_ids), LLM_STRING) == [Generation(text="red")]


def test_unserializable_generation_is_not_cached(cache: MultimodalSemanticCache, make_engine: Callable[..., MLCEngine]) -> None:
    bad = [Generation(text="x", generation_info={"handle": object()})]
    cache.update("Plain prompt", LLM_STRING, bad)
    assert cache.lookup("Plain prompt", LLM_STRING) is None
    assert cache.stats()["adapter"]["updates_skipped"] == 1 and cache.engine.count() == 0
    strict = MultimodalSemanticCache(make_engine(strict=True))
    with pytest.raises(PayloadError):
        strict.update("Plain prompt", LLM_STRING, bad)


def test_unreadable_entry_is_a_miss_and_removed(cache: MultimodalSemanticCache) -> None:
    req, _ = cache.request("Plain prompt", LLM_STRING)
    cache.engine.update(req, {"something": "else"})  # written by another program
    assert cache.lookup("Plain prompt", LLM_STRING) is None
    assert cache.stats()["adapter"]["unreadable_entries"] == 1 and cache.engine.count() == 0


@pytest.mark.parametrize("named", ["prompt template alone", "prompt template inside a generation"])
def test_a_stored_payload_naming_a_class_outside_generations_and_messages_is_never_revived(
        cache: MultimodalSemanticCache, named: str) -> None:
    from langchain_core.load import dumpd
    from langchain_core.prompts import PromptTemplate

    from mlc_integrations.langchain.cache import PAYLOAD_FORMAT, PAYLOAD_VERSION

    template = dumpd(PromptTemplate.from_template("Say {x}"))
    gens = dumpd([Generation(text="x")])
    if named == "prompt template alone":
        gens = [template]
    else:
        gens[0]["kwargs"]["generation_info"] = {"hidden": template}
    req, _ = cache.request("Plain prompt", LLM_STRING)
    cache.engine.update(req, {"format": PAYLOAD_FORMAT, "v": PAYLOAD_VERSION, "generations": gens})
    assert cache.lookup("Plain prompt", LLM_STRING) is None
    assert cache.stats()["adapter"]["unreadable_entries"] == 1


def test_unreadable_entry_in_strict_mode_is_removed_then_raises(make_engine: Callable[..., MLCEngine]) -> None:
    cache = MultimodalSemanticCache(make_engine(strict=True))
    req, _ = cache.request("Plain prompt", LLM_STRING)
    cache.engine.update(req, {"something": "else"})
    with pytest.raises(PayloadError, match=r"cache entry \w+ is unreadable"):
        cache.lookup("Plain prompt", LLM_STRING)
    assert cache.engine.count() == 0  # the next call can store its answer


# ---------------------------------------------------------------------------- plain LLMs and text
def test_plain_llm_round_trip(global_cache: MultimodalSemanticCache) -> None:
    llm = CountingLLM(responses=["Paris", "Rome"])
    assert llm.invoke("Capital of France?") == "Paris"
    assert llm.invoke("Capital of France?") == "Paris"
    assert llm.invoke(" Capital of France?\n") == "Paris"  # outer whitespace: the exact tier
    assert llm._calls == 1 and global_cache.last_hit.tier == "L0.5"
    assert llm.invoke("capital of  FRANCE?") == "Paris"  # case and spacing: L1, the verifier decides
    assert llm._calls == 1 and global_cache.last_hit.tier == "L1"
    assert llm.invoke("Capital of Italy?") == "Rome" and llm._calls == 2
    with global_cache.track() as seen:
        llm.invoke("Capital of France?")
    llm_string = seen.records[0].llm_string  # what LangChain passed for this LLM
    assert global_cache.lookup("Capital of France?", llm_string) == [Generation(text="Paris")]
    assert global_cache.stats()["adapter"]["text_prompts"] >= 4


def test_plain_llm_async(cache: MultimodalSemanticCache) -> None:
    llm = CountingLLM(responses=["Paris", "Rome"], cache=cache)

    async def run() -> list[str]:
        a = await llm.ainvoke("Capital of France?")
        return [a, *(await llm.abatch(["Capital of France?", "Capital of Italy?"]))]

    assert asyncio.run(run()) == ["Paris", "Paris", "Rome"] and llm._calls == 2


@pytest.mark.parametrize("prompt", ["[not json", "[1, 2, 3]", '["a", "b"]', "{}", "", "   text   "])
def test_prompt_that_is_not_a_message_list_is_plain_text(prompt: str) -> None:
    parsed = PromptParser().parse(prompt)
    assert parsed.kind == "text" and parsed.turns[0].text() == prompt


def test_parsed_chat_prompt_splits_request_and_context() -> None:
    msgs = [SystemMessage("sys"), HumanMessage("first"), AIMessage("", tool_calls=[_tool_call("Rome", "c1")]),
            ToolMessage("warm", tool_call_id="c1"),
            HumanMessage(content=[{"type": "text", "text": "and now?"},
                                  {"type": "image_url", "image_url": {"url": "https://x.example/a.png"}},
                                  {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}])]
    turns = PromptParser().parse(dumps(msgs)).turns
    assert [t.role for t in turns] == ["system", "human", "ai", "tool", "human"]
    assert turns[2].extra["tool_calls"][0]["id"] == "c1" and turns[3].extra["tool_call_id"] == "c1"
    assert turns[4].text() == "and now?" and [p.kind for p in turns[4].parts] == ["text", "image", "data"]


def test_not_json_prompt_is_plain_text_through_the_cache(cache: MultimodalSemanticCache) -> None:
    cache.update("[draft] notes", LLM_STRING, [Generation(text="ok")])
    assert cache.lookup("[draft] notes", LLM_STRING) == [Generation(text="ok")]


# ---------------------------------------------------------------------------- bad input
def _corrupt_prompt() -> list[BaseMessage]:
    return [SystemMessage("You describe images."),
            HumanMessage(content=[{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@not*base64@@"}},
                                  {"type": "text", "text": "What is this?"}])]


def test_corrupt_image_fails_open_model_answers_miss_counted(global_cache: MultimodalSemanticCache,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    model = CountingChatModel()
    with caplog.at_level(logging.INFO, logger="mlc_integrations"):
        assert model.invoke(_corrupt_prompt()).content == "answer-1"
        assert model.invoke(_corrupt_prompt()).content == "answer-2"  # nothing was stored
    stats = global_cache.stats()
    assert stats["misses"] == 2 and stats["hits"] == 0 and stats["entries"] == 0
    assert stats["errors"].get("lookup:ImageDecodeError") == 2
    assert stats["adapter"]["misses"] == 2
    assert any("invalid base64" in r.getMessage() for r in caplog.records)
    # a truncated PNG with valid base64 is handled the same way
    broken = [HumanMessage(content=[{"type": "text", "text": "Hi"},
                                    {"type": "image", "base64": b64(RED_PNG[: len(RED_PNG) // 2]), "mime_type": "image/png"}])]
    assert model.invoke(broken).content == "answer-3"


def test_strict_mode_raises_typed_error_naming_the_block(make_engine: Callable[..., MLCEngine]) -> None:
    cache = MultimodalSemanticCache(make_engine(strict=True))
    model = CountingChatModel(cache=cache)
    with pytest.raises(ImageDecodeError) as err:
        model.invoke(_corrupt_prompt())
    assert str(err.value).startswith("messages[1].content[0] (image_url): invalid base64")
    truncated = [HumanMessage(content=[{"type": "text", "text": "Hi"}]), AIMessage("Hello"),
                 HumanMessage(content=[{"type": "text", "text": "Hi"},
                                       {"type": "image", "base64": b64(RED_PNG[:60]), "mime_type": "image/png"}])]
    with pytest.raises(ImageDecodeError, match=r"^messages\[2\]\.content\[1\] \(image\): cannot decode image"):
        model.invoke(truncated)
    with pytest.raises(InvalidRequestError, match=r"messages\[0\]\.content\[0\] \(image_url\): unsupported image source"):
        model.invoke([HumanMessage(content=[{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}])])
    with pytest.raises(InvalidRequestError, match=r"not an image/\* type"):
        model.invoke([HumanMessage(content=[{"type": "image", "base64": b64(b"%PDF-1.4"), "mime_type": "application/pdf"}])])
    assert model.calls == 0
    assert cache.stats()["adapter"]["bad_input"] == 4


def test_strict_mode_rejects_a_corrupt_serialized_message_list(make_engine: Callable[..., MLCEngine]) -> None:
    cache = MultimodalSemanticCache(make_engine(strict=True))
    good = dumps(ask("Hi", RED_PNG))
    with pytest.raises(InvalidRequestError, match="not valid JSON"):
        cache.lookup(good[: len(good) // 2], LLM_STRING)
    assert PromptParser().parse(good[: len(good) // 2]).kind == "text"  # fail-open: plain text


def test_local_paths_in_image_urls_are_never_read(cache: MultimodalSemanticCache, tmp_path: Any) -> None:
    secret = tmp_path / "secret.png"
    secret.write_bytes(RED_PNG)
    model = CountingChatModel(cache=cache)
    block = {"type": "image_url", "image_url": {"url": str(secret)}}
    model.invoke(block_prompt("What is it?", block))
    secret.write_bytes(BLUE_PNG)  # keyed by the block's JSON, not by the file's pixels
    model.invoke(block_prompt("What is it?", block))
    assert model.calls == 1
    req, _ = cache.request(dumps(block_prompt("What is it?", block)), LLM_STRING)
    assert req.images == ()


# ---------------------------------------------------------------------------- streaming
def test_stream_bypasses_the_cache_and_the_alternative(cache: MultimodalSemanticCache) -> None:
    model = CountingChatModel(cache=cache)
    q = ask("What color is the shape?", RED_PNG)
    model.invoke(q)
    chunks = list(model.stream(q))  # LangChain's stream() path never calls BaseCache
    assert model.calls == 2 and "".join(c.content for c in chunks) == "answer-2"
    # alternative: disable_streaming makes stream() go through invoke(), hence the cache
    # (same llm_string: disable_streaming is not a model parameter, so invoke's entry is served)
    cached_stream = CountingChatModel(cache=cache, disable_streaming=True)
    assert [c.content for c in cached_stream.stream(q)] == ["answer-1"] and cached_stream.calls == 0
    assert cache.last_hit is not None


async def test_astream_bypasses_the_cache(cache: MultimodalSemanticCache) -> None:
    model = CountingChatModel(cache=cache)
    q = ask("What color is the shape?", RED_PNG)
    await model.ainvoke(q)
    assert "".join([c.content async for c in model.astream(q)]) == "answer-2" and model.calls == 2
    _ = [e async for e in model.astream_events(q, version="v2")]  # built on astream: no cache either
    assert model.calls == 3
    cached_stream = CountingChatModel(cache=cache, disable_streaming=True)
    assert [c.content async for c in cached_stream.astream(q)] == ["answer-1"] and cached_stream.calls == 0


# ---------------------------------------------------------------------------- construction, scope, clear
def test_zero_argument_constructor_works_offline(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)
    cache = MultimodalSemanticCache()
    set_llm_cache(cache)
    try:
        assert get_llm_cache() is cache
        model = CountingChatModel()
        with caplog.at_level(logging.WARNING, logger="mlc_integrations"):
            for _ in range(3):
                model.invoke(ask("What color is the shape?", RED_PNG))
        assert model.calls == 1
    finally:
        set_llm_cache(None)
        cache.close()
    assert (tmp_path / ".mlc_cache").is_dir()
    l2_warnings = [r for r in caplog.records if "L2" in r.getMessage()]
    assert len(l2_warnings) <= 1  # the hub CLIP is not available offline: L2 off, said once
    assert cache.stats()["config"]["tiers"]["L1"] == "on"


def test_engine_and_engine_options_are_exclusive(make_engine: Callable[..., MLCEngine]) -> None:
    with pytest.raises(TypeError):
        MultimodalSemanticCache(make_engine(), l1_threshold=0.9)
    with pytest.raises(TypeError):
        MultimodalSemanticCache(make_engine(), persist_directory="/tmp/elsewhere")


def test_persistent_cache_survives_reopen(tmp_path: Any, tiny_clip_dir: Any) -> None:
    path = str(tmp_path / "cache")
    first = MultimodalSemanticCache(persist_directory=path, image_encoder=str(tiny_clip_dir))
    CountingChatModel(cache=first).invoke(ask("What color is the shape?", RED_PNG))
    first.close()
    reopened = MultimodalSemanticCache(persist_directory=path, image_encoder=str(tiny_clip_dir))
    model = CountingChatModel(cache=reopened)
    assert model.invoke(ask("What color is the shape?", resaved(RED_PNG))).content == "answer-1"
    assert model.calls == 0


def test_namespaces_are_isolated_and_clear_is_scoped(make_engine: Callable[..., MLCEngine]) -> None:
    engine = make_engine()
    a, b = MultimodalSemanticCache(engine, namespace="tenant-a"), MultimodalSemanticCache(engine, namespace="tenant-b")
    prompt = dumps(ask("What color is the shape?", RED_PNG))
    a.update(prompt, "model-1", [Generation(text="red")])
    a.update(prompt, "model-2", [Generation(text="rouge")])
    assert b.lookup(prompt, "model-1") is None
    b.update(prompt, "model-1", [Generation(text="b-red")])
    a.clear(llm_string="model-1")
    assert a.lookup(prompt, "model-1") is None
    assert a.lookup(prompt, "model-2") == [Generation(text="rouge")]
    assert b.lookup(prompt, "model-1") == [Generation(text="b-red")]
    a.clear()
    assert a.lookup(prompt, "model-2") is None and b.lookup(prompt, "model-1") is not None


async def test_async_methods_are_native(cache: MultimodalSemanticCache) -> None:
    prompt = dumps(ask("What color is the shape?", RED_PNG))
    await cache.aupdate(prompt, LLM_STRING, [Generation(text="red")])
    assert await cache.alookup(prompt, LLM_STRING) == [Generation(text="red")]
    assert cache.last_hit is not None and cache.last_hit.tier == "L0.5"  # same task: visible
    await cache.aclear()
    assert await cache.alookup(prompt, LLM_STRING) is None


def test_images_resent_each_turn_are_decoded_once(cache: MultimodalSemanticCache, monkeypatch: pytest.MonkeyPatch) -> None:
    import mlc_integrations.keys as adapter  # the engine's keyer memo serves the adapter

    decoded: list[str] = []
    real = adapter.decode_image

    def counting(value: Any, **kw: Any) -> Any:
        decoded.append(kw.get("what", ""))
        return real(value, **kw)

    monkeypatch.setattr(adapter, "decode_image", counting)
    model = CountingChatModel(cache=cache)
    history: tuple[BaseMessage, ...] = ()
    for q in ("What color is it?", "Is it bright?", "Is it a square?"):
        turn = ask(q, RED_PNG if not history else None, history)
        history = (*turn, model.invoke(turn))
    assert model.calls == 3
    assert len(decoded) == 1  # turns 2 and 3 carry the picture again in their history


def test_decoded_image_memo_is_bounded_by_pixels() -> None:
    from mlc_integrations.images import DecodedImage, DecodeMemo

    memo = DecodeMemo(max_pixels=4 * 64 * 64)
    urls = [f"data:image/png;base64,{i:040d}" for i in range(5)]
    keys = [memo.key(u) for u in urls]
    assert all(k is not None for k in keys) and memo.key("short") is None and memo.key("/some/path.png") is None
    for i, k in enumerate(keys):
        memo.put(k, DecodedImage(digest=f"px:{i}", pil=solid((1, 2, 3)), source="pixels"))
    assert memo.get(keys[0]) is None and all(memo.get(k) is not None for k in keys[1:])
    big = DecodedImage(digest="px:big", pil=solid((1, 2, 3), (256, 256)), source="pixels")
    memo.put(b"huge-key", big)  # larger than a quarter of the budget: not kept
    assert memo.get(b"huge-key") is None and memo.get(keys[4]) is not None
