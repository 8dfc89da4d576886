"""What the image judge's descriptor memos hold in a process that sees many pictures.

Describes N distinct pictures (one-pixel variants of one noise picture, so that each
passes the histogram early refusal and is aligned: the request side's memo fills with
its grey map, sorted levels and spectrum) through ``describe_memoized`` and judges each
against one stored picture, then prints the growth of the resident set. The memos are
bounded by count (``descriptor.MEMO_PICTURES``), so the growth stops at that many
pictures however large N is.

    python benchmarks/descriptor_memory.py [--pictures 4096]
"""

from __future__ import annotations

import argparse
import gc
import os

import numpy as np
from PIL import Image


def _rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pictures", type=int, default=4096)
    args = p.parse_args()
    from mlc_integrations.verify import image_change as ic

    rng = np.random.default_rng(0)
    base = (rng.random((120, 160, 3)) * 255).astype(np.uint8)
    rule = ic.ImageChangeRule.load()
    stored = ic.describe(Image.fromarray(base))
    before = _rss_mb()
    for i in range(args.pictures):
        a = base.copy()
        a[0, 0], a[1, 0], a[2, 0] = i % 256, (i // 256) % 256, 255 - i % 256
        ic.judge(stored, ic.describe_memoized(Image.fromarray(a), f"picture-{i}"), rule)
    gc.collect()
    print(f"{args.pictures} distinct pictures judged: resident set +{_rss_mb() - before:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
