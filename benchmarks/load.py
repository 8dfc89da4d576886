"""Load benchmark: N application processes x M mixed lookups/updates, embedded vs server.

Each process runs the same kind of traffic an application would: look a request up,
and on a miss call the "model" and store its answer (update). Requests are easy-vqa
(picture, question) pairs with known answers, drawn with a skewed popularity so
repeats happen, in four forms:

* as asked before (L0.5 exact hit expected),
* reworded ("please answer: ..."; L1 expected),
* the same picture re-encoded as JPEG, same question (L2 expected: the pixels differ),
* a pair never seen (a miss, then an update).

Modes, run one after the other in one invocation and printed side by side:

* ``embedded``: each process has its own persistent Chroma directory (an embedded
  cache cannot be shared between processes: nothing one stores is seen by the others);
* ``server``: all processes share one ``chroma run`` server on 127.0.0.1 (free port,
  started and stopped here), so what one stores the others hit.

Reported per mode: lookups/s and operations/s over all processes, hit rate, wrong
hits (reused answer differs from the ground-truth answer of the new request), and
p50/p99 latency of each outcome (L0.5/L1/L2 hit, miss, update). Bounded: M operations
per process and ``--max-seconds`` per mode, loopback only.

    ./dev python benchmarks/load.py                       # 4 processes x 200 operations
    ./dev python benchmarks/load.py --processes 2 --ops 60 # quicker
    ./dev python benchmarks/load.py --json load.json      # also write the figures
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing as mp
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional
from mlc_integrations import StorageOptions

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

OUTCOMES = ("L0.5 hit", "L1 hit", "L2 hit", "miss", "update")
CLIP_MODEL = "mlc-easyvqa-tiny"  # the project's offline open_clip model (no hub download)


def workload(n_pairs: int, seed: int = 0) -> list[tuple[int, str, str]]:
    """(image id, question, answer) pairs from easy-vqa's test split, the same in every process."""
    import easy_vqa

    questions, answers, image_ids = easy_vqa.get_test_questions()
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    return [(int(image_ids[i]), questions[i], answers[i]) for i in order[:n_pairs]]


def worker(mode: str, wid: int, n_workers: int, ops: int, pool_size: int, deadline_s: float, target: dict[str, Any],
           barrier: Any, out: Any, torch_threads: int) -> None:
    try:
        import torch

        # N processes each using every core for one small model call oversubscribe the CPU;
        # on a busy 2-core machine that made a MiniLM call ~14x slower (docs/operations.md).
        torch.set_num_threads(torch_threads)
        out.put(_worker(mode, wid, n_workers, ops, pool_size, deadline_s, target, barrier))
    except BaseException as exc:  # report instead of hanging the parent
        try:
            barrier.abort()
        except Exception:
            pass
        out.put({"worker": wid, "error": f"{type(exc).__name__}: {exc}"})


def _worker(mode: str, wid: int, n_workers: int, ops: int, pool_size: int, deadline_s: float, target: dict[str, Any],
            barrier: Any) -> dict[str, Any]:
    import easy_vqa
    from PIL import Image

    from mlc_integrations import CacheRequest, MLCEngine

    if mode == "server":
        eng = MLCEngine(chroma_host=target["host"], chroma_port=target["port"], image_encoder=CLIP_MODEL, storage=StorageOptions(collection_prefix="load"))
    else:
        eng = MLCEngine(persist_directory=str(Path(target["dir"]) / f"proc-{wid}"), image_encoder=CLIP_MODEL, storage=StorageOptions(collection_prefix="load"))
    paths = easy_vqa.get_test_image_paths()
    pool = workload(pool_size + n_workers * ops)
    shared, fresh = pool[:pool_size], pool[pool_size + wid * ops: pool_size + (wid + 1) * ops]
    images: dict[int, Any] = {}
    jpegs: dict[int, bytes] = {}

    def picture(img_id: int) -> Any:
        if img_id not in images:
            images[img_id] = Image.open(paths[img_id]).convert("RGB")
        return images[img_id]

    def jpeg(img_id: int) -> bytes:
        if img_id not in jpegs:
            buf = io.BytesIO()
            picture(img_id).save(buf, "JPEG", quality=90)
            jpegs[img_id] = buf.getvalue()
        return jpegs[img_id]

    # Warm up: load both models and open the collections outside the timed phase.
    warm = CacheRequest(text="warm up question", images=[picture(shared[0][0])], scope=f"warmup-{wid}")
    eng.update(warm, "w")
    eng.lookup(warm)
    eng.lookup(CacheRequest(text="warm up, reworded", images=[jpeg(shared[0][0])], scope=f"warmup-{wid}"))

    rng = random.Random(1000 + wid)
    weights = [1.0 / (r + 1) ** 0.8 for r in range(len(shared))]  # skewed popularity
    plan = []
    for i in range(ops):
        r = rng.random()
        if r < 0.10:
            plan.append(("new", fresh[i]))
        else:
            pair = rng.choices(shared, weights)[0]
            plan.append(("reworded" if r < 0.30 else "reencoded" if r < 0.45 else "asked", pair))
    for _, (img_id, _, _) in plan:  # decode pictures before the clock starts
        picture(img_id)
        jpeg(img_id)
    eng.reset_stats()

    lat: dict[str, list[float]] = {k: [] for k in OUTCOMES}
    wrong = done = 0
    barrier.wait(timeout=600)
    t_start = time.time()
    stop_at = time.perf_counter() + deadline_s
    for form, (img_id, question, answer) in plan:
        if time.perf_counter() > stop_at:
            break
        text = "please answer: " + question if form == "reworded" else question
        image = jpeg(img_id) if form == "reencoded" else picture(img_id)
        req = CacheRequest(text=text, images=[image], scope="easy-vqa-model;t=0")
        t0 = time.perf_counter()
        hit = eng.lookup(req)
        ms = (time.perf_counter() - t0) * 1000.0
        done += 1
        if hit is None:
            lat["miss"].append(ms)
            t0 = time.perf_counter()
            eng.update(req, {"answer": answer})  # the model's answer, stored for the next asker
            lat["update"].append((time.perf_counter() - t0) * 1000.0)
        else:
            lat[f"{hit.tier} hit"].append(ms)
            wrong += hit.payload.get("answer") != answer
    t_end = time.time()
    st = eng.stats()
    eng.close()
    return {"worker": wid, "lookups": done, "updates": len(lat["update"]), "wrong": wrong, "lat": lat,
            "t_start": t_start, "t_end": t_end, "errors": st["errors"], "updates_failed": st["updates_failed"]}


def run_mode(mode: str, n_workers: int, ops: int, pool_size: int, max_seconds: float, workdir: Path,
             torch_threads: int = 1) -> dict[str, Any]:
    from mlc_integrations.ops.server import ChromaServer

    server: Optional[ChromaServer] = None
    target: dict[str, Any] = {"dir": str(workdir / mode)}
    if mode == "server":
        server = ChromaServer(workdir / "server-data")
        server.start()
        target = {"host": server.host, "port": server.port}
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(n_workers), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(mode, w, n_workers, ops, pool_size, max_seconds, target, barrier, out,
                                                      torch_threads))
             for w in range(n_workers)]
    try:
        for p in procs:
            p.start()
        results = [out.get(timeout=max_seconds + 900) for _ in procs]
    finally:
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
        if server is not None:
            server.close()
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(f"{mode}: worker failed: {errors}")
    return summarize(mode, n_workers, results)


def _pct(values: list[float], q: float) -> Optional[float]:
    if not values:
        return None
    import numpy as np

    return float(np.percentile(np.asarray(values), q))


def summarize(mode: str, n_workers: int, results: list[dict[str, Any]]) -> dict[str, Any]:
    lat: dict[str, list[float]] = {k: [] for k in OUTCOMES}
    for r in results:
        for k in OUTCOMES:
            lat[k] += r["lat"][k]
    wall = max(r["t_end"] for r in results) - min(r["t_start"] for r in results)
    lookups = sum(r["lookups"] for r in results)
    updates = sum(r["updates"] for r in results)
    hits = sum(len(lat[k]) for k in ("L0.5 hit", "L1 hit", "L2 hit"))
    errors: dict[str, int] = {}
    for r in results:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v
    return {
        "mode": mode,
        "processes": n_workers,
        "lookups": lookups,
        "updates": updates,
        "wall_s": wall,
        "lookups_per_s": lookups / wall if wall else 0.0,
        "ops_per_s": (lookups + updates) / wall if wall else 0.0,
        "hit_rate": hits / lookups if lookups else 0.0,
        "wrong_hits": sum(r["wrong"] for r in results),
        "errors": errors,
        "latency_ms": {k: {"n": len(v), "p50": _pct(v, 50), "p99": _pct(v, 99)} for k, v in lat.items()},
    }


def table(rows: list[dict[str, Any]]) -> str:
    def cell(d: dict[str, Any]) -> str:
        if not d["n"]:
            return "-"
        return f"{d['p50']:.1f} / {d['p99']:.1f} (n={d['n']})"

    head = ["", *[f"{r['mode']} x{r['processes']}" for r in rows]]
    lines = [
        ["lookups / s (all processes)", *[f"{r['lookups_per_s']:.1f}" for r in rows]],
        ["ops / s (lookups + updates)", *[f"{r['ops_per_s']:.1f}" for r in rows]],
        ["lookups, updates", *[f"{r['lookups']}, {r['updates']}" for r in rows]],
        ["wall time s", *[f"{r['wall_s']:.1f}" for r in rows]],
        ["hit rate", *[f"{r['hit_rate']:.1%}" for r in rows]],
        ["wrong hits (answer != ground truth)", *[str(r["wrong_hits"]) for r in rows]],
        ["cache errors", *[str(sum(r["errors"].values())) for r in rows]],
        *[[f"{k} ms p50 / p99", *[cell(r["latency_ms"][k]) for r in rows]] for k in OUTCOMES],
    ]
    widths = [max(len(str(x[i])) for x in [head, *lines]) for i in range(len(head))]
    fmt = lambda row: "| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |"  # noqa: E731
    return "\n".join([fmt(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(fmt, lines)])


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=4, help="application processes per mode (default 4)")
    ap.add_argument("--ops", type=int, default=200, help="lookups per process (misses add an update each; default 200)")
    ap.add_argument("--pool", type=int, default=150, help="distinct (picture, question) pairs asked repeatedly")
    ap.add_argument("--max-seconds", type=float, default=300.0, help="cap on the timed phase per mode")
    ap.add_argument("--modes", default="embedded,server", help="comma-separated: embedded, server")
    ap.add_argument("--torch-threads", type=int, default=1, help="torch threads per process (default 1)")
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    if not (1 <= args.processes <= 16 and 1 <= args.ops <= 10_000):
        ap.error("--processes must be 1..16 and --ops 1..10000 (the benchmark is bounded on purpose)")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    workdir = Path(tempfile.mkdtemp(prefix="mlc-load-"))
    rows = []
    try:
        for mode in modes:
            load = os.getloadavg()[0]
            print(f"[load] {mode}: {args.processes} processes x {args.ops} lookups (load average {load:.1f}) ...",
                  file=sys.stderr, flush=True)
            rows.append(run_mode(mode, args.processes, args.ops, args.pool, args.max_seconds, workdir,
                                 args.torch_threads))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nLoad benchmark: {args.processes} processes x {args.ops} lookups, pool of {args.pool} pairs, "
          f"{os.cpu_count()} CPUs, {args.torch_threads} torch thread(s) per process, CLIP {CLIP_MODEL}\n")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
