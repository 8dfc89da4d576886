"""05 - One cache shared by several processes through a Chroma server.

What it shows
    Two application processes (worker A, then worker B) each build their own
    ``MultimodalSemanticCache(chroma_host=..., chroma_port=...)`` pointing at one Chroma
    server, and their own chat model. Worker A asks two questions about a picture:
    misses, its model answers, the answers are stored in the server. Worker B, a
    separate process with its own models and its own memory, then asks:

    * A's question word for word            -> L0.5 hit on A's entry, no model call
    * a paraphrase of it                      -> L1 hit on A's entry, no model call
    * the question about another photo of the same kind of object
                                              -> L2 (image + text) decides; printed either way
    * the question about a different picture -> miss: B's model answers

    Each answer says which process's model produced it (the stand-in records its process
    id in the stored message), so "B reused what A computed" is visible, not assumed.

    With no ``--chroma-host`` the script starts a Chroma server itself (``chroma run``
    on 127.0.0.1, a free port, a temporary data directory) and stops it at the end.
    Each run uses fresh collections (``--collection-prefix``) so that it starts empty.

Run it
    ./dev python cookbook/05_shared_cache_server.py
    ./dev python cookbook/05_shared_cache_server.py --chroma-host 127.0.0.1 --chroma-port 8000   # your server

Real provider (optional; the default is an offline stand-in model, labelled as such)
    MLC_COOKBOOK_PROVIDER=openai  -> langchain_openai.ChatOpenAI   (pip install langchain-openai; OPENAI_API_KEY)
    MLC_COOKBOOK_PROVIDER=ollama  -> langchain_ollama.ChatOllama   (pip install langchain-ollama; a running Ollama)
    MLC_COOKBOOK_MODEL=<name> picks a vision model. (A real model's answers carry no
    process id; the entry ids show the reuse instead.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from typing import Any, Optional, Sequence

import _common
from _common import langchain_chat_model, langchain_image_block, picture, tier_of, true_answer
from langchain_core.messages import HumanMessage

from mlc_integrations import MultimodalSemanticCache
from mlc_integrations.verify import normalize_answer
from mlc_integrations.ops.server import ChromaServer
from mlc_integrations import StorageOptions

RESULT_PREFIX = "RESULT-JSON: "
COLOR_Q = "What color is the shape?"


def worker_tasks(name: str) -> list[tuple[str, str, Any]]:
    """(label, question, picture) for each worker."""
    blue_circle = picture("blue", "circle")
    if name == "A":
        return [("compute", COLOR_Q, blue_circle),
                ("compute", "What shape is in the image?", blue_circle)]
    return [
        ("A's question, same picture", COLOR_Q, blue_circle),
        ("paraphrase, same picture", "What is the color of the shape?", blue_circle),
        ("another photo of a blue circle", COLOR_Q, picture("blue", "circle", nth=1)),
        ("different picture", COLOR_Q, picture("red", "triangle")),
    ]


def run_worker(name: str, host: str, port: int, prefix: str) -> dict[str, Any]:
    """One application process: its own cache object and model, the shared server's data."""
    cache = MultimodalSemanticCache(chroma_host=host, chroma_port=port, image_encoder=_common.offline_clip_model(), storage=StorageOptions(collection_prefix=prefix))
    model = langchain_chat_model(cache=cache)
    steps = []
    for label, question, pic in worker_tasks(name):
        reply = model.invoke([HumanMessage(content=[{"type": "text", "text": question}, langchain_image_block(pic)])])
        hit = cache.last_hit
        truth = true_answer(question, pic.color, pic.shape)
        steps.append({
            "label": label, "question": question, "picture": pic.name,
            "cache": tier_of(hit), "why": hit.explain() if hit else "model called",
            "entry_id": hit.entry_id if hit else None,
            "answer": str(reply.content), "truth": truth,
            "correct": normalize_answer(str(reply.content)).strip(".") == truth,
            "produced_by_pid": reply.response_metadata.get("produced_by_pid"),
        })
    result = {"worker": name, "pid": os.getpid(), "steps": steps,
              "model_calls": _common.model_calls(model, sum(s["cache"] == "miss" for s in steps)),
              "entries_after": cache.engine.count()}  # count() waits for the write-behind queue
    cache.close()
    return result


def spawn_worker(name: str, host: str, port: int, prefix: str) -> dict[str, Any]:
    """Run a worker in a new Python process and read its result line."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", name,
           "--chroma-host", host, "--chroma-port", str(port), "--collection-prefix", prefix]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {name} failed with exit code {proc.returncode}:\n{proc.stderr[-3000:]}")
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    raise RuntimeError(f"worker {name} printed no result:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def show(result: dict[str, Any], pids: dict[int, str]) -> None:
    print(f"worker {result['worker']} (pid {result['pid']}): {result['model_calls']} model calls, "
          f"{result['entries_after']} entries in the shared cache afterwards")
    for s in result["steps"]:
        served = "MISS, model called" if s["cache"] == "miss" else f"CACHE HIT {s['why']}"
        made_by = pids.get(s["produced_by_pid"], "?")
        print(f"  {s['label']:32} {s['question']!r:36} -> {s['answer']!r:9} {served}; "
              f"answer computed by worker {made_by}")


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chroma-host", help="a running Chroma server (default: start one on 127.0.0.1)")
    parser.add_argument("--chroma-port", type=int, default=8000)
    parser.add_argument("--collection-prefix", default=None, help="collection names (default: fresh per run)")
    parser.add_argument("--worker", choices=("A", "B"), help=argparse.SUPPRESS)  # internal: run as a worker
    args = parser.parse_args(argv)
    prefix = args.collection_prefix or f"cookbook05-{uuid.uuid4().hex[:8]}"

    if args.worker:
        result = run_worker(args.worker, args.chroma_host, args.chroma_port, prefix)
        print(RESULT_PREFIX + json.dumps(result), flush=True)
        return result

    print("05 one cache shared by two processes through a Chroma server")
    print(_common.describe_setup(_common.offline_clip_model()).replace("in-memory Chroma", "Chroma server"))
    server: Optional[ChromaServer] = None
    host, port = args.chroma_host, args.chroma_port
    if host is None:
        server = ChromaServer().start()  # 127.0.0.1, a free port, a temporary data directory
        host, port = server.host, server.port
        print(f"started a Chroma server at {server.url} (pid {server.pid}); it stops at the end")
    else:
        print(f"using the Chroma server at {host}:{port}")
    print(f"collections: {prefix}_*\n")
    try:
        a = spawn_worker("A", host, port, prefix)
        b = spawn_worker("B", host, port, prefix)
    finally:
        if server is not None:
            server.close()
    pids = {a["pid"]: "A", b["pid"]: "B"}
    show(a, pids)
    show(b, pids)

    a_pid = a["pid"]
    reused = [s for s in b["steps"] if s["cache"] != "miss" and s["produced_by_pid"] == a_pid]
    summary = {
        "example": "05_shared_cache_server",
        "provider": _common.provider(),
        "server": f"{host}:{port}",
        "server_started_here": server is not None,
        "worker_a": a,
        "worker_b": b,
        "b_steps_served_from_cache": sum(s["cache"] != "miss" for s in b["steps"]),
        "b_steps_reusing_a_answers": len(reused),
        "model_calls": a["model_calls"] + b["model_calls"],
        "model_calls_without_cache": len(a["steps"]) + len(b["steps"]),
        "wrong_answers": sum(not s["correct"] for s in a["steps"] + b["steps"]),
    }
    print(f"\nsummary: worker B answered {summary['b_steps_served_from_cache']}/{len(b['steps'])} questions from the "
          f"shared cache, {summary['b_steps_reusing_a_answers']} with answers worker A's model computed; "
          f"{summary['model_calls']} model calls instead of {summary['model_calls_without_cache']}; "
          f"wrong answers: {summary['wrong_answers']}")
    return summary


if __name__ == "__main__":
    main()
