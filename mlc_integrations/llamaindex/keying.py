"""What of a LlamaIndex call is keyed: messages as framework-neutral turns, keyword
arguments and tools as deterministic JSON, and the inner LLM's settings as the scope
(without clients, callbacks or anything that looks like a secret).

Errors name the part of the call they are about (``messages[1].blocks[0] (ImageBlock)``,
``kwargs['tools']``), as the LangChain adapter's do; :class:`ScopeWatch` says once when
the scope of a wrapper changes between calls, and which settings changed.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import io
import json
import logging
import math
import re
import threading
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, TypeVar

from llama_index.core.base.llms.types import ChatMessage, ImageBlock, MessageRole, TextBlock
from llama_index.core.bridge.pydantic import BaseModel
from llama_index.core.tools.types import BaseTool
from llama_index.core.utils import resolve_binary

from ..adapters.conversation import Part, Turn
from ..errors import ImageDecodeError, InvalidRequestError, MLCError
from ..images import ImageRef

log = logging.getLogger(__name__)
T = TypeVar("T")
ImageResolver = Callable[[Any, str], Any]

# Inner-LLM fields that never decide the answer, or must never be written anywhere.
_TRANSPORT_FIELDS = frozenset({
    "callback_manager", "rate_limiter", "http_client", "async_http_client", "timeout",
    "max_retries", "reuse_client", "session", "async_session", "client", "async_client",
})
_SECRET_WORDS = frozenset({
    "key", "secret", "token", "password", "passwd", "credential", "credentials",
    "auth", "authorization", "header", "headers", "cookie", "cookies", "bearer",
})



def _is_secret_field(name: str, value: Any) -> bool:
    from pydantic import SecretBytes, SecretStr

    if isinstance(value, (SecretStr, SecretBytes)):
        return True
    words = [w for w in re.split(r"[_\-\s]+", name.lower()) if w]
    return any(w in _SECRET_WORDS for w in words) or "apikey" in name.lower().replace("_", "")


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"


def tool_spec(tool: Any) -> dict[str, Any]:
    """What an LLM sees of a LlamaIndex tool: name, description, parameter schema."""
    md = tool.metadata
    return {"tool": md.name, "description": md.description, "parameters": md.get_parameters_dict()}


def key_json(value: Any, *, lenient: bool = False, depth: int = 0) -> Any:
    """A deterministic JSON value for keying. Unknown objects raise
    :class:`InvalidRequestError` (the call bypasses the cache), or with ``lenient``
    become their type name."""
    if depth > 48:
        raise InvalidRequestError("value nested too deeply to key")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, enum.Enum):
        return key_json(value.value, lenient=lenient, depth=depth + 1)
    if isinstance(value, (bytes, bytearray, memoryview)):
        # Never raw bytes: the engine would read them as an image in the context.
        return {"bytes_sha256": hashlib.sha256(bytes(value)).hexdigest()}
    if isinstance(value, dict):
        return {str(k): key_json(v, lenient=lenient, depth=depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [key_json(v, lenient=lenient, depth=depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [key_json(v, lenient=lenient, depth=depth + 1) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, BaseTool):
        return key_json(tool_spec(value), lenient=lenient, depth=depth + 1)
    if isinstance(value, type) and issubclass(value, BaseModel):
        return {"schema": key_json(value.model_json_schema(), lenient=lenient, depth=depth + 1)}
    if isinstance(value, BaseModel):
        try:
            dumped = value.model_dump(mode="json")
        except Exception as exc:
            if lenient:
                return {"type": _qualname(type(value))}
            raise InvalidRequestError(f"cannot serialize {type(value).__name__}: {exc}") from exc
        return key_json(dumped, lenient=lenient, depth=depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return key_json(dataclasses.asdict(value), lenient=lenient, depth=depth + 1)
    if callable(value):
        return {"callable": _qualname(value)}
    if lenient:
        return {"type": _qualname(type(value))}
    raise InvalidRequestError(f"cannot key a value of type {type(value).__name__}")


def image_block_input(block: ImageBlock) -> Any:
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


def image_document_input(doc: Any) -> Any:
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


# ---------------------------------------------------------------------- legacy image_documents
def legacy_args(formatted: Any, image_documents: Optional[Sequence[Any]]) -> tuple[bool, Optional[list[Any]]]:
    """``(formatted, image_documents)`` of a ``complete`` call; the legacy
    ``MultiModalLLM.complete(prompt, image_documents)`` passes the documents second."""
    if not isinstance(formatted, bool) and isinstance(formatted, (list, tuple)):
        return False, list(formatted) + list(image_documents or [])
    return bool(formatted), list(image_documents) if image_documents else None


def image_document_block(doc: Any) -> ImageBlock:
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


def images_message(prompt: str, image_documents: Sequence[Any]) -> list[ChatMessage]:
    """The one user message a legacy ``complete(prompt, image_documents)`` becomes for ``chat``."""
    blocks: list[Any] = [TextBlock(text=prompt)] + [image_document_block(d) for d in image_documents]
    return [ChatMessage(role=MessageRole.USER, blocks=blocks)]


def labelled(label: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``; an :class:`MLCError` it raises names ``label`` (same error type)."""
    try:
        return fn(*args)
    except MLCError as exc:
        if str(exc).startswith(label):
            raise
        raise type(exc)(f"{label}: {exc}") from exc


def _as_is(value: Any, label: str) -> Any:
    return value


def message_to_turn(message: ChatMessage, *, index: int = 0,
                    resolve_image: Optional[ImageResolver] = None) -> Turn:
    """One ``ChatMessage`` (the ``index``-th of the call) as a framework-neutral :class:`Turn`.

    Text blocks are text, image blocks are images (keyed by pixels, or by URL string
    for remote URLs), every other block (tool calls, audio, documents, thinking) is
    compared exactly as JSON; ``additional_kwargs`` (tool calls, tool call id, name) too.
    ``resolve_image(value, label)`` may decode an image now (the wrapper does, so that
    a bad picture is reported by its block); errors name ``messages[i].blocks[j]``.
    """
    resolve = resolve_image or _as_is
    parts: list[Part] = []
    for j, block in enumerate(message.blocks):
        label = f"messages[{index}].blocks[{j}] ({type(block).__name__})"
        if isinstance(block, TextBlock):
            parts.append(Part.of_text(block.text))
        elif isinstance(block, ImageBlock):
            value = labelled(label, image_block_input, block)
            parts.append(Part.of_image(value if isinstance(value, ImageRef) else resolve(value, label)))
        else:
            parts.append(Part.of_data(labelled(label, key_json, block)))
    role = message.role.value if isinstance(message.role, MessageRole) else str(message.role)
    extra = (labelled(f"messages[{index}].additional_kwargs", key_json, message.additional_kwargs)
             if message.additional_kwargs else {})
    details = [b.detail for b in message.blocks if isinstance(b, ImageBlock)]
    if any(d is not None for d in details):  # "low"/"high" resolution changes what the model sees
        extra = dict(extra, image_detail=details)
    return Turn(role=role, parts=parts, extra=extra)


def kwargs_json(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments as keying JSON; an error names the argument."""
    return {str(k): labelled(f"kwargs[{k!r}]", key_json, v) for k, v in kwargs.items()}


def llm_settings(llm: Any) -> dict[str, Any]:
    """The inner LLM's public fields that may decide the answer, as keying JSON:
    every pydantic field except callback managers, clients, timeouts and anything
    that looks like a secret (api keys, tokens, headers)."""
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
        settings[name] = key_json(value, lenient=True)
    return settings


def scope_string(cls: type, settings: dict[str, Any]) -> str:
    """The scope of an LLM of class ``cls`` with these :func:`llm_settings`."""
    body = json.dumps({"class": f"{cls.__module__}.{cls.__qualname__}", "settings": settings},
                      sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "llamaindex:" + body


def llm_scope(llm: Any) -> str:
    """Scope string of an inner LLM: its class plus its serialized settings
    (:func:`llm_settings`). Deterministic across processes."""
    return scope_string(type(llm), llm_settings(llm))


_MISSING = object()


class ScopeWatch:
    """Remembers the inner LLM's settings at the previous call and logs one WARNING
    (per wrapper) the first time they change: every public field is part of the scope,
    so a field that changes per call (a counter, a timestamp) silently makes every call
    a miss, and a setting changed on purpose leaves the entries stored before unused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: Optional[tuple[type, dict[str, Any]]] = None
        self.warned = False

    def observe(self, cls: type, settings: dict[str, Any]) -> list[str]:
        """Record this call's settings; returns the fields that changed since the last
        call (``"<class>"`` when the inner LLM is another class)."""
        with self._lock:
            last, self._last = self._last, (cls, settings)
            if last is None or last == (cls, settings):
                return []
            if last[0] is not cls:
                changed = ["<class>"]
            else:
                names = sorted(set(last[1]) | set(settings))
                changed = [n for n in names if last[1].get(n, _MISSING) != settings.get(n, _MISSING)]
            warn, self.warned = not self.warned, True
        if warn:
            log.warning(
                "the scope of this CachedMultiModalLLM changed between two calls: field(s) %s of the inner %s. "
                "Every public field of the inner LLM is part of the cache scope, so entries stored before the "
                "change are not found after it. Keep per-call state (counters, timestamps) in private attributes "
                "(PrivateAttr); ignore this if the change was intended. (Logged once per wrapper.)",
                ", ".join(changed), cls.__name__)
        return changed


__all__ = ["ScopeWatch", "key_json", "kwargs_json", "labelled", "llm_scope", "llm_settings", "message_to_turn",
           "image_block_input", "image_document_block", "image_document_input", "images_message", "legacy_args",
           "scope_string"]
