"""CachedMultiModalLLM around a FunctionCallingLLM: tool calls, agents, programs, and
callback/instrumentation events for cached calls -- all with real llama-index-core objects."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Dict, List, Optional, Sequence, Union

import pytest
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    LLMMetadata,
    MessageRole,
    ToolCallBlock,
)
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.llm import (
    LLMChatEndEvent,
    LLMChatStartEvent,
    LLMCompletionEndEvent,
    LLMCompletionStartEvent,
)
from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.tools import FunctionTool

from mlc_integrations.llamaindex import CachedFunctionCallingLLM, CachedMultiModalLLM
from tests.helpers import solid
from tests.unit._fake_llms import QUESTION, RED, RecordedCalls, VisionEchoLLM, as_async, chat_stream, describe, user


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def colour_of_picture() -> str:
    """Name the dominant colour of the picture the user sent."""
    return "red"


class ToolVisionLLM(RecordedCalls, FunctionCallingLLM):
    """A function-calling test model in the OpenAI style: tools arrive as JSON specs in
    ``tools=``, tool calls leave as ``ToolCallBlock`` s with fresh random ids."""

    model: str = "tool-vision-1"

    @classmethod
    def class_name(cls) -> str:
        return "ToolVisionLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.model, is_chat_model=True, is_function_calling_model=True)

    def _respond(self, messages: Sequence[ChatMessage], tools: Optional[list[dict]]) -> ChatMessage:
        last_user = max(i for i, m in enumerate(messages) if m.role == MessageRole.USER)
        results = [m for m in messages[last_user + 1:] if m.role == MessageRole.TOOL]
        if results:
            return ChatMessage(role="assistant", content=f"The result is {results[-1].content}.")
        if tools:
            names = [t["function"]["name"] for t in tools]
            question = messages[last_user].content or ""
            nums = [int(n) for n in re.findall(r"\d+", question)]
            if "multiply" in names and "times" in question and len(nums) == 2:
                call = ToolCallBlock(tool_call_id=f"call_{uuid.uuid4().hex[:8]}", tool_name="multiply",
                                     tool_kwargs={"a": nums[0], "b": nums[1]})
                return ChatMessage(role="assistant", blocks=[call])
            if "add" in names and "plus" in question and len(nums) == 2:
                call = ToolCallBlock(tool_call_id=f"call_{uuid.uuid4().hex[:8]}", tool_name="add",
                                     tool_kwargs=json.dumps({"a": nums[0], "b": nums[1]}))
                return ChatMessage(role="assistant", blocks=[call])
            if len(tools) == 1 and names[0] not in ("multiply", "add"):
                # Structured output: fill every string field with what the picture shows.
                seen = describe(messages).split(".")[0].removeprefix("I see ")
                props = tools[0]["function"]["parameters"].get("properties", {})
                call = ToolCallBlock(tool_call_id=f"call_{uuid.uuid4().hex[:8]}", tool_name=names[0],
                                     tool_kwargs={k: seen for k in props})
                return ChatMessage(role="assistant", blocks=[call])
        return ChatMessage(role="assistant", content=describe(messages))

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        self._calls.append("chat")
        return ChatResponse(message=self._respond(messages, kwargs.get("tools")))

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        self._calls.append("achat")
        return ChatResponse(message=self._respond(messages, kwargs.get("tools")))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        self._calls.append("stream_chat")
        message = self._respond(messages, kwargs.get("tools"))
        return chat_stream(message.content or "", final=message, fail_after=self.fail_stream_after)

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        self._calls.append("astream_chat")
        message = self._respond(messages, kwargs.get("tools"))
        return as_async(chat_stream(message.content or "", final=message, fail_after=self.fail_stream_after))

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self.complete(prompt, formatted=formatted, **kwargs)

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        return as_async(self.stream_complete(prompt, formatted=formatted, **kwargs))

    def _prepare_chat_with_tools(
        self,
        tools: Sequence[Any],
        user_msg: Optional[Union[str, ChatMessage]] = None,
        chat_history: Optional[List[ChatMessage]] = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> Dict[str, Any]:
        messages = list(chat_history or [])
        if user_msg:
            messages.append(ChatMessage(role="user", content=user_msg) if isinstance(user_msg, str) else user_msg)
        out: Dict[str, Any] = {"messages": messages, "tools": [t.metadata.to_openai_tool() for t in tools] or None}
        if tool_required:
            out["tool_choice"] = "required"
        return out

    def get_tool_calls_from_response(self, response: ChatResponse, error_on_no_tool_call: bool = True,
                                     **kwargs: Any) -> List[ToolSelection]:
        calls = [b for b in response.message.blocks if isinstance(b, ToolCallBlock)]
        if not calls and error_on_no_tool_call:
            raise ValueError("expected at least one tool call")
        return [ToolSelection(tool_id=c.tool_call_id or "", tool_name=c.tool_name,
                              tool_kwargs=json.loads(c.tool_kwargs) if isinstance(c.tool_kwargs, str) else c.tool_kwargs)
                for c in calls]


TOOLS = [FunctionTool.from_defaults(fn=multiply), FunctionTool.from_defaults(fn=add)]


@pytest.fixture
def fc_inner() -> ToolVisionLLM:
    return ToolVisionLLM()


@pytest.fixture
def fc_cached(make_engine, fc_inner) -> CachedMultiModalLLM:
    return CachedMultiModalLLM(llm=fc_inner, engine=make_engine(image_encoder=None))


def test_function_calling_inner_gives_function_calling_wrapper(fc_cached, fc_inner) -> None:
    assert isinstance(fc_cached, CachedFunctionCallingLLM) and isinstance(fc_cached, FunctionCallingLLM)
    assert isinstance(fc_cached, CachedMultiModalLLM)
    assert fc_cached.metadata.is_function_calling_model


def test_chat_with_tools_hits_and_keeps_tool_calls(fc_cached, fc_inner) -> None:
    first = fc_cached.chat_with_tools(TOOLS, user_msg="What is 6 times 7?")
    calls1 = fc_cached.get_tool_calls_from_response(first)
    again = fc_cached.chat_with_tools(TOOLS, user_msg="what is 6 times 7?")
    assert fc_cached.last_hit is not None and fc_inner.calls == ["chat"]
    calls2 = fc_cached.get_tool_calls_from_response(again)
    assert calls2 == calls1 and calls1[0].tool_name == "multiply" and calls1[0].tool_kwargs == {"a": 6, "b": 7}
    assert again.raw is None


async def test_achat_with_tools_and_string_tool_kwargs(fc_cached, fc_inner) -> None:
    first = await fc_cached.achat_with_tools(TOOLS, user_msg="What is 2 plus 3?")
    again = await fc_cached.achat_with_tools(TOOLS, user_msg="What is 2 plus 3?")
    assert fc_inner.calls == ["achat"]
    assert fc_cached.get_tool_calls_from_response(again) == fc_cached.get_tool_calls_from_response(first)
    assert fc_cached.get_tool_calls_from_response(again)[0].tool_kwargs == {"a": 2, "b": 3}


def test_tool_set_is_part_of_the_key(fc_cached, fc_inner) -> None:
    fc_cached.chat_with_tools(TOOLS, user_msg="What is 6 times 7?")
    fc_cached.chat_with_tools(TOOLS[:1], user_msg="What is 6 times 7?")  # fewer tools
    assert fc_cached.last_hit is None

    def multiply(a: float, b: float) -> float:  # same name, other schema
        """Multiply two numbers."""
        return a * b

    fc_cached.chat_with_tools([FunctionTool.from_defaults(fn=multiply), TOOLS[1]], user_msg="What is 6 times 7?")
    assert fc_cached.last_hit is None
    fc_cached.chat_with_tools(TOOLS, user_msg="What is 6 times 7?", tool_required=True)  # other tool choice
    assert fc_cached.last_hit is None
    fc_cached.chat(user("What is 6 times 7?"))  # no tools at all
    assert fc_cached.last_hit is None
    assert len(fc_inner.calls) == 5
    fc_cached.chat_with_tools(TOOLS, user_msg="What is 6 times 7?")
    assert fc_cached.last_hit is not None and len(fc_inner.calls) == 5


def test_stream_chat_with_tools_replays_tool_calls(fc_cached, fc_inner) -> None:
    list(fc_cached.stream_chat_with_tools(TOOLS, user_msg="What is 6 times 7?"))
    chunks = list(fc_cached.stream_chat_with_tools(TOOLS, user_msg="What is 6 times 7?"))
    assert fc_inner.calls == ["stream_chat"] and fc_cached.last_hit is not None
    calls = fc_cached.get_tool_calls_from_response(chunks[-1])
    assert calls and calls[0].tool_name == "multiply"


def test_predict_and_call_goes_through_the_cache(fc_cached, fc_inner) -> None:
    out1 = fc_cached.predict_and_call(TOOLS, user_msg="What is 6 times 7?")
    out2 = fc_cached.predict_and_call(TOOLS, user_msg="What is 6 times 7?")
    assert out1.response == out2.response == "42" and fc_inner.calls == ["chat"]


def test_structured_predict_with_a_picture(fc_cached, fc_inner) -> None:
    from llama_index.core.bridge.pydantic import BaseModel
    from llama_index.core.prompts import ChatPromptTemplate

    class Colour(BaseModel):
        colour: str

    def prompt(img: Any) -> ChatPromptTemplate:
        return ChatPromptTemplate(message_templates=user("Which colour is shown?", img))

    first = fc_cached.structured_predict(Colour, prompt(RED))
    second = fc_cached.structured_predict(Colour, prompt(RED))
    assert first == second == Colour(colour="red") and fc_inner.calls == ["chat"]
    assert fc_cached.structured_predict(Colour, prompt(solid((30, 30, 220)))) == Colour(colour="blue")
    assert fc_inner.calls == ["chat", "chat"]


@pytest.mark.parametrize("streaming", [False, True])
async def test_function_agent_second_run_makes_no_inner_call(make_engine, streaming) -> None:
    inner = ToolVisionLLM()
    llm = CachedMultiModalLLM(llm=inner, engine=make_engine(image_encoder=None))
    agent = FunctionAgent(tools=[multiply, add], llm=llm, streaming=streaming,
                          system_prompt="You are a calculator.")
    first = await agent.run(user_msg="What is 6 times 7?")
    assert "42" in str(first)
    calls_first_run = len(inner.calls)
    assert calls_first_run == 2  # tool call, then the answer from the tool result
    second = await agent.run(user_msg="What is 6 times 7?")
    assert str(second) == str(first)
    assert len(inner.calls) == calls_first_run, "the second run was served entirely from the cache"
    assert llm.stats()["adapter"]["hits"] == 2


async def test_function_agent_with_a_picture(make_engine) -> None:
    inner = ToolVisionLLM()
    llm = CachedMultiModalLLM(llm=inner, engine=make_engine(image_encoder=None))
    agent = FunctionAgent(tools=[colour_of_picture], llm=llm, streaming=False)
    msg = user(QUESTION, RED)[0]
    first = await agent.run(user_msg=msg)
    n = len(inner.calls)
    second = await agent.run(user_msg=user(QUESTION, RED)[0])
    assert str(second) == str(first) and "red" in str(first) and len(inner.calls) == n
    await agent.run(user_msg=user(QUESTION, solid((30, 30, 220)))[0])
    assert len(inner.calls) > n  # another picture is another question


async def test_react_agent_second_run_makes_no_inner_call(make_engine) -> None:
    class ReActScript(VisionEchoLLM):
        """Thinks once, calls multiply, then answers from the observation."""

        @llm_chat_callback()
        async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            self._calls.append("achat")
            text = "\n".join(m.content or "" for m in messages if m.role != MessageRole.SYSTEM)
            if "Observation:" in text:
                obs = re.findall(r"\d+", text.rsplit("Observation:", 1)[1])[0]
                reply = f"Thought: I can answer without using any more tools.\nAnswer: The result is {obs}"
            else:
                reply = 'Thought: I need to multiply.\nAction: multiply\nAction Input: {"a": 6, "b": 7}'
            return ChatResponse(message=ChatMessage(role="assistant", content=reply))

    inner = ReActScript()
    llm = CachedMultiModalLLM(llm=inner, engine=make_engine(image_encoder=None))
    agent = ReActAgent(tools=[multiply], llm=llm, streaming=False)
    first = await agent.run(user_msg="What is 6 times 7?")
    assert "42" in str(first)
    n = len(inner.calls)
    assert n == 2
    second = await agent.run(user_msg="What is 6 times 7?")
    assert str(second) == str(first) and len(inner.calls) == n


# ---------------------------------------------------------------------- events
class Collect(BaseEventHandler):
    events: list = []

    @classmethod
    def class_name(cls) -> str:
        return "Collect"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        self.events.append(event)


@pytest.fixture
def instrumentation():
    root = get_dispatcher()
    handler = Collect(events=[])
    spans = SimpleSpanHandler()
    root.add_event_handler(handler)
    root.add_span_handler(spans)
    yield handler, spans
    root.event_handlers.remove(handler)
    root.span_handlers.remove(spans)


def _llm_events(handler: Collect, *kinds: type) -> list[BaseEvent]:
    return [e for e in handler.events if isinstance(e, kinds)]


async def test_instrumentation_events_fire_for_cached_calls(make_engine, instrumentation) -> None:
    handler, spans = instrumentation
    inner = VisionEchoLLM()
    llm = CachedMultiModalLLM(llm=inner, engine=make_engine(image_encoder=None))
    llm.chat(user(QUESTION, RED))
    miss_events = _llm_events(handler, LLMChatStartEvent, LLMChatEndEvent)
    assert len(miss_events) == 4  # the wrapper's start/end around the inner model's start/end
    handler.events.clear()

    hit = llm.chat(user(QUESTION, RED))
    await llm.achat(user(QUESTION, RED))
    list(llm.stream_chat(user(QUESTION, RED)))
    llm.complete("Say hi")
    llm.complete("Say hi")
    assert len(inner.calls) == 2
    starts = _llm_events(handler, LLMChatStartEvent)
    ends = _llm_events(handler, LLMChatEndEvent)
    assert len(starts) == len(ends) == 3  # chat, achat, stream_chat hits: wrapper events only
    assert all(s.model_dict["cached_by"] == "CachedMultiModalLLM" for s in starts)
    assert all(s.model_dict["model_name"] == "vision-echo-1" for s in starts)
    assert ends[0].response.message.content == hit.message.content
    assert len(_llm_events(handler, LLMCompletionStartEvent)) == 3  # hit: 1, miss: wrapper + inner
    assert len(_llm_events(handler, LLMCompletionEndEvent)) == 3
    span_names = [s.id_.split("-")[0] for s in spans.completed_spans]
    assert any(n.startswith("CachedMultiModalLLM.chat") for n in span_names)
    assert any(n.startswith("CachedMultiModalLLM.achat") for n in span_names)


def test_callback_manager_events_fire_for_cached_calls(make_engine) -> None:
    debug = LlamaDebugHandler()
    inner = VisionEchoLLM()
    llm = CachedMultiModalLLM(llm=inner, engine=make_engine(image_encoder=None),
                              callback_manager=CallbackManager([debug]))
    llm.chat(user(QUESTION, RED))
    llm.chat(user(QUESTION, RED))
    list(llm.stream_chat(user(QUESTION, RED)))
    pairs = debug.get_llm_inputs_outputs()
    assert len(pairs) == 3 and len(inner.calls) == 1  # the inner model's own manager is separate
    for start, end in pairs:
        assert start.event_type == end.event_type == CBEventType.LLM
        assert "I see red." in str(end.payload["response"])
