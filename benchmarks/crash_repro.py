"""How often does a reopened embedded cache hold vectors its HNSW index cannot return (issue 14)?

Each cycle, a writer process does the crash test's mix of updates / overwrites /
deletes on one persistent cache (supplied 32-d text embeddings, no model), and is
either SIGKILLed at a random point (``--writer kill``, like tests/unit/test_crash_recovery.py)
or closes cleanly after a random number of operations (``--writer clean``). Then
``--reopens`` fresh processes each open the directory with ``--check`` as the store's
index-check mode and compare, per vector collection, the rows Chroma stores (``get``)
with what an exhaustive query returns: straight from Chroma ("raw") and through the
store ("served": pinned rows merged in).

    ./dev python benchmarks/crash_repro.py --cycles 300 --writer kill  --check never        # the bug's rate
    ./dev python benchmarks/crash_repro.py --builds 20 --cycles 3 --writer kill --check never --clustered --prefill 3000
    ./dev python benchmarks/crash_repro.py --cycles 300 --writer clean --check never        # not crash-specific
    ./dev python benchmarks/crash_repro.py --cycles 300 --writer kill  --check after_crash  # the fix
    ./dev python benchmarks/crash_repro.py --cycles 100 --writer clean --check after_crash --reopens 3  # its gap

Prints one line per cycle with a divergence and a summary; ``--json`` writes the totals.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import signal
import tempfile
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import numpy as np  # noqa: E402
from mlc_integrations import StorageOptions

DIM = 32
CENTRES = 8  # --clustered: questions around a few topics, as a real cache's embeddings are


def _vec(key: int, clustered: bool) -> list[float]:
    v = np.random.default_rng(key).normal(size=DIM)
    if clustered:  # 8 tight topics: HNSW leaves far more vectors unreachable there than in random data
        v = np.random.default_rng(key % CENTRES).normal(size=DIM) + 0.05 * v
    return (v / np.linalg.norm(v)).tolist()


def _writer(path: str, check: str, seed: int, first_key: int, n_ops: int, clustered: bool, progress: Any) -> None:
    """The crash test's operation mix; ``n_ops`` < 0 runs until killed, else closes cleanly."""
    from mlc_integrations import CacheRequest, MLCEngine

    eng = MLCEngine(persist_directory=path, image_encoder=None, storage=StorageOptions(check_index=check))
    rng = random.Random(seed)
    existing: list[int] = []
    key, done = first_key, 0
    while n_ops < 0 or done < n_ops:
        r = rng.random()
        if existing and r < 0.15:
            k = existing.pop(rng.randrange(len(existing)))
            eng.delete(eng.key(CacheRequest(text=f"question number {k}")).entry_id)
        else:
            if existing and r < 0.35:
                k = rng.choice(existing)
            else:
                k, key = key, key + 1
                existing.append(k)
            eng.update(CacheRequest(text=f"question number {k}", text_embedding=_vec(k, clustered)), {"key": k})
        done += 1
        progress.value = done
    eng.close()
    eng.store.close()


def _prefill(path: str, n: int, clustered: bool) -> None:
    """``n`` entries laid out as the engine's (response + L1 vector), written in batches."""
    from mlc_integrations.store.chroma import ChromaStore

    store = ChromaStore(persist_directory=path)
    exact, l1 = store.collection("exact"), store.collection("l1", dim=DIM)
    for s in range(0, n, 500):
        keys = range(10_000_000 + s, 10_000_000 + min(n, s + 500))
        ids = [f"prefill-{k}" for k in keys]
        exact.upsert(ids=ids, embeddings=[[1.0]] * len(ids), documents=["{}"] * len(ids), metadatas=[{"v": 1}] * len(ids))
        l1.upsert(ids=ids, embeddings=[_vec(k, clustered) for k in keys], metadatas=[{"v": 1}] * len(ids))
    store.close()


def _check(path: str, check: str, out: Any) -> None:
    from mlc_integrations.store.index_repair import VECTOR_TIERS, finds_own_vector, unreachable_ids
    from mlc_integrations.store.chroma import ChromaStore

    try:
        t0 = time.perf_counter()
        store = ChromaStore(persist_directory=path, check_index=check)
        store.client  # opening: runs the check when the mode asks for it
        open_s = time.perf_counter() - t0
        res: dict[str, Any] = {"open_s": round(open_s, 3), "index": store.index_stats(), "tiers": {}}
        names = {c.name for c in store.client.list_collections()}
        for tier in VECTOR_TIERS:
            if store.name(tier) not in names:
                continue
            raw = store.client.get_collection(store.name(tier), embedding_function=None)
            rows, unreachable = unreachable_ids(raw)
            served = store.collection(tier)
            _rows, served_missing = unreachable_ids(served)
            diag = []
            for i in unreachable[:5]:  # is the vector in the index at all, and found for itself?
                try:
                    emb = raw.get(ids=[i], include=["embeddings"])["embeddings"][0]
                    diag.append({"id": i, "readable": True, "own_query_finds": finds_own_vector(raw, i, emb)})
                except Exception as exc:
                    diag.append({"id": i, "readable": False, "error": f"{type(exc).__name__}"})
            res["tiers"][tier] = {"rows": rows, "unreachable_raw": len(unreachable),
                                  "unreachable_served": len(served_missing), "diagnosis": diag}
        store.close()
        out.put(res)
    except BaseException as exc:  # report, never hang the parent
        out.put({"error": f"{type(exc).__name__}: {exc}"})


def _cycles(ctx: Any, args: argparse.Namespace, rng: random.Random, path: str, totals: dict[str, int],
            build: int) -> None:
    if args.prefill:
        p = ctx.Process(target=_prefill, args=(path, args.prefill, args.clustered))
        p.start()
        p.join()
    for cycle in range(args.cycles):
        progress = ctx.Value("i", 0)
        n_ops = -1 if args.writer == "kill" else rng.randint(1, 150)
        w = ctx.Process(target=_writer, args=(path, args.check, args.seed * 100_000 + cycle,
                                              1_000 * (cycle + 1), n_ops, args.clustered, progress))
        w.start()
        if args.writer == "kill":
            early = cycle % 5 == 0  # as the CI test: every fifth kill lands in the first update
            deadline = time.monotonic() + 60
            while progress.value < (0 if early else 1) and time.monotonic() < deadline and w.is_alive():
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.05) if early else rng.uniform(0.0, 0.6))
            os.kill(w.pid, signal.SIGKILL)
        w.join(120)
        for _ in range(args.reopens):
            q = ctx.Queue()
            c = ctx.Process(target=_check, args=(path, args.check, q))
            c.start()
            res = q.get(timeout=300)
            c.join(60)
            if "error" in res:
                raise SystemExit(f"build {build} cycle {cycle}: checker failed: {res['error']}")
            totals["opens"] += 1
            totals["checks"] += res["index"]["index_checks"] > 0
            raw = sum(t["unreachable_raw"] for t in res["tiers"].values())
            served = sum(t["unreachable_served"] for t in res["tiers"].values())
            totals["opens_unreachable_raw"] += raw > 0
            totals["rows_unreachable_raw"] += raw
            totals["opens_unreachable_served"] += served > 0
            totals["rows_unreachable_served"] += served
            totals["max_rows"] = max([totals["max_rows"], *(t["rows"] for t in res["tiers"].values())])
            for t in res["tiers"].values():
                totals["readable"] += sum(d["readable"] for d in t["diagnosis"])
                totals["own_query_finds"] += sum(bool(d.get("own_query_finds")) for d in t["diagnosis"])
            if raw or served:
                print(f"build {build} cycle {cycle}: {json.dumps(res)}", flush=True)
        totals["cycles"] += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--writer", choices=("kill", "clean"), default="kill")
    ap.add_argument("--check", choices=("never", "after_crash", "always"), default="never")
    ap.add_argument("--reopens", type=int, default=1, help="checker processes per cycle (each rebuilds the graph)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clustered", action="store_true", help=f"vectors around {CENTRES} tight topics")
    ap.add_argument("--prefill", type=int, default=0, help="entries written in batches before the first cycle")
    ap.add_argument("--builds", type=int, default=1, help="repeat everything on this many fresh stores")
    ap.add_argument("--json", help="write the totals here")
    args = ap.parse_args()

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["numpy", "chromadb", "mlc_integrations.engine", "mlc_integrations.store.chroma"])
    rng = random.Random(args.seed)
    totals = {"builds": 0, "builds_unreachable_raw": 0, "builds_unreachable_served": 0, "cycles": 0, "opens": 0,
              "opens_unreachable_raw": 0, "rows_unreachable_raw": 0, "opens_unreachable_served": 0,
              "rows_unreachable_served": 0, "readable": 0, "own_query_finds": 0, "max_rows": 0, "checks": 0}
    t_start = time.time()
    for build in range(args.builds):
        tmp = tempfile.mkdtemp(prefix="crash-repro-")
        try:
            raw_before, served_before = totals["rows_unreachable_raw"], totals["rows_unreachable_served"]
            _cycles(ctx, args, rng, os.path.join(tmp, "cache"), totals, build)
            totals["builds"] += 1
            totals["builds_unreachable_raw"] += totals["rows_unreachable_raw"] > raw_before
            totals["builds_unreachable_served"] += totals["rows_unreachable_served"] > served_before
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    totals["seconds"] = round(time.time() - t_start, 1)
    print(f"writer={args.writer} check={args.check} reopens/cycle={args.reopens} clustered={args.clustered} "
          f"prefill={args.prefill}: "
          f"{json.dumps(totals)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(totals, args=vars(args)), f, indent=1)


if __name__ == "__main__":
    main()
