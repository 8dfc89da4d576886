"""L1 at scale: build time, peak memory, lookup storage cost and probe recall at N entries.

    ./dev python benchmarks/scale.py                       # 1k, 100k, 1M (the 1M store: tens of minutes)
    ./dev python benchmarks/scale.py --sizes 1000 100000   # smaller
    ./dev python benchmarks/scale.py --json out.json

Each size runs in its own process (so its peak RSS is its own). The store is the engine's
own layout, written by the engine's storage layer (``EntryStore.put_many``: the exact row,
then the L1 row, with the keys and partition ``MLCEngine.key`` gives), in batches of
:data:`BATCH`, into a persistent store in a temporary directory (``--storage memory``:
Chroma in memory, as ``MLCEngine()`` makes it; it holds every row in RAM).

Vectors are random but clustered, like prompt embeddings (many users ask about the same
things): ``N / 100`` random unit centres, each entry ``normalize(centre + s * noise)`` with
``s`` such that two entries of one cluster are at cosine ~0.6 (below the L1 threshold
0.80, so a lookup has one neighbour above it, not a hundred). Two query kinds, 200 each:

* *probe*: a stored entry plus noise (cosine ~0.9 to it): a paraphrase, should hit;
* *fresh*: a new point in a stored cluster: a miss.

Lookup cost is ``MLCEngine.lookup`` with the embedding supplied (``text_embedding``) and the
verifier off, so what is timed is storage work: the exact-tier read, the Chroma L1 query and
the fetch of the hit. *Recall*: a probe's exact nearest neighbour (brute force, numpy, over
all N vectors, regenerated chunk by chunk after the peak RSS is read) is the entry the
lookup returned; for the fresh queries, Chroma's top 16 (the engine's first search step)
holds their exact nearest neighbour.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import tempfile
from typing import Any, Optional

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import numpy as np  # noqa: E402

DIM = 384
BATCH = 5000
QUERIES = 200
SEED = 11
CLUSTER_SIZE = 100
# Per-coordinate noise: cos(two members) ~ 1 / (1 + DIM s^2) = 0.6; a probe is its source
# plus noise q, cos(probe, source) ~ 1 / sqrt(1 + DIM q^2) = 0.9.
MEMBER_S = ((1 / 0.6 - 1) / DIM) ** 0.5
PROBE_S = ((1 / 0.81 - 1) / DIM) ** 0.5


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


class Clustered:
    """N clustered unit vectors, reproducible chunk by chunk (nothing holds all N at once)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.centres = _unit(np.random.default_rng([SEED, 0]).normal(size=(max(10, n // CLUSTER_SIZE), DIM)))

    def chunk(self, start: int) -> np.ndarray:
        m = min(BATCH, self.n - start)
        rng = np.random.default_rng([SEED, 1, start])
        centre = self.centres[rng.integers(len(self.centres), size=m)]
        return _unit(centre + MEMBER_S * rng.normal(size=(m, DIM)))

    def rows(self, idx: np.ndarray) -> np.ndarray:
        out = np.empty((len(idx), DIM), dtype=np.float32)
        for start in np.unique(idx // BATCH * BATCH):
            sel = idx // BATCH * BATCH == start
            out[sel] = self.chunk(int(start))[idx[sel] - start]
        return out

    def nearest(self, queries: np.ndarray) -> np.ndarray:
        """Index of each query's exact nearest neighbour (max cosine) over all N."""
        best = np.full(len(queries), -np.inf)
        arg = np.zeros(len(queries), dtype=np.int64)
        for start in range(0, self.n, BATCH):
            sims = queries @ self.chunk(start).T
            j = sims.argmax(axis=1)
            s = sims[np.arange(len(queries)), j]
            better = s > best
            best[better], arg[better] = s[better], start + j[better]
        return arg


def _request(i: int, vec: np.ndarray, kind: str = "entry") -> Any:
    from mlc_integrations import CacheRequest

    return CacheRequest(text=f"{kind} {i}", scope="scale-bench", text_embedding=vec.tolist())


def _entry(eng: Any, i: int, vec: np.ndarray) -> Any:
    """The NewEntry ``MLCEngine.update`` would write for this request (keys, partition, metadata)."""
    from mlc_integrations.store.entries import EntryKeys, EntryMeta, NewEntry

    kr = eng.key(_request(i, vec))
    keys = EntryKeys(scope=kr.scope_key, ns=kr.namespace, ctx=kr.context_key, imgs=kr.images_key, n_images=0)
    now = time.time()
    return NewEntry(entry_id=kr.entry_id, document=json.dumps(f"answer {i}"), partitions=kr.partitions(),
                    meta=EntryMeta(keys, created_at=now, last_access=now, text=kr.text, answer=f"answer {i}"),
                    text_vec=vec, text_model=eng.encoders.text_model)


def run_size(n: int, persist: Optional[str]) -> dict[str, Any]:
    from mlc_integrations import MLCEngine

    # Verifier off: "probe i" and "entry i" are not paraphrases in words; only storage is timed.
    eng = MLCEngine(image_encoder=None, verifier="off", l1_threshold=0.80, durable=True, warm_start=False,
                    persist_directory=persist)
    data = Clustered(n)
    ids: list[str] = []
    t0 = time.perf_counter()
    for start in range(0, n, BATCH):
        vecs = data.chunk(start)
        batch = [_entry(eng, start + j, v) for j, v in enumerate(vecs)]
        eng.entries.put_many(batch)
        ids.extend(e.entry_id for e in batch)
        if start and start % 100_000 == 0:
            el = time.perf_counter() - t0
            print(f"[scale] {n:,}: {start:,} written in {el:.0f} s ({start / el:.0f}/s)", file=sys.stderr, flush=True)
    build_s = time.perf_counter() - t0
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    rng = np.random.default_rng([SEED, 2])
    src = rng.choice(n, size=QUERIES, replace=False)
    probes = _unit(data.rows(src) + PROBE_S * rng.normal(size=(QUERIES, DIM)))
    fresh_centre = data.centres[rng.integers(len(data.centres), size=QUERIES)]
    fresh = _unit(fresh_centre + MEMBER_S * rng.normal(size=(QUERIES, DIM)))
    for q in probes[:10]:  # first queries load the HNSW segment: not part of the steady state
        eng.lookup(_request(-1, q, "warm"))
    hit_ms, miss_ms, returned = [], [], []
    for i, q in enumerate(probes):
        t = time.perf_counter()
        hit = eng.lookup(_request(i, q, "probe"))
        hit_ms.append((time.perf_counter() - t) * 1000)
        returned.append(hit.entry_id if hit is not None else None)
    for i, q in enumerate(fresh):
        t = time.perf_counter()
        eng.lookup(_request(i, q, "fresh"))
        miss_ms.append((time.perf_counter() - t) * 1000)
    col = eng.store.collection("l1", dim=DIM, model=eng.encoders.text_model)
    top16 = col.query(query_embeddings=fresh.tolist(), n_results=16, include=[])["ids"]

    nn_probe, nn_fresh = data.nearest(probes), data.nearest(fresh)
    probe_recall = float(np.mean([r == ids[j] for r, j in zip(returned, nn_probe)]))
    fresh_recall = float(np.mean([ids[j] in got for got, j in zip(top16, nn_fresh)]))
    eng.close()
    pct = lambda xs, p: float(np.percentile(xs, p))  # noqa: E731
    return {
        "entries": n, "build_s": round(build_s, 1), "build_rate_per_s": round(n / build_s),
        "peak_rss_mb": round(peak_rss_mb), "hit_median_ms": round(statistics.median(hit_ms), 3),
        "hit_p90_ms": round(pct(hit_ms, 90), 3), "miss_median_ms": round(statistics.median(miss_ms), 3),
        "miss_p90_ms": round(pct(miss_ms, 90), 3), "probe_hits": sum(r is not None for r in returned) / QUERIES,
        "probe_recall": probe_recall, "fresh_top16_recall": fresh_recall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 100_000, 1_000_000])
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    ap.add_argument("--storage", choices=("persistent", "memory"), default="persistent",
                    help="persistent: a temporary persist_directory (deleted after); memory: MLCEngine() in memory")
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # child process: one size
    args = ap.parse_args()
    if args.one is not None:
        if args.storage == "memory":
            row = run_size(args.one, None)
        else:
            with tempfile.TemporaryDirectory(prefix="mlc-scale-") as d:
                row = run_size(args.one, d)
        print(json.dumps(row | {"storage": args.storage}), flush=True)
        return
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    rows = []
    for n in args.sizes:
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--storage", args.storage],
                             stdout=subprocess.PIPE, text=True, check=True).stdout
        row = json.loads(out.strip().splitlines()[-1])
        row["load_after"] = [round(x, 2) for x in os.getloadavg()]
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=2)
    print(f"\n{'entries':>10} {'build s':>8} {'rate/s':>7} {'peak RSS MB':>11} {'hit ms p50':>10} {'p90':>7} "
          f"{'miss ms p50':>11} {'p90':>7} {'probe recall':>12} {'fresh top16':>11} {'load after':>16}")
    for r in rows:
        print(f"{r['entries']:>10,} {r['build_s']:>8.1f} {r['build_rate_per_s']:>7} {r['peak_rss_mb']:>11} "
              f"{r['hit_median_ms']:>10.2f} {r['hit_p90_ms']:>7.2f} {r['miss_median_ms']:>11.2f} {r['miss_p90_ms']:>7.2f} "
              f"{r['probe_recall']:>12.3f} {r['fresh_top16_recall']:>11.3f} {' '.join(map(str, r['load_after'])):>16}")
    lo, hi = rows[0], rows[-1]
    if hi["entries"] > lo["entries"]:
        print(f"\nL1 lookup storage cost {hi['entries']:,} / {lo['entries']:,}: hit {hi['hit_median_ms'] / lo['hit_median_ms']:.2f}x, "
              f"miss {hi['miss_median_ms'] / lo['miss_median_ms']:.2f}x (target <= 2x)")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
