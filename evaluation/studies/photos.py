"""L2 image thresholds calibrated and checked on real pictures.

Pictures: the 43 photos of ``../shared/data/photos`` (OpenCV's samples), the
``skimage.data`` photos that ship with the package and matplotlib's sample pictures.
For each encoder:

* near-duplicates of every picture (JPEG q85 / q70, resized to 50 % / 75 %, cropped by
  up to 5 % a side, brightness +-10 %, mild sensor noise) must reach the threshold with
  their own original as the best match;
* different pictures must stay below it: every pair of originals, and every
  near-duplicate against every other original;
* related pairs (consecutive video frames, one scene under another exposure or from
  another viewpoint, one chessboard in several poses, an object alone and in a scene)
  are reported apart: whether they count as "the same picture" is the threshold's
  choice, and the report says what it chose.

The threshold is chosen on a calibration half of the pictures (related groups stay on
one side) and reported on the held-out half and over all pairs::

    python -m evaluation.studies.photos --out docs/results

writes ``photos.md``, ``photos.json`` and ``photos_cosines.png``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
from PIL import Image

from mlc_integrations.embed.image_towers import ImageEncoder, resolve_image_encoder
from mlc_integrations.images import pixel_digest
from ..sources import imageops
from ..harness.workloads import local_photos, shared_data_dir

log = logging.getLogger(__name__)

# Related pairs of ../shared/data/photos (README there), by relation. aero1/aero3 and the
# two Blender_Suzanne renders are one city / one object from another viewpoint too.
RELATED: dict[str, list[tuple[str, str]]] = {
    "consecutive video frames": [("cv:rubberwhale1", "cv:rubberwhale2"), ("cv:basketball1", "cv:basketball2")],
    "same scene, other exposure": [("cv:leuvenA", "cv:leuvenB")],
    "same scene or object, other viewpoint": [("cv:graf1", "cv:graf3"), ("cv:aero1", "cv:aero3"),
                                              ("cv:Blender_Suzanne1", "cv:Blender_Suzanne2")],
    "one chessboard, several poses": list(itertools.combinations([f"cv:left0{i}" for i in range(1, 6)], 2)),
    "object alone and in a scene": [("cv:box", "cv:box_in_scene")],
}

MPL_PICTURES = ("grace_hopper.jpg", "Minduka_Present_Blue_Pack.png", "logo2.png")

# Near-duplicates: the changes a re-sent picture goes through. r draws crop anchors and noise.
NearDup = Callable[[Image.Image, random.Random, np.random.Generator], Image.Image]
NEAR_DUPLICATES: dict[str, NearDup] = {
    "JPEG q85": lambda im, r, n: imageops.jpeg(im, 85),
    "JPEG q70": lambda im, r, n: imageops.jpeg(im, 70),
    "resized 50%": lambda im, r, n: imageops.resize(im, 0.5),
    "resized 75%": lambda im, r, n: imageops.resize(im, 0.75),
    "cropped 5%": lambda im, r, n: imageops.crop(im, 0.05, (r.random(), r.random())),
    "brightness +10%": lambda im, r, n: imageops.brightness(im, 1.1),
    "brightness -10%": lambda im, r, n: imageops.brightness(im, 0.9),
    "noise sigma 3": lambda im, r, n: imageops.noise(im, 3.0, n),
}

GRID = 0.01
TARGET_REUSE = 0.97  # calibration near-duplicates reused: the 95 % bar plus room for the held-out half
MARGIN = 0.02  # above the highest different-picture cosine seen in calibration


def load_pictures(max_side: int = 1024) -> dict[str, Image.Image]:
    """Every picture, RGB, keyed ``cv:`` / ``sk:`` / ``mpl:`` + name."""
    out: dict[str, Image.Image] = {}
    folder = shared_data_dir() / "photos"
    if not folder.is_dir():
        log.warning("the 43 OpenCV photos are missing (%s; set MLC_SHARED_DATA): this evaluation runs on the "
                    "skimage and matplotlib pictures only, and its figures are not the committed ones", folder)
    for p in sorted(folder.iterdir()) if folder.is_dir() else []:
        with Image.open(p) as f:
            out["cv:" + p.stem] = f.convert("RGB")
    for name, im in local_photos(max_side=512).items():
        out["sk:" + name] = im
    try:
        import matplotlib

        mpl = Path(matplotlib.get_data_path()) / "sample_data"
        for fn in MPL_PICTURES:
            if (mpl / fn).exists():
                with Image.open(mpl / fn) as f:
                    out["mpl:" + Path(fn).stem] = f.convert("RGB")
    except ImportError:  # matplotlib is in the eval extra; without it, fewer pictures
        log.info("matplotlib not installed: its sample pictures are skipped")
    for k, im in out.items():
        if max(im.size) > max_side:
            im.thumbnail((max_side, max_side), Image.BICUBIC)
    return out


def related_pairs(names: Sequence[str]) -> dict[frozenset[str], str]:
    have = set(names)
    return {frozenset(p): rel for rel, pairs in RELATED.items() for p in pairs if set(p) <= have}


def split(names: Sequence[str], seed: int = 0) -> tuple[list[str], list[str]]:
    """Calibration and held-out halves; each related group on one side (a group would
    otherwise leak its look-alikes across the split)."""
    parent = {n: n for n in names}

    def find(x: str) -> str:
        while parent[x] != x:
            x = parent[x]
        return x

    for pair in related_pairs(names):
        a, b = sorted(pair)
        parent[find(a)] = find(b)
    groups: dict[str, list[str]] = {}
    for n in sorted(names):
        groups.setdefault(find(n), []).append(n)
    order = sorted(groups.values())
    random.Random(seed).shuffle(order)
    cal: list[str] = []
    held: list[str] = []
    for g in order:
        (cal if len(cal) <= len(held) else held).extend(g)
    return sorted(cal), sorted(held)


@dataclass
class EncoderResult:
    encoder: str
    stored_threshold: float
    calibrated_threshold: float
    n_pictures: int
    near_dup: dict[str, dict[str, Any]] = field(default_factory=dict)  # split -> {"rate", "n", "by_kind", ...}
    false_hits: dict[str, dict[str, Any]] = field(default_factory=dict)  # split -> {"pairs", "hits", "max", ...}
    related: list[dict[str, Any]] = field(default_factory=list)
    cosines: dict[str, list[float]] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)


def _embed(enc: ImageEncoder, ims: Sequence[Image.Image]) -> np.ndarray:
    rows = [enc.embed_images([im], [pixel_digest(im)])[0] for im in ims]
    return np.stack(rows)


def choose_threshold(own_cosines: Sequence[float], different_cosines: Sequence[float], *,
                     target: float = TARGET_REUSE, margin: float = MARGIN, grid: float = GRID) -> float:
    """The strictest grid value at which ``target`` of the calibration near-duplicates
    are still reused (``own_cosines``: cosine to their own original, NaN where another
    picture is the better match), raised if needed to ``margin`` above every
    different-picture cosine. Strictest, because a false hit returns a wrong answer
    while a miss only costs a backend call, and related photos of one scene sit just
    below the near-duplicates."""
    own = np.asarray(own_cosines, dtype=np.float64)
    t = 1.0
    while t > 0 and np.mean(np.nan_to_num(own, nan=-2.0) >= t - 1e-9) < target:
        t = round(t - grid, 4)
    floor = max(different_cosines) + margin if different_cosines else 0.0
    return round(max(t, math.ceil(floor / grid - 1e-9) * grid), 4)


def evaluate_encoder(enc: ImageEncoder, pictures: dict[str, Image.Image], cal: Sequence[str],
                     held: Sequence[str], seed: int = 0) -> EncoderResult:
    names = sorted(pictures)
    idx = {n: i for i, n in enumerate(names)}
    rel = related_pairs(names)
    orig = _embed(enc, [pictures[n] for n in names])
    sims = orig @ orig.T
    variants: list[tuple[str, str, np.ndarray]] = []  # (picture, kind, vector)
    for n in names:
        r = random.Random(f"{seed}:{n}")
        g = np.random.default_rng(r.randrange(2**32))
        ims = [make(pictures[n], r, g) for make in NEAR_DUPLICATES.values()]
        for kind, v in zip(NEAR_DUPLICATES, _embed(enc, ims)):
            variants.append((n, kind, v))

    def side(n: str) -> str:
        return "calibration" if n in cal else "held-out"

    # Different pictures: pairs of originals and near-duplicate vs other original, related excluded.
    diff: dict[str, list[tuple[float, str, str]]] = {"calibration": [], "held-out": [], "across": []}
    for a, b in itertools.combinations(names, 2):
        if frozenset((a, b)) in rel:
            continue
        s = side(a) if side(a) == side(b) else "across"
        diff[s].append((float(sims[idx[a], idx[b]]), a, b))
    vsims = np.stack([v for _, _, v in variants]) @ orig.T
    for (n, kind, _), row in zip(variants, vsims):
        for m in names:
            if m != n and frozenset((n, m)) not in rel:
                s = side(n) if side(n) == side(m) else "across"
                diff[s].append((float(row[idx[m]]), f"{n} ({kind})", m))
    own_cal = [float(row[idx[n]]) if int(np.argmax(row)) == idx[n] else float("nan")
               for (n, _, _), row in zip(variants, vsims) if n in cal]
    tau = choose_threshold(own_cal, [c for c, _, _ in diff["calibration"]])
    res = EncoderResult(enc.name if not enc.name.startswith("/") else Path(enc.name).name,
                        float(enc.default_image_threshold), tau, len(names))
    res.cosines["different pictures"] = [c for s in diff.values() for c, _, _ in s]
    use = float(enc.default_image_threshold)
    for split_name, members in (("calibration", set(cal)), ("held-out", set(held)), ("all", set(names))):
        rows = [(n, kind, vsims[i]) for i, (n, kind, _) in enumerate(variants) if n in members]
        by_kind: dict[str, list[int]] = {}
        reused = 0
        for n, kind, row in rows:
            own = float(row[idx[n]])
            ok = own >= use and int(np.argmax(row)) == idx[n]
            reused += ok
            by_kind.setdefault(kind, []).append(int(ok))
        res.near_dup[split_name] = {"n": len(rows), "reused": reused, "rate": reused / max(1, len(rows)),
                                    "by_kind": {k: sum(v) / len(v) for k, v in by_kind.items()},
                                    "min_own_cosine": min(float(row[idx[n]]) for n, _, row in rows)}
        pairs = diff[split_name] if split_name != "all" else [p for s in diff.values() for p in s]
        over = sorted((p for p in pairs if p[0] >= use), reverse=True)
        top = max(pairs) if pairs else (float("nan"), "", "")
        res.false_hits[split_name] = {"pairs": len(pairs), "hits": len(over), "max": top[0],
                                      "max_pair": f"{top[1]} / {top[2]}", "over": [(round(c, 4), a, b) for c, a, b in over[:10]]}
    res.cosines["near-duplicates"] = [float(vsims[i][idx[n]]) for i, (n, _, _) in enumerate(variants)]
    for pair, relation in sorted(rel.items(), key=lambda kv: (kv[1], sorted(kv[0]))):
        a, b = sorted(pair)
        c = float(sims[idx[a], idx[b]])
        res.related.append({"relation": relation, "a": a, "b": b, "cosine": c, "reused": c >= use})
    res.cosines["related pairs"] = [r["cosine"] for r in res.related]
    return res


def encoder_latency(enc: ImageEncoder, pictures: Sequence[Image.Image], threads: int, repeats: int = 3) -> float:
    """Median ms to embed one picture not seen before (what a lookup pays on an embedding
    miss: preprocessing, forward pass, normalization), at ``threads`` torch threads."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        enc.embed_images([pictures[0]], [f"latency-warmup:{time.time_ns()}"])
        times = []
        for k in range(repeats):
            for i, im in enumerate(pictures):
                t0 = time.perf_counter()
                enc.embed_images([im], [f"latency:{threads}:{k}:{i}:{time.time_ns()}"])
                times.append((time.perf_counter() - t0) * 1000.0)
        return statistics.median(times)
    finally:
        torch.set_num_threads(before)


def run(encoders: Sequence[str], seed: int = 0, latency_pictures: int = 8) -> dict[str, Any]:
    pictures = load_pictures()
    cal, held = split(sorted(pictures), seed)
    out: dict[str, Any] = {"pictures": len(pictures), "calibration": cal, "held-out": held, "seed": seed,
                           "near_duplicates": list(NEAR_DUPLICATES), "margin": MARGIN, "results": []}
    lat_ims = [pictures[n] for n in sorted(pictures)[:: max(1, len(pictures) // latency_pictures)]][:latency_pictures]
    for name in encoders:
        enc = resolve_image_encoder(name)
        enc.load()
        res = evaluate_encoder(enc, pictures, cal, held, seed)
        for t in (1, 2):
            res.latency_ms[f"{t} thread{'s' if t > 1 else ''}"] = encoder_latency(enc, lat_ims, t)
        log.info("%s: calibrated %.2f (stored %.2f)", res.encoder, res.calibrated_threshold, res.stored_threshold)
        out["results"].append(res)
    return out


def plot(data: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results: list[EncoderResult] = data["results"]
    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.6), squeeze=False)
    bins = np.linspace(-0.2, 1.0, 61)
    colours = {"different pictures": "tab:red", "related pairs": "tab:orange", "near-duplicates": "tab:green"}
    for ax, r in zip(axes[0], results):
        for label, colour in colours.items():
            vals = r.cosines.get(label, [])
            if vals:
                ax.hist(vals, bins=bins, density=True, alpha=0.5, color=colour, label=f"{label} ({len(vals)})")
        ax.axvline(r.stored_threshold, color="black", ls="--", lw=1, label=f"threshold {r.stored_threshold:.2f}")
        ax.set_title(r.encoder, fontsize=9)
        ax.set_xlabel("cosine")
        ax.set_yscale("log")
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel("density (log)")
    fig.suptitle(f"L2 image cosines on {data['pictures']} real pictures and their near-duplicates", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown(data: dict[str, Any], command: str, png: str) -> str:
    from ..harness.experiments import environment

    results: list[EncoderResult] = data["results"]
    L = ["# L2 image thresholds on real pictures", "",
         f"Generated {time.strftime('%Y-%m-%d %H:%M')} by `{command}`. Environment: {json.dumps(environment())}.", "",
         f"{data['pictures']} pictures (43 OpenCV sample photos from ../shared/data/photos, the skimage.data photos that "
         f"ship with scikit-image, matplotlib's sample pictures), split into a calibration half ({len(data['calibration'])}) "
         f"and a held-out half ({len(data['held-out'])}); related groups stay on one side. Near-duplicates of every "
         f"picture: {', '.join(data['near_duplicates'])}. A near-duplicate is reused when its cosine to its own original "
         "reaches the threshold and that original is its best match. Different pictures: every pair of originals and "
         "every near-duplicate against every other original, related pairs excluded.", "",
         f"Threshold rule (`choose_threshold`): the strictest multiple of {GRID} at which {TARGET_REUSE:.0%} of the "
         f"calibration half's near-duplicates are still reused, raised if needed to {data['margin']} above the highest "
         "different-picture cosine of that half. `stored` is the encoder's `default_image_threshold` (what every figure "
         "below uses); `calibrated` is what the rule gives on this run.", "",
         "| encoder | stored | calibrated | near-dup reuse held-out | near-dup reuse all | min own cosine | "
         "false hits held-out (pairs) | false hits all (pairs) | max different cosine (pair) | "
         "ms / picture 1 thread | 2 threads |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in results:
        nh, na = r.near_dup["held-out"], r.near_dup["all"]
        fh, fa = r.false_hits["held-out"], r.false_hits["all"]
        calibrated = f"{r.calibrated_threshold:.2f}" if r.calibrated_threshold <= 1.0 else "none (different pictures reach 1.0)"
        L.append(f"| {r.encoder} | {r.stored_threshold:.2f} | {calibrated} | "
                 f"{nh['rate']:.1%} ({nh['reused']}/{nh['n']}) | {na['rate']:.1%} ({na['reused']}/{na['n']}) | "
                 f"{na['min_own_cosine']:.3f} | {fh['hits']} ({fh['pairs']}) | {fa['hits']} ({fa['pairs']}) | "
                 f"{fa['max']:.3f} ({fa['max_pair']}) | {r.latency_ms.get('1 thread', float('nan')):.1f} | "
                 f"{r.latency_ms.get('2 threads', float('nan')):.1f} |")
    L += ["", "Near-duplicate reuse by kind (all pictures, stored threshold):", "",
          "| encoder | " + " | ".join(data["near_duplicates"]) + " |",
          "|---|" + "---:|" * len(data["near_duplicates"])]
    for r in results:
        bk = r.near_dup["all"]["by_kind"]
        L.append(f"| {r.encoder} | " + " | ".join(f"{bk.get(k, 0):.1%}" for k in data["near_duplicates"]) + " |")
    L += ["", "Cosine distributions (quantiles):", "", "| encoder | set | n | min | p1 | median | p99 | max |",
          "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        for label, vals in r.cosines.items():
            q = np.quantile(vals, [0, 0.01, 0.5, 0.99, 1.0]) if vals else [float("nan")] * 5
            L.append(f"| {r.encoder} | {label} | {len(vals)} | " + " | ".join(f"{x:.3f}" for x in q) + " |")
    L += ["", "Related pairs (reported apart; `reused` = cosine >= the stored threshold):", "",
          "| relation | pair | " + " | ".join(r.encoder for r in results) + " |", "|---|---|" + "---:|" * len(results)]
    for k, rp in enumerate(results[0].related if results else []):
        cells = []
        for r in results:
            x = r.related[k]
            cells.append(f"{x['cosine']:.3f}{' reused' if x['reused'] else ''}")
        L.append(f"| {rp['relation']} | {rp['a']} / {rp['b']} | " + " | ".join(cells) + " |")
    for r in results:
        over = r.false_hits["all"]["over"]
        if over:
            L += ["", f"{r.encoder}: different pictures at or above its threshold (first 10): "
                  + "; ".join(f"{a} / {b} {c:.3f}" for c, a, b in over)]
    L += ["", f"![cosine distributions]({png})", ""]
    return "\n".join(L)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evaluation.studies.photos", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="mlc_report")
    p.add_argument("--encoders", default="efficientnet-lite0,efficientnet-lite1,efficientnet-lite2,mlc-easyvqa-tiny")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--latency-only", action="store_true", help="only time each encoder on 8 pictures, 1 and 2 threads")
    args = p.parse_args(argv)
    import os

    import torch

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    if args.latency_only:
        pictures = load_pictures()
        sample = [pictures[n] for n in sorted(pictures)[::8][:8]]
        print(f"median ms to embed one new picture (load average {os.getloadavg()[0]:.1f}):")
        for name in (e for e in args.encoders.split(",") if e):
            enc = resolve_image_encoder(name)
            enc.load()
            print(f"  {name}: " + ", ".join(f"{t} thread(s) {encoder_latency(enc, sample, t):.1f}" for t in (1, 2)))
        return 0
    data = run([e for e in args.encoders.split(",") if e], seed=args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    png = plot(data, out / "photos_cosines.png")
    cmd = "python -m evaluation.studies.photos --out " + args.out + (
        f" --encoders {args.encoders}" if args.encoders != p.get_default("encoders") else "")
    md = out / "photos.md"
    md.write_text(markdown(data, cmd, png.name) + "\n", encoding="utf-8")
    serial = dict(data, results=[r.__dict__ for r in data["results"]])
    (out / "photos.json").write_text(json.dumps(serial, indent=1, default=str) + "\n", encoding="utf-8")
    print(md.read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
