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
from _common import SHOP_SYSTEM, Picture, langchain_chat_model, langchain_image_block, tier_of
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from mlc_integrations import MultimodalSemanticCache


CATALOG_PRICE = _common.langchain_catalog_tool()  # the shop's catalog, a LangChain @tool
TOOLS = {CATALOG_PRICE.name: CATALOG_PRICE}


def run_agent(model: Any, cache: MultimodalSemanticCache, question: str, pic: Picture,
              max_steps: int = 4) -> tuple[str, list[dict[str, Any]]]:
    """One agent run: call the model, run the tools it asks for, until it answers."""
    bound = model.bind_tools(list(TOOLS.values()))
    messages: list[BaseMessage] = [
        SystemMessage(SHOP_SYSTEM),
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
    clip = _common.introduce("01 LangChain tool-calling agent over a cached multimodal model")

    cache = MultimodalSemanticCache(persist_directory=None, image_encoder=clip)
    model = langchain_chat_model(cache=cache)
    runs = []
    for label, question, pic in _common.shop_tasks():
        meter = _common.CallMeter(model, lambda: cache.stats()["adapter"]["misses"])
        answer, steps = run_agent(model, cache, question, pic)
        calls, misses = meter.read()
        runs.append(_common.run_record(label, question, pic, answer, steps, calls, misses))
        print(f"[{label}] {question!r} about a {pic.name}")
        for n, step in enumerate(steps, 1):
            action = f"tool {step['tool']}" if "tool" in step else f"answer {step['answer']!r}"
            print(f"  step {n}: model call {_common.served(step):62} -> {action}")
        print(f"  model calls in this run: {calls}\n")

    summary = _common.agent_summary("01_langchain_agent", cache.stats(), runs)
    cache.close()
    return summary


if __name__ == "__main__":
    main()
