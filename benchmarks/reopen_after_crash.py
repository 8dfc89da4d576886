"""Time to reopen an embedded persistent cache after a crash, with and without the index check.

A child process fills a store laid out as the engine's (``exact``: responses under a
1-d placeholder vector; ``l1``: 384-d vectors, the all-MiniLM-L6-v2 size) with
``--entries`` entries in batches, then is SIGKILLed while the store is open (its marker
stays). Each measurement is a fresh process: open the store and answer one L1 query
("first answer"), which is where the engine pays for opening.

* ``clean, after_crash``: the marker removed by hand first, as a clean close would have,
  opened with ``check_index="after_crash"`` (the default before it became "always") -- no check;
* ``clean, always``: the same clean directory opened with the default ``check_index``
  ("always" for a persistent store) -- the store checks every vector collection;
* ``after crash``: the marker left behind, default ``check_index`` -- checked;
* ``check alone``: the seconds the check itself reported (clean, always);
* ``engine first call``: an ``MLCEngine`` (exact tier only) on the clean directory, default
  ``check_index``: seconds of its first lookup with ``warm_start=False`` (the call opens the
  store and runs the check) and after its warm start finished (the check ran in the
  background thread).

Then the cost of ``check_every_writes`` (re-checking the L1 collection every N vector
writes; N=1 is the full guarantee): mean and median ms per single-row L1 upsert for
N = 0 (off), 100 and 1, on the same store.

    ./dev python benchmarks/reopen_after_crash.py --entries 1000
    ./dev python benchmarks/reopen_after_crash.py --entries 100000
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import numpy as np  # noqa: E402
from mlc_integrations import TierOptions

DIM = 384
BATCH = 2_000


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.normal(size=(n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _fill_then_hang(path: str, entries: int, ready: Any) -> None:
    from mlc_integrations.store.chroma import ChromaStore

    store = ChromaStore(persist_directory=path)
    exact, l1 = store.collection("exact"), store.collection("l1", dim=DIM, model="bench")
    rng = np.random.default_rng(0)
    for s in range(0, entries, BATCH):
        ids = [f"e{i}" for i in range(s, min(entries, s + BATCH))]
        meta = [{"scope": "s", "ns": "n", "part": "p", "v": 1} for _ in ids]
        exact.upsert(ids=ids, embeddings=[[1.0]] * len(ids), documents=['{"answer": 1}'] * len(ids), metadatas=meta)
        l1.upsert(ids=ids, embeddings=_unit(rng, len(ids)), metadatas=meta)
    ready.set()
    time.sleep(3600)


def _reopen(path: str, check: Optional[str], out: Any) -> None:
    from mlc_integrations.store.chroma import ChromaStore

    t0 = time.perf_counter()
    store = ChromaStore(persist_directory=path, check_index=check)
    col = store.collection("l1")
    col.query(query_embeddings=_unit(np.random.default_rng(1), 1), n_results=16, include=["distances"])
    first = time.perf_counter() - t0
    checks = {t: r.seconds for t, r in store.last_index_check.items()}
    out.put({"first_answer_s": first, "check_s": sum(checks.values()), "stats": store.index_stats()})
    # no close: every measurement sees the same markers


def _engine_first_call(path: str, warm: bool, out: Any) -> None:
    from mlc_integrations import CacheRequest, MLCEngine

    eng = MLCEngine(persist_directory=path, warm_start=warm, image_encoder=None, tiers=TierOptions(l1=False))
    if eng._warm is not None:
        eng._warm.join(600)
    t0 = time.perf_counter()
    eng.lookup(CacheRequest(text="a question nobody stored"))
    first = time.perf_counter() - t0
    out.put({"first_call_s": first, "stats": eng.store.index_stats()})
    eng.close()


def _write_cost(path: str, every: int, n: int, out: Any) -> None:
    from mlc_integrations.store.chroma import ChromaStore

    store = ChromaStore(persist_directory=path, check_index="never", check_every_writes=every)
    col = store.collection("l1", dim=DIM, model="bench")
    rng = np.random.default_rng(2 + every)
    xs = []
    for i, v in enumerate(_unit(rng, n)):
        t = time.perf_counter()
        col.upsert(ids=[f"w{every}-{i}"], embeddings=[v.tolist()], metadatas=[{"part": "p"}])
        xs.append((time.perf_counter() - t) * 1000)
    out.put({"mean_ms": statistics.mean(xs), "median_ms": statistics.median(xs),
             "checks": store.index_stats()["index_checks"]})


def _run(ctx: Any, target: Any, *args: Any) -> dict[str, Any]:
    q = ctx.Queue()
    p = ctx.Process(target=target, args=(*args, q))
    p.start()
    res = q.get(timeout=3600)
    p.join(60)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--writes", type=int, default=100, help="single-row upserts timed per check_every_writes")
    args = ap.parse_args()
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["numpy", "chromadb", "mlc_integrations.store.chroma"])
    tmp = tempfile.mkdtemp(prefix="reopen-bench-")
    path = os.path.join(tmp, "cache")
    try:
        ready = ctx.Event()
        t0 = time.perf_counter()
        filler = ctx.Process(target=_fill_then_hang, args=(path, args.entries, ready))
        filler.start()
        if not ready.wait(7200):
            raise SystemExit("filler did not finish")
        os.kill(filler.pid, signal.SIGKILL)
        filler.join(30)
        print(f"{args.entries:,} entries written in {time.perf_counter() - t0:.1f} s, writer SIGKILLed")
        markers = sorted(Path(path).glob(".mlc-open-*"))
        saved = {p: p.read_text() for p in markers}

        def restore() -> None:
            for p in Path(path).glob(".mlc-open-*"):
                p.unlink()
            for p, text in saved.items():
                p.write_text(text)

        rows: dict[str, list[float]] = {"clean, after_crash": [], "clean, always": [], "after crash": [],
                                        "check alone": []}

        def clean() -> None:
            for p in Path(path).glob(".mlc-open-*"):
                p.unlink()

        for _ in range(args.repeats):
            clean()
            rows["clean, after_crash"].append(_run(ctx, _reopen, path, "after_crash")["first_answer_s"])
            clean()
            res = _run(ctx, _reopen, path, None)
            assert res["stats"]["index_checks"] >= 1, res
            rows["clean, always"].append(res["first_answer_s"])
            rows["check alone"].append(res["check_s"])
            restore()
            res = _run(ctx, _reopen, path, None)
            assert res["stats"]["index_checks"] >= 1, res
            rows["after crash"].append(res["first_answer_s"])
            print(f"  check found {res['stats']['index_unreachable']} unreachable "
                  f"({res['stats']['index_reinserted']} re-inserted, {res['stats']['index_pinned']} pinned)")
            restore()
        for warm, name in ((False, "engine first call, warm_start=False"),
                           (True, "engine first call after warm start")):
            rows[name] = []
            for _ in range(args.repeats):
                clean()
                res = _run(ctx, _engine_first_call, path, warm)
                assert res["stats"]["index_checks"] >= 1, res
                rows[name].append(res["first_call_s"])
        for name, xs in rows.items():
            print(f"{args.entries:>7,} entries, {name:>35}: median {statistics.median(xs):.3f} s "
                  f"(min {min(xs):.3f}, max {max(xs):.3f}, n={len(xs)})")
        for every in (0, 100, 1):
            res = _run(ctx, _write_cost, path, every, args.writes)
            print(f"{args.entries:>7,} entries, single-row L1 upsert, check_every_writes={every}: "
                  f"mean {res['mean_ms']:.2f} ms, median {res['median_ms']:.2f} ms ({res['checks']} checks)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
