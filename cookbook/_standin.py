"""The offline stand-in model of the cookbook: not an LLM, and not needed with a real one.

No vision-language model installs offline, so by default the examples talk to this
stand-in (and say so in their first lines). It reads the colour and shape of an easy-vqa
picture off the pixels (median colour of the pixels that differ from the border, and how
much of its bounding box the shape fills), answers the examples' questions from what it
read (:func:`_common.true_answer`), calls a ``catalog_price`` tool when one is offered and
the question asks for a price, and translates its previous answer when asked to. It
misreads 4 of the 668 labelled easy-vqa test pictures (a triangle or circle cut by the
border; ``tests/unit/test_cookbook.py`` measures it), so its answers are checkable
against ground truth.

``MLC_COOKBOOK_PROVIDER=openai`` or ``ollama`` replaces it with a real model
(:func:`_common.langchain_chat_model`, :func:`_common.llamaindex_llm`).
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Optional, Sequence

import numpy as np
from _common import true_answer
from PIL import Image
from pydantic import BaseModel, PrivateAttr

# easy-vqa draws its shapes in these exact colours.
PALETTE = {
    "red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255), "black": (0, 0, 0),
    "gray": (128, 128, 128), "teal": (0, 128, 128), "brown": (165, 42, 42), "yellow": (255, 255, 0),
}

def read_picture(im: Image.Image) -> tuple[Optional[str], Optional[str]]:
    """(colour, shape) read off the pixels: what the stand-in model "sees"."""
    a = np.asarray(im.convert("RGB")).astype(np.float32)
    border = np.concatenate([a[0], a[-1], a[:, 0], a[:, -1]])
    mask = np.linalg.norm(a - np.median(border, axis=0), axis=2) > 60
    if mask.sum() < 4:
        return None, None
    names = list(PALETTE)
    pal = np.array([PALETTE[n] for n in names], dtype=np.float32)
    color = names[int(np.argmin(np.linalg.norm(pal - np.median(a[mask], axis=0), axis=1)))]
    ys, xs = np.nonzero(mask)
    fill = mask.sum() / ((ys.max() - ys.min() + 1) * (xs.max() - xs.min() + 1))
    shape = "rectangle" if fill > 0.88 else ("circle" if fill > 0.64 else "triangle")
    return color, shape


@dataclass
class SimpleMessage:
    """A framework-neutral message for the stand-in: role is user/assistant/tool/system."""

    role: str
    text: str = ""
    images: list[Image.Image] = field(default_factory=list)


def standin_decide(messages: Sequence[SimpleMessage], tool_names: Sequence[str]) -> tuple[str, Any]:
    """What the stand-in does next: ``("tool_call", (name, args))`` or ``("text", answer)``."""
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    if not users:
        return "text", "Please ask a question about a picture."
    last = users[-1]
    pictures = [im for m in messages[: last + 1] if m.role == "user" for im in m.images]
    if not pictures:
        return "text", "I don't see a picture."
    color, shape = read_picture(pictures[-1])
    if color is None or shape is None:
        return "text", "I can't make out a shape in this picture."
    results = [m for m in messages[last + 1:] if m.role == "tool"]
    question = messages[last].text
    if results:
        return "text", f"The {color} {shape} costs {results[-1].text}."
    if "catalog_price" in tool_names and re.search(r"\b(price|cost|how much)\b", question.lower()):
        return "tool_call", ("catalog_price", {"color": color, "shape": shape})
    answers = [m.text for m in messages[:last] if m.role == "assistant"]
    return "text", true_answer(question, color, shape, previous=answers[-1] if answers else None)


class StandInRuns(BaseModel):
    """What both frameworks' stand-ins share: ``calls`` counts the times the model really
    ran, ``latency_s`` makes each run as slow as a remote model, and :meth:`_decide` is
    one run. Tool specs arrive OpenAI-style (``{"function": {"name": ...}}``)."""

    latency_s: float = 0.0
    _calls: int = PrivateAttr(default=0)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    @property
    def calls(self) -> int:
        return self._calls

    def _decide(self, messages: Sequence[SimpleMessage], tools: Optional[Sequence[dict[str, Any]]]) -> tuple[str, Any]:
        with self._lock:
            self._calls += 1
        if self.latency_s:
            time.sleep(self.latency_s)
        return standin_decide(messages, [t["function"]["name"] for t in tools or []])


# ---------------------------------------------------------------------------- LangChain
def _langchain_stand_in_class() -> type:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.utils.function_calling import convert_to_openai_tool

    from mlc_integrations.images import decode_image

    def simple(message: BaseMessage) -> SimpleMessage:
        role = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}.get(message.type, message.type)
        content = message.content
        if isinstance(content, str):
            return SimpleMessage(role, content)
        texts, images = [], []
        for block in content:
            if isinstance(block, str):
                texts.append(block)
            elif block.get("type") == "text":
                texts.append(block.get("text", ""))
            elif block.get("type") == "image_url":
                url = block["image_url"]["url"] if isinstance(block["image_url"], dict) else block["image_url"]
                images.append(decode_image(url, what="stand-in image").pil)
        return SimpleMessage(role, "\n".join(texts), images)

    class StandInVisionChatModel(StandInRuns, BaseChatModel):
        """LangChain chat model for offline runs: answers from the pixels (see module doc).

        Tool calls get fresh random ids, as real providers give them; ``calls`` counts
        the times the model really ran; ``latency_s`` makes it as slow as a remote model.
        """

        model_name: str = "standin-vision-1"

        @property
        def _llm_type(self) -> str:
            return "cookbook-standin-vision"

        def bind_tools(self, tools: Sequence[Any], *, tool_choice: Optional[str] = None, **kwargs: Any) -> Any:
            formatted = [convert_to_openai_tool(t) for t in tools]
            if tool_choice:
                kwargs["tool_choice"] = tool_choice
            return self.bind(tools=formatted, **kwargs)

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            kind, value = self._decide([simple(m) for m in messages], kwargs.get("tools"))
            meta = {"model_name": self.model_name, "produced_by_pid": os.getpid()}
            if kind == "tool_call":
                name, args = value
                call = {"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:12]}", "type": "tool_call"}
                message = AIMessage(content="", tool_calls=[call], response_metadata=meta)
            else:
                message = AIMessage(content=value, response_metadata=meta)
            return ChatResult(generations=[ChatGeneration(message=message)])

    return StandInVisionChatModel


@lru_cache(maxsize=1)
def langchain_stand_in_class() -> type:
    return _langchain_stand_in_class()


# ---------------------------------------------------------------------------- LlamaIndex
def _llamaindex_stand_in_class() -> type:
    import json

    from llama_index.core.base.llms.types import (
        ChatMessage,
        ChatResponse,
        CompletionResponse,
        ImageBlock,
        LLMMetadata,
        MessageRole,
        TextBlock,
        ToolCallBlock,
    )
    from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
    from llama_index.core.llms.function_calling import FunctionCallingLLM
    from llama_index.core.llms.llm import ToolSelection

    roles = {MessageRole.USER: "user", MessageRole.ASSISTANT: "assistant", MessageRole.TOOL: "tool",
             MessageRole.SYSTEM: "system"}

    def simple(message: ChatMessage) -> SimpleMessage:
        texts = [b.text for b in message.blocks if isinstance(b, TextBlock)]
        images = [Image.open(b.resolve_image()).convert("RGB") for b in message.blocks
                  if isinstance(b, ImageBlock) and (b.image is not None or b.path is not None)]
        return SimpleMessage(roles.get(message.role, str(message.role)), "\n".join(texts), images)

    class StandInVisionLLM(StandInRuns, FunctionCallingLLM):
        """LlamaIndex function-calling LLM for offline runs: answers from the pixels (see
        module doc). Tool specs arrive OpenAI-style in ``tools=``; tool calls leave as
        ``ToolCallBlock`` s with fresh random ids; ``calls`` counts real runs."""

        model: str = "standin-vision-1"

        @classmethod
        def class_name(cls) -> str:
            return "CookbookStandInVisionLLM"

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name=self.model, is_chat_model=True, is_function_calling_model=True)

        def _reply(self, messages: Sequence[ChatMessage], tools: Optional[list[dict[str, Any]]]) -> ChatResponse:
            kind, value = self._decide([simple(m) for m in messages], tools)
            if kind == "tool_call":
                name, args = value
                block = ToolCallBlock(tool_call_id=f"call_{uuid.uuid4().hex[:12]}", tool_name=name, tool_kwargs=args)
                message = ChatMessage(role="assistant", blocks=[block])
            else:
                message = ChatMessage(role="assistant", content=value)
            return ChatResponse(message=message, additional_kwargs={"produced_by_pid": os.getpid()})

        @llm_chat_callback()
        def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            return self._reply(messages, kwargs.get("tools"))

        @llm_chat_callback()
        async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            return self._reply(messages, kwargs.get("tools"))

        @llm_chat_callback()
        def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
            response = self._reply(messages, kwargs.get("tools"))
            return iter([ChatResponse(message=response.message, delta=response.message.content or "")])

        @llm_chat_callback()
        async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
            response = self._reply(messages, kwargs.get("tools"))

            async def gen() -> Any:
                yield ChatResponse(message=response.message, delta=response.message.content or "")

            return gen()

        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            text = self._reply([ChatMessage(role="user", content=prompt)], None).message.content or ""
            return CompletionResponse(text=text)

        @llm_completion_callback()
        async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            return self.complete(prompt, formatted=formatted, **kwargs)

        @llm_completion_callback()
        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            text = self.complete(prompt, formatted=formatted, **kwargs).text
            return iter([CompletionResponse(text=text, delta=text)])

        @llm_completion_callback()
        async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            text = self.complete(prompt, formatted=formatted, **kwargs).text

            async def gen() -> Any:
                yield CompletionResponse(text=text, delta=text)

            return gen()

        def _prepare_chat_with_tools(self, tools: Sequence[Any], user_msg: Any = None,
                                     chat_history: Optional[list[ChatMessage]] = None, verbose: bool = False,
                                     allow_parallel_tool_calls: bool = False, tool_required: bool = False,
                                     **kwargs: Any) -> dict[str, Any]:
            messages = list(chat_history or [])
            if user_msg:
                messages.append(ChatMessage(role="user", content=user_msg) if isinstance(user_msg, str) else user_msg)
            return {"messages": messages, "tools": [t.metadata.to_openai_tool() for t in tools] or None, **kwargs}

        def get_tool_calls_from_response(self, response: ChatResponse, error_on_no_tool_call: bool = True,
                                         **kwargs: Any) -> list[ToolSelection]:
            calls = [b for b in response.message.blocks if isinstance(b, ToolCallBlock)]
            if not calls and error_on_no_tool_call:
                raise ValueError(f"expected a tool call in {response.message.content!r}")
            return [ToolSelection(tool_id=c.tool_call_id or "", tool_name=c.tool_name,
                                  tool_kwargs=json.loads(c.tool_kwargs) if isinstance(c.tool_kwargs, str) else c.tool_kwargs)
                    for c in calls]

    return StandInVisionLLM


@lru_cache(maxsize=1)
def llamaindex_stand_in_class() -> type:
    return _llamaindex_stand_in_class()
