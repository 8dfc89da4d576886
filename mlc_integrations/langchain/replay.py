"""What :class:`~mlc_integrations.langchain.chat_model.CachedChatModel` does with
LangChain objects besides keying them: stored generations replayed as a reply or as a
stream of chunks (marked as served from the cache), a finished stream assembled into
the generation that is stored, the inner model swapped for the wrapper inside what its
``bind_tools`` / ``with_structured_output`` return, and the callbacks the inner model
gets on a miss.
"""

from __future__ import annotations

from typing import Any, Optional

from langchain_core.callbacks import AsyncCallbackManager, AsyncCallbackManagerForLLMRun, BaseCallbackManager
from langchain_core.callbacks import CallbackManager
from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.utils import message_chunk_to_message
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, Generation
from langchain_core.outputs.chat_generation import merge_chat_generation_chunks
from langchain_core.runnables import Runnable
from langchain_core.runnables.config import ensure_config
from pydantic import BaseModel

from ..adapters.kit import split_deltas
from ..request import Hit

try:  # langchain-core >= 1.3: the marker of handlers that consume v2 stream events
    from langchain_core.tracers._streaming import _V2StreamingCallbackHandler as _V2Streaming

    _V2_STREAMING: tuple[type, ...] = (_V2Streaming,)
except ImportError:  # pragma: no cover - older langchain-core
    _V2_STREAMING = ()

CACHE_METADATA_KEY = "mlc_cache"


# ---------------------------------------------------------------------------- hits
def cache_marker(hit: Hit) -> dict[str, Any]:
    """What a replayed reply says about where it came from (``response_metadata["mlc_cache"]``)."""
    return {"hit": True, "tier": hit.tier, "entry_id": hit.entry_id, "scores": dict(hit.scores)}


def cached_generation(gen: Generation, hit: Hit) -> ChatGeneration:
    """A stored generation as a reply of this call: no message id (LangChain gives it
    this run's), ``response_metadata`` marked with :func:`cache_marker`, and, as
    LangChain does for its own cache hits, ``usage_metadata["total_cost"] = 0``."""
    if not isinstance(gen, ChatGeneration):  # a plain-LLM generation under the same key
        return ChatGeneration(message=AIMessage(content=gen.text, id=None, response_metadata={
            CACHE_METADATA_KEY: cache_marker(hit)}), generation_info=gen.generation_info)
    message = gen.message
    update: dict[str, Any] = {
        "id": None,
        "response_metadata": {**message.response_metadata, CACHE_METADATA_KEY: cache_marker(hit)},
    }
    if isinstance(message, AIMessage) and message.usage_metadata:
        update["usage_metadata"] = {**message.usage_metadata, "total_cost": 0}
    return ChatGeneration(message=message.model_copy(update=update), generation_info=gen.generation_info)


def as_chunk(message: BaseMessage) -> AIMessageChunk:
    """Any reply message as one ``AIMessageChunk`` without an id (a model without
    streaming yields its whole ``AIMessage`` from ``stream()``); tool calls become tool
    call chunks. The id is left to LangChain, which gives every chunk of the wrapper's
    run the run's id: one id per reply, whether it was replayed or streamed."""
    if isinstance(message, AIMessageChunk):
        return message.model_copy(update={"id": None})
    fields: dict[str, Any] = {
        "content": message.content, "additional_kwargs": message.additional_kwargs,
        "response_metadata": message.response_metadata, "name": message.name,
    }
    if isinstance(message, AIMessage):
        fields.update(tool_calls=message.tool_calls, invalid_tool_calls=message.invalid_tool_calls,
                      usage_metadata=message.usage_metadata)
    return AIMessageChunk(**fields)


def replay_chunks(gen: ChatGeneration) -> list[ChatGenerationChunk]:
    """A (cached) generation as the chunks a streaming model would send: text content
    word by word; the last chunk carries everything else once (tool calls, usage,
    response metadata, generation info), so that merging the chunks gives the message
    back. List content (content blocks) is sent whole in that last chunk."""
    message = gen.message
    content = message.content
    pieces = split_deltas(content) if isinstance(content, str) else []
    chunks = [ChatGenerationChunk(message=AIMessageChunk(content=piece)) for piece in pieces[:-1]]
    last = as_chunk(message).model_copy(update={"content": pieces[-1] if pieces else content,
                                                "chunk_position": "last"})
    chunks.append(ChatGenerationChunk(message=last, generation_info=gen.generation_info))
    return chunks


# ---------------------------------------------------------------------------- misses
def finished_generation(chunks: list[ChatGenerationChunk]) -> Optional[ChatGeneration]:
    """The generation a finished stream amounts to, as ``invoke`` would have returned
    it (an ``AIMessage``, not a chunk); None for a stream that sent nothing."""
    merged = merge_chat_generation_chunks(chunks)
    if merged is None:
        return None
    return ChatGeneration(message=message_chunk_to_message(merged.message), generation_info=merged.generation_info)


def _streams_tokens(handler: Any) -> bool:
    return hasattr(handler, "tap_output_iter") or isinstance(handler, _V2_STREAMING)


def inner_callbacks(run_manager: Any) -> Any:
    """Callbacks for the inner model's run on a miss.

    Handlers that stream tokens to a consumer (``astream_events``, ``astream_log``,
    LangGraph's ``stream_mode="messages"``) are left out: the wrapper's own run already
    sends them every token and the final message, and the inner run would send each a
    second time. Tracers and other handlers see both runs. With ``run_manager`` the
    inner run nests under the wrapper's; LangChain does not hand ``_stream`` one, and
    then the callbacks are those the inner model would inherit from the running
    chain or graph (its config context), filtered the same way."""
    if run_manager is None:
        inherited = ensure_config().get("callbacks")
        if isinstance(inherited, BaseCallbackManager):
            manager = inherited.copy()
            for handler in list(manager.handlers) + list(manager.inheritable_handlers):
                if _streams_tokens(handler):
                    manager.remove_handler(handler)
            return manager
        return [h for h in inherited if not _streams_tokens(h)] if inherited else inherited
    # an LLM run manager has no get_child(): a child manager is built the way it is there
    manager_class = AsyncCallbackManager if isinstance(run_manager, AsyncCallbackManagerForLLMRun) else CallbackManager
    child = manager_class(handlers=[], parent_run_id=run_manager.run_id)
    child.set_handlers([h for h in run_manager.inheritable_handlers if not _streams_tokens(h)])
    child.add_tags(run_manager.inheritable_tags)
    child.add_metadata(run_manager.inheritable_metadata)
    return child


# ---------------------------------------------------------------------------- tool binding
def swap_model(runnable: Any, old: Runnable, new: Runnable) -> tuple[Any, int]:
    """``runnable`` with every occurrence of the model ``old`` replaced by ``new`` (in
    bindings, sequences, parallel maps, fallbacks: any pydantic runnable's fields), and
    how many were replaced. Nothing else is copied or changed."""
    if runnable is old:
        return new, 1
    if isinstance(runnable, (list, tuple)):
        swapped = [swap_model(item, old, new) for item in runnable]
        n = sum(k for _, k in swapped)
        return (type(runnable)(item for item, _ in swapped) if n else runnable), n
    if isinstance(runnable, dict):
        pairs = {key: swap_model(value, old, new) for key, value in runnable.items()}
        n = sum(k for _, k in pairs.values())
        return ({key: value for key, (value, _) in pairs.items()} if n else runnable), n
    if not isinstance(runnable, Runnable) or not isinstance(runnable, BaseModel):
        return runnable, 0
    if isinstance(runnable, BaseLanguageModel):  # another model: not ours to rewire
        return runnable, 0
    updates: dict[str, Any] = {}
    total = 0
    for name in type(runnable).model_fields:
        value, n = swap_model(getattr(runnable, name, None), old, new)
        if n:
            updates[name] = value
            total += n
    return (runnable.model_copy(update=updates) if updates else runnable), total


__all__ = ["CACHE_METADATA_KEY", "as_chunk", "cache_marker", "cached_generation", "finished_generation",
           "inner_callbacks", "replay_chunks", "swap_model"]
