"""What a picture lookup costs, as ratios to one fp32 MiniLM encode E measured in the same run.

easy-vqa pictures (64 px shapes) are stored with one question each through ``MLCEngine()``
defaults (in-memory Chroma, durable writes), then three kinds of lookup are timed:

* **resized copy** -- a stored picture resized to 80 % (bicubic), same question: an L2 hit
  (bar <= 1.5 E);
* **never stored** -- an easy-vqa test picture not in the cache, a question asked before:
  a miss (bar <= 1.0 E);
* **reworded question** -- the same pixels (the same PNG bytes), the question reworded
  (bar <= 0.6 E).

E is one sentence through all-MiniLM-L6-v2 in fp32 on torch (sentence-transformers, one
thread), timed in this run between the lookups. ``--profile`` also writes a cProfile of
the lookups (the top functions by cumulative time, and the share of the L2 lookup spent
in the image-change comparison, the image tower and Chroma).

    python benchmarks/l2_picture_cost.py [--stored 60] [--n 40] [--profile] [--json out.json]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from PIL import Image

QUESTION = "What color is the shape?"
REWORDED = "What colour is the shape?"


def _png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def reference_encoder() -> Callable[[int], float]:
    from mlc_integrations.embed.models import TextEmbedder

    model = TextEmbedder(None, backend="torch")
    model.embed(["warm up the reference encoder"])
    st = model._ensure()

    def once(i: int) -> float:
        t0 = time.perf_counter()
        st.encode([f"What is the reference sentence number {i} about?"])
        return (time.perf_counter() - t0) * 1000.0

    return once


def _shares(prof: cProfile.Profile, lookup_total: float) -> dict[str, float]:
    """Cumulative seconds of the functions that matter, as shares of the lookups' time."""
    st = pstats.Stats(prof)
    want = {"compare": ("image_change/change_map.py", "compare"), "verify": ("image_change/verifier.py", "verify"),
            "align": ("image_change/alignment.py", "align"), "tower": ("image_towers.py", "embed_images"),
            "chroma query": ("entries.py", "nearest"), "fetch": ("entries.py", "fetch"),
            "tier lookups (L0.5 + L1 + L2)": ("base.py", "lookup"), "image check": ("multimodal.py", "_image_check"),
            "fingerprint stage": ("multimodal.py", "_fingerprint_stage"),
            "encoder stage": ("multimodal.py", "_encoder_stage"), "prescreen": ("image_change/histograms.py", "prescreen"),
            "describe": ("image_change/descriptor.py", "describe"), "decode": ("images.py", "pil")}
    out: dict[str, float] = {}
    for (fn, _line, name), (_cc, _nc, _tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        for label, (f, n) in want.items():
            if fn.endswith(f) and name == n:
                out[label] = out.get(label, 0.0) + ct
    return {k: round(v / lookup_total, 3) for k, v in sorted(out.items())}


def main() -> int:
    import torch

    from evaluation.sources.easyvqa import load_split
    from mlc_integrations import CacheRequest, MLCEngine

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stored", type=int, default=60)
    p.add_argument("--n", type=int, default=40)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    train = load_split("train")[: args.stored]
    test = load_split("test")[: args.n]
    pics = [Image.open(v.path).convert("RGB") for v in train]
    encode = reference_encoder()
    eng = MLCEngine(persist_directory=None, durable=True)
    for i, im in enumerate(pics):
        eng.update(CacheRequest(text=QUESTION, images=[_png(im)]), f"answer {i}")
    eng.warmup()
    resized = [_png(im.resize((int(im.width * 0.8), int(im.height * 0.8)), Image.BICUBIC)) for im in pics[: args.n]]
    unseen = [_png(Image.open(v.path).convert("RGB")) for v in test]
    same = [_png(im) for im in pics[: args.n]]
    kinds: dict[str, list[bytes]] = {"resized copy (L2 hit)": resized, "picture never stored": unseen,
                                     "same pixels, reworded question": same}
    texts = {"resized copy (L2 hit)": QUESTION, "picture never stored": QUESTION,
             "same pixels, reworded question": REWORDED}
    times: dict[str, list[float]] = {k: [] for k in kinds}
    times["E"] = []
    tiers: dict[str, dict[str, int]] = {k: {} for k in kinds}
    prof = cProfile.Profile() if args.profile else None
    lookup_s = 0.0
    for i in range(args.n):
        times["E"].append(encode(i))
        for kind, datas in kinds.items():
            if i >= len(datas):
                continue
            req = CacheRequest(text=texts[kind], images=[datas[i]])
            if prof:
                prof.enable()
            t0 = time.perf_counter()
            hit = eng.lookup(req)
            dt = time.perf_counter() - t0
            if prof:
                prof.disable()
            lookup_s += dt
            times[kind].append(dt * 1000.0)
            t = hit.tier if hit is not None else "miss"
            tiers[kind][t] = tiers[kind].get(t, 0) + 1
    eng.close()
    e = statistics.median(times["E"])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    bars = {"resized copy (L2 hit)": 1.5, "picture never stored": 1.0, "same pixels, reworded question": 0.6}
    res: dict[str, Any] = {"commit": commit or "unknown", "load_avg_1m": round(os.getloadavg()[0], 2),
                           "stored": len(pics), "n": args.n, "E_ms": round(e, 2), "rows": {}}
    print(f"E = {e:.2f} ms (one fp32 MiniLM encode, this run); load {res['load_avg_1m']}")
    print(f"{'lookup':34} {'median ms':>9} {'ratio to E':>10} {'bar':>5}  outcomes")
    for kind in kinds:
        m = statistics.median(times[kind])
        res["rows"][kind] = {"median_ms": round(m, 2), "mean_ms": round(statistics.fmean(times[kind]), 2),
                             "ratio_E": round(m / e, 2), "bar_E": bars[kind], "met": m / e <= bars[kind],
                             "outcomes": tiers[kind]}
        print(f"{kind:34} {m:9.2f} {m / e:10.2f} {bars[kind]:5.1f}  {tiers[kind]}")
    if prof:
        res["profile_shares_of_lookup_time"] = _shares(prof, lookup_s)
        print("shares of lookup time:", res["profile_shares_of_lookup_time"])
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(25)
        res["profile_top"] = s.getvalue().splitlines()[:60]
        print(s.getvalue()[:6000])
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
