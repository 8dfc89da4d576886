"""A fake LangChain chat model for the ``CachedChatModel`` tests: it streams word by
word, calls bound tools, takes the standard provider parameters (so that
langchain-tests' ``ChatModelUnitTests`` can build it) and records every real call.

Replies are numbered (``Answer 3: ...``), so a reply served from the cache is told apart
from a new one by its text. With tools bound and a human message last, it calls the
first tool with arguments made from the tool's JSON schema (structured output works the
same way); after a tool message it answers with the tool's result.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Iterator, Optional, Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import PrivateAttr, SecretStr


class StreamBroke(RuntimeError):
    pass


def _example(spec: dict[str, Any], n: int) -> Any:
    kind = spec.get("type")
    return {"integer": n, "number": float(n), "boolean": True}.get(kind, f"value-{n}")


def last_question(messages: Sequence[BaseMessage]) -> str:
    human = [m for m in messages if m.type == "human"]
    if not human:
        return ""
    content = human[-1].content
    if isinstance(content, str):
        return content
    return " ".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


class FakeToolChatModel(BaseChatModel):
    """See the module docstring. ``calls`` lists ``"generate"``/``"stream"`` per real call."""

    model: str = "fake-tool-model"
    temperature: float = 0.0
    max_tokens: Optional[int] = None
    timeout: Optional[float] = None
    stop: Optional[list[str]] = None
    max_retries: int = 2
    api_key: Optional[SecretStr] = None
    streaming: bool = False
    fail_stream_after: Optional[int] = None
    _calls: list[str] = PrivateAttr(default_factory=list)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "fake-tool-chat"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": self.model, "temperature": self.temperature, "max_tokens": self.max_tokens}

    @property
    def calls(self) -> list[str]:
        return self._calls

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Optional[str] = None, **kwargs: Any) -> Any:
        formatted = [convert_to_openai_tool(t) for t in tools]
        if tool_choice:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=formatted, **kwargs)

    def _reply(self, messages: list[BaseMessage], kind: str, kwargs: dict[str, Any]) -> AIMessage:
        with self._lock:
            self._calls.append(kind)
            n = len(self._calls)
        tools = kwargs.get("tools") or []
        last = messages[-1]
        usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
        meta = {"model_name": self.model, "finish_reason": "stop"}
        if tools and last.type == "human":
            fn = tools[0]["function"]
            props = fn.get("parameters", {}).get("properties", {})
            call = {"name": fn["name"], "args": {k: _example(v, n) for k, v in props.items()},
                    "id": f"call_{n}", "type": "tool_call"}
            return AIMessage(content="", tool_calls=[call], usage_metadata=usage, response_metadata=meta)
        if last.type == "tool":
            text = f"Answer {n}: the tool said {last.content}."
        else:
            text = f"Answer {n}: you asked {last_question(messages)!r}."
        return AIMessage(content=text, usage_metadata=usage, response_metadata=meta)

    def _generate(self, messages: list[BaseMessage], stop: Optional[list[str]] = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages, "generate", kwargs))])

    def _stream(self, messages: list[BaseMessage], stop: Optional[list[str]] = None,
                run_manager: Any = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        reply = self._reply(messages, "stream", kwargs)
        words = reply.content.split(" ") if reply.content else []
        for i, word in enumerate(words):
            if self.fail_stream_after is not None and i >= self.fail_stream_after:
                raise StreamBroke("connection reset mid-stream")
            yield ChatGenerationChunk(message=AIMessageChunk(content=word if i == 0 else " " + word))
        tool_chunks = [{"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
                       for i, c in enumerate(reply.tool_calls)]
        yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=tool_chunks,
                                                         usage_metadata=reply.usage_metadata,
                                                         response_metadata=reply.response_metadata))
