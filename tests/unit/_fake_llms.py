"""Fake LlamaIndex models shared by the LlamaIndex tests, and the streaming helpers
they are built from (word-by-word chunks that carry the text so far, as LlamaIndex
integrations do; an async stream from the same chunks; a stream that breaks).

``VisionEchoLLM`` really looks at the picture (its dominant colour) and the question,
and counts every call it receives.
"""

from __future__ import annotations

import base64
import re
from typing import Any, AsyncGenerator, Iterable, Iterator, Optional, Sequence

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseGen,
    ImageBlock,
    LLMMetadata,
    MessageRole,
    TextBlock,
)
from llama_index.core.bridge.pydantic import BaseModel, Field, PrivateAttr
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.schema import ImageDocument
from PIL import Image

from tests.helpers import png_bytes, solid

RED = solid((220, 30, 30))
BLUE = solid((30, 30, 220))
QUESTION = "What color is the shape?"
PARAPHRASE = "What's the color of the shape?"


# ---------------------------------------------------------------------- streams
class StreamBroke(RuntimeError):
    pass


def word_pieces(text: str) -> list[str]:
    """A word and the whitespace after it: how the fake models stream."""
    return re.findall(r"\S+\s*", text)


def _pieces_until(text: str, fail_after: Optional[int]) -> Iterator[tuple[int, str]]:
    for i, piece in enumerate(word_pieces(text)):
        if fail_after is not None and i >= fail_after:
            raise StreamBroke("connection reset mid-stream")
        yield i, piece


def chat_stream(text: str, *, fail_after: Optional[int] = None,
                final: Optional[ChatMessage] = None) -> ChatResponseGen:
    """Chat chunks carrying the text so far; ``final`` adds a last chunk with the whole
    message (tool calls), as function-calling integrations do; ``fail_after`` breaks
    the stream after that many chunks."""
    so_far = ""
    for i, piece in _pieces_until(text, fail_after):
        so_far += piece
        yield ChatResponse(message=ChatMessage(role="assistant", content=so_far), delta=piece, raw={"chunk": i})
    if final is not None:
        yield ChatResponse(message=final, delta="")


def completion_stream(text: str, *, fail_after: Optional[int] = None) -> CompletionResponseGen:
    so_far = ""
    for _, piece in _pieces_until(text, fail_after):
        so_far += piece
        yield CompletionResponse(text=so_far, delta=piece)


async def as_async(chunks: Iterable[Any]) -> AsyncGenerator[Any, None]:
    """The same chunks as an async stream."""
    for chunk in chunks:
        yield chunk


# ---------------------------------------------------------------------- a vision model
def colour_name(img: Image.Image) -> str:
    r, g, b = img.convert("RGB").resize((1, 1)).getpixel((0, 0))
    return {0: "red", 1: "green", 2: "blue"}[max(range(3), key=lambda i: (r, g, b)[i])]


def describe(messages: Sequence[ChatMessage]) -> str:
    """The fake model's answer: colours of the last user message's pictures + its question."""
    user = [m for m in messages if m.role == MessageRole.USER][-1]
    seen = []
    for block in user.blocks:
        if isinstance(block, ImageBlock):
            if block.image is not None or block.path is not None or str(block.url or "").startswith("data:"):
                seen.append(colour_name(Image.open(block.resolve_image())))
            else:  # never fetch: a remote picture is described by its address
                seen.append(f"picture at {block.url}")
    question = " ".join(b.text for b in user.blocks if isinstance(b, TextBlock))
    return f"I see {', '.join(seen) or 'no picture'}. You asked: {question}"


class RecordedCalls(BaseModel):
    """What the fake LlamaIndex models share: ``calls`` names each of their methods that
    really ran, in order (a cache hit adds none); completions echo the prompt;
    ``fail_stream_after`` breaks their streams after that many chunks."""

    fail_stream_after: Optional[int] = None
    _calls: list = PrivateAttr(default_factory=list)

    @property
    def calls(self) -> list[str]:
        return self._calls

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self._calls.append("complete")
        return CompletionResponse(text=f"Completion of: {prompt}")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        self._calls.append("stream_complete")
        return completion_stream(f"Completion of: {prompt}", fail_after=self.fail_stream_after)


class VisionEchoLLM(RecordedCalls, CustomLLM):
    """A multimodal test LLM that answers from the image and the text and counts calls."""

    model: str = "vision-echo-1"
    temperature: float = 0.0
    api_key: str = Field(default="sk-test-secret", description="must never reach the scope")

    @classmethod
    def class_name(cls) -> str:
        return "VisionEchoLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.model, is_chat_model=True, context_window=4096)

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        self._calls.append("chat")
        text = describe(messages)
        return ChatResponse(
            message=ChatMessage(role="assistant", content=text, additional_kwargs={"model": self.model}),
            raw={"id": "resp-1"},
            additional_kwargs={"usage": {"prompt_tokens": 12, "completion_tokens": len(text.split())}},
        )

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        self._calls.append("achat")
        return ChatResponse(message=ChatMessage(role="assistant", content=describe(messages)))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        self._calls.append("stream_chat")
        return chat_stream(describe(messages), fail_after=self.fail_stream_after)

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        self._calls.append("astream_chat")
        return as_async(chat_stream(describe(messages), fail_after=self.fail_stream_after))

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self._calls.append("acomplete")
        return CompletionResponse(text=f"Completion of: {prompt}")


def user(question: str, *images: Any) -> list[ChatMessage]:
    blocks: list[Any] = [ImageBlock(image=png_bytes(im)) if isinstance(im, Image.Image) else im for im in images]
    blocks.append(TextBlock(text=question))
    return [ChatMessage(role="user", blocks=blocks)]


def image_doc(img: Image.Image) -> ImageDocument:
    return ImageDocument(image=base64.b64encode(png_bytes(img)).decode())
