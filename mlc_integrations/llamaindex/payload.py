"""LlamaIndex responses as plain JSON cache payloads, and back.

Payloads are JSON only (never pickle): message blocks as LlamaIndex dumps them, extra
fields through :func:`encode_value`, which keeps the class name of pydantic objects so
that tool-call objects come back as the same type, without ever importing anything
because an entry names it.
"""

from __future__ import annotations

import base64
import enum
import logging
import math
import sys
from typing import Any, Optional, Union

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    MessageRole,
)
from llama_index.core.bridge.pydantic import BaseModel

from ..errors import PayloadError

log = logging.getLogger(__name__)

PAYLOAD_VERSION = 1
Response = Union[ChatResponse, CompletionResponse]


# ---------------------------------------------------------------------- values and messages
def encode_value(value: Any, depth: int = 0) -> Any:
    """Plain JSON for a response's extra fields; pydantic objects keep their class name
    so that tool-call objects come back as the same type (see :func:`decode_value`)."""
    if depth > 48:
        raise PayloadError("response value nested too deeply")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadError("non-finite float in response")
        return value
    if isinstance(value, enum.Enum):
        return encode_value(value.value, depth + 1)
    if isinstance(value, (bytes, bytearray)):
        return {"__bytes__": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dict):
        return {str(k): encode_value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_value(v, depth + 1) for v in value]
    if isinstance(value, BaseModel):
        cls = type(value)
        return {"__pydantic__": f"{cls.__module__}:{cls.__qualname__}", "data": value.model_dump(mode="json")}
    raise PayloadError(f"cannot store a value of type {type(value).__name__} in the cache")


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


def decode_value(value: Any) -> Any:
    if isinstance(value, list):
        return [decode_value(v) for v in value]
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
    return {k: decode_value(v) for k, v in value.items()}


def message_to_json(message: ChatMessage) -> dict[str, Any]:
    return {
        "role": message.role.value if isinstance(message.role, MessageRole) else str(message.role),
        "blocks": [b.model_dump(mode="json") for b in message.blocks],
        "additional_kwargs": encode_value(message.additional_kwargs),
    }


def message_from_json(data: dict[str, Any]) -> ChatMessage:
    return ChatMessage.model_validate({
        "role": data["role"],
        "blocks": data.get("blocks", []),
        "additional_kwargs": decode_value(data.get("additional_kwargs", {})),
    })


# ---------------------------------------------------------------------- responses
def answer_text(response: Response) -> str:
    """The text a user reads from a response (what the verifier compares)."""
    if isinstance(response, CompletionResponse):
        return response.text or ""
    return response.message.content or ""


def is_empty_response(response: Response) -> bool:
    """Blank text and no tool calls (in ``additional_kwargs`` or the message's blocks):
    never stored (a model that answered nothing is asked again next time)."""
    if answer_text(response).strip():
        return False
    kwargs = dict(response.additional_kwargs or {})
    if isinstance(response, ChatResponse):
        kwargs.update(response.message.additional_kwargs or {})
        if any(type(b).__name__ != "TextBlock" for b in (response.message.blocks or [])):
            return False
    return not (kwargs.get("tool_calls") or kwargs.get("function_call"))


def response_payload(response: Response) -> dict[str, Any]:
    if isinstance(response, CompletionResponse):
        return {"kind": "completion", "v": PAYLOAD_VERSION, "text": response.text,
                "additional_kwargs": encode_value(response.additional_kwargs)}
    return {"kind": "chat", "v": PAYLOAD_VERSION, "message": message_to_json(response.message),
            "additional_kwargs": encode_value(response.additional_kwargs)}


def chat_from_payload(payload: Any) -> ChatResponse:
    if not isinstance(payload, dict) or payload.get("kind") != "chat":
        raise PayloadError("not a stored chat response")
    message = message_from_json(payload["message"])
    return ChatResponse(message=message, additional_kwargs=decode_value(payload.get("additional_kwargs", {})))


def completion_from_payload(payload: Any) -> CompletionResponse:
    if not isinstance(payload, dict) or payload.get("kind") != "completion":
        raise PayloadError("not a stored completion")
    return CompletionResponse(text=str(payload["text"]),
                              additional_kwargs=decode_value(payload.get("additional_kwargs", {})))


def as_completion(response: ChatResponse) -> CompletionResponse:
    """A chat response as the completion ``complete(prompt, image_documents)`` returns."""
    return CompletionResponse(text=response.message.content or "", additional_kwargs=response.additional_kwargs,
                              raw=response.raw, delta=response.delta)
