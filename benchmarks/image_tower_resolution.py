"""Do small pictures (easy-vqa, 64 px) embed as well at a lower tower input resolution?

Lite0 (torch, the same weights the ONNX tower serves) embeds easy-vqa TEST pictures at
input sides 224 (shipped), 160, 128 and 96: for each side, the global cosine of each
picture with its re-shot copy (shift +-2 px, noise 3, brightness) and its resized copy
(80 %), against the cosine with other pictures -- how many other-picture pairs score at or
above the 5th percentile of the copies (lower is better) -- and the time per picture
relative to 224 in the same run. One thread.

    python benchmarks/image_tower_resolution.py [--n 150] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np
from PIL import Image


def main() -> int:
    import torch

    from evaluation.sources.easyvqa import load_split
    from evaluation.training.image_pairs import evqa_jitter
    from mlc_integrations.embed.image_towers import EfficientNetLiteEncoder

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=150)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    enc = EfficientNetLiteEncoder.shared()
    model = enc.torch_model()
    vs = load_split("test")[: args.n]
    ims = [Image.open(v.path).convert("RGB") for v in vs]
    r = random.Random(0)
    g = np.random.default_rng(0)
    jit = [evqa_jitter(im, r, g) for im in ims]
    rsz = [im.resize((51, 51), Image.BICUBIC) for im in ims]
    res = {}
    for side in (224, 160, 128, 96):
        def emb(batch: list[Image.Image]) -> np.ndarray:
            a = np.stack([np.asarray(im.resize((side, side), Image.BICUBIC), np.float32) for im in batch])
            x = torch.from_numpy(np.ascontiguousarray(((a - 127.5) / 127.5).transpose(0, 3, 1, 2)))
            with torch.inference_mode():
                f = model.forward_head(model.forward_features(x), pre_logits=True).float().numpy()
            return f / np.linalg.norm(f, axis=1, keepdims=True)

        for _ in range(3):  # warm-up at this side (the first calls allocate)
            emb(ims[:1])
        t0 = time.perf_counter()
        e0 = np.concatenate([emb([im]) for im in ims])
        per_pic = (time.perf_counter() - t0) / len(ims) * 1000
        ej, er = emb(jit), emb(rsz)
        same = np.concatenate([(e0 * ej).sum(1), (e0 * er).sum(1)])
        sims = e0 @ e0.T
        other = sims[np.triu_indices(len(ims), 1)]
        floor = float(np.percentile(same, 5))
        res[side] = {"ms_per_picture": round(per_pic, 2), "copies_cosine_p5": round(floor, 4),
                     "copies_cosine_min": round(float(same.min()), 4),
                     "other_pairs_at_or_above_copies_p5": f"{int((other >= floor).sum())}/{other.size}",
                     "other_cosine_p99": round(float(np.percentile(other, 99)), 4)}
    base = res[224]["ms_per_picture"]
    for side in res:
        res[side]["time_vs_224"] = round(res[side]["ms_per_picture"] / base, 2)
    print(json.dumps(res, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
