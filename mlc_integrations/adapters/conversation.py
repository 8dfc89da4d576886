"""Framework-neutral conversation -> :class:`CacheRequest`, shared by both adapters.

The LangChain and LlamaIndex adapters convert their message types into
:class:`Turn` lists; this module alone decides what is *the request* and what is
*context*:

* the last user (human) turn's text and images are the request;
* every other message is context, compared exactly: the messages before it, and
  also any after it (an AI tool call and its tool result following the last user
  turn), so that an agent's next step never reuses the answer to its first.

What else both adapters share (the fail-open/strict policy, counters, per-call
lookup tracking) is :mod:`mlc_integrations.adapters.kit`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from ..request import DEFAULT_NAMESPACE, CacheRequest

USER_ROLES = ("user", "human")


@dataclass
class Part:
    """One content part: ``kind`` is ``"text"``, ``"image"`` or ``"data"`` (any other JSON)."""

    kind: str
    text: str = ""
    image: Any = None
    data: Any = None

    @classmethod
    def of_text(cls, text: str) -> "Part":
        return cls("text", text=text)

    @classmethod
    def of_image(cls, image: Any) -> "Part":
        return cls("image", image=image)

    @classmethod
    def of_data(cls, data: Any) -> "Part":
        return cls("data", data=data)


@dataclass
class Turn:
    """One message. ``extra`` holds what else decides the answer (tool calls, tool call id, name)."""

    role: str
    parts: list[Part] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        return "\n".join(p.text for p in self.parts if p.kind == "text")

    def images(self) -> list[Any]:
        return [p.image for p in self.parts if p.kind == "image"]

    def as_context(self) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        for p in self.parts:
            if p.kind == "text":
                content.append({"type": "text", "text": p.text})
            elif p.kind == "image":
                content.append({"type": "image", "image": p.image})
            else:
                content.append({"type": "data", "data": p.data})
        out: dict[str, Any] = {"role": self.role, "content": content}
        if self.extra:
            out["extra"] = self.extra
        return out


def request_from_turns(
    turns: Sequence[Turn],
    *,
    scope: str,
    namespace: str = DEFAULT_NAMESPACE,
    extra_context: Optional[dict[str, Any]] = None,
) -> CacheRequest:
    """Split a conversation into the request (last user turn) and its exact context.

    ``extra_context`` adds request-wide facts that must match exactly (e.g. the tool
    set bound to the model) without being part of the scope string.
    """
    turns = list(turns)
    idx = max((i for i, t in enumerate(turns) if t.role.lower() in USER_ROLES), default=len(turns) - 1)
    if idx < 0:
        return CacheRequest(text="", images=[], context=[], scope=scope, namespace=namespace)
    last = turns[idx]
    context: list[Any] = [t.as_context() for t in turns[:idx]]
    after = [t.as_context() for t in turns[idx + 1:]]
    if after:
        context.append({"after_request": after})
    if last.role.lower() not in USER_ROLES:
        context.append({"request_role": last.role, "request_extra": last.extra})
    elif last.extra:
        context.append({"request_extra": last.extra})
    data_parts = [p.data for p in last.parts if p.kind == "data"]
    if data_parts:  # blocks that are neither text nor image (files, audio, ...) key exactly
        context.append({"request_data": data_parts})
    if extra_context:
        context.append({"extra_context": extra_context})
    return CacheRequest(text=last.text(), images=last.images(), context=context, scope=scope, namespace=namespace)
