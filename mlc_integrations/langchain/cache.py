"""LangChain cache adapter: ``set_llm_cache(MultimodalSemanticCache())``.

LangChain calls a :class:`~langchain_core.caches.BaseCache` with two strings:

* ``prompt``: for a chat model, ``langchain_core.load.dumps`` of the message list
  (message ids already set to None by ``BaseChatModel._generate_with_cache``); for a
  plain LLM, the prompt text itself;
* ``llm_string``: the model's serialized configuration plus call parameters
  (model name, temperature, stop, bound tools, ...).

This module only translates: :class:`~mlc_integrations.langchain.prompt.PromptParser`
reads ``prompt`` into framework-neutral :class:`~mlc_integrations.adapters.conversation.Turn` s,
:func:`~mlc_integrations.adapters.conversation.request_from_turns` decides request vs. context,
``llm_string`` is the scope, and generations are (de)serialized with LangChain's own
serializer. Matching, storage and failure policy are the engine's; fail-open, counters
and ``last_hit`` follow :mod:`mlc_integrations.adapters.kit`, like the LlamaIndex wrapper.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ContextManager, Optional, Sequence

from langchain_core.caches import RETURN_VAL_TYPE, BaseCache
from langchain_core.load import dumpd, load
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    ChatMessage,
    ChatMessageChunk,
    FunctionMessage,
    FunctionMessageChunk,
    HumanMessage,
    HumanMessageChunk,
    SystemMessage,
    SystemMessageChunk,
    ToolMessage,
    ToolMessageChunk,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, Generation, GenerationChunk

try:  # a context variable in langchain-core 1.x: safe across threads and tasks
    from langchain_core._api import suppress_langchain_beta_warning as _quiet_beta
except ImportError:  # pragma: no cover - older langchain-core
    from contextlib import nullcontext as _quiet_beta

from ..runtime.lru import LRU
from ..adapters.kit import (Counters, FailOpen, adapter_engine, LookupRecord, LookupTracker, LookupTracking, lookup_and_restore,
                           note_lookup, release)
from ..adapters.conversation import request_from_turns
from ..engine import MLCEngine
from ..errors import InvalidRequestError, PayloadError
from ..runtime.inflight import coalesced_in_thread
from ..images import ImageRef, is_remote_url
from ..request import DEFAULT_NAMESPACE, CacheRequest, Hit
from .prompt import ParsedPrompt, PromptParser

log = logging.getLogger(__name__)

DEFAULT_PERSIST_DIRECTORY = ".mlc_cache"
PAYLOAD_FORMAT = "langchain-generations"
PAYLOAD_VERSION = 1

# Classes `load` may revive from a stored payload: generations and the messages inside
# them, nothing that runs logic at construction.
_RESTORABLE = [
    Generation, GenerationChunk, ChatGeneration, ChatGenerationChunk,
    AIMessage, AIMessageChunk, HumanMessage, HumanMessageChunk, SystemMessage, SystemMessageChunk,
    ToolMessage, ToolMessageChunk, ChatMessage, ChatMessageChunk, FunctionMessage, FunctionMessageChunk,
]
_PENDING_MAX = 8  # requests kept between a lookup miss and its update (they hold decoded images)
_COUNTERS = ("hits", "misses", "chat_prompts", "text_prompts", "bad_input", "updates_skipped", "unreadable_entries")


def answer_text(generations: Sequence[Generation]) -> str:
    """The answer a user reads from these generations (what the verifier compares)."""
    return "\n".join(g.text for g in generations)


def is_empty_reply(generations: Sequence[Generation]) -> bool:
    """No generation, or only blank text with no tool or function call: never stored
    (a model that answered nothing is asked again next time)."""
    for g in generations:
        if g.text.strip():
            return False
        msg = getattr(g, "message", None)
        if msg is not None and (getattr(msg, "tool_calls", None) or getattr(msg, "invalid_tool_calls", None)
                                or (msg.additional_kwargs or {}).get("function_call")
                                or (msg.additional_kwargs or {}).get("tool_calls")):
            return False
    return True


_RESTORABLE_BY_ID: dict[tuple[str, ...], type] = {tuple(c.lc_id()): c for c in _RESTORABLE}


def _allowed_in(data: Any) -> list[type]:
    """The restorable classes a payload names: ``load`` computes its allow-list on every call,
    in proportion to its length, and a stored answer names two or three of the sixteen. Every
    restorable class when the payload names another (``load`` then refuses it, as it would)."""
    named: dict[tuple[str, ...], type] = {}
    todo = [data]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            if x.get("lc") == 1 and x.get("type") == "constructor":
                try:
                    cls = _RESTORABLE_BY_ID.get(tuple(x.get("id") or ()))
                except TypeError:
                    cls = None
                if cls is None:
                    return _RESTORABLE
                named[tuple(x["id"])] = cls
            todo.extend(x.values())
        elif isinstance(x, list):
            todo.extend(x)
    return list(named.values()) or _RESTORABLE


def _load_generations(data: Any) -> Any:
    """LangChain's ``load`` restricted to generations and messages -- to those the payload
    names, all of them restorable (``load`` is marked beta; its one-time warning says
    nothing actionable to a cache user)."""
    with _quiet_beta():
        return load(data, allowed_objects=_allowed_in(data))


def generations_payload(generations: list[Generation]) -> dict[str, Any]:
    """LangChain's own serializer; only what restores to an equal list is stored."""
    data = dumpd(generations)
    if _load_generations(data) != generations:
        raise PayloadError("generations do not survive LangChain's dumpd/load round trip unchanged")
    return {"format": PAYLOAD_FORMAT, "v": PAYLOAD_VERSION, "generations": data}


def generations_from_payload(payload: Any) -> list[Generation]:
    if not isinstance(payload, dict) or payload.get("format") != PAYLOAD_FORMAT:
        raise PayloadError("entry was not written by the LangChain adapter")
    gens = _load_generations(payload["generations"])
    if not isinstance(gens, list) or not gens or not all(isinstance(g, Generation) for g in gens):
        raise PayloadError("entry does not hold a list of generations")
    return gens


class MultimodalSemanticCache(BaseCache):
    """A LangChain cache backed by :class:`~mlc_integrations.MLCEngine`.

    ``set_llm_cache(MultimodalSemanticCache())`` or ``ChatX(cache=MultimodalSemanticCache())``.
    The last human turn's text and images are the request; every other message (system,
    earlier turns, AI tool calls, tool results, their images) is context compared exactly;
    ``llm_string`` (model + parameters) is the scope, so an answer from one model or
    temperature is never returned for another.

    Args:
        engine: an engine to share (e.g. with the LlamaIndex wrapper). When given, it is
            configured already: pass no other engine options.
        persist_directory: embedded Chroma directory (default ``.mlc_cache`` in the
            working directory, like LangChain's ``SQLiteCache``); None for in-memory.
            Ignored when ``chroma_host`` or ``storage=StorageOptions(client=...)`` is given.
        namespace: tenant; entries of other namespaces are never returned.
        strict: raise typed :class:`~mlc_integrations.errors.MLCError` subclasses on bad
            input (naming the bad block) instead of counting a miss.
        **engine_options: any :class:`MLCEngine` option (thresholds, ``chroma_host``,
            ``image_encoder``, ``ttl``, ``max_entries``, ``storage=``, ...).
    """

    def __init__(
        self,
        engine: Optional[MLCEngine] = None,
        *,
        persist_directory: Optional[str] = DEFAULT_PERSIST_DIRECTORY,
        namespace: str = DEFAULT_NAMESPACE,
        strict: Optional[bool] = None,
        **engine_options: Any,
    ) -> None:
        if engine is None and persist_directory == DEFAULT_PERSIST_DIRECTORY and (
                engine_options.get("chroma_host") or getattr(engine_options.get("storage"), "client", None) is not None):
            persist_directory = None  # a server or the caller's client: no local directory
        if engine is not None and persist_directory != DEFAULT_PERSIST_DIRECTORY:
            engine_options["persist_directory"] = persist_directory  # reported as a conflicting option
        elif engine is None:
            engine_options["persist_directory"] = persist_directory
        engine, self._owns_engine = adapter_engine("MultimodalSemanticCache", engine, strict, engine_options)
        if not isinstance(namespace, str) or not namespace:
            raise ValueError("namespace must be a non-empty string")
        self.engine: MLCEngine = engine
        self.namespace = namespace
        # update() follows a lookup miss: it reuses the request keyed there
        self._pending: LRU[tuple[str, str], tuple[CacheRequest, str]] = LRU(_PENDING_MAX)
        self._counters = Counters(_COUNTERS)
        self._fail_open = FailOpen(self._counters, lambda: self.strict, log)
        self._tracking = LookupTracking()

    # ------------------------------------------------------------------ request
    @property
    def strict(self) -> bool:
        return bool(self.engine.strict)

    def _resolve_image(self, source: str, label: str) -> Any:
        """Decode once, here, so errors name the block; on bad data hand the engine the
        raw source, which it rejects the same way (a counted miss, nothing stored)."""
        if is_remote_url(source):
            return ImageRef(source)
        try:
            # the engine memoizes decoded pictures: history re-sent each turn decodes once
            return self.engine.decode_image(source, label)
        except InvalidRequestError as exc:
            self._fail_open.fail("image not keyable", exc, level=logging.DEBUG, outcome="the lookup will be a miss")
            return source

    def parse(self, prompt: str) -> ParsedPrompt:
        """How this cache reads a LangChain ``prompt`` (useful to see what is keyed)."""
        return PromptParser(self._resolve_image, strict=self.strict).parse(prompt)

    def request(self, prompt: str, llm_string: str) -> tuple[CacheRequest, str]:
        """The engine request for ``(prompt, llm_string)`` and the prompt kind."""
        parsed = self.parse(prompt)
        return request_from_turns(parsed.turns, scope=llm_string, namespace=self.namespace), parsed.kind

    def _request_or_none(self, prompt: str, llm_string: str, op: str) -> tuple[Optional[CacheRequest], str]:
        pending = self._pending.pop((prompt, llm_string))
        if pending is not None:
            return pending
        try:
            req, kind = self.request(prompt, llm_string)
        except Exception as exc:  # a parsing bug must never break the user's LLM call
            self._fail_open.fail("prompt cannot be keyed", exc, counter="bad_input", outcome=f"cache {op} skipped")
            return None, "invalid"
        self._counters.incr(f"{kind}_prompts")
        return req, kind

    # ------------------------------------------------------------------ hit details
    @property
    def last_hit(self) -> Optional[Hit]:
        """The hit of the latest lookup of this cache in the current thread or asyncio
        task, or in a task or thread started from it (``ainvoke``, ``batch`` look up
        there); None after a miss. Callers sharing one context: use :meth:`track`."""
        return self._tracking.last_hit

    @property
    def last_lookup(self) -> Optional[LookupRecord]:
        """Like :attr:`last_hit`, with the miss case: what was looked up and, on a miss,
        why (``reason``; ``refused``: the best candidate the verifier refused, with its
        scores; ``tiers``: each tier's outcome)."""
        return self._tracking.last_lookup

    def track(self) -> ContextManager[LookupTracker]:
        """Collect every lookup of this cache made inside the block, including those
        LangChain runs in child threads or tasks (``batch``, ``ainvoke``, ``abatch``)."""
        return self._tracking.track()

    def stats(self) -> dict[str, Any]:
        """The engine's stats (tiers, latency, errors, entries) plus this adapter's counts
        under ``"adapter"`` (as every adapter's): lookups seen, hits, misses, prompt kinds, bad input,
        responses not cached because they do not serialize, unreadable entries, and
        ``by_scope``: lookups, hits and misses per ``llm_string`` and namespace."""
        return self._counters.merged(self.engine.stats(), "adapter", type="MultimodalSemanticCache",
                                     namespace=self.namespace)

    # ------------------------------------------------------------------ BaseCache
    def _look_up(self, prompt: str, llm_string: str) -> tuple[LookupRecord, Optional[list[Generation]]]:
        """The blocking part of a lookup (parse, decode, search, restore), shared by
        :meth:`lookup` and :meth:`alookup`; the outcome is recorded by the caller."""
        req, kind = self._request_or_none(prompt, llm_string, "lookup")
        if req is None:
            return LookupRecord.of(None, kind, llm_string, namespace=self.namespace), None
        found, gens, note = lookup_and_restore(
            self.engine, self._fail_open, req, lambda hit: generations_from_payload(hit.payload),
            lambda failed: note_lookup(LookupRecord.of(req, kind, llm_string, failed), self._counters,
                                       self._tracking, log))
        if gens is None:
            self._pending.put((prompt, llm_string), (req, kind))
        return LookupRecord.of(req, kind, llm_string, found, note=note), gens

    def _finish(self, record: LookupRecord, gens: Optional[list[Generation]]) -> Optional[list[Generation]]:
        note_lookup(record, self._counters, self._tracking, log)
        return gens

    def lookup(self, prompt: str, llm_string: str) -> Optional[RETURN_VAL_TYPE]:
        """The stored generations for an equal-enough request, or None."""
        return self._finish(*self._look_up(prompt, llm_string))

    async def alookup(self, prompt: str, llm_string: str) -> Optional[RETURN_VAL_TYPE]:
        # parsing decodes images: off the event loop, like the engine's own work; an identical
        # request in flight is waited for on the event loop (inflight.py)
        return self._finish(*await coalesced_in_thread(self._look_up, prompt, llm_string))

    def update(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        """Store the generations LangChain got from the model for this request."""
        gens = list(return_val)
        if is_empty_reply(gens):
            self._counters.incr("empty_not_stored")
            req, _kind = self._request_or_none(prompt, llm_string, "update")
            release(self.engine, req)
            return
        payload = self._fail_open.attempt("generations cannot be stored", generations_payload, gens,
                                          counter="updates_skipped", error=PayloadError, level=logging.INFO,
                                          outcome="response not cached")
        req, _kind = self._request_or_none(prompt, llm_string, "update")
        if req is None:
            return
        if payload is None:  # identical requests waiting for this answer call the model themselves
            self.engine.release(req)
            return
        self.engine.update(req, payload, answer=answer_text(gens))

    async def aupdate(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        await asyncio.to_thread(self.update, prompt, llm_string, return_val)

    def clear(self, **kwargs: Any) -> None:
        """Delete every entry of this cache's namespace; ``clear(llm_string=...)`` only that model's."""
        self.engine.clear(scope=kwargs.get("llm_string"), namespace=self.namespace)
        self._pending.clear()

    async def aclear(self, **kwargs: Any) -> None:
        await asyncio.to_thread(self.clear, **kwargs)

    def close(self) -> None:
        """Close the engine if this cache built it (a shared engine is its owner's)."""
        if self._owns_engine:
            self.engine.close()

    def __repr__(self) -> str:
        return f"MultimodalSemanticCache(namespace={self.namespace!r}, storage={self.engine.storage_mode!r})"
