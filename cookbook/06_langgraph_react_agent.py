"""06 - A LangGraph ReAct agent that streams its model's tokens, through the cache.

What it shows
    LangGraph's prebuilt ``create_react_agent`` with ``CachedChatModel`` as its model.
    The agent looks at a customer's picture, calls the ``catalog_price`` tool with the
    colour and shape it sees, and answers with the price. The graph is run the way chat
    UIs run it, ``agent.stream(..., stream_mode="messages")``: token by token. On that
    path LangChain never consults a ``BaseCache`` (``set_llm_cache`` caches nothing);
    the wrapper caches it anyway. The same task runs twice: the second run makes zero
    model calls and its answer still arrives token by token, replayed from the cache.
    Then a paraphrased task (served by L1, the text-semantic tier) and the same task
    about another picture (a miss: the model is called). The tool always runs: only
    model calls are cached.

Why a replayed run matches step after step
    A cached tool call carries its original call id, so the tool message LangGraph
    builds from it is the same as the first run's, and the agent's second model call
    (question + tool call + tool result) is the same request again.

Run it
    ./dev python cookbook/06_langgraph_react_agent.py

Real provider (optional; the default is an offline STAND-IN model, not an LLM,
labelled as such in the output; it answers in one piece, a real model streams)
    MLC_COOKBOOK_PROVIDER=openai  -> langchain_openai.ChatOpenAI   (pip install langchain-openai; OPENAI_API_KEY)
    MLC_COOKBOOK_PROVIDER=ollama  -> langchain_ollama.ChatOllama   (pip install langchain-ollama; a running Ollama)
    MLC_COOKBOOK_MODEL=<name> picks the model; it must take images and call tools.
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any, Optional, Sequence

import _common
from _common import SHOP_SYSTEM, Picture, langchain_chat_model, langchain_image_block
from langchain_core.messages import AIMessageChunk, HumanMessage
from langgraph.prebuilt import create_react_agent
from langgraph.warnings import LangGraphDeprecatedSinceV10

from mlc_integrations import CachedChatModel


def build_agent(model: CachedChatModel) -> Any:
    # LangGraph 1.x marks the prebuilt agent as moved to `langchain.agents.create_agent`
    # (the separate `langchain` package); the prebuilt one is what `langgraph` ships.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
        return create_react_agent(model, [_common.langchain_catalog_tool()], prompt=SHOP_SYSTEM)


def run_agent(agent: Any, model: CachedChatModel, question: str, pic: Picture) -> dict[str, Any]:
    """One agent run, streamed token by token; which model calls the cache served."""
    message = HumanMessage(content=[{"type": "text", "text": question}, langchain_image_block(pic)])
    replies: dict[str, list[AIMessageChunk]] = {}  # the chunks of each model call: one message id per call
    tools: list[str] = []
    with model.track() as seen:  # every lookup of this run, from the threads LangGraph runs nodes in
        for chunk, meta in agent.stream({"messages": [message]}, stream_mode="messages"):
            if isinstance(chunk, AIMessageChunk) and meta.get("langgraph_node") == "agent":
                replies.setdefault(str(chunk.id), []).append(chunk)
            elif chunk.type == "tool":
                tools.append(f"{chunk.name} -> {chunk.content}")
    steps = []
    for record, chunks in zip(seen.records, replies.values()):
        merged = chunks[0]
        for c in chunks[1:]:
            merged = merged + c
        steps.append({"model": record.hit.tier if record.hit else "miss", "why": record.explain(),
                      "chunks": sum(1 for c in chunks if c.content or c.tool_call_chunks), "text": str(merged.content),
                      "tool_calls": [(c["name"], c["args"]) for c in merged.tool_calls]})
    return {"answer": steps[-1]["text"] if steps else "", "steps": steps, "tools": tools}


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    clip = _common.introduce("06 LangGraph ReAct agent, streamed token by token, over CachedChatModel")

    inner = langchain_chat_model()
    model = CachedChatModel(inner, persist_directory=None, image_encoder=clip)
    agent = build_agent(model)
    runs = []
    for label, question, pic in _common.shop_tasks(paraphrases=1):
        meter = _common.CallMeter(inner, lambda: model.stats()["adapter"]["misses"])
        streamed = run_agent(agent, model, question, pic)
        calls, misses = meter.read()
        run = _common.run_record(label, question, pic, streamed["answer"], streamed["steps"], calls, misses,
                                 tools=streamed["tools"])
        runs.append(run)
        print(f"[{label}] {question!r} about a {pic.name}")
        for n, step in enumerate(run["steps"], 1):
            action = f"tool call {step['tool_calls']}" if step["tool_calls"] else f"answer {step['text']!r}"
            print(f"  model call {n}: {_common.served(step):60} {step['chunks']:2} streamed chunk(s) -> {action}")
        print(f"  tools run: {run['tools']}; model calls in this run: {calls}\n")

    summary = _common.agent_summary("06_langgraph_react_agent", model.stats(), runs)
    model.close()
    return summary


if __name__ == "__main__":
    main()
