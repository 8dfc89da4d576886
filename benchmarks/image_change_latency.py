"""Latency of the L2 image-change verifier per candidate (budget: p90 <= 10 ms, DESIGN.md).

What one L2 candidate costs on the caller's path: reading the stored descriptor text
(base64 + zlib), the request picture's descriptor (once per lookup; memoized by pixel
digest after that, so it is timed separately), alignment, comparison and the rule.
Pictures: skimage.data photos at typical sizes (512 px, a 768x576 video frame size,
1024 px), each against a JPEG copy and against an edited copy. One torch-free thread.

    python benchmarks/image_change_latency.py [--repeats 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import time

import numpy as np
from PIL import Image


def _pictures() -> list[Image.Image]:
    import skimage.data as sd

    out = []
    for name, size in (("astronaut", (512, 512)), ("coffee", (768, 576)), ("chelsea", (1024, 768)), ("rocket", (768, 576))):
        out.append(Image.fromarray(np.asarray(getattr(sd, name)())).convert("RGB").resize(size, Image.BICUBIC))
    return out


def _jpeg(im: Image.Image, q: int = 75) -> Image.Image:
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=q)
    return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")


def main() -> int:
    from mlc_integrations.verify.image_change import ImageChangeVerifier, describe

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    ver = ImageChangeVerifier()
    pics = _pictures()
    pairs = []
    for i, im in enumerate(pics):
        edited = im.copy()
        edited.paste(pics[(i + 1) % len(pics)].resize((im.width // 4, im.height // 4)), (im.width // 3, im.height // 3))
        pairs += [(im, _jpeg(im)), (im, _jpeg(edited))]
    stored = [describe(a).to_text() for a, _ in pairs]
    describe_ms, verify_ms = [], []
    for _ in range(args.repeats):
        for (a, b), s in zip(pairs, stored):
            t0 = time.perf_counter()
            d = describe(b)
            t1 = time.perf_counter()
            ver.verify(s, d)
            t2 = time.perf_counter()
            describe_ms.append((t1 - t0) * 1000)
            verify_ms.append((t2 - t1) * 1000)

    def q(v: list[float]) -> dict[str, float]:
        return {"p50": round(float(np.percentile(v, 50)), 3), "p90": round(float(np.percentile(v, 90)), 3),
                "mean": round(statistics.fmean(v), 3)}

    per_candidate = [x + y for x, y in zip(describe_ms, verify_ms)]
    res = {"load_avg_1m": round(os.getloadavg()[0], 2), "pairs": len(pairs), "repeats": args.repeats,
           "verify_ms (stored text -> verdict)": q(verify_ms),
           "describe_ms (request picture, once per lookup)": q(describe_ms),
           "first candidate ms (describe + verify)": q(per_candidate)}
    print(json.dumps(res, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
