"""Is the L2 pre-screen safe? Pixel fingerprints vs the image encoder on real pictures.

The engine runs its image encoder on a new picture only when some stored picture's
fingerprint (:func:`mlc_integrations.images.fingerprint`) is within ``l2_prescreen`` of
the new one's. This measures, for each candidate pre-screen threshold:

* hits lost: pairs the encoder would reuse (cosine >= the encoder's threshold) whose
  fingerprints are below the pre-screen threshold — near-duplicates of the real photos
  (JPEG, resize, crop, brightness, noise; ``eval.photos``) and consecutive frames of the
  two real videos;
* encoder runs saved: the share of pairs of *different* photos below it (a new picture
  among unrelated stored ones costs no encoder run).

    python -m evaluation.studies.prescreen [--out docs/results]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from mlc_integrations.embed.image_towers import DEFAULT_IMAGE_ENCODER, resolve_image_encoder
from mlc_integrations.images import fingerprint
from . import photos
from ..harness.image_streams import video_frames

CANDIDATES = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
VIDEOS = ("vtest.avi", "tree.avi")


def measure(encoder: str = DEFAULT_IMAGE_ENCODER, video_frames_each: int = 150, seed: int = 0) -> dict[str, Any]:
    enc = resolve_image_encoder(encoder)
    enc.load()
    thr = float(enc.default_image_threshold)
    pics = photos.load_pictures()
    names = sorted(pics)
    rng = np.random.default_rng(seed)
    emb = {n: enc.embed_images([pics[n]], [f"orig:{n}"])[0] for n in names}
    fps = {n: fingerprint(pics[n]) for n in names}
    near: list[tuple[float, float]] = []
    for n in names:
        for vname, make in photos.NEAR_DUPLICATES.items():
            v = make(pics[n], rng, rng)
            near.append((float(emb[n] @ enc.embed_images([v], [f"{n}:{vname}"])[0]), float(fps[n] @ fingerprint(v))))
    different = [float(fps[a] @ fps[b]) for i, a in enumerate(names) for b in names[i + 1:]]
    frames_pairs: list[tuple[float, float]] = []
    for video in VIDEOS:
        frames = video_frames(video, stride=2, max_frames=video_frames_each)
        vecs = enc.embed_images(frames, [f"{video}:{i}" for i in range(len(frames))])
        for i in range(1, len(frames)):
            frames_pairs.append((float(vecs[i - 1] @ vecs[i]), float(fingerprint(frames[i - 1]) @ fingerprint(frames[i]))))
    rows = []
    for tf in CANDIDATES:
        row: dict[str, Any] = {"prescreen": tf}
        for label, pairs in (("near_duplicates", near), ("video_frames", frames_pairs)):
            hits = [f for e, f in pairs if e >= thr]
            row[f"{label}_encoder_hits"] = len(hits)
            row[f"{label}_lost"] = sum(f < tf for f in hits)
        row["different_photos_encoder_runs_saved"] = float(np.mean(np.asarray(different) < tf))
        rows.append(row)
    sample = next(iter(pics.values())).resize((224, 224))
    t0 = time.perf_counter()
    for _ in range(100):
        fingerprint(sample)
    fp_ms = (time.perf_counter() - t0) * 10.0
    t0 = time.perf_counter()
    for i in range(10):
        enc.embed_images([sample], [f"latency:{i}"])
    enc_ms = (time.perf_counter() - t0) * 100.0
    return {"encoder": enc.name, "encoder_threshold": thr, "pictures": len(names),
            "near_duplicate_pairs": len(near), "video_pairs": len(frames_pairs), "different_pairs": len(different),
            "fingerprint_ms": fp_ms, "encoder_ms": enc_ms, "rows": rows}


def markdown(res: dict[str, Any], command: str) -> str:
    lines = [f"# L2 pre-screen: pixel fingerprints vs {res['encoder']} (threshold {res['encoder_threshold']:.2f})", "",
             f"`{command}` — {res['pictures']} real pictures, {res['near_duplicate_pairs']} near-duplicate pairs, "
             f"{res['video_pairs']} consecutive-frame pairs of the two real videos, {res['different_pairs']} pairs of "
             f"different pictures. Fingerprint {res['fingerprint_ms']:.2f} ms, encoder {res['encoder_ms']:.1f} ms per "
             "224-px picture (this run, shared machine).", "",
             "| pre-screen | near-dup hits lost | video-frame hits lost | different photos: encoder runs saved |",
             "|---:|---:|---:|---:|"]
    for r in res["rows"]:
        lines.append(f"| {r['prescreen']:.1f} | {r['near_duplicates_lost']} of {r['near_duplicates_encoder_hits']} | "
                     f"{r['video_frames_lost']} of {r['video_frames_encoder_hits']} | "
                     f"{r['different_photos_encoder_runs_saved']:.1%} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evaluation.studies.prescreen", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", default=DEFAULT_IMAGE_ENCODER)
    ap.add_argument("--out", default=None, help="write prescreen.md and prescreen.json here")
    args = ap.parse_args(argv)
    res = measure(args.encoder)
    md = markdown(res, "python -m evaluation.studies.prescreen" + (f" --out {args.out}" if args.out else ""))
    print(md)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "prescreen.md").write_text(md)
        (out / "prescreen.json").write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
