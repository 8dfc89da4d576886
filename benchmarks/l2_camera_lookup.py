"""What an L2 lookup costs on a camera stream of one static scene (issue 24 follow-up).

vtest.avi, every 5th frame (the committed truth's frames), each a JPEG q90 with one
question, through ``MLCEngine()`` defaults (in-memory Chroma, durable writes so every
frame is stored before the next lookup): median / p90 lookup time, storage calls per
lookup (``ChromaStore.call``) and rows whose metadata / documents / vectors were read.
At the default global threshold every stored frame of the scene passes it; the lookup
must still read only the best few candidates.

    python benchmarks/l2_camera_lookup.py [--frames 159] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np


def main() -> int:
    import torch

    from evaluation.sources import imageops
    from evaluation.harness.image_streams import video_frames
    from evaluation.sources.video_truth import load_annotation
    from evaluation.harness.workloads import shared_data_dir
    from mlc_integrations import CacheRequest, MLCEngine

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--frames", type=int, default=159)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    ann = load_annotation()
    vt = video_frames(shared_data_dir() / "video" / "vtest.avi")
    frames = [imageops.jpeg_bytes(vt[r["frame"]], 90) for r in ann["vtest.avi"]["frames"]][: args.frames]
    question = ann["vtest.avi"]["question"]
    eng = MLCEngine(persist_directory=None, durable=True)
    calls: list[str] = []
    rows_read: list[int] = []
    orig = eng.store.call

    def counting(what, fn):  # type: ignore[no-untyped-def]
        calls.append(what)
        out = orig(what, fn)
        if isinstance(out, dict) and what.startswith(("get", "query")):
            ids = out.get("ids") or []
            n = sum(len(x) for x in ids) if ids and isinstance(ids[0], list) else len(ids)
            inc = [k for k in ("metadatas", "documents", "embeddings") if out.get(k) is not None]
            rows_read.append(n if inc else 0)
        return out

    eng.store.call = counting  # type: ignore[method-assign]
    ms, per_lookup_calls, per_lookup_rows, hits = [], [], [], 0
    for data in frames:
        req = CacheRequest(text=question, images=[data])
        calls.clear()
        rows_read.clear()
        t0 = time.perf_counter()
        hit = eng.lookup(req)
        ms.append((time.perf_counter() - t0) * 1000)
        per_lookup_calls.append(len(calls))
        per_lookup_rows.append(sum(rows_read))
        if hit is None:
            eng.update(req, "answer")
        else:
            hits += 1
    eng.close()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    late = slice(len(ms) // 2, None)  # the second half: the store already holds many frames of the scene
    res = {"commit": commit or "unknown", "load_avg_1m": round(os.getloadavg()[0], 2), "frames": len(frames),
           "hits": hits, "tau": eng.l2_image_threshold,
           "lookup_ms": {"p50": round(float(np.median(ms)), 1), "p90": round(float(np.percentile(ms, 90)), 1),
                         "p50_second_half": round(float(np.median(ms[late])), 1)},
           "storage_calls_per_lookup": {"p50": float(np.median(per_lookup_calls)), "max": int(max(per_lookup_calls)),
                                        "p50_second_half": float(np.median(per_lookup_calls[late]))},
           "rows_read_per_lookup": {"p50": float(np.median(per_lookup_rows)), "max": int(max(per_lookup_rows)),
                                    "p50_second_half": float(np.median(per_lookup_rows[late]))}}
    print(json.dumps(res, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
