"""LlamaIndex adapter: :class:`CachedMultiModalLLM`, a caching wrapper around any LlamaIndex LLM.

The wrapper is itself a ``llama_index.core.llms.LLM`` (the ``StructuredLLM``
pattern: it holds ``llm``, delegates ``metadata`` and decorates its endpoints with
``llm_chat_callback`` / ``llm_completion_callback``, so callback and instrumentation
events fire for cached calls too). It is a thin adapter: :mod:`.keying` turns a call
into a request, :mod:`.payload` turns responses into JSON and back. Matching, storage
and failure policy are the engine's; fail-open, counters and ``last_hit`` follow
:mod:`mlc_integrations.adapters.kit`, like the LangChain cache.

What is in the key, besides the conversation:

* the scope: the inner LLM's class and its serialized settings (model, temperature,
  ...), without callback managers, clients or secrets;
* which endpoint family answered (``chat`` or ``complete``) and every keyword argument
  that reaches the inner LLM -- for tool calling that is the tool set (names,
  descriptions, parameter schemas) and the tool choice, so a response is never reused
  for a different tool set.

Each endpoint's blocking work (search, rebuild, store) is written once and run by
the async endpoints through ``asyncio.to_thread``. Wrapping a ``FunctionCallingLLM``
gives a :class:`CachedFunctionCallingLLM` (a subclass of both), so agents that
require function calling keep working.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncGenerator, AsyncIterator, Callable, ContextManager, Generator, Iterable, List
from typing import Optional, Sequence, Union

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.bridge.pydantic import Field, PrivateAttr, SerializeAsAny
from llama_index.core.callbacks import CallbackManager
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import LLM, ToolSelection

from ..adapters.kit import (Counters, FailOpen, LookupRecord, LookupTracker, LookupTracking, adapter_engine,
                           lookup_and_restore, note_lookup, release, released_on_failure, take_control)
from ..adapters.conversation import Part, Turn, request_from_turns
from ..engine import MLCEngine
from ..errors import InvalidRequestError, PayloadError
from ..runtime.inflight import coalesced_in_thread
from ..images import ImageRef
from ..request import DEFAULT_CONTROL, DEFAULT_NAMESPACE, CacheControl, CacheRequest, Hit
from .events import report_lookup
from .keying import ScopeWatch, image_document_input, images_message, kwargs_json, labelled, legacy_args, llm_scope
from .keying import llm_settings, message_to_turn, scope_string
from .payload import (Response, answer_text, as_completion, chat_from_payload, completion_from_payload, is_empty_response,
                      response_payload)
from .streams import StreamRecorder, amap, apass_through, areplayed, pass_through, replayed
from .streams import replay_chat, replay_completion

log = logging.getLogger(__name__)

_COUNTERS = ("hits", "misses", "bypassed", "streams_finished", "streams_unfinished", "unreadable_entries",
             "unstorable_responses")
_FROM_PAYLOAD: dict[str, Callable[[Any], Response]] = {"chat": chat_from_payload, "complete": completion_from_payload}


# ---------------------------------------------------------------------- the wrapper
class CachedMultiModalLLM(LLM):
    """Any LlamaIndex LLM, with multi-level response caching in front of it.

    ``CachedMultiModalLLM(llm, engine=None, *, namespace="default", strict=None,
    **engine_options)``: give an :class:`~mlc_integrations.MLCEngine` to share one
    cache between wrappers (its settings, ``strict`` included, are its own), or ``strict``
    and engine options (``persist_directory=...``, ``l1_threshold=...``, ...) to build one;
    the default engine is in memory. ``close()`` closes an engine the wrapper built,
    ``clear()`` deletes the entries of its namespace (the convention of all three adapters).

    ``chat``/``complete`` (sync and async) look up first and call the inner LLM only
    on a miss; the ``stream_*`` variants replay a hit as a stream and store a miss only
    once the inner stream has finished. Cache faults never break a call (fail-open);
    ``strict=True`` raises :class:`~mlc_integrations.errors.MLCError` subclasses.
    ``last_hit`` tells whether (and why) the latest call in this context was served
    from the cache.
    """

    llm: SerializeAsAny[LLM] = Field(description="The LLM whose responses are cached.")
    namespace: str = Field(default=DEFAULT_NAMESPACE, description="Tenant namespace of the cache entries.")
    strict: bool = Field(default=False, description="Raise typed errors instead of failing open.")

    _engine: MLCEngine = PrivateAttr()
    _counters: Counters = PrivateAttr()
    _fail_open: FailOpen = PrivateAttr()
    _tracking: LookupTracking = PrivateAttr()
    _scope_watch: ScopeWatch = PrivateAttr()
    _owns_engine: bool = PrivateAttr(default=False)

    def __new__(cls, *args: Any, **kwargs: Any) -> "CachedMultiModalLLM":
        # A function-calling inner LLM gets the function-calling wrapper, so that
        # isinstance(..., FunctionCallingLLM) checks in agents and programs hold.
        inner = kwargs.get("llm", args[0] if args else None)
        if cls is CachedMultiModalLLM and isinstance(inner, FunctionCallingLLM):
            cls = CachedFunctionCallingLLM
        return super().__new__(cls)

    def __init__(
        self,
        llm: LLM,
        engine: Optional[MLCEngine] = None,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        strict: Optional[bool] = None,
        callback_manager: Optional[CallbackManager] = None,
        **engine_options: Any,
    ) -> None:
        if not isinstance(llm, LLM):
            raise TypeError(
                f"llm must be a llama_index.core.llms.LLM, got {type(llm).__name__}; legacy "
                "MultiModalLLM classes are not supported (use their LLM successor with ImageBlocks)"
            )
        engine, owns = adapter_engine("CachedMultiModalLLM", engine, strict, engine_options)
        fields: dict[str, Any] = {}
        if callback_manager is not None:
            fields["callback_manager"] = callback_manager
        super().__init__(
            llm=llm,
            namespace=namespace,
            strict=bool(engine.strict),
            **fields,
            # The wrapper formats prompts exactly as the inner LLM would (predict(), programs).
            system_prompt=llm.system_prompt,
            messages_to_prompt=llm.messages_to_prompt,
            completion_to_prompt=llm.completion_to_prompt,
            output_parser=llm.output_parser,
            pydantic_program_mode=llm.pydantic_program_mode,
            query_wrapper_prompt=llm.query_wrapper_prompt,
        )
        self._engine = engine
        self._owns_engine = owns
        self._counters = Counters(_COUNTERS)
        self._fail_open = FailOpen(self._counters, lambda: self.strict, log)
        self._tracking = LookupTracking()
        self._scope_watch = ScopeWatch()

    @classmethod
    def class_name(cls) -> str:
        return "CachedMultiModalLLM"

    # ------------------------------------------------------------------ public extras
    @property
    def metadata(self) -> LLMMetadata:
        return self.llm.metadata

    @property
    def engine(self) -> MLCEngine:
        return self._engine

    @property
    def scope(self) -> str:
        """The scope string of the inner LLM (pass it to ``engine.clear(scope=...)``)."""
        return llm_scope(self.llm)

    @property
    def last_hit(self) -> Optional[Hit]:
        """The :class:`Hit` that served the latest call in this thread or asyncio task
        (or in a task it started), None on a miss."""
        return self._tracking.last_hit

    @property
    def last_lookup(self) -> Optional[LookupRecord]:
        """Like :attr:`last_hit`, with the miss case: ``kind`` is the endpoint family
        (``"chat"``/``"complete"``) or ``"invalid"`` (the call could not be keyed); on a
        miss ``reason`` says why, ``refused`` is the best candidate the verifier refused
        (tier, scores, thresholds, reason) and ``tiers`` each tier's outcome."""
        return self._tracking.last_lookup

    def track(self) -> ContextManager[LookupTracker]:
        """Collect every lookup of this wrapper made inside the block, from any task or
        thread started inside it (agents and workflows call the LLM in their own tasks)."""
        return self._tracking.track()

    def stats(self) -> dict[str, Any]:
        """The engine's statistics plus this adapter's counters under ``"adapter"``
        (``by_scope``: lookups, hits and misses per scope and namespace)."""
        return self._counters.merged(self._engine.stats(), "adapter", type="CachedMultiModalLLM",
                                     namespace=self.namespace)

    def clear(self) -> None:
        """Delete every entry of this wrapper's namespace (``engine.clear(scope=self.scope,
        namespace=...)`` for this inner LLM's only)."""
        self._engine.clear(namespace=self.namespace)

    async def aclear(self) -> None:
        await asyncio.to_thread(self.clear)

    def close(self) -> None:
        """Close the engine if this wrapper built it (a shared one is its owner's)."""
        if self._owns_engine:
            self._engine.close()

    def to_payload(self) -> dict[str, Any]:
        payload = dict(self.llm.to_payload())
        payload["cached_by"] = self.class_name()
        return payload

    # ------------------------------------------------------------------ keying
    def _call_scope(self) -> str:
        """The scope of this call; a change since the previous call is logged once."""
        settings = llm_settings(self.llm)
        self._scope_watch.observe(type(self.llm), settings)
        return scope_string(type(self.llm), settings)

    def _resolve_image(self, value: Any, label: str) -> Any:
        """Decode a picture now, so that an error names its block; on bad data hand the
        engine the raw value, which it rejects the same way (a counted miss)."""
        try:
            return self._engine.decode_image(value, label)
        except InvalidRequestError as exc:
            self._fail_open.fail("image not keyable", exc, level=logging.DEBUG, outcome="the lookup will be a miss")
            return value

    def _request(self, turns: Callable[[], list[Turn]], api: str, kwargs: dict[str, Any]) -> Optional[CacheRequest]:
        """The cache request for a call, or None when it cannot be keyed (the call bypasses the cache)."""
        def keyed() -> CacheRequest:
            extra: dict[str, Any] = {"api": api}
            if kwargs:
                extra["kwargs"] = kwargs_json(kwargs)
            return request_from_turns(turns(), scope=self._call_scope(), namespace=self.namespace,
                                      extra_context=extra)

        return self._fail_open.attempt("cannot key this LlamaIndex call", keyed, counter="bypassed",
                                       outcome="the call goes on uncached")

    def _chat_request(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> Optional[CacheRequest]:
        return self._request(lambda: [message_to_turn(m, index=i, resolve_image=self._resolve_image)
                                      for i, m in enumerate(messages)], "chat", kwargs)

    def _complete_request(self, prompt: str, formatted: bool, image_documents: Optional[Sequence[Any]],
                          kwargs: dict[str, Any]) -> Optional[CacheRequest]:
        def turns() -> list[Turn]:
            parts = [Part.of_text(prompt)]
            for k, doc in enumerate(image_documents or []):
                label = f"image_documents[{k}] ({type(doc).__name__})"
                value = labelled(label, image_document_input, doc)
                parts.append(Part.of_image(value if isinstance(value, ImageRef) else self._resolve_image(value, label)))
            return [Turn(role="user", parts=parts)]

        key_kwargs = dict(kwargs)
        if formatted:
            key_kwargs["formatted"] = True
        return self._request(turns, "complete", key_kwargs)

    # ------------------------------------------------------------------ lookup / store
    def _look_up(self, request: Optional[CacheRequest], api: str,
                 control: CacheControl = DEFAULT_CONTROL) -> tuple[LookupRecord, Optional[Response]]:
        """The blocking part of a lookup (search, rebuild the response), shared by the
        sync and async endpoints; the outcome is recorded in the caller's context."""
        if request is None:
            return LookupRecord.of(None, "invalid", "", namespace=self.namespace), None
        found, response, note = lookup_and_restore(
            self._engine, self._fail_open, request, lambda hit: _FROM_PAYLOAD[api](hit.payload),
            lambda failed: self._finish(LookupRecord.of(request, api, request.scope, failed), None), control)
        return LookupRecord.of(request, api, request.scope, found, note=note), response

    def _finish(self, record: LookupRecord, response: Optional[Response]) -> Any:
        note_lookup(record, self._counters, self._tracking, log)
        return report_lookup(record, response)  # a CacheLookupEvent; a hit names its tier (events.py)

    def _lookup(self, request: Optional[CacheRequest], api: str, control: CacheControl = DEFAULT_CONTROL) -> Any:
        return self._finish(*self._look_up(request, api, control))

    async def _alookup(self, request: Optional[CacheRequest], api: str,
                       control: CacheControl = DEFAULT_CONTROL) -> Any:
        # an identical request in flight is waited for on the event loop (inflight.py)
        return self._finish(*await coalesced_in_thread(self._look_up, request, api, control))

    def _store(self, request: Optional[CacheRequest], response: Optional[Response],
               control: CacheControl = DEFAULT_CONTROL) -> None:
        if request is None:
            return
        if response is None or is_empty_response(response):
            if response is not None:
                self._counters.incr("empty_not_stored")
            release(self._engine, request)
            return
        payload = self._fail_open.attempt(
            "response cannot be stored as JSON", response_payload, response, counter="unstorable_responses",
            error=PayloadError, level=logging.INFO, outcome="returned, not cached")
        if payload is not None:
            self._engine.update(request, payload, answer=answer_text(response), control=control)
        else:  # identical calls waiting for this answer call the model themselves
            release(self._engine, request)

    def _pass_through(self, request: Optional[CacheRequest], inner: Iterable[Any],
                      control: CacheControl = DEFAULT_CONTROL) -> Generator[Any, None, None]:
        """The inner stream unchanged; its response is stored once it has finished."""
        return pass_through(inner, StreamRecorder(self._counters, request is not None,
                                                  lambda: release(self._engine, request)),
                            lambda response: self._store(request, response, control))

    def _apass_through(self, request: Optional[CacheRequest], inner: AsyncIterator[Any],
                       control: CacheControl = DEFAULT_CONTROL) -> AsyncGenerator[Any, None]:
        return apass_through(inner, StreamRecorder(self._counters, request is not None,
                                                   lambda: release(self._engine, request)),
                             lambda response: asyncio.to_thread(self._store, request, response, control))

    # ------------------------------------------------------------------ chat
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        messages = list(messages)
        control = take_control(kwargs)  # llm.chat(..., cache_control="refresh"): not a model parameter
        request = self._chat_request(messages, kwargs)
        cached = self._lookup(request, "chat", control)
        if cached is not None:
            return cached
        with released_on_failure(self._engine, request):
            response = self.llm.chat(messages, **kwargs)
        self._store(request, response, control)
        return response

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        messages = list(messages)
        control = take_control(kwargs)  # llm.chat(..., cache_control="refresh"): not a model parameter
        request = self._chat_request(messages, kwargs)
        cached = await self._alookup(request, "chat", control)
        if cached is not None:
            return cached
        with released_on_failure(self._engine, request):
            response = await self.llm.achat(messages, **kwargs)
        await asyncio.to_thread(self._store, request, response, control)
        return response

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        messages = list(messages)
        control = take_control(kwargs)  # llm.chat(..., cache_control="refresh"): not a model parameter
        request = self._chat_request(messages, kwargs)
        cached = self._lookup(request, "chat", control)
        if cached is not None:
            return replayed(replay_chat(cached))
        with released_on_failure(self._engine, request):
            return self._pass_through(request, self.llm.stream_chat(messages, **kwargs), control)

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        messages = list(messages)
        control = take_control(kwargs)  # llm.chat(..., cache_control="refresh"): not a model parameter
        request = self._chat_request(messages, kwargs)
        cached = await self._alookup(request, "chat", control)
        if cached is not None:
            return areplayed(replay_chat(cached))
        with released_on_failure(self._engine, request):
            return self._apass_through(request, await self.llm.astream_chat(messages, **kwargs), control)

    # ------------------------------------------------------------------ complete
    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, image_documents: Optional[Sequence[Any]] = None,
                 **kwargs: Any) -> CompletionResponse:
        """Completion; ``image_documents`` (legacy ``ImageDocument``/``ImageNode``) are
        sent to the inner LLM as ``ImageBlock`` s in one user message."""
        formatted, docs = legacy_args(formatted, image_documents)
        control = take_control(kwargs)
        request = self._complete_request(prompt, formatted, docs, kwargs)
        cached = self._lookup(request, "complete", control)
        if cached is not None:
            return cached
        with released_on_failure(self._engine, request):
            if docs:
                response = as_completion(self.llm.chat(images_message(prompt, docs), **kwargs))
            else:
                response = self.llm.complete(prompt, formatted=formatted, **kwargs)
        self._store(request, response, control)
        return response

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, image_documents: Optional[Sequence[Any]] = None,
                        **kwargs: Any) -> CompletionResponse:
        formatted, docs = legacy_args(formatted, image_documents)
        control = take_control(kwargs)
        request = self._complete_request(prompt, formatted, docs, kwargs)
        cached = await self._alookup(request, "complete", control)
        if cached is not None:
            return cached
        with released_on_failure(self._engine, request):
            if docs:
                response = as_completion(await self.llm.achat(images_message(prompt, docs), **kwargs))
            else:
                response = await self.llm.acomplete(prompt, formatted=formatted, **kwargs)
        await asyncio.to_thread(self._store, request, response, control)
        return response

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False,
                        image_documents: Optional[Sequence[Any]] = None, **kwargs: Any) -> CompletionResponseGen:
        formatted, docs = legacy_args(formatted, image_documents)
        control = take_control(kwargs)
        request = self._complete_request(prompt, formatted, docs, kwargs)
        cached = self._lookup(request, "complete", control)
        if cached is not None:
            return replayed(replay_completion(cached))
        with released_on_failure(self._engine, request):
            if docs:
                inner: Any = map(as_completion, self.llm.stream_chat(images_message(prompt, docs), **kwargs))
            else:
                inner = self.llm.stream_complete(prompt, formatted=formatted, **kwargs)
        return self._pass_through(request, inner, control)

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False,
                               image_documents: Optional[Sequence[Any]] = None,
                               **kwargs: Any) -> CompletionResponseAsyncGen:
        formatted, docs = legacy_args(formatted, image_documents)
        control = take_control(kwargs)
        request = self._complete_request(prompt, formatted, docs, kwargs)
        cached = await self._alookup(request, "complete", control)
        if cached is not None:
            return areplayed(replay_completion(cached))
        with released_on_failure(self._engine, request):
            if docs:
                inner: Any = amap(as_completion, await self.llm.astream_chat(images_message(prompt, docs), **kwargs))
            else:
                inner = await self.llm.astream_complete(prompt, formatted=formatted, **kwargs)
        return self._apass_through(request, inner, control)


class CachedFunctionCallingLLM(CachedMultiModalLLM, FunctionCallingLLM):
    """:class:`CachedMultiModalLLM` around a ``FunctionCallingLLM`` (built automatically).

    ``chat_with_tools`` and friends come from ``FunctionCallingLLM``: the inner LLM
    prepares the chat arguments (its own tool format), the wrapper's ``chat`` keys on
    them -- so the tool set is part of the key -- and tool calls are read and
    validated by the inner LLM, so cached responses keep working in agents.
    """

    llm: SerializeAsAny[FunctionCallingLLM] = Field(description="The function-calling LLM whose responses are cached.")

    @classmethod
    def class_name(cls) -> str:
        return "CachedFunctionCallingLLM"

    def _prepare_chat_with_tools(
        self,
        tools: Sequence[Any],
        user_msg: Optional[Union[str, ChatMessage]] = None,
        chat_history: Optional[List[ChatMessage]] = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        return self.llm._prepare_chat_with_tools_compat(
            tools,
            user_msg=user_msg,
            chat_history=chat_history,
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )

    def _validate_chat_with_tools_response(
        self,
        response: ChatResponse,
        tools: Sequence[Any],
        allow_parallel_tool_calls: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        return self.llm._validate_chat_with_tools_response(
            response, tools, allow_parallel_tool_calls=allow_parallel_tool_calls, **kwargs
        )

    def get_tool_calls_from_response(
        self,
        response: ChatResponse,
        error_on_no_tool_call: bool = True,
        **kwargs: Any,
    ) -> List[ToolSelection]:
        return self.llm.get_tool_calls_from_response(response, error_on_no_tool_call=error_on_no_tool_call, **kwargs)


__all__ = ["CachedMultiModalLLM", "CachedFunctionCallingLLM"]
