"""The image judge on the demo's own picture pairs: its time, and its outputs to compare two checkouts.

Pairs: consecutive and 3-apart pictures of the demo's VQA and camera streams, and consecutive
kept frames of vtest.avi (JPEG q90) -- 1,039 pairs with the full video, fewer with the
checkout's excerpt. ``--photos`` adds the train side of the labelled photo pairs
(``evaluation.training.image_pairs``: benign copies, content edits, different pictures,
~1,900 pairs with rotations, crops and rescales the streams do not have; the held-out side
is never read). ``judge`` decides each pair from fresh descriptors (every memo cold),
then the accepted pairs again with the stored side's memo warm (as L2 meets a camera's last
frame). ``--dump`` writes every verdict and report (all fields, every cell) so that two
checkouts can be checked for identical outputs with ``--same A B``.

    python benchmarks/judge_pairs.py [--photos] [--dump out.pkl]
    python benchmarks/judge_pairs.py --same a.pkl b.pkl
"""

from __future__ import annotations

import argparse
import io
import pickle
import sys
import time
from typing import Any


def _photo_pairs() -> list[tuple[Any, Any]]:
    from evaluation.training.image_pairs import different_pairs, load_sources, make_pairs, split_sources
    from mlc_integrations.verify import image_change as ic

    pics, group = load_sources()
    train, _held = split_sources(group)
    return [(ic.describe(p.stored), ic.describe(p.new)) for p in make_pairs(pics, train) + different_pairs(pics, train)
            if p.split == "train"]


def _pairs() -> list[tuple[Any, Any]]:
    from PIL import Image

    from evaluation.harness.image_streams import video_frames
    from evaluation.harness.workloads import build, shared_data_dir
    from evaluation.sources import imageops
    from mlc_integrations.verify import image_change as ic

    pairs = []
    for name in ("camera", "vqa"):
        ds = [ic.describe(Image.open(io.BytesIO(it.image)).convert("RGB")) for it in build(name, seed=0).items if it.image]
        for i in range(1, len(ds)):
            pairs.append((ds[i - 1], ds[i]))
            if i >= 3:
                pairs.append((ds[i - 3], ds[i]))
    frames = video_frames(shared_data_dir() / "video" / "vtest.avi")
    vds = [ic.describe(Image.open(io.BytesIO(imageops.jpeg_bytes(frames[i], 90)))) for i in range(0, min(len(frames), 400), 5)]
    pairs += [(vds[i - 1], vds[i]) for i in range(1, len(vds))]
    return pairs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dump", default=None)
    p.add_argument("--photos", action="store_true")
    p.add_argument("--same", nargs=2, default=None)
    args = p.parse_args()
    if args.same:
        a, b = (pickle.load(open(f, "rb")) for f in args.same)
        diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        print(f"{len(a)} and {len(b)} pairs; {len(diff)} differ" + (f" (first: {diff[:5]})" if diff else ""))
        return 0 if len(a) == len(b) and not diff else 1

    from mlc_integrations.verify import image_change as ic

    pairs = _pairs() + (_photo_pairs() if args.photos else [])
    rule = ic.ImageChangeRule.load()

    def fresh(d: Any) -> Any:
        return ic.ImageDescriptor(d.grey, d.chroma, d.size)

    out = []
    t0 = time.perf_counter()
    for a, b in pairs:
        v = ic.judge(fresh(a), fresh(b), rule)
        r = v.report
        out.append((v.accept, v.reason, v.detail,
                    None if r is None else tuple(sorted(r.features().items())), None if r is None else r.cells))
    every = (time.perf_counter() - t0) * 1000 / len(pairs)
    accepted = [(fresh(a), b) for (a, b), o in zip(pairs, out) if o[0]]
    warm = []
    for _ in range(3):
        t0 = time.perf_counter()
        for a, b in accepted:
            ic.judge(a, fresh(b), rule)
        warm.append((time.perf_counter() - t0) * 1000 / max(1, len(accepted)))
    print(f"{len(pairs)} pairs, {len(accepted)} accepted: {every:.2f} ms per pair (cold); "
          f"accepted, stored side warm: {min(warm):.2f} ms per pair (best of 3)")
    if args.dump:
        with open(args.dump, "wb") as f:
            pickle.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
