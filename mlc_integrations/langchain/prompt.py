"""LangChain ``prompt`` string -> framework-neutral :class:`~mlc_integrations.adapters.conversation.Turn` s.

For a chat model LangChain hands the cache ``langchain_core.load.dumps`` of the
message list; for a plain LLM, the prompt text itself. :class:`PromptParser` reads
both: message roles, the fields that decide the answer (tool calls, tool call ids,
names), text blocks, and pictures in every provider's block format
(:func:`image_block_source`). What is the request and what is context is
:func:`~mlc_integrations.adapters.conversation.request_from_turns`' decision, not this module's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

from ..adapters.conversation import Part, Turn
from ..errors import InvalidRequestError
from ..images import ImageRef, is_remote_url

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


class _ById:
    """Marker: an image referenced by a provider file id (keyed exactly, like any id)."""


BY_FILE_ID = _ById()


@dataclass
class ParsedPrompt:
    """``kind`` is ``"chat"`` (a serialized message list) or ``"text"`` (anything else)."""

    kind: str
    turns: list[Turn]


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


__all__ = ["BY_FILE_ID", "ImageResolver", "ParsedPrompt", "PromptParser", "image_block_source"]
