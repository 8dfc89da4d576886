"""CachedMultiModalLLM with real llama-index-core objects: every endpoint, image forms,
legacy image_documents, scope, streams, fail-open.

The inner LLM is ``tests.unit._fake_llms.VisionEchoLLM``: a small ``CustomLLM`` that
really looks at the picture (its dominant colour) and the question, and counts every
call it receives.
"""

from __future__ import annotations

import asyncio
import base64
import io
from typing import Any, Optional, Sequence

import pytest
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ImageBlock,
    MessageRole,
    TextBlock,
    ToolCallBlock,
)
from llama_index.core.llms.callbacks import llm_chat_callback
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.schema import ImageDocument, ImageNode
from PIL import Image

from mlc_integrations import ImageDecodeError, InvalidRequestError, PayloadError
from mlc_integrations.llamaindex import CachedFunctionCallingLLM, CachedMultiModalLLM, llm_scope
from tests.helpers import pattern, png_bytes, record_answers
from tests.unit._fake_llms import BLUE, PARAPHRASE, QUESTION, RED, StreamBroke, VisionEchoLLM, image_doc, user
from mlc_integrations import TierOptions

MODES = ["chat", "achat", "stream_chat", "astream_chat", "complete", "acomplete", "stream_complete", "astream_complete"]


async def ask(llm: CachedMultiModalLLM, mode: str, question: str, img: Image.Image) -> str:
    """One call through ``mode``; chat modes send an ImageBlock, complete modes the
    legacy ``image_documents``. Streams are consumed and their deltas joined."""
    msgs = user(question, img)
    docs = [image_doc(img)]
    if mode == "chat":
        return llm.chat(msgs).message.content
    if mode == "achat":
        return (await llm.achat(msgs)).message.content
    if mode == "complete":
        return llm.complete(question, image_documents=docs).text
    if mode == "acomplete":
        return (await llm.acomplete(question, image_documents=docs)).text
    if mode == "stream_chat":
        chunks = list(llm.stream_chat(msgs))
        text = chunks[-1].message.content
    elif mode == "stream_complete":
        chunks = list(llm.stream_complete(question, image_documents=docs))
        text = chunks[-1].text
    elif mode == "astream_chat":
        chunks = [c async for c in await llm.astream_chat(msgs)]
        text = chunks[-1].message.content
    else:
        chunks = [c async for c in await llm.astream_complete(question, image_documents=docs)]
        text = chunks[-1].text
    assert "".join(c.delta or "" for c in chunks) == text
    return text


@pytest.fixture
def inner() -> VisionEchoLLM:
    return VisionEchoLLM()


@pytest.fixture
def cached(make_engine, inner) -> CachedMultiModalLLM:
    return CachedMultiModalLLM(llm=inner, engine=make_engine(image_encoder=None))


# ---------------------------------------------------------------------- every endpoint
@pytest.mark.parametrize("mode", MODES)
async def test_every_endpoint_same_paraphrase_and_different_image(mode, make_engine, inner) -> None:
    llm = CachedMultiModalLLM(llm=inner, engine=make_engine(image_encoder=None))
    first = await ask(llm, mode, QUESTION, RED)
    assert first.startswith("I see red.") and llm.last_hit is None
    assert len(inner.calls) == 1

    again = await ask(llm, mode, QUESTION, RED)
    assert again == first and len(inner.calls) == 1
    assert llm.last_hit is not None and llm.last_hit.tier == "L0.5"

    para = await ask(llm, mode, PARAPHRASE, RED)
    assert para == first and len(inner.calls) == 1  # reused answer, no call
    assert llm.last_hit.tier == "L1" and llm.last_hit.scores["text"] >= llm.last_hit.thresholds["text"]

    other = await ask(llm, mode, QUESTION, BLUE)
    assert other.startswith("I see blue.") and len(inner.calls) == 2
    assert llm.last_hit is None
    st = llm.stats()
    assert st["hits"] == 2 and st["adapter"]["hits"] == 2 and st["adapter"]["misses"] == 2


async def test_stream_and_non_stream_share_entries(cached, inner) -> None:
    full = cached.chat(user(QUESTION, RED)).message.content
    chunks = list(cached.stream_chat(user(QUESTION, RED)))
    assert len(chunks) > 3, "a hit is replayed as a real stream, not one lump"
    assert "".join(c.delta for c in chunks) == full == chunks[-1].message.content
    assert [c.message.content for c in chunks] == ["".join(x.delta for x in chunks[: i + 1]) for i in range(len(chunks))]
    async_chunks = [c async for c in await cached.astream_chat(user(QUESTION, RED))]
    assert "".join(c.delta for c in async_chunks) == full
    assert inner.calls == ["chat"]


def test_hit_rebuilds_response_without_raw(cached, inner) -> None:
    miss = cached.chat(user(QUESTION, RED))
    hit = cached.chat(user(QUESTION, RED))
    assert miss.raw == {"id": "resp-1"} and hit.raw is None
    assert hit.message.role == MessageRole.ASSISTANT
    assert hit.message.content == miss.message.content
    assert hit.message.additional_kwargs == {"model": "vision-echo-1"}
    assert {k: v for k, v in hit.additional_kwargs.items() if k != "mlc_cache"} == miss.additional_kwargs
    assert hit.additional_kwargs["mlc_cache"]["tier"] == "L0.5"  # the hit names where it came from
    assert inner.calls == ["chat"]


def test_text_only_complete_uses_inner_complete(cached, inner) -> None:
    assert cached.complete("Say hi").text == "Completion of: Say hi"
    assert cached.complete("say   HI").text == "Completion of: Say hi"  # normalized exact hit
    assert cached.complete("Say hi", formatted=True).text == "Completion of: Say hi"  # formatted is keyed
    assert inner.calls == ["complete", "complete"]


def test_chat_and_complete_never_share_entries(cached, inner) -> None:
    cached.chat(user(QUESTION, RED))
    cached.complete(QUESTION, image_documents=[image_doc(RED)])
    assert inner.calls == ["chat", "chat"]  # complete with images goes to chat, keyed apart


# ---------------------------------------------------------------------- hit details and answers
async def test_last_hit_after_a_call_in_a_child_task_is_that_calls(cached, inner) -> None:
    """Agents and workflows call the LLM from tasks of their own: the caller sees that
    call's outcome, never its own previous (sync) call's hit."""
    cached.chat(user(QUESTION, RED))
    cached.chat(user(QUESTION, RED))
    assert cached.last_hit is not None
    await asyncio.create_task(cached.achat(user(QUESTION, BLUE)))  # a new question: a miss
    assert cached.last_hit is None and cached.last_lookup.kind == "chat"
    await asyncio.gather(cached.achat(user(QUESTION, BLUE)))
    assert cached.last_hit is not None and cached.last_hit.tier == "L0.5"
    cached.complete("Say hi")
    assert cached.last_hit is None and cached.last_lookup.kind == "complete" and len(inner.calls) == 3


@pytest.fixture
def answers(cached, monkeypatch) -> list[Optional[str]]:
    """Every ``answer`` the wrapper hands ``engine.update``."""
    return record_answers(cached.engine, monkeypatch)


@pytest.mark.parametrize("mode", MODES)
async def test_answer_given_to_the_engine_is_the_text_the_user_reads(mode, cached, answers) -> None:
    """The verifier compares answers: chat, completion and finished streams hand the
    engine the response text, never the stored JSON payload."""
    text = await ask(cached, mode, QUESTION, RED)
    assert answers == [text] and text.startswith("I see red.")


def test_answer_of_a_message_with_several_blocks_is_its_content(cached, answers) -> None:
    class TwoParagraphs(VisionEchoLLM):
        @llm_chat_callback()
        def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            blocks = [TextBlock(text="The shape is red."), ToolCallBlock(tool_name="lookup", tool_kwargs={}),
                      TextBlock(text="It is a square.")]
            return ChatResponse(message=ChatMessage(role="assistant", blocks=blocks))

    llm = CachedMultiModalLLM(llm=TwoParagraphs(), engine=cached.engine)
    response = llm.chat(user(QUESTION, RED))
    assert answers == [response.message.content] == ["The shape is red.\nIt is a square."]


# ---------------------------------------------------------------------- legacy image_documents
def test_legacy_complete_with_image_documents_and_nodes(cached, inner, tmp_path) -> None:
    path = tmp_path / "red.png"
    path.write_bytes(png_bytes(RED, compress_level=1))
    r1 = cached.complete(QUESTION, image_documents=[ImageDocument(image_path=str(path))])
    assert r1.text.startswith("I see red.")
    # Same pixels as base64 ImageDocument, as ImageNode, and positionally (MultiModalLLM order).
    assert cached.complete(QUESTION, image_documents=[image_doc(RED)]).text == r1.text
    node = ImageNode(image=base64.b64encode(png_bytes(RED)).decode())
    assert cached.complete(QUESTION, [node]).text == r1.text
    assert len(inner.calls) == 1
    assert cached.complete(QUESTION, image_documents=[image_doc(BLUE)]).text.startswith("I see blue.")
    assert len(inner.calls) == 2


# ---------------------------------------------------------------------- image forms
def test_image_block_forms_key_by_pixels(cached, inner, tmp_path) -> None:
    img = pattern(7)
    raw = png_bytes(img)
    path = tmp_path / "p.png"
    path.write_bytes(png_bytes(img, compress_level=0))
    cached.chat(user(QUESTION, ImageBlock(image=raw)))
    forms = [
        ImageBlock(image=base64.b64encode(raw)),  # base64 text as bytes
        ImageBlock(path=path),  # a file with other compression
        ImageBlock(url="data:image/png;base64," + base64.b64encode(png_bytes(img, compress_level=9)).decode()),
        ImageBlock(image=io.BytesIO(raw)),  # a file object
    ]
    for block in forms:
        cached.chat(user(QUESTION, block))
        assert cached.last_hit is not None and cached.last_hit.tier == "L0.5", block
    assert len(inner.calls) == 1


def test_remote_url_keyed_by_string_and_never_fetched(cached, inner) -> None:
    url = "https://example.invalid/cat.png"  # .invalid never resolves: a fetch would fail
    r = cached.chat(user(QUESTION, ImageBlock(url=url)))
    assert "picture at https://example.invalid/cat.png" in r.message.content
    cached.chat(user(QUESTION, ImageBlock(url=url)))
    assert cached.last_hit.tier == "L0.5"
    cached.chat(user(QUESTION, ImageBlock(url="https://example.invalid/dog.png")))
    assert len(inner.calls) == 2
    # A block that carries the bytes as well as a URL is keyed by its pixels.
    cached.chat(user(QUESTION, ImageBlock(image=png_bytes(RED), url=url)))
    cached.chat(user(QUESTION, ImageBlock(image=png_bytes(RED, compress_level=1), url="https://example.invalid/x.png")))
    assert cached.last_hit is not None and len(inner.calls) == 3


def test_l2_sees_the_images(make_engine, inner, tmp_path) -> None:
    # The tiny random CLIP is plumbing only: identical pictures pass 0.999, the prompt side 0.9.
    eng = make_engine(l2_image_threshold=0.999, l2_prompt_threshold=0.9, tiers=TierOptions(exact=False, l1=False))
    llm = CachedMultiModalLLM(llm=inner, engine=eng)
    img = pattern(11)
    path = tmp_path / "a.png"
    path.write_bytes(png_bytes(img))
    llm.chat(user(QUESTION, ImageBlock(path=path)))
    llm.chat(user(PARAPHRASE, img))
    assert llm.last_hit is not None and llm.last_hit.tier == "L2"
    # the same pixels, as a path and as a PIL image: found by fingerprint, compared locally
    assert {"fingerprint", "prompt", "image_changed"} <= set(llm.last_hit.scores)
    assert len(inner.calls) == 1


# ---------------------------------------------------------------------- context
def test_earlier_messages_and_their_images_are_exact_context(cached, inner) -> None:
    def convo(first_img: Image.Image, follow_up: str) -> list[ChatMessage]:
        return [
            ChatMessage(role="system", content="You describe pictures."),
            *user("What is this?", first_img),
            ChatMessage(role="assistant", content="A square."),
            ChatMessage(role="user", content=follow_up),
        ]

    cached.chat(convo(RED, "And its color?"))
    cached.chat(convo(RED, "and its colour?"))  # close paraphrase, same context
    assert cached.last_hit is not None
    cached.chat(convo(BLUE, "And its color?"))  # same words, other earlier picture
    assert cached.last_hit is None
    cached.chat(user("And its color?"))  # no history at all
    assert cached.last_hit is None
    assert len(inner.calls) == 3


# ---------------------------------------------------------------------- scope
def test_scope_is_class_and_settings_without_secrets(make_engine) -> None:
    eng = make_engine(image_encoder=None)
    a = VisionEchoLLM(temperature=0.0, api_key="sk-AAA")
    b = VisionEchoLLM(temperature=0.7)
    c = VisionEchoLLM(temperature=0.0, api_key="sk-BBB")
    assert "sk-" not in llm_scope(a) and "api_key" not in llm_scope(a)
    assert llm_scope(a) == llm_scope(c) != llm_scope(b)
    assert '"temperature":0.0' in llm_scope(a) and "VisionEchoLLM" in llm_scope(a)
    wa, wb, wc = (CachedMultiModalLLM(llm=x, engine=eng) for x in (a, b, c))
    wa.chat(user(QUESTION, RED))
    wb.chat(user(QUESTION, RED))
    assert wb.last_hit is None and len(b.calls) == 1  # other temperature: never shared
    wc.chat(user(QUESTION, RED))
    assert wc.last_hit is not None and c.calls == []  # other key only: the same model
    # Settings changed after wrapping count too.
    a.temperature = 0.3
    wa.chat(user(QUESTION, RED))
    assert wa.last_hit is None


def test_namespaces_isolate_and_clear(make_engine, inner) -> None:
    eng = make_engine(image_encoder=None)
    t1 = CachedMultiModalLLM(llm=inner, engine=eng, namespace="tenant-1")
    t2 = CachedMultiModalLLM(llm=inner, engine=eng, namespace="tenant-2")
    t1.chat(user(QUESTION, RED))
    t2.chat(user(QUESTION, RED))
    assert t2.last_hit is None and len(inner.calls) == 2
    t1.clear()
    t1.chat(user(QUESTION, RED))
    assert t1.last_hit is None
    t2.chat(user(QUESTION, RED))
    assert t2.last_hit is not None


def test_persistent_cache_survives_a_new_wrapper(tmp_path, inner, text_embedder) -> None:
    d = str(tmp_path / "cache")
    first = CachedMultiModalLLM(llm=inner, persist_directory=d, image_encoder=None)
    first.chat(user(QUESTION, RED))
    first.engine.close()
    second = CachedMultiModalLLM(llm=VisionEchoLLM(), persist_directory=d, image_encoder=None)
    assert second.chat(user(QUESTION, RED)).message.content.startswith("I see red.")
    assert second.last_hit is not None and second.llm.calls == []
    second.engine.close()


def test_constructor_engine_options(inner, text_embedder) -> None:
    llm = CachedMultiModalLLM(llm=inner, l1_threshold=0.9, strict=True, image_encoder=None)
    assert llm.engine.l1_threshold == 0.9 and llm.engine.strict and llm.strict
    assert llm.engine.storage_mode == "ephemeral"  # in memory unless persist_directory is given
    with pytest.raises(TypeError, match="uses that engine's settings"):
        CachedMultiModalLLM(llm=inner, engine=llm.engine, l1_threshold=0.5)
    with pytest.raises(TypeError):
        CachedMultiModalLLM(llm="gpt-4o")  # type: ignore[arg-type]
    assert type(llm) is CachedMultiModalLLM and not isinstance(llm, CachedFunctionCallingLLM)
    assert llm.metadata.model_name == "vision-echo-1"


# ---------------------------------------------------------------------- streams
@pytest.mark.parametrize("mode", ["stream_chat", "stream_complete"])
def test_interrupted_stream_stores_nothing(cached, inner, mode) -> None:
    def start() -> Any:
        if mode == "stream_chat":
            return cached.stream_chat(user(QUESTION, RED))
        return cached.stream_complete("Tell me a long story")

    gen = start()
    first = next(gen)
    assert first.delta
    gen.close()  # the consumer stops early
    assert cached.engine.count() == 0
    assert cached.stats()["adapter"]["streams_unfinished"] == 1
    full = list(start())
    assert len(inner.calls) == 2 and cached.engine.count() == 1
    list(start())
    assert len(inner.calls) == 2 and cached.last_hit is not None and len(full) > 1


@pytest.mark.parametrize("mode", ["stream_chat", "astream_chat", "stream_complete", "astream_complete"])
async def test_failed_stream_stores_nothing_and_raises(cached, inner, mode) -> None:
    inner.fail_stream_after = 2
    got: list[Any] = []
    with pytest.raises(StreamBroke):
        if mode == "stream_chat":
            got.extend(cached.stream_chat(user(QUESTION, RED)))
        elif mode == "stream_complete":
            got.extend(cached.stream_complete("Tell me a long story"))
        elif mode == "astream_chat":
            async for c in await cached.astream_chat(user(QUESTION, RED)):
                got.append(c)
        else:
            async for c in await cached.astream_complete("Tell me a long story"):
                got.append(c)
    assert len(got) == 2, "chunks before the failure were passed through unchanged"
    assert got[0].raw == {"chunk": 0} if mode.endswith("chat") else True
    assert cached.engine.count() == 0


async def test_async_interrupted_stream_stores_nothing(cached, inner) -> None:
    gen = await cached.astream_chat(user(QUESTION, RED))
    async for _ in gen:
        break
    await gen.aclose()
    assert cached.engine.count() == 0
    chunks = [c async for c in await cached.astream_chat(user(QUESTION, RED))]
    assert cached.engine.count() == 1 and chunks[0].raw == {"chunk": 0}  # miss: inner chunks unchanged


# ---------------------------------------------------------------------- fail-open / strict
def test_broken_image_is_a_counted_miss_and_strict_raises(make_engine) -> None:
    class BlindLLM(VisionEchoLLM):
        @llm_chat_callback()
        def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            self._calls.append("chat")
            return ChatResponse(message=ChatMessage(role="assistant", content="I cannot see well."))

    blind = BlindLLM()
    broken = [ChatMessage(role="user", blocks=[ImageBlock(image=b"not an image at all"), TextBlock(text=QUESTION)])]
    llm = CachedMultiModalLLM(llm=blind, engine=make_engine(image_encoder=None))
    assert llm.chat(broken).message.content == "I cannot see well."
    assert llm.chat(broken).message.content == "I cannot see well."
    assert blind.calls == ["chat", "chat"]  # nothing stored under a key that cannot be made
    st = llm.stats()
    assert st["misses"] == 2 and st["errors"]["lookup:ImageDecodeError"] == 2 and st["entries"] == 0

    strict = CachedMultiModalLLM(llm=BlindLLM(), engine=make_engine(strict=True, image_encoder=None))
    with pytest.raises(ImageDecodeError):
        strict.chat(broken)
    assert strict.llm.calls == []


def test_unkeyable_kwargs_bypass_the_cache(cached, inner, make_engine) -> None:
    class Opaque:
        pass

    cached.chat(user(QUESTION, RED), weird=Opaque())
    cached.chat(user(QUESTION, RED), weird=Opaque())
    assert len(inner.calls) == 2 and cached.stats()["adapter"]["bypassed"] == 2
    strict = CachedMultiModalLLM(llm=VisionEchoLLM(), engine=make_engine(image_encoder=None, strict=True))
    with pytest.raises(InvalidRequestError):
        strict.chat(user(QUESTION, RED), weird=Opaque())


def test_kwargs_are_part_of_the_key(cached, inner) -> None:
    cached.chat(user(QUESTION, RED), max_tokens=10)
    cached.chat(user(QUESTION, RED), max_tokens=10)
    cached.chat(user(QUESTION, RED), max_tokens=20)
    assert len(inner.calls) == 2


def test_unreadable_entry_is_removed_and_the_call_goes_on(cached, inner) -> None:
    msgs = user(QUESTION, RED)
    request = cached._chat_request(msgs, {})
    cached.engine.update(request, {"kind": "something else"})
    r = cached.chat(msgs)
    assert r.message.content.startswith("I see red.") and inner.calls == ["chat"]
    assert cached.stats()["adapter"]["unreadable_entries"] == 1
    cached.chat(msgs)
    assert cached.last_hit is not None and inner.calls == ["chat"]


def test_unreadable_entry_in_strict_mode_is_removed_then_raises(make_engine) -> None:
    """The same policy as the LangChain cache: strict mode says so, after deleting the entry."""
    strict = CachedMultiModalLLM(llm=VisionEchoLLM(), engine=make_engine(image_encoder=None, strict=True))
    msgs = user(QUESTION, RED)
    strict.engine.update(strict._chat_request(msgs, {}), {"kind": "something else"})
    with pytest.raises(PayloadError, match="is unreadable"):
        strict.chat(msgs)
    assert strict.engine.count() == 0 and strict.llm.calls == []


def test_response_kwargs_round_trip_types(cached) -> None:
    """Tool calls carried as pydantic objects and bytes come back as the same types."""

    class ToolCaller(VisionEchoLLM):
        @llm_chat_callback()
        def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            self._calls.append("chat")
            call = ToolSelection(tool_id="call_1", tool_name="lookup", tool_kwargs={"q": "red"})
            return ChatResponse(message=ChatMessage(
                role="assistant", content="",
                additional_kwargs={"tool_calls": [call], "signature": b"\x00\x01", "n": 1.5}))

    llm = CachedMultiModalLLM(llm=ToolCaller(), engine=cached.engine)
    miss = llm.chat(user("look it up", RED))
    hit = llm.chat(user("look it up", RED))
    assert llm.last_hit is not None
    assert hit.message.additional_kwargs == miss.message.additional_kwargs
    assert isinstance(hit.message.additional_kwargs["tool_calls"][0], ToolSelection)


def test_unstorable_response_is_returned_not_stored(cached) -> None:
    class Weird(VisionEchoLLM):
        @llm_chat_callback()
        def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            self._calls.append("chat")
            return ChatResponse(message=ChatMessage(role="assistant", content="ok",
                                                    additional_kwargs={"handle": object()}))

    llm = CachedMultiModalLLM(llm=Weird(), engine=cached.engine)
    assert llm.chat(user(QUESTION, RED)).message.content == "ok"
    assert llm.chat(user(QUESTION, RED)).message.content == "ok"
    assert llm.llm.calls == ["chat", "chat"] and llm.stats()["adapter"]["unstorable_responses"] == 2


# ---------------------------------------------------------------------- drops into LlamaIndex
def test_predict_and_prompt_templates_go_through_the_cache(cached, inner) -> None:
    from llama_index.core.prompts import PromptTemplate

    tmpl = PromptTemplate("Answer briefly: {question}")
    a = cached.predict(tmpl, question="what is two plus two?")
    b = cached.predict(tmpl, question="What is two plus two?")
    assert a == b and inner.calls == ["chat"]


def test_query_engine_with_the_wrapper(cached, inner) -> None:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding

    index = VectorStoreIndex.from_documents(
        [Document(text="The square in the picture is red."), Document(text="The sky is blue.")],
        embed_model=MockEmbedding(embed_dim=8),
    )
    qe = index.as_query_engine(llm=cached)
    first = str(qe.query("What color is the square?"))
    calls = len(inner.calls)
    assert calls >= 1
    assert str(qe.query("What color is the square?")) == first
    assert len(inner.calls) == calls


def test_image_detail_is_part_of_the_key(cached, inner) -> None:
    raw = png_bytes(RED)
    cached.chat(user(QUESTION, ImageBlock(image=raw, detail="low")))
    cached.chat(user(QUESTION, ImageBlock(image=raw, detail="high")))
    assert cached.last_hit is None
    cached.chat(user(QUESTION, ImageBlock(image=raw, detail="low")))
    assert cached.last_hit is not None and len(inner.calls) == 2

