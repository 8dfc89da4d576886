"""LlamaIndex streams through the cache: a stored response replayed as a stream of
word deltas, and an inner stream passed through unchanged whose response is stored
only once it has finished (a stream that fails or is abandoned stores nothing).

One :class:`StreamRecorder` holds what both iteration protocols share; the sync and
async pass-throughs are the few lines a ``for`` and an ``async for`` cannot share.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Iterable, Optional

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, CompletionResponse, TextBlock

from ..adapters.kit import Counters, split_deltas
from .payload import Response


# ---------------------------------------------------------------------- replay
def replay_chat(response: ChatResponse) -> list[ChatResponse]:
    """A cached chat response as stream chunks: deltas join to the text, the last
    chunk carries the whole message (tool calls, additional kwargs)."""
    pieces = split_deltas(response.message.content or "")
    chunks: list[ChatResponse] = []
    so_far = ""
    for piece in pieces[:-1]:
        so_far += piece
        chunks.append(ChatResponse(message=ChatMessage(role=response.message.role, content=so_far), delta=piece))
    chunks.append(ChatResponse(message=response.message, delta=pieces[-1],
                               additional_kwargs=response.additional_kwargs))
    return chunks


def replay_completion(response: CompletionResponse) -> list[CompletionResponse]:
    pieces = split_deltas(response.text)
    chunks: list[CompletionResponse] = []
    so_far = ""
    for piece in pieces[:-1]:
        so_far += piece
        chunks.append(CompletionResponse(text=so_far, delta=piece))
    chunks.append(CompletionResponse(text=response.text, delta=pieces[-1],
                                     additional_kwargs=response.additional_kwargs))
    return chunks


def final_response(last: Response, deltas: list[str]) -> Response:
    """The finished response of a stream: LlamaIndex chunks carry the text so far; a
    provider that puts only the delta in each chunk gets the joined deltas."""
    joined = "".join(deltas)
    if isinstance(last, CompletionResponse):
        if len(joined) > len(last.text):
            return CompletionResponse(text=joined, additional_kwargs=last.additional_kwargs)
        return last
    content = last.message.content or ""
    if len(joined) > len(content) and all(isinstance(b, TextBlock) for b in last.message.blocks):
        message = last.message.model_copy(update={"blocks": [TextBlock(text=joined)]})
        return ChatResponse(message=message, additional_kwargs=last.additional_kwargs)
    return last


def replayed(chunks: list[Any]) -> Generator[Any, None, None]:
    yield from chunks


async def areplayed(chunks: list[Any]) -> AsyncGenerator[Any, None]:
    for chunk in chunks:
        yield chunk


async def amap(fn: Callable[[Any], Any], stream: AsyncIterator[Any]) -> AsyncGenerator[Any, None]:
    async for item in stream:
        yield fn(item)


# ---------------------------------------------------------------------- pass-through
class StreamRecorder:
    """The chunks of one inner stream; counts streams that finished and streams that
    failed or were abandoned (``keyed``: only those the cache would have stored)."""

    def __init__(self, counters: Counters, keyed: bool, on_failure: Callable[[], None] = lambda: None) -> None:
        self._counters = counters
        self._keyed = keyed
        self._on_failure = on_failure  # identical requests waiting for this answer go on (inflight.py)
        self._last: Optional[Response] = None
        self._deltas: list[str] = []

    def add(self, chunk: Any) -> Any:
        self._last = chunk
        self._deltas.append(chunk.delta or "")
        return chunk

    def __enter__(self) -> "StreamRecorder":
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if exc_type is not None and self._keyed:  # GeneratorExit too: the caller stopped reading
            self._counters.incr("streams_unfinished")
            self._on_failure()

    def response(self) -> Optional[Response]:
        """The finished stream's response, None if it yielded nothing."""
        if self._last is None:
            return None
        self._counters.incr("streams_finished")
        return final_response(self._last, self._deltas)


def pass_through(inner: Iterable[Any], recorder: StreamRecorder,
                 store: Callable[[Optional[Response]], None]) -> Generator[Any, None, None]:
    with recorder:
        for chunk in inner:
            yield recorder.add(chunk)
    store(recorder.response())


async def apass_through(inner: AsyncIterator[Any], recorder: StreamRecorder,
                        store: Callable[[Optional[Response]], Awaitable[None]]) -> AsyncGenerator[Any, None]:
    with recorder:
        async for chunk in inner:
            yield recorder.add(chunk)
    await store(recorder.response())
