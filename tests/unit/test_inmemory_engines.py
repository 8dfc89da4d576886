"""Many in-memory caches in one process: every acknowledged write is found.

Chroma shares one process-wide System among its in-memory clients and publishes it
before it has started, so engines opened from several threads at once used to hand each
other a half-started System (and the failing one then released it): writes were dropped
with "no attribute 'bindings'" or "Could not connect to tenant". The race only exists
while the process has no Chroma System yet, so it runs in a fresh interpreter, which
forgets chromadb's System cache before each of three rounds (as a new process starts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r'''
import json, sys, threading
sys.path.insert(0, sys.argv[1])
from mlc_integrations import CacheRequest, MLCEngine
from mlc_integrations.llamaindex import CachedMultiModalLLM
from llama_index.core.llms import ChatMessage
from tests.unit._fake_llms import VisionEchoLLM

N = 4
ROUNDS = 3
found = dropped = 0
errors = []

def engine_body(i, barrier, engines):
    try:
        barrier.wait()
        e = MLCEngine(image_encoder=None)
        engines[i] = e
        e.update(CacheRequest(text=f"Which river flows through city number {i}?"), {"text": f"river {i}"})
    except Exception as exc:  # reported, not swallowed
        errors.append(repr(exc))

def wrapper_body(i, barrier, wrappers):
    try:
        barrier.wait()
        w = CachedMultiModalLLM(VisionEchoLLM(), image_encoder=None)
        wrappers[i] = w
        w.chat([ChatMessage(role="user", content=f"Name the tallest tower of town number {i}.")])
    except Exception as exc:
        errors.append(repr(exc))

for _ in range(ROUNDS):
    # Each round starts as a fresh process does: no Chroma System exists yet.
    from chromadb.api.shared_system_client import SharedSystemClient
    SharedSystemClient.clear_system_cache()
    barrier = threading.Barrier(2 * N)
    engines, wrappers = [None] * N, [None] * N
    threads = [threading.Thread(target=engine_body, args=(i, barrier, engines)) for i in range(N)]
    threads += [threading.Thread(target=wrapper_body, args=(i, barrier, wrappers)) for i in range(N)]
    for t in threads: t.start()
    for t in threads: t.join()
    for i, e in enumerate(engines):
        e.flush()
        found += e.lookup(CacheRequest(text=f"Which river flows through city number {i}?")) is not None
        dropped += e.stats()["updates_failed"]
    for i, w in enumerate(wrappers):
        calls = len(w.llm.calls)
        w.chat([ChatMessage(role="user", content=f"Name the tallest tower of town number {i}.")])
        found += len(w.llm.calls) == calls   # served from the cache: the model was not called again
        w.close()
    for e in engines:
        e.close()
print(json.dumps({"found": found, "expected": 2 * N * ROUNDS, "errors": errors, "dropped": dropped}))
'''


def test_in_memory_engines_and_wrappers_opened_from_threads_keep_every_write() -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", ANONYMIZED_TELEMETRY="False")
    out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT)], capture_output=True, text=True,
                         timeout=300, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["errors"] == []
    assert result["dropped"] == 0, out.stderr[-3000:]
    assert result["found"] == result["expected"], out.stderr[-3000:]
    assert "write-behind failed" not in out.stderr and "lookup failed" not in out.stderr, out.stderr[-3000:]
