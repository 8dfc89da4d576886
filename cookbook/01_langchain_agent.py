"""01 - A LangChain tool-calling agent whose multimodal model calls are cached.

What it shows
    A shop assistant agent (langchain-core ``bind_tools`` + ``ToolMessage`` loop) looks
    at a customer's picture, calls the ``catalog_price`` tool with the colour and shape
    it sees, and answers with the price. Every model call goes through
    ``MultimodalSemanticCache``. The same task runs twice (the second run replays each
    step from the cache: zero model calls), then two paraphrased tasks (served from
    the cache by L1, the text-semantic tier), then the same task about a different
    picture (a miss: the model is called). For each step the script prints whether the
    model call was served from the cache and by which tier. The tool itself always runs:
    only model calls are cached.

Why the agent's second step is safe to reuse
    The cache keys the last human turn (text + picture pixels) and compares every other
    message exactly, including the AI tool call and its result. A cached tool call
    carries its original call id, so a replayed run produces the same tool message and
    the next step matches too.

Run it
    ./dev python cookbook/01_langchain_agent.py

Real provider (optional; the default is an offline stand-in model, labelled as such)
    MLC_COOKBOOK_PROVIDER=openai  -> langchain_openai.ChatOpenAI   (pip install langchain-openai; OPENAI_API_KEY)
    MLC_COOKBOOK_PROVIDER=ollama  -> langchain_ollama.ChatOllama   (pip install langchain-ollama; a running Ollama)
    MLC_COOKBOOK_MODEL=<name> picks the model; it must take images and call tools.
"""

from __future__ import annotations

import argparse
from typing import Any, Optional, Sequence

import _common
from _common import Picture, langchain_chat_model, langchain_image_block, picture, tier_of
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool

from mlc_integrations import MultimodalSemanticCache
from mlc_integrations.eval.easyvqa import COLORS, SHAPES

SYSTEM = ("You are a toy shop assistant. Look at the customer's picture, then use the "
          "catalog_price tool with the colour and shape you see to quote the price.")
QUESTION = "What is the price of the shape in this picture?"
PARAPHRASES = ("Tell me the price of the shape in this picture.", "What is the price of the shape in this image?")


def price_of(color: str, shape: str) -> str:
    """The toy shop's catalog: a price per shape, 20 cents more per colour down the list."""
    if shape not in SHAPES or color not in COLORS:
        return f"no catalog entry for a {color} {shape}"
    cents = {"circle": 300, "rectangle": 450, "triangle": 250}[shape] + 20 * COLORS.index(color)
    return f"${cents // 100}.{cents % 100:02d}"


@tool
def catalog_price(color: str, shape: str) -> str:
    """Look up the price of a shape of the given colour in the shop's catalog."""
    return price_of(color.lower(), shape.lower())


TOOLS = {catalog_price.name: catalog_price}


def run_agent(model: Any, cache: MultimodalSemanticCache, question: str, pic: Picture,
              max_steps: int = 4) -> tuple[str, list[dict[str, Any]]]:
    """One agent run: call the model, run the tools it asks for, until it answers."""
    bound = model.bind_tools(list(TOOLS.values()))
    messages: list[BaseMessage] = [
        SystemMessage(SYSTEM),
        HumanMessage(content=[{"type": "text", "text": question}, langchain_image_block(pic)]),
    ]
    steps: list[dict[str, Any]] = []
    for _ in range(max_steps):
        reply: AIMessage = bound.invoke(messages)
        hit = cache.last_hit  # this thread's latest lookup: the call just made
        step: dict[str, Any] = {"model": tier_of(hit), "why": hit.explain() if hit else "model called"}
        messages.append(reply)
        if not reply.tool_calls:
            step["answer"] = reply.content
            steps.append(step)
            return str(reply.content), steps
        results = []
        for call in reply.tool_calls:
            result = TOOLS[call["name"]].invoke(call)  # a ToolMessage with the call's id
            messages.append(result)
            results.append(f"{call['name']}({', '.join(f'{k}={v!r}' for k, v in call['args'].items())}) -> {result.content}")
        step["tool"] = "; ".join(results)
        steps.append(step)
    return "(no answer within max_steps)", steps


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    clip = _common.offline_clip_model()
    print("01 LangChain tool-calling agent over a cached multimodal model")
    print(_common.describe_setup(clip) + "\n")

    cache = MultimodalSemanticCache(persist_directory=None, clip_model=clip)
    model = langchain_chat_model(cache=cache)
    blue_circle, red_triangle = picture("blue", "circle"), picture("red", "triangle")
    tasks = [
        ("task", QUESTION, blue_circle),
        ("same task again", QUESTION, blue_circle),
        ("paraphrase 1", PARAPHRASES[0], blue_circle),
        ("paraphrase 2", PARAPHRASES[1], blue_circle),
        ("different picture", QUESTION, red_triangle),
    ]
    runs = []
    for label, question, pic in tasks:
        before_calls, before_misses = _common.model_calls(model, 0), cache.stats()["langchain"]["misses"]
        answer, steps = run_agent(model, cache, question, pic)
        misses = cache.stats()["langchain"]["misses"] - before_misses
        calls = _common.model_calls(model, before_calls + misses) - before_calls
        expected_price = price_of(pic.color, pic.shape)
        runs.append({"label": label, "question": question, "picture": pic.name, "answer": answer,
                     "steps": steps, "model_calls": calls, "cache_misses": misses,
                     "correct": expected_price in answer})
        print(f"[{label}] {question!r} about a {pic.name}")
        for n, step in enumerate(steps, 1):
            served = "MISS, model called" if step["model"] == "miss" else f"CACHE HIT {step['why']}"
            action = f"tool {step['tool']}" if "tool" in step else f"answer {step['answer']!r}"
            print(f"  step {n}: model call {served:62} -> {action}")
        print(f"  model calls in this run: {calls}\n")

    stats = cache.stats()
    summary = {
        "example": "01_langchain_agent",
        "provider": _common.provider(),
        "l2": stats["config"]["tiers"]["L2"],
        "runs": runs,
        "model_calls": sum(r["model_calls"] for r in runs),
        "model_calls_without_cache": sum(len(r["steps"]) for r in runs),
        "hits_by_tier": {t: v.get("hit", 0) for t, v in stats["tiers"].items()},
        "all_correct": all(r["correct"] for r in runs),
    }
    print(f"summary: {summary['model_calls']} model calls instead of {summary['model_calls_without_cache']}; "
          f"hits by tier {summary['hits_by_tier']}; every answer has the catalog price: {summary['all_correct']}")
    cache.close()
    return summary


if __name__ == "__main__":
    main()
