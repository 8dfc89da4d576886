"""02 - A LlamaIndex FunctionAgent over CachedMultiModalLLM.

What it shows
    The shop assistant of example 01, built the LlamaIndex way: a ``FunctionAgent``
    (llama-index-core workflows) whose LLM is ``CachedMultiModalLLM(llm=...)``. The
    customer's picture travels as an ``ImageBlock`` in the user message; the agent calls
    the ``catalog_price`` tool and answers. The same task runs twice (the second run
    makes zero model calls), then two paraphrased tasks (L1 hits), then a different
    picture (a miss). Each model call is reported as served from the cache (and by
    which tier) or not, read from LlamaIndex's instrumentation events: agent steps run
    in their own asyncio tasks, and an event handler sees each call where it happens.

Run it
    ./dev python cookbook/02_llamaindex_agent.py

Real provider (optional; the default is an offline stand-in model, labelled as such)
    MLC_COOKBOOK_PROVIDER=openai  -> llama_index.llms.openai.OpenAI  (pip install llama-index-llms-openai; OPENAI_API_KEY)
    MLC_COOKBOOK_PROVIDER=ollama  -> llama_index.llms.ollama.Ollama  (pip install llama-index-llms-ollama; a running Ollama)
    MLC_COOKBOOK_MODEL=<name> picks the model; it must take images and call tools.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any, Optional, Sequence

import _common
from _common import SHOP_SYSTEM, Picture, llamaindex_llm, price_of, tier_of
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent, LLMChatStartEvent
from llama_index.core.llms import ChatMessage, ImageBlock, TextBlock
from llama_index.core.tools import FunctionTool

from mlc_integrations import CachedMultiModalLLM


class StepLog:
    """What happened, in order: model calls (with their cache outcome) and tool runs."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []


class CacheOutcomeRecorder(BaseEventHandler):
    """Logs, for each call of the cached LLM, whether the cache served it.

    The wrapper's start event names it (``model_dict["cached_by"]``); at its end event,
    in the same task, ``llm.last_hit`` is the hit that served the call (None: a miss)."""

    _llm: Any = PrivateAttr()
    _log: StepLog = PrivateAttr()
    _spans: set = PrivateAttr(default_factory=set)

    def __init__(self, llm: CachedMultiModalLLM, log: StepLog) -> None:
        super().__init__()
        self._llm, self._log = llm, log

    @classmethod
    def class_name(cls) -> str:
        return "CacheOutcomeRecorder"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if isinstance(event, LLMChatStartEvent) and event.model_dict.get("cached_by"):
            self._spans.add(event.span_id)
        elif isinstance(event, LLMChatEndEvent) and event.span_id in self._spans:
            self._spans.discard(event.span_id)
            hit = self._llm.last_hit
            self._log.steps.append({"model": tier_of(hit), "why": hit.explain() if hit else "model called"})


def catalog_tool(log: StepLog) -> FunctionTool:
    def catalog_price(color: str, shape: str) -> str:
        """Look up the price of a shape of the given colour in the shop's catalog."""
        price = price_of(color.lower(), shape.lower())
        log.steps.append({"tool": f"catalog_price(color={color!r}, shape={shape!r}) -> {price}"})
        return price

    return FunctionTool.from_defaults(fn=catalog_price)


def user_message(question: str, pic: Picture) -> ChatMessage:
    return ChatMessage(role="user", blocks=[ImageBlock(image=pic.png(), image_mimetype="image/png"),
                                            TextBlock(text=question)])


async def run_tasks(llm: CachedMultiModalLLM, tasks: list[tuple[str, str, Picture]]) -> list[dict[str, Any]]:
    runs = []
    for label, question, pic in tasks:
        log = StepLog()
        recorder = CacheOutcomeRecorder(llm, log)
        dispatcher = get_dispatcher()  # the root dispatcher: every component's events reach it
        dispatcher.add_event_handler(recorder)
        agent = FunctionAgent(tools=[catalog_tool(log)], llm=llm, system_prompt=SHOP_SYSTEM)
        meter = _common.CallMeter(llm.llm, lambda: llm.stats()["adapter"]["misses"])
        try:
            answer = str(await agent.run(user_msg=user_message(question, pic)))
        finally:
            dispatcher.event_handlers.remove(recorder)
        calls, misses = meter.read()
        runs.append(_common.run_record(label, question, pic, answer, log.steps, calls, misses))
    return runs


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    clip = _common.introduce("02 LlamaIndex FunctionAgent over CachedMultiModalLLM")

    llm = CachedMultiModalLLM(llm=llamaindex_llm(), image_encoder=clip)  # in-memory cache
    runs = asyncio.run(run_tasks(llm, _common.shop_tasks()))
    for run in runs:
        print(f"[{run['label']}] {run['question']!r} about a {run['picture']}")
        n = 0
        for step in run["steps"]:
            if "model" in step:
                n += 1
                print(f"  step {n}: model call {_common.served(step)}")
            else:
                print(f"          tool {step['tool']}")
        print(f"  answer {run['answer']!r}; model calls in this run: {run['model_calls']}\n")

    summary = _common.agent_summary("02_llamaindex_agent", llm.stats(), runs)
    llm.engine.close()
    return summary


if __name__ == "__main__":
    main()
