"""LangChain cache adapter: ``set_llm_cache(MultimodalSemanticCache())``.

LangChain calls a :class:`~langchain_core.caches.BaseCache` with two strings:

* ``prompt``: for a chat model, ``langchain_core.load.dumps`` of the message list
  (message ids already set to None by ``BaseChatModel._generate_with_cache``); for a
  plain LLM, the prompt text itself;
* ``llm_string``: the model's serialized configuration plus call parameters
  (model name, temperature, stop, bound tools, ...).

This module only translates: it parses ``prompt`` into framework-neutral
:class:`~mlc_integrations.conversation.Turn` objects (text, images, tool calls), lets
:func:`~mlc_integrations.conversation.request_from_turns` decide request vs. context,
uses ``llm_string`` as the scope, and (de)serializes generations with LangChain's own
serializer. Matching, storage and failure policy are the engine's.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import threading
from collections import OrderedDict
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

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

from .conversation import Part, Turn, request_from_turns
from .engine import MLCEngine
from .errors import InvalidRequestError, MLCError, PayloadError
from .images import ImageRef, is_remote_url
from .request import DEFAULT_NAMESPACE, CacheRequest, Hit

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

_ROLE_BY_CLASS = {
    "HumanMessage": "human",
    "AIMessage": "ai",
    "SystemMessage": "system",
    "ToolMessage": "tool",
    "FunctionMessage": "function",
}
# Message fields that never reach the model, are per-run noise, or restate another field
# (``tool_call_chunks`` is the streamed form of ``tool_calls``): not part of the key.
_NOT_KEYED_FIELDS = frozenset({
    "content", "id", "type", "role", "response_metadata", "usage_metadata", "artifact",
    "chunk_position", "tool_call_chunks",
})
_IMAGE_BLOCK_TYPES = ("image_url", "input_image", "image")
_PENDING_MAX = 8  # requests kept between a lookup miss and its update (they hold decoded images)


# ---------------------------------------------------------------------------- prompt parsing
class _ById:
    """Marker: an image referenced by a provider file id (keyed exactly, like any id)."""


BY_FILE_ID = _ById()


@dataclass
class ParsedPrompt:
    """``kind`` is ``"chat"`` (a serialized message list) or ``"text"`` (anything else)."""

    kind: str
    turns: list[Turn]


def _answer(generations: Sequence[Generation]) -> str:
    """The answer text a user reads from these generations (what the verifier compares)."""
    return "\n".join(g.text for g in generations)


def _load_generations(data: Any) -> Any:
    """LangChain's ``load`` restricted to generations and messages (``load`` is marked
    beta; its one-time warning says nothing actionable to a cache user)."""
    with _quiet_beta():
        return load(data, allowed_objects=_RESTORABLE)


def _unescape(value: Any) -> Any:
    """Undo ``dumps``' escaping of user dicts that contain an ``"lc"`` key."""
    if isinstance(value, dict):
        if len(value) == 1 and "__lc_escaped__" in value:
            return value["__lc_escaped__"]
        return {k: _unescape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unescape(v) for v in value]
    return value


def _is_serialized_message(obj: Any) -> bool:
    if not isinstance(obj, dict) or obj.get("lc") != 1 or obj.get("type") != "constructor":
        return False
    ident = obj.get("id")
    return (
        isinstance(ident, list) and bool(ident) and isinstance(ident[-1], str)
        and ident[-1].removesuffix("Chunk").endswith("Message") and isinstance(obj.get("kwargs"), dict)
    )


def _data_url(mime: Any, data: Any) -> Optional[str]:
    if not isinstance(data, str) or not data.strip():
        return None
    if data.startswith("data:"):
        return data
    return f"data:{mime if isinstance(mime, str) and mime else 'image/*'};base64,{data}"


def image_block_source(block: Mapping[str, Any]) -> Union[str, _ById, None]:
    """Where the image of a content block comes from: a data URL or remote URL string,
    :data:`BY_FILE_ID` for a provider file reference, or None when the block names no
    usable image.

    Forms: OpenAI ``image_url`` (dict with optional ``detail``, or a bare string) and
    ``input_image``; LangChain standard v1 ``{"type": "image", "base64"|"url"|"file_id"}``
    and v0 ``{"type": "image", "source_type": "base64"|"url"|"id"}``; Anthropic
    ``{"type": "image", "source": {"type": "base64"|"url"|"file"}}``.
    """
    btype = block.get("type")
    if btype == "image_url":
        iu = block.get("image_url")
        url = iu.get("url") if isinstance(iu, dict) else iu
        return url if isinstance(url, str) and url.strip() else None
    if btype == "input_image":
        if isinstance(block.get("image_url"), str):
            return block["image_url"]
        return BY_FILE_ID if block.get("file_id") else None
    source = block.get("source")
    if isinstance(source, dict):  # Anthropic
        stype = source.get("type")
        if stype == "base64":
            return _data_url(source.get("media_type"), source.get("data"))
        if stype == "url":
            return source.get("url") if isinstance(source.get("url"), str) else None
        return BY_FILE_ID if stype == "file" or source.get("file_id") else None
    stype = block.get("source_type")  # LangChain v0 standard block
    if stype == "base64":
        return _data_url(block.get("mime_type"), block.get("data"))
    if stype == "url":
        return block.get("url") if isinstance(block.get("url"), str) else None
    if stype == "id":
        return BY_FILE_ID
    if "base64" in block:  # LangChain v1 standard block
        return _data_url(block.get("mime_type"), block.get("base64"))
    if isinstance(block.get("url"), str):
        return block["url"]
    return BY_FILE_ID if block.get("file_id") else None


def _image_options(block: Mapping[str, Any]) -> dict[str, Any]:
    """Options that change what the model sees of an image (OpenAI ``detail``)."""
    iu = block.get("image_url")
    detail = iu.get("detail") if isinstance(iu, dict) else block.get("detail")
    return {"image_detail": detail} if detail not in (None, "auto") else {}


ImageResolver = Callable[[str, str], Any]


def _reference_only(source: str, label: str) -> Any:
    return ImageRef(source) if is_remote_url(source) else source


class PromptParser:
    """LangChain ``prompt`` string -> :class:`ParsedPrompt`.

    ``resolve_image(source, label)`` turns a data URL into the engine's image value
    (the cache decodes it here so that errors name the block); remote URLs become
    :class:`ImageRef` (never fetched). ``strict`` raises on blocks that cannot be keyed
    as what they claim to be; otherwise such blocks are keyed exactly as JSON.
    """

    def __init__(self, resolve_image: ImageResolver = _reference_only, *, strict: bool = False) -> None:
        self.resolve_image = resolve_image
        self.strict = strict

    def parse(self, prompt: str) -> ParsedPrompt:
        if not isinstance(prompt, str):
            raise InvalidRequestError(f"prompt must be str, got {type(prompt).__name__}")
        head = prompt.lstrip()[:16]
        if head.startswith("["):
            try:
                data = json.loads(prompt)
            except ValueError as exc:
                if self.strict and head.replace(" ", "").startswith('[{"lc"'):
                    raise InvalidRequestError(
                        f"prompt looks like a serialized LangChain message list but is not valid JSON ({exc})"
                    ) from exc
                data = None
            if isinstance(data, list) and data and all(isinstance(m, dict) and "lc" in m for m in data):
                return ParsedPrompt("chat", [self._turn(i, m) for i, m in enumerate(data)])
        # A plain LLM prompt, or anything that is not a serialized message list.
        return ParsedPrompt("text", [Turn("human", [Part.of_text(prompt)])])

    def _turn(self, i: int, obj: dict[str, Any]) -> Turn:
        if not _is_serialized_message(obj):
            if self.strict:
                raise InvalidRequestError(f"messages[{i}]: not a serialized LangChain message ({str(obj)[:120]})")
            return Turn("unknown", [Part.of_data(obj)])
        cls = obj["id"][-1].removesuffix("Chunk")
        kwargs = _unescape(obj["kwargs"])
        role = kwargs.get("role") if cls == "ChatMessage" else _ROLE_BY_CLASS.get(cls)
        if not isinstance(role, str):
            role = str(kwargs.get("type") or cls)
        extra: dict[str, Any] = {}
        for key, value in kwargs.items():
            if key in _NOT_KEYED_FIELDS or value is None or value == [] or value == {}:
                continue
            if key == "additional_kwargs" and isinstance(value, dict):
                value = {k: v for k, v in value.items() if v is not None}
                if not value:
                    continue
            extra[key] = value
        return Turn(role, self._parts(i, kwargs.get("content", "")), extra)

    def _parts(self, i: int, content: Any) -> list[Part]:
        if isinstance(content, str):
            return [Part.of_text(content)] if content else []
        if not isinstance(content, list):
            return [Part.of_data(content)]
        parts: list[Part] = []
        for j, block in enumerate(content):
            if isinstance(block, str):
                parts.append(Part.of_text(block))
                continue
            if not isinstance(block, dict):
                parts.append(Part.of_data(block))
                continue
            btype = block.get("type")
            if btype in ("text", "input_text") and isinstance(block.get("text"), str):
                parts.append(Part.of_text(block["text"]))
            elif btype in _IMAGE_BLOCK_TYPES:
                parts.extend(self._image_parts(f"messages[{i}].content[{j}] ({btype})", block))
            else:  # files, audio, tool_use, reasoning, ...: compared exactly
                parts.append(Part.of_data(block))
        return parts

    def _image_parts(self, label: str, block: dict[str, Any]) -> list[Part]:
        source = image_block_source(block)
        if isinstance(source, _ById):
            return [Part.of_data(block)]
        if source is None or not (source.startswith("data:") or is_remote_url(source)):
            if self.strict:
                shown = "no image data" if source is None else f"unsupported image source {source[:60]!r}"
                raise InvalidRequestError(
                    f"{label}: {shown}; expected a data: URL, an http(s) URL, or base64 data with a MIME type"
                )
            return [Part.of_data(block)]
        parts = [Part.of_image(self.resolve_image(source, label))]
        options = _image_options(block)
        if options:
            parts.append(Part.of_data(options))
        return parts


# ---------------------------------------------------------------------------- hit details
@dataclass(frozen=True)
class LookupRecord:
    """One lookup as the cache saw it: ``hit`` is None on a miss."""

    hit: Optional[Hit]
    kind: str  # "chat" | "text" | "invalid"
    text: str
    n_images: int
    llm_string: str


@dataclass
class LookupTracker:
    """Every lookup made inside :meth:`MultimodalSemanticCache.track`, from any thread or
    asyncio task LangChain spawned for it (they inherit the context)."""

    records: list[LookupRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _add(self, record: LookupRecord) -> None:
        with self._lock:
            self.records.append(record)

    @property
    def hits(self) -> list[Hit]:
        return [r.hit for r in self.records if r.hit is not None]

    @property
    def misses(self) -> int:
        return sum(1 for r in self.records if r.hit is None)

    @property
    def last_hit(self) -> Optional[Hit]:
        return self.records[-1].hit if self.records else None


# Module-level context variables (ContextVars must not be created per instance): the
# latest outcome per cache instance, and the active trackers.
_LAST: ContextVar[Mapping[int, Optional[LookupRecord]]] = ContextVar("mlc_langchain_last", default=MappingProxyType({}))
_TRACKERS: ContextVar[tuple[tuple[int, LookupTracker], ...]] = ContextVar("mlc_langchain_trackers", default=())
_instance_ids = itertools.count(1)


# ---------------------------------------------------------------------------- the cache
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
            Ignored when ``chroma_host`` or ``chroma_client`` is given.
        namespace: tenant; entries of other namespaces are never returned.
        strict: raise typed :class:`~mlc_integrations.errors.MLCError` subclasses on bad
            input (naming the bad block) instead of counting a miss.
        **engine_options: any :class:`MLCEngine` option (thresholds, ``chroma_host``,
            ``clip_model``, ``ttl``, ``max_entries``, ...).
    """

    def __init__(
        self,
        engine: Optional[MLCEngine] = None,
        *,
        persist_directory: Optional[str] = DEFAULT_PERSIST_DIRECTORY,
        namespace: str = DEFAULT_NAMESPACE,
        strict: bool = False,
        **engine_options: Any,
    ) -> None:
        if engine is not None:
            if engine_options or strict or persist_directory != DEFAULT_PERSIST_DIRECTORY:
                raise TypeError(
                    "MultimodalSemanticCache(engine=...) uses that engine's settings; configure "
                    "persist_directory, strict and other options on the MLCEngine instead"
                )
            self._owns_engine = False
        else:
            if engine_options.get("chroma_host") or engine_options.get("chroma_client") is not None:
                if persist_directory == DEFAULT_PERSIST_DIRECTORY:
                    persist_directory = None
            engine = MLCEngine(persist_directory=persist_directory, strict=strict, **engine_options)
            self._owns_engine = True
        if not isinstance(namespace, str) or not namespace:
            raise ValueError("namespace must be a non-empty string")
        self.engine: MLCEngine = engine
        self.namespace = namespace
        self._id = next(_instance_ids)
        self._pending: OrderedDict[tuple[str, str], tuple[CacheRequest, str]] = OrderedDict()
        self._pending_lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._counts_lock = threading.Lock()

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
            if self.strict:
                raise
            log.debug("image not keyable, the lookup will be a miss: %s", exc)
            return source

    def parse(self, prompt: str) -> ParsedPrompt:
        """How this cache reads a LangChain ``prompt`` (useful to see what is keyed)."""
        return PromptParser(self._resolve_image, strict=self.strict).parse(prompt)

    def request(self, prompt: str, llm_string: str) -> tuple[CacheRequest, str]:
        """The engine request for ``(prompt, llm_string)`` and the prompt kind."""
        parsed = self.parse(prompt)
        return request_from_turns(parsed.turns, scope=llm_string, namespace=self.namespace), parsed.kind

    def _request_or_none(self, prompt: str, llm_string: str, op: str) -> tuple[Optional[CacheRequest], str]:
        key = (prompt, llm_string)
        with self._pending_lock:
            pending = self._pending.pop(key, None)
        if pending is not None:
            return pending
        try:
            req, kind = self.request(prompt, llm_string)
        except MLCError as exc:
            self._count("bad_input")
            if self.strict:
                raise
            log.info("cache %s skipped: prompt cannot be keyed: %s", op, exc)
            return None, "invalid"
        except Exception as exc:  # a parsing bug must never break the user's LLM call
            self._count("bad_input")
            if self.strict:
                raise InvalidRequestError(f"prompt cannot be keyed: {type(exc).__name__}: {exc}") from exc
            log.warning("cache %s skipped: prompt cannot be keyed: %s: %s", op, type(exc).__name__, exc)
            return None, "invalid"
        self._count(f"{kind}_prompts")
        return req, kind

    def _remember(self, prompt: str, llm_string: str, req: CacheRequest, kind: str) -> None:
        with self._pending_lock:
            self._pending[(prompt, llm_string)] = (req, kind)
            while len(self._pending) > _PENDING_MAX:
                self._pending.popitem(last=False)

    # ------------------------------------------------------------------ (de)serialization
    def _serialize(self, generations: list[Generation]) -> Optional[dict[str, Any]]:
        """LangChain's own serializer; only what restores to an equal list is stored."""
        try:
            data = dumpd(generations)
            if _load_generations(data) != generations:
                raise PayloadError("generations do not survive LangChain's dumpd/load round trip unchanged")
        except Exception as exc:
            self._count("updates_skipped")
            if self.strict:
                if isinstance(exc, MLCError):
                    raise
                raise PayloadError(f"cannot serialize generations: {exc}") from exc
            log.info("response not cached: %s: %s", type(exc).__name__, exc)
            return None
        return {"format": PAYLOAD_FORMAT, "v": PAYLOAD_VERSION, "generations": data}

    def _restore(self, hit: Hit) -> Optional[list[Generation]]:
        try:
            payload = hit.payload
            if not isinstance(payload, dict) or payload.get("format") != PAYLOAD_FORMAT:
                raise PayloadError("entry was not written by the LangChain adapter")
            gens = _load_generations(payload["generations"])
            if not isinstance(gens, list) or not gens or not all(isinstance(g, Generation) for g in gens):
                raise PayloadError("entry does not hold a list of generations")
        except Exception as exc:
            self._count("unreadable_entries")
            log.warning("cache entry %s is unreadable, treating as a miss: %s", hit.entry_id[:12], exc)
            if self.strict:
                if isinstance(exc, MLCError):
                    raise
                raise PayloadError(f"cache entry {hit.entry_id[:12]} is unreadable: {exc}") from exc
            return None
        return gens

    # ------------------------------------------------------------------ hit details
    def _record(self, req: Optional[CacheRequest], kind: str, llm_string: str, hit: Optional[Hit]) -> None:
        record = LookupRecord(
            hit=hit,
            kind=kind,
            text=req.text if req is not None else "",
            n_images=len(req.images) if req is not None else 0,
            llm_string=llm_string,
        )
        last = dict(_LAST.get())
        last[self._id] = record
        _LAST.set(MappingProxyType(last))
        for owner, tracker in _TRACKERS.get():
            if owner == self._id:
                tracker._add(record)
        self._count("hits" if hit is not None else "misses")

    @property
    def last_hit(self) -> Optional[Hit]:
        """The hit of the latest lookup made by this cache in the current thread or asyncio
        task (None after a miss). ``ainvoke``/``abatch``/``batch`` look up in child tasks
        or threads: use :meth:`track` there."""
        record = _LAST.get().get(self._id)
        return record.hit if record is not None else None

    @property
    def last_lookup(self) -> Optional[LookupRecord]:
        """Like :attr:`last_hit`, with the miss case and what was looked up."""
        return _LAST.get().get(self._id)

    @contextmanager
    def track(self) -> Iterator[LookupTracker]:
        """Collect every lookup of this cache made inside the block, including those
        LangChain runs in child threads or tasks (``batch``, ``ainvoke``, ``abatch``)."""
        tracker = LookupTracker()
        token = _TRACKERS.set(_TRACKERS.get() + ((self._id, tracker),))
        try:
            yield tracker
        finally:
            _TRACKERS.reset(token)

    def _count(self, name: str) -> None:
        with self._counts_lock:
            self._counts[name] = self._counts.get(name, 0) + 1

    def stats(self) -> dict[str, Any]:
        """The engine's stats (tiers, latency, errors, entries) plus this adapter's counts
        under ``"langchain"``: lookups seen, hits, misses, prompt kinds, bad input,
        responses not cached because they do not serialize, unreadable entries."""
        out = self.engine.stats()
        with self._counts_lock:
            counts = dict(self._counts)
        hits, misses = counts.get("hits", 0), counts.get("misses", 0)
        out["langchain"] = {
            "lookups": hits + misses,
            "hits": hits,
            "misses": misses,
            "chat_prompts": counts.get("chat_prompts", 0),
            "text_prompts": counts.get("text_prompts", 0),
            "bad_input": counts.get("bad_input", 0),
            "updates_skipped": counts.get("updates_skipped", 0),
            "unreadable_entries": counts.get("unreadable_entries", 0),
            "namespace": self.namespace,
        }
        return out

    # ------------------------------------------------------------------ BaseCache
    def lookup(self, prompt: str, llm_string: str) -> Optional[RETURN_VAL_TYPE]:
        """The stored generations for an equal-enough request, or None."""
        req, kind = self._request_or_none(prompt, llm_string, "lookup")
        if req is None:
            self._record(None, kind, llm_string, None)
            return None
        hit = self.engine.lookup(req)
        return self._finish_lookup(prompt, llm_string, req, kind, hit)

    async def alookup(self, prompt: str, llm_string: str) -> Optional[RETURN_VAL_TYPE]:
        # Parsing decodes images: keep it off the event loop, like the engine's own work.
        req, kind = await asyncio.to_thread(self._request_or_none, prompt, llm_string, "lookup")
        if req is None:
            self._record(None, kind, llm_string, None)
            return None
        hit = await self.engine.alookup(req)
        return self._finish_lookup(prompt, llm_string, req, kind, hit)

    def _finish_lookup(
        self, prompt: str, llm_string: str, req: CacheRequest, kind: str, hit: Optional[Hit]
    ) -> Optional[list[Generation]]:
        gens = self._restore(hit) if hit is not None else None
        if gens is None:
            if hit is not None:
                self._drop_unreadable(hit.entry_id)
                hit = None
            self._remember(prompt, llm_string, req, kind)  # update() follows a miss: reuse the keyed request
        self._record(req, kind, llm_string, hit)
        return gens

    def _drop_unreadable(self, entry_id: str) -> None:
        try:
            self.engine.delete(entry_id)
        except Exception as exc:  # fail-open: the next lookup tries again
            if self.strict:
                raise
            log.warning("could not delete unreadable entry %s: %s", entry_id[:12], exc)

    def update(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        """Store the generations LangChain got from the model for this request."""
        gens = list(return_val)
        if not gens:
            return
        payload = self._serialize(gens)
        if payload is None:
            return
        req, _kind = self._request_or_none(prompt, llm_string, "update")
        if req is not None:
            self.engine.update(req, payload, answer=_answer(gens))

    async def aupdate(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        gens = list(return_val)
        if not gens:
            return
        payload = self._serialize(gens)
        if payload is None:
            return
        req, _kind = await asyncio.to_thread(self._request_or_none, prompt, llm_string, "update")
        if req is not None:
            await self.engine.aupdate(req, payload, answer=_answer(gens))

    def clear(self, **kwargs: Any) -> None:
        """Delete this namespace's entries; ``clear(llm_string=...)`` only that model's."""
        self.engine.clear(scope=kwargs.get("llm_string"), namespace=self.namespace)
        with self._pending_lock:
            self._pending.clear()

    async def aclear(self, **kwargs: Any) -> None:
        await self.engine.aclear(scope=kwargs.get("llm_string"), namespace=self.namespace)
        with self._pending_lock:
            self._pending.clear()

    def close(self) -> None:
        """Flush the engine if this cache created it (a shared engine is its owner's)."""
        if self._owns_engine:
            self.engine.close()

    def __repr__(self) -> str:
        return f"MultimodalSemanticCache(namespace={self.namespace!r}, storage={self.engine.storage_mode!r})"
