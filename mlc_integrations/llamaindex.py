"""LlamaIndex adapter: :class:`CachedMultiModalLLM`, a caching wrapper around any LlamaIndex LLM.

The wrapper is itself a ``llama_index.core.llms.LLM`` (the ``StructuredLLM``
pattern: it holds ``llm``, delegates ``metadata`` and decorates its endpoints with
``llm_chat_callback`` / ``llm_completion_callback``, so callback and instrumentation
events fire for cached calls too). It is a thin adapter: it turns ``ChatMessage``
blocks into framework-neutral :class:`~mlc_integrations.conversation.Turn` s, lets
:func:`~mlc_integrations.conversation.request_from_turns` decide request vs. context,
and (de)serializes LlamaIndex responses as plain JSON. Matching, storage and failure
policy are the engine's.

What is in the key, besides the conversation:

* the scope: the inner LLM's class and its serialized settings (model, temperature,
  ...), without callback managers, clients or secrets;
* which endpoint family answered (``chat`` or ``complete``) and every keyword argument
  that reaches the inner LLM -- for tool calling that is the tool set (names,
  descriptions, parameter schemas) and the tool choice, so a response is never reused
  for a different tool set.

Wrapping a ``FunctionCallingLLM`` gives a :class:`CachedFunctionCallingLLM` (a
subclass of both), so agents that require function calling keep working.
"""

from __future__ import annotations

import base64
import contextvars
import dataclasses
import enum
import hashlib
import io
import json
import logging
import math
import re
import sys
import threading
from pathlib import Path
from typing import Any, AsyncGenerator, Callable, Generator, List, Optional, Sequence, Union

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    ImageBlock,
    LLMMetadata,
    MessageRole,
    TextBlock,
)
from llama_index.core.bridge.pydantic import BaseModel, Field, PrivateAttr, SerializeAsAny
from llama_index.core.callbacks import CallbackManager
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import LLM, ToolSelection
from llama_index.core.tools.types import BaseTool
from llama_index.core.utils import resolve_binary

from .conversation import Part, Turn, request_from_turns
from .engine import MLCEngine
from .errors import ImageDecodeError, InvalidRequestError, MLCError, PayloadError
from .images import ImageRef
from .request import DEFAULT_NAMESPACE, CacheRequest, Hit

log = logging.getLogger(__name__)

PAYLOAD_VERSION = 1

# Inner-LLM fields that never decide the answer, or must never be written anywhere.
_TRANSPORT_FIELDS = frozenset({
    "callback_manager", "rate_limiter", "http_client", "async_http_client", "timeout",
    "max_retries", "reuse_client", "session", "async_session", "client", "async_client",
})
_SECRET_WORDS = frozenset({
    "key", "secret", "token", "password", "passwd", "credential", "credentials",
    "auth", "authorization", "header", "headers", "cookie", "cookies", "bearer",
})


# ---------------------------------------------------------------------- JSON helpers
def _is_secret_field(name: str, value: Any) -> bool:
    from pydantic import SecretBytes, SecretStr

    if isinstance(value, (SecretStr, SecretBytes)):
        return True
    words = [w for w in re.split(r"[_\-\s]+", name.lower()) if w]
    return any(w in _SECRET_WORDS for w in words) or "apikey" in name.lower().replace("_", "")


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"


def _tool_spec(tool: Any) -> dict[str, Any]:
    """What an LLM sees of a LlamaIndex tool: name, description, parameter schema."""
    md = tool.metadata
    return {"tool": md.name, "description": md.description, "parameters": md.get_parameters_dict()}


def _key_json(value: Any, *, lenient: bool = False, depth: int = 0) -> Any:
    """A deterministic JSON value for keying. Unknown objects raise ``TypeError``
    (then the call bypasses the cache), or with ``lenient`` become their type name."""
    if depth > 48:
        raise TypeError("value nested too deeply to key")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, enum.Enum):
        return _key_json(value.value, lenient=lenient, depth=depth + 1)
    if isinstance(value, (bytes, bytearray, memoryview)):
        # Never raw bytes: the engine would read them as an image in the context.
        return {"bytes_sha256": hashlib.sha256(bytes(value)).hexdigest()}
    if isinstance(value, dict):
        return {str(k): _key_json(v, lenient=lenient, depth=depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_key_json(v, lenient=lenient, depth=depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [_key_json(v, lenient=lenient, depth=depth + 1) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, BaseTool):
        return _key_json(_tool_spec(value), lenient=lenient, depth=depth + 1)
    if isinstance(value, type) and issubclass(value, BaseModel):
        return {"schema": _key_json(value.model_json_schema(), lenient=lenient, depth=depth + 1)}
    if isinstance(value, BaseModel):
        try:
            dumped = value.model_dump(mode="json")
        except Exception as exc:
            if lenient:
                return {"type": _qualname(type(value))}
            raise TypeError(f"cannot serialize {type(value).__name__}: {exc}") from exc
        return _key_json(dumped, lenient=lenient, depth=depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _key_json(dataclasses.asdict(value), lenient=lenient, depth=depth + 1)
    if callable(value):
        return {"callable": _qualname(value)}
    if lenient:
        return {"type": _qualname(type(value))}
    raise TypeError(f"cannot key a value of type {type(value).__name__}")


def _encode_payload(value: Any, depth: int = 0) -> Any:
    """Plain JSON for a response's extra fields; pydantic objects keep their class name
    so that tool-call objects come back as the same type (see :func:`_decode_payload`)."""
    if depth > 48:
        raise TypeError("response value nested too deeply")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError("non-finite float in response")
        return value
    if isinstance(value, enum.Enum):
        return _encode_payload(value.value, depth + 1)
    if isinstance(value, (bytes, bytearray)):
        return {"__bytes__": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dict):
        return {str(k): _encode_payload(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode_payload(v, depth + 1) for v in value]
    if isinstance(value, BaseModel):
        cls = type(value)
        return {"__pydantic__": f"{cls.__module__}:{cls.__qualname__}", "data": value.model_dump(mode="json")}
    raise TypeError(f"cannot store a value of type {type(value).__name__} in the cache")


def _loaded_model_class(path: str) -> Optional[type]:
    """The pydantic class named ``module:qualname`` if that module is already imported.
    Nothing is ever imported because a cache entry names it."""
    module_name, _, qual = path.partition(":")
    obj: Any = sys.modules.get(module_name)
    if obj is None:
        return None
    for part in qual.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if isinstance(obj, type) and issubclass(obj, BaseModel) else None


def _decode_payload(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode_payload(v) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"__bytes__"}:
        return base64.b64decode(value["__bytes__"])
    if set(value) == {"__pydantic__", "data"}:
        cls = _loaded_model_class(str(value["__pydantic__"]))
        if cls is not None:
            try:
                return cls.model_validate(value["data"])
            except Exception:  # a changed class: the plain data is still useful
                log.debug("stored %s no longer validates; returning its data", value["__pydantic__"])
        return value["data"]
    return {k: _decode_payload(v) for k, v in value.items()}


def _message_to_json(message: ChatMessage) -> dict[str, Any]:
    return {
        "role": message.role.value if isinstance(message.role, MessageRole) else str(message.role),
        "blocks": [b.model_dump(mode="json") for b in message.blocks],
        "additional_kwargs": _encode_payload(message.additional_kwargs),
    }


def _message_from_json(data: dict[str, Any]) -> ChatMessage:
    return ChatMessage.model_validate({
        "role": data["role"],
        "blocks": data.get("blocks", []),
        "additional_kwargs": _decode_payload(data.get("additional_kwargs", {})),
    })


def _payload_answer(payload: dict[str, Any]) -> str:
    """The answer text of a stored chat or completion payload (what the verifier compares)."""
    if payload.get("kind") == "completion":
        return str(payload.get("text") or "")
    blocks = (payload.get("message") or {}).get("blocks") or []
    return "\n".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("block_type") == "text")


def _split_deltas(text: str) -> list[str]:
    """Pieces (a word and the whitespace before it) that join back to ``text`` exactly."""
    if not text:
        return [""]
    return [p for p in re.split(r"(?<=\S)(?=\s)", text) if p] or [text]


# ---------------------------------------------------------------------- block conversion
def _image_block_input(block: ImageBlock) -> Any:
    """An image input the engine decodes; remote URLs are keyed by string, never fetched."""
    if block.image is not None:
        data = block.image
        if isinstance(data, io.IOBase):
            data.seek(0)
            data = data.read()
        if not isinstance(data, (bytes, bytearray)):
            raise ImageDecodeError(f"ImageBlock.image has unsupported type {type(data).__name__}")
        return resolve_binary(raw_bytes=bytes(data)).read()  # the block stores base64
    if block.path is not None:
        return Path(block.path)
    if block.url is not None:
        url = str(block.url)
        if url.startswith(("data:", "file:")):
            return url
        return ImageRef(url)
    raise ImageDecodeError("ImageBlock carries no image, path or url")


def _image_document_input(doc: Any) -> Any:
    """The same for a legacy ``ImageDocument`` / ``ImageNode``."""
    b64 = getattr(doc, "image", None)
    if b64:
        return resolve_binary(raw_bytes=b64.encode("ascii") if isinstance(b64, str) else b64).read()
    path = getattr(doc, "image_path", None)
    if path:
        return Path(path)
    url = getattr(doc, "image_url", None)
    if url:
        url = str(url)
        return url if url.startswith(("data:", "file:")) else ImageRef(url)
    raise ImageDecodeError(f"{type(doc).__name__} carries no image, image_path or image_url")


def _image_document_block(doc: Any) -> ImageBlock:
    """A legacy image document as the ``ImageBlock`` that modern LLMs take in ``chat``."""
    mimetype = getattr(doc, "image_mimetype", None)
    b64 = getattr(doc, "image", None)
    if b64:
        return ImageBlock(image=b64.encode("ascii") if isinstance(b64, str) else b64, image_mimetype=mimetype)
    if getattr(doc, "image_path", None):
        return ImageBlock(path=Path(doc.image_path), image_mimetype=mimetype)
    if getattr(doc, "image_url", None):
        return ImageBlock(url=str(doc.image_url), image_mimetype=mimetype)
    raise ImageDecodeError(f"{type(doc).__name__} carries no image, image_path or image_url")


def message_to_turn(message: ChatMessage) -> Turn:
    """One ``ChatMessage`` as a framework-neutral :class:`Turn`.

    Text blocks are text, image blocks are images (keyed by pixels, or by URL string
    for remote URLs), every other block (tool calls, audio, documents, thinking) is
    compared exactly as JSON; ``additional_kwargs`` (tool calls, tool call id, name) too.
    """
    parts: list[Part] = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            parts.append(Part.of_text(block.text))
        elif isinstance(block, ImageBlock):
            parts.append(Part.of_image(_image_block_input(block)))
        else:
            parts.append(Part.of_data(_key_json(block)))
    role = message.role.value if isinstance(message.role, MessageRole) else str(message.role)
    extra = _key_json(message.additional_kwargs) if message.additional_kwargs else {}
    details = [b.detail for b in message.blocks if isinstance(b, ImageBlock)]
    if any(d is not None for d in details):  # "low"/"high" resolution changes what the model sees
        extra = dict(extra, image_detail=details)
    return Turn(role=role, parts=parts, extra=extra)


def llm_scope(llm: Any) -> str:
    """Scope string of an inner LLM: its class plus its serialized settings.

    Deterministic across processes; leaves out callback managers, clients, timeouts
    and anything that looks like a secret (api keys, tokens, headers).
    """
    settings: dict[str, Any] = {}
    fields = getattr(type(llm), "model_fields", {})
    for name in sorted(fields):
        if name in _TRANSPORT_FIELDS:
            continue
        try:
            value = getattr(llm, name)
        except Exception:
            continue
        if _is_secret_field(name, value):
            continue
        settings[name] = _key_json(value, lenient=True)
    cls = type(llm)
    body = json.dumps({"class": f"{cls.__module__}.{cls.__qualname__}", "settings": settings},
                      sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "llamaindex:" + body


# ---------------------------------------------------------------------- the wrapper
class CachedMultiModalLLM(LLM):
    """Any LlamaIndex LLM, with multi-level response caching in front of it.

    ``CachedMultiModalLLM(llm, engine=None, *, namespace="default", strict=False,
    **engine_options)``: give an :class:`~mlc_integrations.MLCEngine` to share one
    cache between wrappers, or engine options (``persist_directory=...``,
    ``l1_threshold=...``, ...) to build one; the default engine is in memory.

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
    _last_hit: contextvars.ContextVar = PrivateAttr()
    _counts: dict = PrivateAttr(default_factory=dict)
    _counts_lock: Any = PrivateAttr(default_factory=threading.Lock)

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
        strict: bool = False,
        callback_manager: Optional[CallbackManager] = None,
        **engine_options: Any,
    ) -> None:
        if not isinstance(llm, LLM):
            raise TypeError(
                f"llm must be a llama_index.core.llms.LLM, got {type(llm).__name__}; legacy "
                "MultiModalLLM classes are not supported (use their LLM successor with ImageBlocks)"
            )
        if engine is not None and engine_options:
            raise ValueError(f"give either engine= or engine options, not both (got {sorted(engine_options)})")
        if engine is None:
            engine = MLCEngine(strict=strict, **engine_options)
        fields: dict[str, Any] = {}
        if callback_manager is not None:
            fields["callback_manager"] = callback_manager
        super().__init__(
            llm=llm,
            namespace=namespace,
            strict=bool(strict or engine.strict),
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
        self._last_hit = contextvars.ContextVar(f"mlc_last_hit_{id(self)}", default=None)
        self._counts = {"hits": 0, "misses": 0, "bypassed": 0, "streams_finished": 0, "streams_unfinished": 0,
                        "unreadable_entries": 0, "unstorable_responses": 0}

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
        """The :class:`Hit` that served the latest call in this thread/task, or None on a miss."""
        return self._last_hit.get()

    def stats(self) -> dict[str, Any]:
        """The engine's statistics plus this adapter's counters under ``"llamaindex"``."""
        out = self._engine.stats()
        with self._counts_lock:
            out["llamaindex"] = dict(self._counts)
        return out

    def clear_cache(self) -> None:
        """Delete every entry of this inner LLM's scope in this namespace."""
        self._engine.clear(scope=self.scope, namespace=self.namespace)

    def to_payload(self) -> dict[str, Any]:
        payload = dict(self.llm.to_payload())
        payload["cached_by"] = self.class_name()
        return payload

    # ------------------------------------------------------------------ keying
    def _count(self, name: str) -> None:
        with self._counts_lock:
            self._counts[name] = self._counts.get(name, 0) + 1

    def _request(self, turns_fn: Callable[[], list[Turn]], api: str, kwargs: dict[str, Any]) -> Optional[CacheRequest]:
        """The cache request for a call, or None when it cannot be keyed (bypass, fail-open)."""
        try:
            turns = turns_fn()
            extra: dict[str, Any] = {"api": api}
            if kwargs:
                extra["kwargs"] = _key_json(kwargs)
            return request_from_turns(turns, scope=self.scope, namespace=self.namespace, extra_context=extra)
        except Exception as exc:
            self._count("bypassed")
            if self.strict:
                if isinstance(exc, MLCError):
                    raise
                raise InvalidRequestError(f"cannot key this LlamaIndex call: {type(exc).__name__}: {exc}") from exc
            log.info("llamaindex call not cached (cannot key it): %s: %s", type(exc).__name__, exc)
            return None

    def _chat_request(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> Optional[CacheRequest]:
        return self._request(lambda: [message_to_turn(m) for m in messages], "chat", kwargs)

    def _complete_request(self, prompt: str, formatted: bool, image_documents: Optional[Sequence[Any]],
                          kwargs: dict[str, Any]) -> Optional[CacheRequest]:
        def turns() -> list[Turn]:
            parts = [Part.of_text(prompt)]
            parts += [Part.of_image(_image_document_input(d)) for d in image_documents or []]
            return [Turn(role="user", parts=parts)]

        key_kwargs = dict(kwargs)
        if formatted:
            key_kwargs["formatted"] = True
        return self._request(turns, "complete", key_kwargs)

    # ------------------------------------------------------------------ lookup / store
    def _reuse(self, request: Optional[CacheRequest], hit: Optional[Hit], build: Callable[[Any], Any]) -> Any:
        """Rebuild a response from a hit; None (a miss) when there is none or it is unreadable."""
        if request is None:
            self._last_hit.set(None)
            return None
        if hit is not None:
            try:
                response = build(hit.payload)
            except Exception as exc:
                log.warning("cache entry %s is not a readable LlamaIndex response (%s); removing it",
                            hit.entry_id[:12], exc)
                self._count("unreadable_entries")
                try:
                    self._engine.delete(hit.entry_id)
                except Exception as del_exc:  # fail-open: the call goes on
                    log.warning("could not delete unreadable entry: %s", del_exc)
                hit = None
            else:
                self._last_hit.set(hit)
                self._count("hits")
                return response
        self._last_hit.set(None)
        self._count("misses")
        return None

    def _lookup(self, request: Optional[CacheRequest], build: Callable[[Any], Any]) -> Any:
        return self._reuse(request, self._engine.lookup(request) if request is not None else None, build)

    async def _alookup(self, request: Optional[CacheRequest], build: Callable[[Any], Any]) -> Any:
        hit = await self._engine.alookup(request) if request is not None else None
        return self._reuse(request, hit, build)

    def _payload(self, make: Callable[[], dict[str, Any]]) -> Optional[dict[str, Any]]:
        try:
            return make()
        except Exception as exc:
            self._count("unstorable_responses")
            if self.strict:
                raise PayloadError(f"response cannot be stored as JSON: {exc}") from exc
            log.info("llamaindex response not cached (not JSON-serializable): %s", exc)
            return None

    def _store(self, request: Optional[CacheRequest], make: Callable[[], dict[str, Any]]) -> None:
        if request is None:
            return
        payload = self._payload(make)
        if payload is not None:
            self._engine.update(request, payload, answer=_payload_answer(payload))

    async def _astore(self, request: Optional[CacheRequest], make: Callable[[], dict[str, Any]]) -> None:
        if request is None:
            return
        payload = self._payload(make)
        if payload is not None:
            await self._engine.aupdate(request, payload, answer=_payload_answer(payload))

    # ------------------------------------------------------------------ (de)serialization
    @staticmethod
    def _chat_payload(response: ChatResponse) -> dict[str, Any]:
        return {
            "kind": "chat",
            "v": PAYLOAD_VERSION,
            "message": _message_to_json(response.message),
            "additional_kwargs": _encode_payload(response.additional_kwargs),
        }

    @staticmethod
    def _chat_from_payload(payload: Any) -> ChatResponse:
        if not isinstance(payload, dict) or payload.get("kind") != "chat":
            raise ValueError("not a stored chat response")
        message = _message_from_json(payload["message"])
        return ChatResponse(message=message, additional_kwargs=_decode_payload(payload.get("additional_kwargs", {})))

    @staticmethod
    def _completion_payload(response: CompletionResponse) -> dict[str, Any]:
        return {
            "kind": "completion",
            "v": PAYLOAD_VERSION,
            "text": response.text,
            "additional_kwargs": _encode_payload(response.additional_kwargs),
        }

    @staticmethod
    def _completion_from_payload(payload: Any) -> CompletionResponse:
        if not isinstance(payload, dict) or payload.get("kind") != "completion":
            raise ValueError("not a stored completion")
        return CompletionResponse(text=str(payload["text"]),
                                  additional_kwargs=_decode_payload(payload.get("additional_kwargs", {})))

    @staticmethod
    def _replay_chat(response: ChatResponse) -> list[ChatResponse]:
        """A cached chat response as stream chunks: deltas join to the text, the last
        chunk carries the whole message (tool calls, additional kwargs)."""
        text = response.message.content or ""
        pieces = _split_deltas(text)
        chunks: list[ChatResponse] = []
        so_far = ""
        for piece in pieces[:-1]:
            so_far += piece
            chunks.append(ChatResponse(message=ChatMessage(role=response.message.role, content=so_far), delta=piece))
        chunks.append(ChatResponse(message=response.message, delta=pieces[-1],
                                   additional_kwargs=response.additional_kwargs))
        return chunks

    @staticmethod
    def _replay_completion(response: CompletionResponse) -> list[CompletionResponse]:
        pieces = _split_deltas(response.text)
        chunks: list[CompletionResponse] = []
        so_far = ""
        for piece in pieces[:-1]:
            so_far += piece
            chunks.append(CompletionResponse(text=so_far, delta=piece))
        chunks.append(CompletionResponse(text=response.text, delta=pieces[-1],
                                         additional_kwargs=response.additional_kwargs))
        return chunks

    @staticmethod
    def _final_chat(last: ChatResponse, deltas: list[str]) -> ChatResponse:
        """The finished response of a stream: LlamaIndex chunks carry the text so far;
        a provider that puts only the delta in the message gets the joined deltas."""
        joined = "".join(deltas)
        content = last.message.content or ""
        if len(joined) > len(content) and all(isinstance(b, TextBlock) for b in last.message.blocks):
            message = last.message.model_copy(update={"blocks": [TextBlock(text=joined)]})
            return ChatResponse(message=message, additional_kwargs=last.additional_kwargs)
        return last

    @staticmethod
    def _final_completion(last: CompletionResponse, deltas: list[str]) -> CompletionResponse:
        joined = "".join(deltas)
        if len(joined) > len(last.text):
            return CompletionResponse(text=joined, additional_kwargs=last.additional_kwargs)
        return last

    # ------------------------------------------------------------------ stream plumbing
    def _store_stream(self, request: Optional[CacheRequest], inner: Any, final: Callable[[Any, list[str]], Any],
                      to_payload: Callable[[Any], dict[str, Any]]) -> Generator[Any, None, None]:
        """Pass the inner stream through unchanged; store only once it has finished."""
        last = None
        deltas: list[str] = []
        finished = False
        try:
            for chunk in inner:
                last = chunk
                deltas.append(chunk.delta or "")
                yield chunk
            finished = True
        finally:
            if not finished and request is not None:
                self._count("streams_unfinished")
        if last is not None:
            self._count("streams_finished")
            self._store(request, lambda: to_payload(final(last, deltas)))

    async def _astore_stream(self, request: Optional[CacheRequest], inner: Any, final: Callable[[Any, list[str]], Any],
                             to_payload: Callable[[Any], dict[str, Any]]) -> AsyncGenerator[Any, None]:
        last = None
        deltas: list[str] = []
        finished = False
        try:
            async for chunk in inner:
                last = chunk
                deltas.append(chunk.delta or "")
                yield chunk
            finished = True
        finally:
            if not finished and request is not None:
                self._count("streams_unfinished")
        if last is not None:
            self._count("streams_finished")
            await self._astore(request, lambda: to_payload(final(last, deltas)))

    @staticmethod
    def _iterate(items: list[Any]) -> Generator[Any, None, None]:
        yield from items

    @staticmethod
    async def _aiterate(items: list[Any]) -> AsyncGenerator[Any, None]:
        for item in items:
            yield item

    # ------------------------------------------------------------------ legacy image_documents
    @staticmethod
    def _legacy_args(formatted: Any, image_documents: Optional[Sequence[Any]]) -> tuple[bool, Optional[list[Any]]]:
        # MultiModalLLM.complete(prompt, image_documents) passes the documents second.
        if not isinstance(formatted, bool) and isinstance(formatted, (list, tuple)):
            return False, list(formatted) + list(image_documents or [])
        return bool(formatted), list(image_documents) if image_documents else None

    @staticmethod
    def _images_message(prompt: str, image_documents: Sequence[Any]) -> list[ChatMessage]:
        blocks: list[Any] = [TextBlock(text=prompt)] + [_image_document_block(d) for d in image_documents]
        return [ChatMessage(role=MessageRole.USER, blocks=blocks)]

    @staticmethod
    def _as_completion(response: ChatResponse) -> CompletionResponse:
        return CompletionResponse(text=response.message.content or "", additional_kwargs=response.additional_kwargs,
                                  raw=response.raw, delta=response.delta)

    # ------------------------------------------------------------------ chat
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        messages = list(messages)
        request = self._chat_request(messages, kwargs)
        cached = self._lookup(request, self._chat_from_payload)
        if cached is not None:
            return cached
        response = self.llm.chat(messages, **kwargs)
        self._store(request, lambda: self._chat_payload(response))
        return response

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        messages = list(messages)
        request = self._chat_request(messages, kwargs)
        cached = await self._alookup(request, self._chat_from_payload)
        if cached is not None:
            return cached
        response = await self.llm.achat(messages, **kwargs)
        await self._astore(request, lambda: self._chat_payload(response))
        return response

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        messages = list(messages)
        request = self._chat_request(messages, kwargs)
        cached = self._lookup(request, self._chat_from_payload)
        if cached is not None:
            return self._iterate(self._replay_chat(cached))
        return self._store_stream(request, self.llm.stream_chat(messages, **kwargs), self._final_chat,
                                  self._chat_payload)

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        messages = list(messages)
        request = self._chat_request(messages, kwargs)
        cached = await self._alookup(request, self._chat_from_payload)
        if cached is not None:
            return self._aiterate(self._replay_chat(cached))
        inner = await self.llm.astream_chat(messages, **kwargs)
        return self._astore_stream(request, inner, self._final_chat, self._chat_payload)

    # ------------------------------------------------------------------ complete
    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, image_documents: Optional[Sequence[Any]] = None,
                 **kwargs: Any) -> CompletionResponse:
        """Completion; ``image_documents`` (legacy ``ImageDocument``/``ImageNode``) are
        sent to the inner LLM as ``ImageBlock`` s in one user message."""
        formatted, docs = self._legacy_args(formatted, image_documents)
        request = self._complete_request(prompt, formatted, docs, kwargs)
        cached = self._lookup(request, self._completion_from_payload)
        if cached is not None:
            return cached
        if docs:
            response = self._as_completion(self.llm.chat(self._images_message(prompt, docs), **kwargs))
        else:
            response = self.llm.complete(prompt, formatted=formatted, **kwargs)
        self._store(request, lambda: self._completion_payload(response))
        return response

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, image_documents: Optional[Sequence[Any]] = None,
                        **kwargs: Any) -> CompletionResponse:
        formatted, docs = self._legacy_args(formatted, image_documents)
        request = self._complete_request(prompt, formatted, docs, kwargs)
        cached = await self._alookup(request, self._completion_from_payload)
        if cached is not None:
            return cached
        if docs:
            response = self._as_completion(await self.llm.achat(self._images_message(prompt, docs), **kwargs))
        else:
            response = await self.llm.acomplete(prompt, formatted=formatted, **kwargs)
        await self._astore(request, lambda: self._completion_payload(response))
        return response

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False,
                        image_documents: Optional[Sequence[Any]] = None, **kwargs: Any) -> CompletionResponseGen:
        formatted, docs = self._legacy_args(formatted, image_documents)
        request = self._complete_request(prompt, formatted, docs, kwargs)
        cached = self._lookup(request, self._completion_from_payload)
        if cached is not None:
            return self._iterate(self._replay_completion(cached))
        if docs:
            inner: Any = (self._as_completion(c) for c in self.llm.stream_chat(self._images_message(prompt, docs), **kwargs))
        else:
            inner = self.llm.stream_complete(prompt, formatted=formatted, **kwargs)
        return self._store_stream(request, inner, self._final_completion, self._completion_payload)

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False,
                               image_documents: Optional[Sequence[Any]] = None,
                               **kwargs: Any) -> CompletionResponseAsyncGen:
        formatted, docs = self._legacy_args(formatted, image_documents)
        request = self._complete_request(prompt, formatted, docs, kwargs)
        cached = await self._alookup(request, self._completion_from_payload)
        if cached is not None:
            return self._aiterate(self._replay_completion(cached))
        if docs:
            chat_stream = await self.llm.astream_chat(self._images_message(prompt, docs), **kwargs)

            async def as_completions() -> AsyncGenerator[CompletionResponse, None]:
                async for c in chat_stream:
                    yield self._as_completion(c)

            inner: Any = as_completions()
        else:
            inner = await self.llm.astream_complete(prompt, formatted=formatted, **kwargs)
        return self._astore_stream(request, inner, self._final_completion, self._completion_payload)


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


__all__ = ["CachedMultiModalLLM", "CachedFunctionCallingLLM", "message_to_turn", "llm_scope"]
