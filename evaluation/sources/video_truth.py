"""A per-frame truth for the real camera streams that does not flicker.

* ``vtest.avi`` (a fixed camera over a street): the people in each sampled frame, found
  by background subtraction (the per-pixel median over the whole video is the empty
  street), thresholding, a morphological clean-up and connected regions of at least
  ``MIN_BLOB`` pixels (at half resolution). The truth of a frame is the question's
  answer "how many people are in the frame?" = the number of such regions, smoothed
  over three consecutive sampled frames (the median), so that one noisy detection does
  not flip it. Each frame's regions (boxes) are written beside it.
* ``tree.avi`` (a tree in wind, then a hand enters): the truth is "a tree" before frame
  ``TREE_HAND_FRAME`` and "a hand in front of a tree" from it on (checked by eye).

``python -m evaluation.sources.video_truth --out docs/results`` writes ``video_truth.json`` (the
annotation, committed), ``video_truth.md`` and contact sheets (PNG) of a sample of frames
with their regions drawn, which were checked by eye (the .md says what was seen).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
from PIL import Image, ImageDraw

from ..harness.workloads import shared_data_dir
from ..paths import EVAL_DATA

VTEST_STRIDE = 5  # every 5th frame: 0.5 s apart at 10 fps
TREE_STRIDE = 1
TREE_HAND_FRAME = 54
DIFF = 28  # grey levels from the background that make a pixel foreground (half resolution)
MIN_BLOB = 60  # pixels (half resolution, 384 x 288) of a person region
ANNOTATION = EVAL_DATA / "video_truth.json"


def _frames(name: str) -> list[Image.Image]:
    from ..harness.image_streams import video_frames

    return video_frames(shared_data_dir() / "video" / name)


def vtest_regions(frames: Sequence[Image.Image]) -> list[list[tuple[int, int, int, int]]]:
    """Per frame: boxes (x0, y0, x1, y1, full-resolution pixels) of the moving regions."""
    from scipy import ndimage

    grey = np.stack([np.asarray(f.convert("L").resize((f.width // 2, f.height // 2), Image.BOX), np.int16)
                     for f in frames])
    bg = np.median(grey[::3], axis=0)
    out = []
    for g in grey:
        fg = np.abs(g - bg) > DIFF
        fg = ndimage.binary_opening(fg, structure=np.ones((2, 2)))
        fg = ndimage.binary_closing(fg, structure=np.ones((5, 3)))
        lab, n = ndimage.label(fg)
        boxes = []
        for k, sl in enumerate(ndimage.find_objects(lab), start=1):
            if sl is None:
                continue
            area = int((lab[sl] == k).sum())
            if area >= MIN_BLOB:
                boxes.append((sl[1].start * 2, sl[0].start * 2, sl[1].stop * 2, sl[0].stop * 2))
        out.append(sorted(boxes))
    return out


def smooth(counts: Sequence[int]) -> list[int]:
    """Median of each count with its neighbours (the ends keep theirs)."""
    c = list(counts)
    return [c[i] if i in (0, len(c) - 1) else int(np.median(c[i - 1:i + 2])) for i in range(len(c))]


def annotate() -> dict[str, Any]:
    frames = _frames("vtest.avi")
    regions = vtest_regions(frames)
    idx = list(range(0, len(frames), VTEST_STRIDE))
    raw = [len(regions[i]) for i in idx]
    truth = smooth(raw)
    tree = _frames("tree.avi")
    return {
        "vtest.avi": {"stride": VTEST_STRIDE, "question": "How many people are in this frame?",
                      "method": f"median background, |frame - background| > {DIFF}, opening 2x2, closing 5x3, "
                                f"regions >= {MIN_BLOB} px at half resolution, count smoothed by a 3-frame median",
                      "frames": [{"frame": i, "people": t, "raw_regions": r, "boxes": regions[i]}
                                 for i, t, r in zip(idx, truth, raw)]},
        "tree.avi": {"stride": TREE_STRIDE, "question": "What is in this frame?",
                     "method": f"checked by eye: a hand enters at frame {TREE_HAND_FRAME}",
                     "frames": [{"frame": i, "answer": "a tree" if i < TREE_HAND_FRAME else "a hand in front of a tree"}
                                for i in range(0, len(tree), TREE_STRIDE)]},
    }


def contact_sheet(frames: Sequence[Image.Image], rows: Sequence[dict[str, Any]], path: Path, cols: int = 4) -> None:
    w, h = 384, 288
    sheet = Image.new("RGB", (cols * w, ((len(rows) + cols - 1) // cols) * h), "black")
    for k, r in enumerate(rows):
        im = frames[r["frame"]].resize((w, h), Image.BILINEAR)
        d = ImageDraw.Draw(im)
        for x0, y0, x1, y1 in r["boxes"]:
            d.rectangle((x0 / 2, y0 / 2, x1 / 2, y1 / 2), outline=(255, 0, 0), width=2)
        d.rectangle((0, 0, 150, 16), fill=(0, 0, 0))
        d.text((3, 2), f"f{r['frame']} people={r['people']} raw={r['raw_regions']}", fill=(255, 255, 0))
        sheet.paste(im, ((k % cols) * w, (k // cols) * h))
    sheet.save(path)


def load_annotation(path: Optional[Path] = None) -> dict[str, Any]:
    return json.loads((path or ANNOTATION).read_text(encoding="utf-8"))


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evaluation.sources.video_truth", description=__doc__.split("\n")[0])
    p.add_argument("--sheets", default="/tmp/video_truth", help="where the contact sheets go")
    p.add_argument("--sample", type=int, default=16, help="frames per contact sheet")
    args = p.parse_args(argv)
    ann = annotate()
    ANNOTATION.parent.mkdir(parents=True, exist_ok=True)
    ANNOTATION.write_text(json.dumps(ann, indent=0) + "\n", encoding="utf-8")
    frames = _frames("vtest.avi")
    rows = ann["vtest.avi"]["frames"]
    out = Path(args.sheets)
    out.mkdir(parents=True, exist_ok=True)
    step = max(1, len(rows) // args.sample)
    for s in range(3):
        sample = rows[s::step][: args.sample]
        contact_sheet(frames, sample, out / f"vtest_sheet{s}.png")
    counts = [r["people"] for r in rows]
    changes = sum(a != b for a, b in zip(counts, counts[1:]))
    print(f"vtest: {len(rows)} sampled frames, people per frame {min(counts)}..{max(counts)}, "
          f"{changes} changes of the count between consecutive sampled frames; sheets in {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
