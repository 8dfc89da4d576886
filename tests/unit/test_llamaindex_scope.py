"""LlamaIndex scope surprises (issue 19.7): a wrapper whose inner LLM's settings change
between calls says so once, naming the fields; strict-mode errors name the message and
block (or argument, or image document) they are about, as the LangChain cache's do."""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import pytest
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, ImageBlock, TextBlock
from llama_index.core.llms import MockLLM
from llama_index.core.llms.callbacks import llm_chat_callback
from llama_index.core.schema import ImageDocument

from mlc_integrations import ImageDecodeError, InvalidRequestError, MLCEngine
from mlc_integrations.llamaindex import CachedMultiModalLLM
from tests.helpers import png_bytes
from tests.unit._fake_llms import QUESTION, RED, VisionEchoLLM, image_doc, user

LOGGER = "mlc_integrations.llamaindex.keying"


class CountingFieldLLM(VisionEchoLLM):
    """An LLM that keeps a per-call counter in a public field: part of the scope."""

    requests_served: int = 0

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        self.requests_served += 1
        return super().chat(messages, **kwargs)


def scope_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def test_a_public_counter_in_the_inner_llm_is_named_once(make_engine: Callable[..., MLCEngine],
                                                         caplog: pytest.LogCaptureFixture) -> None:
    inner = CountingFieldLLM()
    llm = CachedMultiModalLLM(llm=inner, engine=make_engine(image_encoder=None))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(4):
            llm.chat(user(QUESTION, RED))
    assert inner.calls == ["chat"] * 4  # the counter is in the scope: every call is a miss
    warnings = scope_warnings(caplog)
    assert len(warnings) == 1, "once per wrapper, not once per call"
    message = warnings[0].getMessage()
    assert "requests_served" in message and "CountingFieldLLM" in message and "PrivateAttr" in message
    assert "temperature" not in message  # only the fields that changed

    other = CachedMultiModalLLM(llm=CountingFieldLLM(), engine=make_engine(image_encoder=None))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        other.chat(user(QUESTION, RED))
        other.chat(user(QUESTION, RED))
    assert len(scope_warnings(caplog)) == 2  # another wrapper says it once too


def test_an_intended_setting_change_is_named_and_a_stable_llm_is_silent(make_engine: Callable[..., MLCEngine],
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    inner = VisionEchoLLM()
    llm = CachedMultiModalLLM(llm=inner, engine=make_engine(image_encoder=None))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        llm.chat(user(QUESTION, RED))
        llm.chat(user(QUESTION, RED))
        llm.complete("Describe it.")
        assert scope_warnings(caplog) == [] and inner.calls == ["chat", "complete"]
        inner.temperature = 0.7
        llm.chat(user(QUESTION, RED))
    warnings = scope_warnings(caplog)
    assert len(warnings) == 1 and "field(s) temperature of the inner VisionEchoLLM" in warnings[0].getMessage()
    assert inner.calls == ["chat", "complete", "chat"]


@pytest.fixture
def strict(make_engine: Callable[..., MLCEngine]) -> CachedMultiModalLLM:
    return CachedMultiModalLLM(llm=VisionEchoLLM(), engine=make_engine(strict=True, image_encoder=None))


def test_strict_errors_name_the_message_and_block(strict: CachedMultiModalLLM) -> None:
    history = user("Hello", RED) + [ChatMessage(role="assistant", content="I see red.")]
    broken = ChatMessage(role="user", blocks=[TextBlock(text=QUESTION), ImageBlock(image=b"not an image at all")])
    with pytest.raises(ImageDecodeError, match=r"^messages\[2\]\.blocks\[1\] \(ImageBlock\): "):
        strict.chat(history + [broken])
    truncated = ChatMessage(role="user", blocks=[ImageBlock(image=png_bytes(RED)[:60])])
    with pytest.raises(ImageDecodeError, match=r"^messages\[0\]\.blocks\[0\] \(ImageBlock\): cannot decode image"):
        strict.chat([truncated] + user(QUESTION, RED))
    with pytest.raises(ImageDecodeError, match=r"^image_documents\[1\] \(ImageDocument\): "):
        strict.complete(QUESTION, image_documents=[image_doc(RED), ImageDocument(image="bm90IGFuIGltYWdl")])
    with pytest.raises(ImageDecodeError, match=r"^image_documents\[0\] \(ImageDocument\): ImageDocument carries no"):
        strict.complete(QUESTION, image_documents=[ImageDocument(text="no picture")])
    assert strict.llm.calls == []


def test_strict_errors_name_the_argument_and_the_message_fields(strict: CachedMultiModalLLM) -> None:
    class Opaque:
        pass

    with pytest.raises(InvalidRequestError, match=r"^kwargs\['weird'\]: cannot key a value of type Opaque"):
        strict.chat(user(QUESTION, RED), weird=Opaque())
    odd = ChatMessage(role="user", content=QUESTION, additional_kwargs={"handle": Opaque()})
    with pytest.raises(InvalidRequestError, match=r"^messages\[0\]\.additional_kwargs: cannot key"):
        strict.chat([odd])
    assert strict.llm.calls == []


def test_fail_open_still_answers_and_says_why_it_missed(make_engine: Callable[..., MLCEngine]) -> None:
    llm = CachedMultiModalLLM(llm=MockLLM(), engine=make_engine(image_encoder=None))  # echoes, never opens pictures
    broken = ChatMessage(role="user", blocks=[TextBlock(text=QUESTION), ImageBlock(image=b"not an image at all")])
    assert llm.chat([broken]).message.content
    st = llm.stats()
    assert st["misses"] == 1 and st["errors"]["lookup:ImageDecodeError"] == 1 and st["entries"] == 0
    assert llm.last_lookup.reason.startswith("the lookup failed")
