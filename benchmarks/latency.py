"""Lookup latency per tier (hit and miss), update latency, and Chroma query latency
at 1k vs 100k entries, measured side by side in one run (medians and ratios).

    ./dev python benchmarks/latency.py            # full run (~3-5 min on 2 cores)
    ./dev python benchmarks/latency.py --quick    # smaller counts

L2 uses an open_clip ViT-B-32 architecture with random weights: the budget in
DESIGN.md is about the cost of a ViT-B-32-size model on this CPU, which does not
depend on the weights (no pretrained weights can be downloaded here).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

from mlc_integrations import CacheRequest, MLCEngine  # noqa: E402
from mlc_integrations.models import ClipSpec  # noqa: E402


def picture(i: int) -> Image.Image:
    rng = np.random.default_rng(i)
    arr = rng.integers(0, 256, size=(28, 28, 3), dtype=np.uint8)
    return Image.fromarray(arr).resize((224, 224), Image.NEAREST)


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000.0


def engine_latencies(n: int) -> dict[str, float]:
    eng = MLCEngine(clip_model=ClipSpec("ViT-B-32"), l2_image_threshold=0.999, l2_prompt_threshold=0.999)
    eng.update(CacheRequest(text="warm up", images=[picture(10_000)]), "w")  # load models once
    imgs = [picture(i) for i in range(n)]
    upd, exact, l1, miss_seen, miss_new = [], [], [], [], []
    for i in range(n):
        r = CacheRequest(text=f"What color is shape number {i} in the image?", images=[imgs[i]], scope="bench")
        upd.append(timed(lambda: eng.update(r, {"answer": i})))
    for i in range(n):
        r = CacheRequest(text=f"What color is shape number {i} in the image?", images=[imgs[i]], scope="bench")
        exact.append(timed(lambda: eng.lookup(r)))
        assert eng.key(r).entry_id  # keyed once, memoized by the engine
    for i in range(n):
        # a fresh string each time: the text embedding is computed, not memoized
        r = CacheRequest(text=f"What colour is the shape number {i} in this image?", images=[imgs[i]], scope="bench")
        l1.append(timed(lambda: eng.lookup(r)))
    for i in range(n):
        r = CacheRequest(text=f"How many sides does figure {i} have, roughly {i * 3}?", images=[imgs[i]], scope="bench")
        miss_seen.append(timed(lambda: eng.lookup(r)))
    for i in range(n):
        r = CacheRequest(text=f"Describe new picture {i} please, item {i * 7}", images=[picture(50_000 + i)], scope="bench")
        miss_new.append(timed(lambda: eng.lookup(r)))
    st = eng.stats()
    assert st["tiers"]["L1"].get("hit", 0) >= n * 0.9, st["tiers"]
    return {
        "update": statistics.median(upd),
        "L0.5 hit": statistics.median(exact),
        "L1 hit": statistics.median(l1),
        "miss, image seen before": statistics.median(miss_seen),
        "miss, new image": statistics.median(miss_new),
    }


def chroma_scaling(sizes: list[int], queries: int) -> dict[int, tuple[float, float]]:
    """Median engine L1 lookup (a hit) with N entries stored, embeddings supplied so
    that only storage work is timed: Chroma query + response fetch; and the fraction of
    probes whose stored neighbour was found (HNSW recall; random vectors are its worst case)."""
    rng = np.random.default_rng(0)
    out: dict[int, tuple[float, float]] = {}
    for size in sizes:
        # Verifier off: "probe i" vs "stored i" are not paraphrases; only storage is timed here.
        eng = MLCEngine(clip_model=None, verifier="off", l1_threshold=0.9)
        col_l1 = eng.store.collection("l1", dim=384, model=eng.text_embedder.name)
        col_exact = eng.store.collection("exact")
        batch = 5000
        # Filler entries spread over 8 scopes (other models/tenants) and our own scope.
        for start in range(0, size, batch):
            m = min(batch, size - start)
            vecs = rng.normal(size=(m, 384)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            ids = [f"filler-{size}-{start + j}" for j in range(m)]
            metas = [{"part": f"p{(start + j) % 9}", "scope": "x", "ns": "x", "expires_at": 1e18, "v": 1} for j in range(m)]
            col_l1.add(ids=ids, embeddings=vecs, metadatas=metas)
            col_exact.add(ids=ids, embeddings=[[1.0]] * m, documents=['"filler"'] * m, metadatas=metas)
        probes = rng.normal(size=(queries, 384)).astype(np.float32)
        probes /= np.linalg.norm(probes, axis=1, keepdims=True)
        for i, p in enumerate(probes):
            eng.update(CacheRequest(text=f"stored {i}", scope="bench", text_embedding=p.tolist()), i)
        lat, found = [], 0
        for i, p in enumerate(probes):
            near = p + 0.01 * rng.normal(size=384).astype(np.float32)
            r = CacheRequest(text=f"probe {i}", scope="bench", text_embedding=near.tolist())
            hit: list = []
            lat.append(timed(lambda r=r: hit.append(eng.lookup(r))))
            found += hit[0] is not None and hit[0].payload == i
        out[size] = (statistics.median(lat), found / queries)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = ap.parse_args()
    n = 30 if args.quick else 100
    sizes = [1_000, 10_000] if args.quick else [1_000, 100_000]
    lat = engine_latencies(n)
    budgets = {"L0.5 hit": 1.0, "L1 hit": 15.0, "miss, image seen before": 20.0, "miss, new image": 100.0}
    print(f"\nEngine latency, medians over {n} requests (embedded in-memory Chroma, all-MiniLM-L6-v2, ViT-B-32-size CLIP):")
    print(f"{'operation':28} {'median ms':>10} {'budget ms':>10}")
    for k, v in lat.items():
        b = budgets.get(k)
        print(f"{k:28} {v:10.2f} {('%.0f' % b) if b else '-':>10}")
    backend_ms = 1000.0
    print(f"\nOverhead of a full miss (new image) on a {backend_ms:.0f} ms backend call: "
          f"{lat['miss, new image'] / backend_ms * 100:.1f} % (budget 5 %)")
    scale = chroma_scaling(sizes, 50 if args.quick else 200)
    lo, hi = sizes
    print(f"\nL1 lookup storage cost (Chroma query + fetch, embeddings supplied), medians: {lo:,} entries {scale[lo][0]:.2f} ms, "
          f"{hi:,} entries {scale[hi][0]:.2f} ms, ratio {scale[hi][0] / scale[lo][0]:.2f}x (budget 2x); "
          f"probes that found their entry: {scale[lo][1]:.1%} / {scale[hi][1]:.1%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"latency_ms": lat, "chroma_query_ms": {str(k): v[0] for k, v in scale.items()},
                       "probe_recall": {str(k): v[1] for k, v in scale.items()}}, f, indent=2)


if __name__ == "__main__":
    main()
