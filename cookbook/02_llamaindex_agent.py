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
from _common import Picture, llamaindex_llm, picture, tier_of
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent, LLMChatStartEvent
from llama_index.core.llms import ChatMessage, ImageBlock, TextBlock
from llama_index.core.tools import FunctionTool

from mlc_integrations import CachedMultiModalLLM
from mlc_integrations.eval.easyvqa import COLORS, SHAPES

SYSTEM = ("You are a toy shop assistant. Look at the customer's picture, then use the "
          "catalog_price tool with the colour and shape you see to quote the price.")
QUESTION = "What is the price of the shape in this picture?"
PARAPHRASES = ("Tell me the price of the shape in this picture.", "What is the price of the shape in this image?")


def price_of(color: str, shape: str) -> str:
    """The toy shop's catalog (example 01's): a price per shape, 20 cents more per colour down the list."""
    if shape not in SHAPES or color not in COLORS:
        return f"no catalog entry for a {color} {shape}"
    cents = {"circle": 300, "rectangle": 450, "triangle": 250}[shape] + 20 * COLORS.index(color)
    return f"${cents // 100}.{cents % 100:02d}"


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
        agent = FunctionAgent(tools=[catalog_tool(log)], llm=llm, system_prompt=SYSTEM)
        calls_before, misses_before = _common.model_calls(llm.llm, 0), llm.stats()["llamaindex"]["misses"]
        try:
            answer = str(await agent.run(user_msg=user_message(question, pic)))
        finally:
            dispatcher.event_handlers.remove(recorder)
        misses = llm.stats()["llamaindex"]["misses"] - misses_before
        calls = _common.model_calls(llm.llm, calls_before + misses) - calls_before
        runs.append({"label": label, "question": question, "picture": pic.name, "answer": answer,
                     "steps": log.steps, "model_calls": calls, "cache_misses": misses,
                     "correct": price_of(pic.color, pic.shape) in answer})
    return runs


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    clip = _common.offline_clip_model()
    print("02 LlamaIndex FunctionAgent over CachedMultiModalLLM")
    print(_common.describe_setup(clip) + "\n")

    llm = CachedMultiModalLLM(llm=llamaindex_llm(), clip_model=clip)  # in-memory cache
    blue_circle, red_triangle = picture("blue", "circle"), picture("red", "triangle")
    tasks = [
        ("task", QUESTION, blue_circle),
        ("same task again", QUESTION, blue_circle),
        ("paraphrase 1", PARAPHRASES[0], blue_circle),
        ("paraphrase 2", PARAPHRASES[1], blue_circle),
        ("different picture", QUESTION, red_triangle),
    ]
    runs = asyncio.run(run_tasks(llm, tasks))
    for run in runs:
        print(f"[{run['label']}] {run['question']!r} about a {run['picture']}")
        n = 0
        for step in run["steps"]:
            if "model" in step:
                n += 1
                served = "MISS, model called" if step["model"] == "miss" else f"CACHE HIT {step['why']}"
                print(f"  step {n}: model call {served}")
            else:
                print(f"          tool {step['tool']}")
        print(f"  answer {run['answer']!r}; model calls in this run: {run['model_calls']}\n")

    stats = llm.stats()
    model_steps = [s for r in runs for s in r["steps"] if "model" in s]
    summary = {
        "example": "02_llamaindex_agent",
        "provider": _common.provider(),
        "l2": stats["config"]["tiers"]["L2"],
        "runs": runs,
        "model_calls": sum(r["model_calls"] for r in runs),
        "model_calls_without_cache": len(model_steps),
        "hits_by_tier": {t: v.get("hit", 0) for t, v in stats["tiers"].items()},
        "all_correct": all(r["correct"] for r in runs),
    }
    print(f"summary: {summary['model_calls']} model calls instead of {summary['model_calls_without_cache']}; "
          f"hits by tier {summary['hits_by_tier']}; every answer has the catalog price: {summary['all_correct']}")
    llm.engine.close()
    return summary


if __name__ == "__main__":
    main()
