"""LangChain chat-model wrapper: every call style through the cache, streams included.

LangChain consults a :class:`~langchain_core.caches.BaseCache` only on the
``invoke``/``batch`` path (``BaseChatModel._generate_with_cache``); ``stream()``,
``astream()`` and ``astream_events()`` of a model that streams call its ``_stream``
directly and never look at the cache. :class:`CachedChatModel` is a ``BaseChatModel``
around any chat model whose own ``_generate``/``_agenerate``/``_stream``/``_astream``
consult the cache, so every route LangChain takes to a model goes through it:

* a hit is returned as the stored reply, or replayed as chunks when the caller streams
  (:mod:`.replay`), marked ``response_metadata["mlc_cache"]``;
* a miss calls the inner model (``generate``, or ``stream`` when the caller streams) and
  stores its reply; a stream is stored only once it has finished (an exception or a
  caller that stops reading stores nothing).

Keying is :class:`~mlc_integrations.langchain.cache.MultimodalSemanticCache`'s own: the
prompt LangChain would hand a cache (the serialized messages, ids cleared) and the inner
model's ``llm_string`` for this call (model settings, stop, bound tools) as the scope,
with the same payload format, so the wrapper and ``set_llm_cache`` share entries.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing, closing
from typing import Any, AsyncIterator, ContextManager, Iterator, Optional, Sequence

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.load import dumps
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from pydantic import Field, PrivateAttr

from ..adapters.kit import (CONTROL_KWARG, Counters, FailOpen, LookupRecord, LookupTracker, LookupTracking,
                           StreamOutcome, adapter_engine, lookup_and_restore, note_lookup, release,
                           released_on_failure, take_control)
from ..engine import MLCEngine
from ..errors import PayloadError
from ..runtime.inflight import coalesced_in_thread
from ..request import DEFAULT_CONTROL, CacheControl, CacheRequest, Hit
from .cache import MultimodalSemanticCache, answer_text, generations_from_payload, generations_payload, is_empty_reply
from .events import StreamRunMixin, areport_lookup, report_lookup
from .replay import as_chunk, cached_generation, finished_generation, inner_callbacks, replay_chunks, swap_model

log = logging.getLogger(__name__)

_COUNTERS = ("hits", "misses", "bypassed", "streams_finished", "streams_unfinished", "unreadable_entries",
             "unstorable_responses")


class _Call:
    """One call's key and lookup outcome; ``replay`` holds the cached generations."""

    __slots__ = ("request", "record", "replay", "control")

    def __init__(self, request: Optional[CacheRequest], record: LookupRecord,
                 replay: Optional[list[ChatGeneration]], control: CacheControl = DEFAULT_CONTROL) -> None:
        self.request = request
        self.record = record
        self.replay = replay
        self.control = control


class CachedChatModel(StreamRunMixin, BaseChatModel):  # StreamRunMixin: events.py
    """Any LangChain chat model, with multi-level response caching on every call style.

    ``CachedChatModel(model, engine=None, *, cache=None, namespace=None, strict=None, **options)``:

    * ``engine``: an :class:`~mlc_integrations.MLCEngine` to share (its settings, ``strict``
      included, are its own), or None to build one from ``strict`` and the engine options,
      as ``MultimodalSemanticCache(...)`` would (the convention of all three adapters);
    * ``cache``: instead, the :class:`MultimodalSemanticCache` to share -- LangChain's own
      ``cache=`` convention -- e.g. the one given to ``set_llm_cache`` (its namespace too);
    * ``options``: ``BaseChatModel`` settings of the wrapper (``callbacks``, ``tags``,
      ``disable_streaming``, ...); any other name is an engine option.

    ``bind_tools`` and ``with_structured_output`` are the inner model's, with the wrapper
    in its place, so the bound tools reach the key exactly as they reach the model.
    The wrapper's own LangChain ``cache`` field is False: it does the caching itself.
    Put a rate limiter on the inner model: it then limits model calls, not cache hits.
    """

    model: BaseChatModel = Field(description="The chat model whose replies are cached.")

    _mlc_cache: MultimodalSemanticCache = PrivateAttr()
    _owns_cache: bool = PrivateAttr(default=False)
    _counters: Counters = PrivateAttr()
    _fail_open: FailOpen = PrivateAttr()
    _tracking: LookupTracking = PrivateAttr()

    def __init__(self, model: BaseChatModel, engine: Optional[MLCEngine] = None, *,
                 cache: Optional[MultimodalSemanticCache] = None, namespace: Optional[str] = None,
                 strict: Optional[bool] = None, **options: Any) -> None:
        if not isinstance(model, BaseChatModel):
            hint = " (wrap the model, then bind: CachedChatModel(model).bind_tools(...))" \
                if isinstance(model, Runnable) else ""
            raise TypeError(f"model must be a LangChain BaseChatModel, got {type(model).__name__}{hint}")
        fields = {k: options.pop(k) for k in list(options) if k in type(self).model_fields}
        if cache is not None:
            if not isinstance(cache, MultimodalSemanticCache):
                raise TypeError("cache= takes the MultimodalSemanticCache to share (e.g. set_llm_cache's); "
                                f"got {type(cache).__name__} (an MLCEngine goes to engine=)")
            if engine is not None or options or strict is not None or namespace is not None:
                raise TypeError("CachedChatModel(cache=MultimodalSemanticCache(...)) uses that cache's namespace, "
                                "strictness and engine; configure them there")
        elif engine is not None:
            adapter_engine("CachedChatModel", engine, strict, options)  # the shared convention's checks
        super().__init__(model=model, cache=False, **fields)
        # built only once the wrapper's own fields are valid: an engine may hold a directory lock
        ns = {"namespace": namespace} if namespace else {}
        if cache is not None:
            self._mlc_cache = cache
        elif engine is not None:
            self._mlc_cache = MultimodalSemanticCache(engine, **ns)
        else:  # as the LangChain cache would be built (persisted in ./.mlc_cache by default)
            self._mlc_cache = MultimodalSemanticCache(strict=strict, **ns, **options)
            self._owns_cache = True
        self._counters = Counters(_COUNTERS)
        self._fail_open = FailOpen(self._counters, lambda: self._mlc_cache.strict, log)
        self._tracking = LookupTracking()

    # ------------------------------------------------------------------ identity
    @property
    def _llm_type(self) -> str:
        return f"mlc-cached-{self.model._llm_type}"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"cached_model": self.model._llm_type, **self.model._identifying_params}

    def _get_ls_params(self, stop: Optional[list[str]] = None, **kwargs: Any) -> Any:
        # traces name the model that answers, not the wrapper
        return self.model._get_ls_params(stop=stop, **kwargs)

    # ------------------------------------------------------------------ public extras
    @property
    def semantic_cache(self) -> MultimodalSemanticCache:
        """The cache this wrapper keys and stores through (shares ``set_llm_cache``'s entries)."""
        return self._mlc_cache

    @property
    def engine(self) -> MLCEngine:
        return self._mlc_cache.engine

    @property
    def last_hit(self) -> Optional[Hit]:
        """The :class:`Hit` that served the latest call of this wrapper in this thread or
        asyncio task (or a task or thread it started), None after a miss."""
        return self._tracking.last_hit

    @property
    def last_lookup(self) -> Optional[LookupRecord]:
        """Like :attr:`last_hit`, with the miss case: ``reason`` says why it missed,
        ``refused`` is the best candidate the verifier refused (tier, scores, reason)."""
        return self._tracking.last_lookup

    def track(self) -> ContextManager[LookupTracker]:
        """Collect every lookup of this wrapper made inside the block, from any thread or
        task started inside it (``batch``, ``abatch``, agents)."""
        return self._tracking.track()

    def stats(self) -> dict[str, Any]:
        """The engine's statistics plus this wrapper's counters under ``"adapter"``
        (hits, misses, calls that could not be keyed, streams finished and abandoned,
        ``by_scope``: per ``llm_string`` and namespace)."""
        return self._counters.merged(self.engine.stats(), "adapter", type="CachedChatModel",
                                     namespace=self._mlc_cache.namespace)

    def close(self) -> None:
        """Close the engine if this wrapper built it (a shared one is its owner's)."""
        if self._owns_cache:
            self._mlc_cache.engine.close()

    def clear(self) -> None:
        """Delete every entry of this wrapper's namespace."""
        self._mlc_cache.clear()

    async def aclear(self) -> None:
        await asyncio.to_thread(self.clear)

    @property
    def strict(self) -> bool:
        return self._mlc_cache.strict

    # ------------------------------------------------------------------ entry points
    # LangChain runs ainvoke/abatch/batch/astream_events lookups in tasks or threads it
    # starts; the caller's context gets its lookup slot first, so ``last_hit`` after
    # ``await model.ainvoke(...)`` is that call's outcome even if it is the first call.
    def batch(self, *args: Any, **kwargs: Any) -> Any:
        self._tracking.open()
        return super().batch(*args, **kwargs)

    async def ainvoke(self, *args: Any, **kwargs: Any) -> Any:
        self._tracking.open()
        return await super().ainvoke(*args, **kwargs)

    async def abatch(self, *args: Any, **kwargs: Any) -> Any:
        self._tracking.open()
        return await super().abatch(*args, **kwargs)

    def astream_events(self, *args: Any, **kwargs: Any) -> Any:
        self._tracking.open()
        return super().astream_events(*args, **kwargs)

    # ------------------------------------------------------------------ tools, structured output
    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Optional[str] = None,
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """The inner model's ``bind_tools`` (its own tool format), bound to the wrapper."""
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self._rewire(self.model.bind_tools(tools, **kwargs), "bind_tools")

    def with_structured_output(self, schema: Any, *, include_raw: bool = False, **kwargs: Any) -> Runnable:
        """The inner model's ``with_structured_output`` (its own methods: function
        calling, JSON schema, JSON mode), calling the wrapper instead of the model."""
        return self._rewire(self.model.with_structured_output(schema, include_raw=include_raw, **kwargs),
                            "with_structured_output")

    def _rewire(self, runnable: Any, what: str) -> Any:
        rewired, n = swap_model(runnable, self.model, self)
        if n == 0:
            raise NotImplementedError(
                f"{type(self.model).__name__}.{what}() returned a {type(runnable).__name__} that does not call the "
                "model through a binding the wrapper can take over; its calls would bypass the cache")
        return rewired

    # ------------------------------------------------------------------ keying and lookup
    def _prepare(self, messages: list[BaseMessage], stop: Optional[list[str]], kwargs: dict[str, Any],
                 run_manager: Any = None) -> _Call:
        """Key the call as LangChain keys it for a cache and look it up (the blocking part,
        run in a worker thread by the async paths)."""
        scope = ""

        # Per call: model.invoke(..., cache_control="refresh") or config={"metadata": {"cache_control": ...}};
        # taken out before keying: it is not a model parameter.
        control = take_control(kwargs, (getattr(run_manager, "metadata", None) or {}).get(CONTROL_KWARG))
        def keyed() -> tuple[CacheRequest, str]:
            nonlocal scope
            scope = self.model._get_llm_string(stop=stop, **kwargs)  # what LangChain hands a BaseCache
            prompt = dumps([m.model_copy(update={"id": None}) if getattr(m, "id", None) is not None else m
                            for m in messages])
            return self._mlc_cache.request(prompt, scope)

        keyed_call = self._fail_open.attempt("cannot key this chat model call", keyed, counter="bypassed",
                                             outcome="the call goes to the model uncached")
        namespace = self._mlc_cache.namespace
        if keyed_call is None:
            return _Call(None, LookupRecord.of(None, "invalid", scope, namespace=namespace), None, control)
        request, kind = keyed_call

        def restore(hit: Hit) -> list[ChatGeneration]:
            replay = [cached_generation(g, hit) for g in generations_from_payload(hit.payload)]
            replay_chunks(replay[0])  # a stored reply that cannot be replayed is unreadable too
            return replay

        found, replay, note = lookup_and_restore(
            self.engine, self._fail_open, request, restore,
            lambda failed: self._finish(_Call(request, LookupRecord.of(request, kind, scope, failed), None, control)),
            control)
        return _Call(request, LookupRecord.of(request, kind, scope, found, note=note), replay, control)

    def _finish(self, call: _Call) -> _Call:
        note_lookup(call.record, self._counters, self._tracking, log)
        return call

    async def _aprepare(self, messages: list[BaseMessage], stop: Optional[list[str]],
                        kwargs: dict[str, Any], run_manager: Any = None) -> _Call:
        return self._finish(await coalesced_in_thread(self._prepare, messages, stop, kwargs, run_manager))

    def _store(self, call: _Call, generations: Sequence[ChatGeneration]) -> None:
        request = call.request
        if request is None or is_empty_reply(generations):
            if request is not None:
                self._counters.incr("empty_not_stored")
            release(self.engine, request)
            return
        gens = list(generations)
        payload = self._fail_open.attempt("reply cannot be stored", generations_payload, gens,
                                          counter="unstorable_responses", error=PayloadError, level=logging.INFO,
                                          outcome="returned, not cached")
        if payload is not None:
            self.engine.update(request, payload, answer=answer_text(gens), control=call.control)
        else:
            release(self.engine, request)  # identical calls waiting for this reply call the model themselves

    # ------------------------------------------------------------------ BaseChatModel
    def _generate(self, messages: list[BaseMessage], stop: Optional[list[str]] = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        call = self._finish(self._prepare(messages, stop, kwargs, run_manager))
        report_lookup(run_manager, call.record)  # on_custom_event with the decision (events.py)
        if call.replay is not None:
            return ChatResult(generations=call.replay)
        with released_on_failure(self.engine, call.request):
            result = self.model.generate([messages], stop=stop, callbacks=inner_callbacks(run_manager), **kwargs)
        reply = ChatResult(generations=list(result.generations[0]), llm_output=result.llm_output)
        self._store(call, reply.generations)
        return reply

    async def _agenerate(self, messages: list[BaseMessage], stop: Optional[list[str]] = None,
                         run_manager: Any = None, **kwargs: Any) -> ChatResult:
        call = await self._aprepare(messages, stop, kwargs, run_manager)
        await areport_lookup(run_manager, call.record)
        if call.replay is not None:
            return ChatResult(generations=call.replay)
        with released_on_failure(self.engine, call.request):
            result = await self.model.agenerate([messages], stop=stop, callbacks=inner_callbacks(run_manager),
                                                **kwargs)
        reply = ChatResult(generations=list(result.generations[0]), llm_output=result.llm_output)
        await asyncio.to_thread(self._store, call, reply.generations)
        return reply

    def _stream(self, messages: list[BaseMessage], stop: Optional[list[str]] = None,
                run_manager: Any = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        call = self._finish(self._prepare(messages, stop, kwargs, run_manager))
        report_lookup(run_manager, call.record)
        if call.replay is not None:
            yield from replay_chunks(call.replay[0])
            return
        chunks: list[ChatGenerationChunk] = []
        config = {"callbacks": inner_callbacks(run_manager)}
        with self._stream_outcome(call), closing(self.model.stream(messages, config, stop=stop, **kwargs)) as inner:
            for message in inner:
                chunk = ChatGenerationChunk(message=as_chunk(message))
                chunks.append(chunk)
                yield chunk
        self._store_stream(call, chunks)

    async def _astream(self, messages: list[BaseMessage], stop: Optional[list[str]] = None,
                       run_manager: Any = None, **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        call = await self._aprepare(messages, stop, kwargs, run_manager)
        await areport_lookup(run_manager, call.record)
        if call.replay is not None:
            for chunk in replay_chunks(call.replay[0]):
                yield chunk
            return
        chunks: list[ChatGenerationChunk] = []
        config = {"callbacks": inner_callbacks(run_manager)}
        async with aclosing(self.model.astream(messages, config, stop=stop, **kwargs)) as inner:
            with self._stream_outcome(call):
                async for message in inner:
                    chunk = ChatGenerationChunk(message=as_chunk(message))
                    chunks.append(chunk)
                    yield chunk
        await asyncio.to_thread(self._store_stream, call, chunks)

    # ------------------------------------------------------------------ stream bookkeeping
    def _stream_outcome(self, call: _Call) -> StreamOutcome:
        return StreamOutcome(self._counters, call.request is not None, lambda: release(self.engine, call.request))

    def _store_stream(self, call: _Call, chunks: list[ChatGenerationChunk]) -> None:
        """Store a stream that has finished, as the reply ``invoke`` would have returned."""
        if call.request is None:
            return
        self._counters.incr("streams_finished")
        generation = self._fail_open.attempt("the finished stream cannot be assembled into a reply",
                                             finished_generation, chunks, counter="unstorable_responses",
                                             error=PayloadError, level=logging.INFO, outcome="streamed, not cached")
        self._store(call, [generation] if generation is not None else [])


__all__ = ["CachedChatModel"]
