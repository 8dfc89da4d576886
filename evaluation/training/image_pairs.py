"""Labelled picture pairs from real pictures, and the image-change rule calibrated on them.

Sources: the 43 photos of ``../shared/data/photos``, the ``skimage.data`` photos that
load offline, and frames of the two real videos (``tree.avi``: frames of a tree in
wind; ``vtest.avi``: a street). Each source is a *stored* picture; a pair is
(stored, new):

* **benign** (the answer stays): JPEG q50-95, resized 50-150 %, cropped <= 5 %, shifted
  <= 5 %, brightness or contrast +-15 %, sensor noise, combinations, and real drift
  along ``tree.avi`` (wind, frames 2 apart, before the hand enters at frame 54);
* **content edits** (the answer may change), each at 1, 2, 3, 5, 8, 12, 15 % of the
  picture's area: an object cut from *another* source (an elliptic cut-out) pasted;
  a pasted object moved elsewhere; a pasted object removed (the background comes back);
  a region recoloured. Half of the edited pictures are also re-encoded or rescaled;
* **different pictures**: every pair of sources, related ones (one chessboard in five
  poses, one scene from two viewpoints, ...) included.

The split is by SOURCE (related sources on one side), fixed by ``SPLIT_SEED``, and
written to the report before any result is looked at; the rule is calibrated on the
train split only and reported on the held-out split::

    python -m evaluation.training.image_pairs --out docs/results

writes ``image_pairs.md`` / ``image_pairs.json`` and (with ``--write-rule``) the
shipped rule ``mlc_integrations/assets/image_change.json``.
"""

from __future__ import annotations

import argparse
import colorsys
import itertools
import json
import logging
import random
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter

from mlc_integrations.verify.image_change import (DEFAULT_RULE_PATH, ImageChangeRule, compare, describe)
from ..sources import imageops
from ..studies.photos import RELATED
from ..harness.workloads import local_photos, shared_data_dir
from ..paths import REPO_ROOT

log = logging.getLogger(__name__)

SPLIT_SEED = 24  # issue 24; fixed before any result was looked at
EDIT_AREAS = (0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.15)
EDIT_KINDS = ("paste", "move", "remove", "recolour")
BAR_AREA = 0.03  # content edits at or above this share must be refused (issue 24)
TREE_HAND_FRAME = 54  # first tree.avi frame with the hand in it (checked by eye: docs/image-change.md)
TREE_FRAMES = (0, 12, 24, 36, 48)  # tree.avi frames used as stored pictures
VTEST_FRAMES = (0, 300, 600)


# ---------------------------------------------------------------------------- sources and split
def load_sources(max_side: int = 768) -> tuple[dict[str, Image.Image], dict[str, str]]:
    """Pictures keyed ``cv:`` / ``sk:`` / ``tree:`` / ``vtest:`` + name, and each one's group
    (related pictures share one: they go to the same side of the split)."""
    from ..harness.image_streams import video_frames

    pics: dict[str, Image.Image] = {}
    folder = shared_data_dir() / "photos"
    for p in sorted(folder.iterdir()) if folder.is_dir() else []:
        with Image.open(p) as f:
            pics["cv:" + p.stem] = f.convert("RGB")
    for name, im in local_photos(max_side=512).items():
        pics["sk:" + name] = im
    video = shared_data_dir() / "video"
    if (video / "tree.avi").exists():
        frames = video_frames(video / "tree.avi")
        for i in TREE_FRAMES:
            pics[f"tree:{i:03d}"] = frames[i]
    if (video / "vtest.avi").exists():
        frames = video_frames(video / "vtest.avi", max_frames=max(VTEST_FRAMES) + 1)
        for i in VTEST_FRAMES:
            pics[f"vtest:{i:03d}"] = frames[i]
    for im in pics.values():
        if max(im.size) > max_side:
            im.thumbnail((max_side, max_side), Image.BICUBIC)
    group = {n: n.split(":")[0] if n.startswith(("tree:", "vtest:")) else n for n in pics}
    for pairs in RELATED.values():
        for a, b in pairs:
            if a in group and b in group:
                ga, gb = group[a], group[b]
                for k, v in group.items():
                    if v == gb:
                        group[k] = ga
    return pics, group


def split_sources(group: dict[str, str], seed: int = SPLIT_SEED) -> tuple[list[str], list[str]]:
    """Train and held-out sources: whole groups, shuffled by ``seed``, half the groups each."""
    groups = sorted(set(group.values()))
    random.Random(seed).shuffle(groups)
    train_groups = set(groups[: len(groups) // 2])
    train = sorted(n for n, g in group.items() if g in train_groups)
    held = sorted(n for n, g in group.items() if g not in train_groups)
    return train, held


# ---------------------------------------------------------------------------- transforms and edits
def contrast(im: Image.Image, f: float) -> Image.Image:
    return ImageEnhance.Contrast(im).enhance(f)


def shift_frac(im: Image.Image, frac: float, r: random.Random) -> Image.Image:
    ang = r.uniform(0, 2 * np.pi)
    w, h = im.size
    return imageops.shift(im, round(frac * w * np.cos(ang)), round(frac * h * np.sin(ang)))


Benign = Callable[[Image.Image, random.Random, np.random.Generator], tuple[Image.Image, str]]
BENIGN: dict[str, Benign] = {
    "jpeg": lambda im, r, g: (lambda q: (imageops.jpeg(im, q), f"JPEG q{q}"))(r.randint(50, 95)),
    "resize": lambda im, r, g: (lambda s: (imageops.resize(im, s), f"resized {s:.0%}"))(r.uniform(0.5, 1.5)),
    "crop": lambda im, r, g: (lambda c: (imageops.crop(im, c, (r.random(), r.random())), f"cropped {c:.1%}"))(
        r.uniform(0.01, 0.05)),
    "shift": lambda im, r, g: (lambda s: (shift_frac(im, s, r), f"shifted {s:.1%}"))(r.uniform(0.005, 0.05)),
    "brightness": lambda im, r, g: (lambda f: (imageops.brightness(im, f), f"brightness {f - 1:+.0%}"))(
        r.choice((-1, 1)) * r.uniform(0.03, 0.15) + 1),
    "contrast": lambda im, r, g: (lambda f: (contrast(im, f), f"contrast {f - 1:+.0%}"))(
        r.choice((-1, 1)) * r.uniform(0.03, 0.15) + 1),
    "noise": lambda im, r, g: (lambda s: (imageops.noise(im, s, g), f"noise sigma {s:.0f}"))(r.uniform(2, 8)),
    "jpeg+resize+brightness": lambda im, r, g: (
        imageops.jpeg(imageops.brightness(imageops.resize(im, r.uniform(0.6, 1.3)), r.uniform(0.9, 1.1)),
                      r.randint(60, 90)), "JPEG + resized + brightness"),
    "shift+jpeg": lambda im, r, g: (imageops.jpeg(shift_frac(im, r.uniform(0.01, 0.03), r), r.randint(60, 90)),
                                    "shifted + JPEG"),
    "crop+noise": lambda im, r, g: (imageops.noise(imageops.crop(im, r.uniform(0.01, 0.04), (r.random(), r.random())),
                                                   r.uniform(2, 5), g), "cropped + noise"),
}


def mild(im: Image.Image, r: random.Random, g: np.random.Generator) -> tuple[Image.Image, str]:
    """A re-encode or rescale of an edited picture (half the edits get one)."""
    k = r.choice(("jpeg", "resize", "brightness", "none", "none", "none"))
    if k == "none":
        return im, ""
    out, what = BENIGN[k](im, r, g)
    return out, " + " + what


def cutout(src: Image.Image, area_px: float, r: random.Random) -> tuple[Image.Image, Image.Image]:
    """An elliptic "object" cut from ``src`` covering ``area_px`` pixels: (patch, mask)."""
    aspect = r.uniform(0.6, 1.6)
    # ellipse area = pi/4 * w * h
    h = max(4, round(np.sqrt(area_px * 4 / np.pi / aspect)))
    w = max(4, round(h * aspect))
    sw, sh = src.size
    if w > sw or h > sh:
        src = src.resize((max(w, sw), max(h, sh)), Image.BICUBIC)
        sw, sh = src.size
    x0, y0 = r.randint(0, sw - w), r.randint(0, sh - h)
    patch = src.crop((x0, y0, x0 + w, y0 + h))
    mask = Image.new("L", (w, h), 0)
    ImageDraw.Draw(mask).ellipse((0, 0, w - 1, h - 1), fill=255)
    return patch, mask.filter(ImageFilter.GaussianBlur(0.7))


def _place(im: Image.Image, size: tuple[int, int], r: random.Random,
           avoid: Optional[tuple[int, int, int, int]] = None) -> tuple[int, int]:
    W, H = im.size
    w, h = size
    for _ in range(50):
        x, y = r.randint(0, max(0, W - w)), r.randint(0, max(0, H - h))
        if avoid is None or x + w <= avoid[0] or x >= avoid[2] or y + h <= avoid[1] or y >= avoid[3]:
            return x, y
    return x, y


def paste(base: Image.Image, patch: Image.Image, mask: Image.Image, xy: tuple[int, int]) -> Image.Image:
    out = base.copy()
    out.paste(patch, xy, mask)
    return out


def recolour(base: Image.Image, area: float, r: random.Random) -> Image.Image:
    """An elliptic region given another hue (its shading kept, saturation at least 0.5)."""
    W, H = base.size
    patch_area = area * W * H
    aspect = r.uniform(0.6, 1.6)
    h = max(4, round(np.sqrt(patch_area * 4 / np.pi / aspect)))
    w = max(4, round(h * aspect))
    x, y = _place(base, (w, h), r)
    region = base.crop((x, y, x + w, y + h))
    hsv = np.asarray(region.convert("HSV"), dtype=np.float32) / 255.0
    mean_h = float(np.median(hsv[..., 0]))
    hsv[..., 0] = (mean_h + r.uniform(0.25, 0.75)) % 1.0
    hsv[..., 1] = np.maximum(hsv[..., 1], 0.5)
    hsv[..., 2] = np.clip(hsv[..., 2], 0.25, 1.0)
    new = Image.fromarray((hsv * 255).round().astype(np.uint8), "HSV").convert("RGB")
    mask = Image.new("L", (w, h), 0)
    ImageDraw.Draw(mask).ellipse((0, 0, w - 1, h - 1), fill=255)
    return paste(base, new, mask, (x, y))


@dataclass
class Pair:
    source: str
    split: str
    label: str  # "benign" | "edit" | "different"
    kind: str  # benign transform / edit kind / relation
    detail: str
    area: float = 0.0  # edit area share (0 for benign)
    stored: Optional[Image.Image] = field(default=None, repr=False)
    new: Optional[Image.Image] = field(default=None, repr=False)


def make_pairs(pics: dict[str, Image.Image], train: Sequence[str], seed: int = 0,
               benign_per_source: int = 10) -> list[Pair]:
    """Every benign and edited pair of every source (deterministic in ``seed``)."""
    names = sorted(pics)
    side = {n: "train" if n in set(train) else "held-out" for n in names}
    pairs: list[Pair] = []
    for n in names:
        r = random.Random(f"{seed}:{n}")
        g = np.random.default_rng(r.randrange(2**32))
        im = pics[n]
        kinds = list(BENIGN)
        for k in kinds[:benign_per_source]:
            out, what = BENIGN[k](im, r, g)
            pairs.append(Pair(n, side[n], "benign", k, what, 0.0, im, out))
        others = [m for m in names if m != n and side[m] == side[n]]  # objects from the same split only
        W, H = im.size
        for area in EDIT_AREAS:
            for kind in EDIT_KINDS:
                if kind == "recolour":
                    stored, new = im, recolour(im, area, r)
                else:
                    patch, mask = cutout(pics[r.choice(others)], area * W * H, r)
                    x, y = _place(im, patch.size, r)
                    with_obj = paste(im, patch, mask, (x, y))
                    if kind == "paste":
                        stored, new = im, with_obj
                    elif kind == "remove":
                        stored, new = with_obj, im
                    else:
                        x2, y2 = _place(im, patch.size, r, avoid=(x, y, x + patch.size[0], y + patch.size[1]))
                        stored, new = with_obj, paste(im, patch, mask, (x2, y2))
                new, extra = mild(new, r, g)
                pairs.append(Pair(n, side[n], "edit", kind, f"{kind} {area:.0%}{extra}", area, stored, new))
    # Real drift along tree.avi (wind only, before the hand enters), frames 2 apart.
    video = shared_data_dir() / "video" / "tree.avi"
    if video.exists():
        from ..harness.image_streams import video_frames

        frames = video_frames(video)
        for i in range(0, TREE_HAND_FRAME - 2, 2):
            src = f"tree:{min(TREE_FRAMES, key=lambda f: abs(f - i)):03d}"
            if src in side:
                pairs.append(Pair(src, side[src], "benign", "video drift", f"tree.avi frame {i} -> {i + 2}", 0.0,
                                  frames[i], frames[i + 2]))
    return pairs


def different_pairs(pics: dict[str, Image.Image], train: Sequence[str]) -> list[Pair]:
    """Every pair of different sources on the same side of the split (related ones labelled)."""
    rel = {frozenset(p): k for k, ps in RELATED.items() for p in ps}
    tr = set(train)
    out = []
    for a, b in itertools.combinations(sorted(pics), 2):
        if (a in tr) != (b in tr):
            continue
        kind = rel.get(frozenset((a, b)), "same video" if a.split(":")[0] == b.split(":")[0] in ("tree", "vtest")
                       else "unrelated")
        out.append(Pair(a, "train" if a in tr else "held-out", "different", kind, f"{a} vs {b}", 0.0, pics[a], pics[b]))
    return out


# ---------------------------------------------------------------------------- measuring
def measure(pairs: Sequence[Pair], encoder: Optional[str] = "efficientnet-lite0") -> list[dict[str, Any]]:
    """Local-comparison features (and the encoder's global cosine) of every pair."""
    from mlc_integrations.images import pixel_digest

    enc = None
    if encoder:
        from mlc_integrations.embed.image_towers import resolve_image_encoder

        enc = resolve_image_encoder(encoder)
        enc.load()
    rows = []
    desc_cache: dict[int, Any] = {}
    for p in pairs:
        assert p.stored is not None and p.new is not None
        ds = desc_cache.setdefault(id(p.stored), describe(p.stored))
        t0 = time.perf_counter()
        dn = describe(p.new)
        rep = compare(ds, dn)
        ms = (time.perf_counter() - t0) * 1000
        row = {"source": p.source, "split": p.split, "label": p.label, "kind": p.kind, "detail": p.detail,
               "area": p.area, "ms": round(ms, 3), **{k: round(v, 5) for k, v in rep.features().items()},
               "where": rep.where}
        if enc is not None:
            vs = enc.embed_images([p.stored, p.new], [pixel_digest(p.stored), pixel_digest(p.new)])
            row["cosine"] = round(float(vs[0] @ vs[1]), 5)
        rows.append(row)
    return rows


def accepted(rule: ImageChangeRule, row: dict[str, Any]) -> bool:
    from mlc_integrations.verify.image_change import ChangeReport

    rep = ChangeReport(**{k: row[k] for k in ("peak", "scale", "shift", "overlap", "noise", "changed_area",
                                              "largest_region", "largest_cell", "colour_area")})
    return rule.decide(rep).accept


# ---------------------------------------------------------------------------- calibration
GRID = {
    "min_peak": (0.05, 0.08, 0.1, 0.12, 0.15, 0.2),
    "min_overlap": (0.6, 0.7, 0.75, 0.8),
    "max_noise": (0.03, 0.04, 0.05, 0.07),
    "max_region": (0.006, 0.008, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03),
    "max_area": (0.005, 0.0075, 0.01, 0.015, 0.02, 0.03),
}
TAU_GRID = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.87)
TARGET_BENIGN = 0.97  # train benign reuse to keep, end to end (the bar is 95 % held-out)
SAME_SCENE = ("same video", "consecutive video frames")  # "different" pairs that show one scene: not counted as false hits


def _accept_array(rule: ImageChangeRule, f: dict[str, np.ndarray]) -> np.ndarray:
    """:meth:`ImageChangeRule.decide` over arrays of features (same order of tests, same bounds)."""
    return ((f["peak"] >= rule.min_peak) & (f["overlap"] >= rule.min_overlap) & (f["noise"] <= rule.max_noise)
            & (f["largest_region"] < rule.max_region) & (f["changed_area"] < rule.max_area))


def calibrate(rows: Sequence[dict[str, Any]], max_edit_reuse: float = 0.0) -> tuple[ImageChangeRule, float, dict[str, Any]]:
    """The global threshold tau and the rule (on their grids) that, end to end on the
    train split (cosine >= tau and the rule accepts), reuse no pair of different pictures
    (other poses and viewpoints included), keep ``TARGET_BENIGN`` of benign pairs, and
    refuse the most content edits >= 3 %; ties go to more benign reuse, then to the lower
    tau and the loosest bounds (which refuse least of what they did not see)."""
    train = [r for r in rows if r["split"] == "train"]
    benign = [r for r in train if r["label"] == "benign"]
    edits = [r for r in train if r["label"] == "edit" and r["area"] >= BAR_AREA - 1e-9]
    diff = [r for r in train if r["label"] == "different" and r["kind"] not in SAME_SCENE]
    cols = ("peak", "overlap", "noise", "largest_region", "changed_area", "cosine")
    fb, fe, fd = ({c: np.array([r.get(c, 1.0) for r in sel]) for c in cols} for sel in (benign, edits, diff))
    best: Optional[tuple[Any, ...]] = None
    for tau in TAU_GRID:
        for values in itertools.product(*GRID.values()):
            rule = ImageChangeRule(**dict(zip(GRID, values)), source="calibrated")
            b = float((_accept_array(rule, fb) & (fb["cosine"] >= tau)).mean())
            if b < TARGET_BENIGN:
                continue
            if (_accept_array(rule, fd) & (fd["cosine"] >= tau)).any():
                continue
            e = float((_accept_array(rule, fe) & (fe["cosine"] >= tau)).mean())
            key = (-int(e > max_edit_reuse), -e, b, -tau, -values[0], -values[1], values[2], values[3], values[4])
            if best is None or key > best[0]:
                best = (key, rule, tau, b, e)
    if best is None:
        raise RuntimeError(f"no (tau, rule) on the grid keeps {TARGET_BENIGN:.0%} of train benign pairs")
    _, rule, tau, b, e = best
    return rule, tau, {"train_benign_reuse": b, "train_edit_reuse_ge3": e, "benign": len(benign),
                       "edits_ge3": len(edits), "different": len(diff), "tau": tau}


# ---------------------------------------------------------------------------- report
def summarize(rows: Sequence[dict[str, Any]], rule: ImageChangeRule, tau: float) -> dict[str, Any]:
    """Reuse per split, label, kind and edit size: locally (the rule alone) and end to end
    (global cosine >= ``tau`` and the rule)."""
    out: dict[str, Any] = {}
    for split_name in ("train", "held-out"):
        rs = [r for r in rows if r["split"] == split_name]
        s: dict[str, Any] = {}

        def rate(sel: Sequence[dict[str, Any]], e2e: bool = True) -> dict[str, Any]:
            ok = [accepted(rule, r) and (not e2e or r.get("cosine", 1.0) >= tau) for r in sel]
            return {"n": len(sel), "reused": int(sum(ok)), "rate": float(np.mean(ok)) if ok else float("nan")}

        ben = [r for r in rs if r["label"] == "benign"]
        s["benign"] = rate(ben)
        s["benign_local"] = rate(ben, e2e=False)
        s["benign_by_kind"] = {k: rate([r for r in ben if r["kind"] == k]) for k in sorted({r["kind"] for r in ben})}
        ed = [r for r in rs if r["label"] == "edit"]
        s["edits_ge3"] = rate([r for r in ed if r["area"] >= BAR_AREA - 1e-9])
        s["edits_ge3_local"] = rate([r for r in ed if r["area"] >= BAR_AREA - 1e-9], e2e=False)
        s["edits_ge3_global_only"] = {"n": len([r for r in ed if r["area"] >= BAR_AREA - 1e-9]),
                                      "reused": sum(r.get("cosine", 1) >= tau for r in ed if r["area"] >= BAR_AREA - 1e-9)}
        s["edits_by_area"] = {f"{a:.0%}": rate([r for r in ed if abs(r["area"] - a) < 1e-9]) for a in EDIT_AREAS}
        s["edits_by_kind_area"] = {k: {f"{a:.0%}": rate([r for r in ed if r["kind"] == k and abs(r["area"] - a) < 1e-9])
                                       for a in EDIT_AREAS} for k in EDIT_KINDS}
        diff = [r for r in rs if r["label"] == "different"]
        s["different"] = rate(diff)
        s["different_global_only"] = {"n": len(diff), "reused": sum(r.get("cosine", 0) >= tau for r in diff)}
        s["different_by_kind"] = {k: rate([r for r in diff if r["kind"] == k]) for k in sorted({r["kind"] for r in diff})}
        s["benign_refused_examples"] = [
            {k: r[k] for k in ("source", "detail", "cosine", "peak", "overlap", "noise", "changed_area", "largest_region")
             if k in r} for r in ben if not (accepted(rule, r) and r.get("cosine", 1) >= tau)][:12]
        s["edit_ge3_reused_examples"] = [
            {k: r[k] for k in ("source", "detail", "cosine", "changed_area", "largest_region", "where") if k in r}
            for r in ed if r["area"] >= BAR_AREA - 1e-9 and accepted(rule, r) and r.get("cosine", 1) >= tau][:12]
        out[split_name] = s
    ms = [r["ms"] for r in rows]
    out["ms_per_pair"] = {"p50": float(np.percentile(ms, 50)), "p90": float(np.percentile(ms, 90)),
                          "note": "describe(new) + compare, one thread, during the run (load varies)"}
    return out


def detection_line(summary: dict[str, Any], split_name: str = "held-out", at: float = 0.95) -> Optional[float]:
    """The smallest edit area from which every larger size is refused at least ``at`` of the time."""
    by = summary[split_name]["edits_by_area"]
    line = None
    for a in reversed(EDIT_AREAS):
        if 1 - by[f"{a:.0%}"]["rate"] >= at:
            line = a
        else:
            break
    return line


def markdown(data: dict[str, Any], command: str) -> str:
    s, rule = data["summary"], data["rule"]
    L = ["# Image-change verifier on labelled pairs of real pictures", "",
         f"Generated {data['generated']} by `{command}` at commit `{data['commit']}`.", "",
         f"Sources: {data['n_sources']} pictures ({data['source_counts']}), split by source (related pictures "
         f"together) with seed {SPLIT_SEED}: train {len(data['train'])}, held-out {len(data['held_out'])} "
         "(lists in the JSON). Pairs: benign copies (JPEG q50-95, resized 50-150 %, cropped <= 5 %, shifted <= 5 %, "
         "brightness / contrast +-15 %, noise, combinations, tree.avi drift), content edits (an object from another "
         "source pasted, moved, removed; a region recoloured) at "
         + ", ".join(f"{a:.0%}" for a in EDIT_AREAS) + " of the area, half of them also re-encoded or rescaled, and "
         "every pair of different sources on one side of the split.", "",
         f"Rule and global tau calibrated together on the train split only (`calibrate`: the grid point that, end to end, "
         f"reuses no pair of different pictures, keeps {TARGET_BENIGN:.0%} of benign pairs and refuses the most edits "
         f">= {BAR_AREA:.0%}; calibrated tau {data['calibration']['tau']}): `{json.dumps({k: v for k, v in rule.items() if k != 'source'})}`. "
         f"End to end = the global cosine ({data['encoder']}) >= tau {data['tau']} **and** the rule accepts.", "",
         "| split | benign reused | benign reused (rule alone) | edits >= 3 % reused | edits >= 3 % (rule alone) | "
         "edits >= 3 % passing the global tau alone | different pictures reused | different passing tau alone |",
         "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for sp in ("train", "held-out"):
        x = s[sp]
        f = lambda d: f"{d['rate']:.1%} ({d['reused']}/{d['n']})"  # noqa: E731
        L.append(f"| {sp} | {f(x['benign'])} | {f(x['benign_local'])} | {f(x['edits_ge3'])} | {f(x['edits_ge3_local'])} | "
                 f"{x['edits_ge3_global_only']['reused']}/{x['edits_ge3_global_only']['n']} | {f(x['different'])} | "
                 f"{x['different_global_only']['reused']}/{x['different_global_only']['n']} |")
    L += ["", "## Reuse by edit size (end to end)", "", "| split | kind | " + " | ".join(f"{a:.0%}" for a in EDIT_AREAS) + " |",
          "|---|---|" + "---:|" * len(EDIT_AREAS)]
    for sp in ("train", "held-out"):
        L.append(f"| {sp} | all | " + " | ".join(f"{v['rate']:.0%} ({v['reused']}/{v['n']})" for v in s[sp]["edits_by_area"].values()) + " |")
        for k, by in s[sp]["edits_by_kind_area"].items():
            L.append(f"| {sp} | {k} | " + " | ".join(f"{v['rate']:.0%}" for v in by.values()) + " |")
    line = data.get("detection_line")
    L += ["", f"**Where a change stops being reliably seen** (held-out): edits of {line:.0%} of the picture and more are "
          "refused at least 95 % of the time; below that, reuse rises (table above)." if line else
          "**Where a change stops being reliably seen**: no edit size is refused 95 % of the time (held-out).", ""]
    L += ["## Benign reuse by transform (held-out, end to end)", "", "| transform | reused |", "|---|---:|"]
    for k, v in s["held-out"]["benign_by_kind"].items():
        L.append(f"| {k} | {v['rate']:.1%} ({v['reused']}/{v['n']}) |")
    L += ["", "## Different pictures by relation (end to end)", "", "| split | relation | reused |", "|---|---|---:|"]
    for sp in ("train", "held-out"):
        for k, v in s[sp]["different_by_kind"].items():
            L.append(f"| {sp} | {k} | {v['reused']}/{v['n']} |")
    L += ["", f"Verifier time per pair (describe the new picture + compare): p50 {s['ms_per_pair']['p50']:.1f} ms, "
          f"p90 {s['ms_per_pair']['p90']:.1f} ms ({s['ms_per_pair']['note']}).", "",
          "Held-out benign pairs refused (first 12): " + json.dumps(s["held-out"]["benign_refused_examples"]), "",
          "Held-out edits >= 3 % reused (first 12): " + json.dumps(s["held-out"]["edit_ge3_reused_examples"]), ""]
    return "\n".join(L)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=REPO_ROOT, check=True).stdout.strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evaluation.training.image_pairs", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="mlc_report")
    p.add_argument("--encoder", default="efficientnet-lite0")
    p.add_argument("--tau", type=float, default=None, help="global threshold (default: the engine's for the encoder)")
    p.add_argument("--rows", default=None, help="reuse measured rows (JSON) instead of measuring again")
    p.add_argument("--cosines", default=None,
                   help="measure the local features again but take the global cosines from these rows (same pairs)")
    p.add_argument("--write-rule", action="store_true", help="write the calibrated rule to the package asset")
    p.add_argument("--split-only", action="store_true", help="print the split and stop")
    args = p.parse_args(argv)
    import torch

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(1)
    pics, group = load_sources()
    train, held = split_sources(group)
    if args.split_only:
        print(json.dumps({"train": train, "held_out": held}, indent=1))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.rows:
        rows = json.loads(Path(args.rows).read_text())["rows"]
    else:
        pairs = make_pairs(pics, train) + different_pairs(pics, train)
        log.info("%d pairs", len(pairs))
        if args.cosines:
            old = json.loads(Path(args.cosines).read_text())["rows"]
            rows = measure(pairs, None)
            if [(r["source"], r["detail"]) for r in old] != [(r["source"], r["detail"]) for r in rows]:
                raise SystemExit(f"{args.cosines} holds other pairs")
            for r, o in zip(rows, old):
                r["cosine"] = o["cosine"]
        else:
            rows = measure(pairs, args.encoder)
        (out / "image_pairs_rows.json").write_text(json.dumps({"rows": rows}) + "\n", encoding="utf-8")
    rule, tau, cal = calibrate(rows)
    if args.tau is None:
        args.tau = tau
    summary = summarize(rows, rule, args.tau)
    counts: dict[str, int] = {}
    for n in pics:
        counts[n.split(":")[0]] = counts.get(n.split(":")[0], 0) + 1
    data = {"generated": time.strftime("%Y-%m-%d %H:%M"), "commit": _commit(), "encoder": args.encoder, "tau": args.tau,
            "n_sources": len(pics), "source_counts": counts, "split_seed": SPLIT_SEED, "train": train, "held_out": held,
            "rule": rule.to_json(), "calibration": cal, "summary": summary}
    data["detection_line"] = detection_line(summary)
    cmd = "python -m evaluation.training.image_pairs --out " + args.out + (" --write-rule" if args.write_rule else "") + (
        " --cosines " + args.cosines if args.cosines else "")
    (out / "image_pairs.md").write_text(markdown(data, cmd) + "\n", encoding="utf-8")
    (out / "image_pairs.json").write_text(json.dumps(dict(data, rows=rows), indent=0) + "\n", encoding="utf-8")
    if args.write_rule:
        DEFAULT_RULE_PATH.write_text(json.dumps(dict(rule.to_json(), global_tau=tau, source=f"python -m evaluation.training.image_pairs "
                                                     f"(train split, seed {SPLIT_SEED}, commit {data['commit']})",
                                                     calibration=cal), indent=1) + "\n", encoding="utf-8")
    print((out / "image_pairs.md").read_text(encoding="utf-8"))
    return 0




# ============================================================================ drift, jitter, small edits
# The second calibration (camera drift and re-shoots, edits down to 1 %): pairs from the
# TRAIN side of the photo split, vtest.avi frames (train side) and easy-vqa TRAIN pictures;
# the train side is split again by group (CAL_SEED) into calibration and validation halves;
# the held-out check (docs/results/image_heldout_spec.json, committed before any of it was
# generated) is built by :func:`heldout_pairs` from the held-out side and easy-vqa TEST.
CAL_SEED = 3302
HELDOUT_SEED = 3301
SMALL_EDIT_AREAS = (0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.05)
EVQA_COLOURS = {"red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255), "yellow": (255, 255, 0),
                "teal": (0, 128, 128), "brown": (165, 42, 42), "black": (0, 0, 0), "gray": (128, 128, 128)}


def subpixel_shift(im: Image.Image, dx: float, dy: float) -> Image.Image:
    """Translate by a fractional (dx, dy) (bilinear), borders from the edge pixels."""
    pad = int(np.ceil(max(abs(dx), abs(dy)))) + 1
    a = np.pad(np.asarray(im.convert("RGB")), ((pad, pad), (pad, pad), (0, 0)), mode="edge")
    big = Image.fromarray(np.ascontiguousarray(a))
    w, h = im.size
    return big.transform((w, h), Image.AFFINE, (1, 0, pad - dx, 0, 1, pad - dy), resample=Image.BILINEAR)


def rotate(im: Image.Image, deg: float) -> Image.Image:
    a = np.asarray(im.convert("RGB"))
    border = np.concatenate([a[0], a[-1], a[:, 0], a[:, -1]])
    fill = tuple(int(v) for v in np.median(border, axis=0))
    return im.convert("RGB").rotate(deg, Image.BICUBIC, expand=False, fillcolor=fill)


def motion_blur(im: Image.Image, px: int) -> Image.Image:
    k = 3 if px <= 3 else 5
    row = [0.0] * (k * (k // 2)) + [1.0 if abs(i - k // 2) <= (px - 1) / 2 else 0.0 for i in range(k)] + [0.0] * (k * (k // 2))
    return im.convert("RGB").filter(ImageFilter.Kernel((k, k), row, scale=sum(row)))


def exposure(im: Image.Image, f: float) -> Image.Image:
    a = np.asarray(im.convert("RGB")).astype(np.float32) * f
    return Image.fromarray(np.clip(a, 0, 255).round().astype(np.uint8))


JITTER: dict[str, Benign] = {
    "subpixel shift": lambda im, r, g: (lambda d: (subpixel_shift(im, *d), f"shift {d[0]:+.2f},{d[1]:+.2f} px"))(
        (r.uniform(-0.8, 0.8), r.uniform(-0.8, 0.8))),
    "few-pixel shift": lambda im, r, g: (lambda d: (subpixel_shift(im, *d), f"shift {d[0]:+.1f},{d[1]:+.1f} px"))(
        (r.uniform(-4, 4), r.uniform(-4, 4))),
    "sensor noise": lambda im, r, g: (lambda s: (imageops.noise(im, s, g), f"noise sigma {s:.1f}"))(r.uniform(2, 6)),
    "exposure step": lambda im, r, g: (lambda f: (exposure(im, f), f"exposure x{f:.2f}"))(r.choice((0.85, 0.9, 1.1, 1.15))),
    "motion blur": lambda im, r, g: (lambda k: (motion_blur(im, k), f"motion blur {k} px"))(r.choice((2, 3, 4, 5))),
    "small rotation": lambda im, r, g: (lambda d: (rotate(im, d), f"rotation {d:+.1f} deg"))(r.choice((-1, 1)) * r.uniform(0.5, 3.0)),
    "rescale": lambda im, r, g: (lambda s: (imageops.resize(im, s), f"resized {s:.0%}"))(r.uniform(0.4, 1.5)),
    "crop": lambda im, r, g: (lambda c: (imageops.crop(im, c, (r.random(), r.random())), f"cropped {c:.1%}"))(r.uniform(0.02, 0.06)),
    "jpeg low": lambda im, r, g: (lambda q: (imageops.jpeg(im, q), f"JPEG q{q}"))(r.randint(25, 50)),
    "blur": lambda im, r, g: (lambda s: (im.filter(ImageFilter.GaussianBlur(s)), f"blur {s:.1f}"))(r.uniform(0.5, 1.5)),
    "contrast": lambda im, r, g: (lambda f: (contrast(im, f), f"contrast {f:.2f}"))(r.uniform(0.8, 0.9)),
    "drift": lambda im, r, g: (imageops.noise(exposure(subpixel_shift(im, r.uniform(-2.5, 2.5), r.uniform(-2.5, 2.5)),
                                                       r.uniform(0.92, 1.08)), r.uniform(2, 4), g), "drift: shift + exposure + noise"),
}


def evqa_jitter(im: Image.Image, r: random.Random, g: np.random.Generator) -> Image.Image:
    """An easy-vqa picture re-shot: shift in [-2, 2] px (sub-pixel), noise sigma 3, brightness x0.94-1.06."""
    out = subpixel_shift(im, r.uniform(-2, 2), r.uniform(-2, 2))
    return imageops.noise(imageops.brightness(out, r.uniform(0.94, 1.06)), 3.0, g)


def evqa_recolour(im: Image.Image, colour: str, r: random.Random) -> tuple[Image.Image, str]:
    """The shape's pixels (within 60 of its colour in RGB) set to another easy-vqa colour."""
    a = np.asarray(im.convert("RGB")).astype(np.int32)
    mask = np.abs(a - np.array(EVQA_COLOURS[colour])).sum(axis=2) <= 60
    other = r.choice([c for c in EVQA_COLOURS if c != colour])
    a = a.copy()
    a[mask] = EVQA_COLOURS[other]
    return Image.fromarray(a.astype(np.uint8)), f"{colour} -> {other} ({mask.mean():.1%} of the picture)"


def feathered_paste(base: Image.Image, patch: Image.Image, mask: Image.Image, xy: tuple[int, int]) -> Image.Image:
    radius = max(1.0, 2.0 * max(base.size) / 768)
    return paste(base, patch, mask.filter(ImageFilter.GaussianBlur(radius)), xy)


def small_edits(n: str, im: Image.Image, donors: Sequence[Image.Image], split: str, r: random.Random,
                g: np.random.Generator, areas: Sequence[float] = SMALL_EDIT_AREAS) -> list[Pair]:
    """paste / feathered paste / recolour at each of ``areas``; half re-encoded (JPEG q70-90)."""
    out = []
    W, H = im.size
    for area in areas:
        for kind in ("paste", "feathered paste", "recolour"):
            if kind == "recolour":
                new = recolour(im, area, r)
            else:
                patch, mask = cutout(r.choice(list(donors)), area * W * H, r)
                xy = _place(im, patch.size, r)
                new = paste(im, patch, mask, xy) if kind == "paste" else feathered_paste(im, patch, mask, xy)
            extra = ""
            if r.random() < 0.5:
                q = r.randint(70, 90)
                new, extra = imageops.jpeg(new, q), f" + JPEG q{q}"
            out.append(Pair(n, split, "edit", kind, f"{kind} {area:.2%}{extra}", area, im, new))
    return out


def evqa_pairs(split_name: str, pictures: Sequence[Any], seed: int, label_split: str) -> list[Pair]:
    out = []
    for v in pictures:
        r = random.Random(f"{seed}:evqa:{v.image_id}")
        g = np.random.default_rng(r.randrange(2**32))
        im = Image.open(v.path).convert("RGB")
        out.append(Pair(f"evqa:{v.image_id}", label_split, "benign", "easy-vqa jitter", "shift +-2 px, noise 3, brightness",
                        0.0, im, evqa_jitter(im, r, g)))
        rec, what = evqa_recolour(im, v.color, r)
        out.append(Pair(f"evqa:{v.image_id}", label_split, "edit", "easy-vqa shape colour", what, 0.05, im,
                        evqa_jitter(rec, r, g)))
    return out


# Extra draws of every jitter and small edit on the same train-side photos (another seed
# each): the first draw holds only ~3 reused edits >= 2 % per half, too few to tell a
# low-contrast edit from a benign copy with.
EXTRA_DRAWS = 3


def calibration_pairs(pics: dict[str, Image.Image], group: dict[str, str], train: Sequence[str],
                      n_evqa: int = 300, extra_draws: int = EXTRA_DRAWS) -> list[Pair]:
    """Train-side pairs (jitter, drift, small edits, different pictures, easy-vqa train),
    labelled ``split`` "cal" or "val" by group (CAL_SEED); ``extra_draws`` more draws of
    the jitter and the small edits of each train photo (seeds ``CAL_SEED:name:draw``)."""
    from ..sources.easyvqa import load_split

    groups = sorted({group[n] for n in train})
    random.Random(CAL_SEED).shuffle(groups)
    val_groups = set(groups[: len(groups) // 2])
    side = {n: "val" if group[n] in val_groups else "cal" for n in train}
    pairs: list[Pair] = []
    for n in sorted(train):
        r = random.Random(f"{CAL_SEED}:{n}")
        g = np.random.default_rng(r.randrange(2**32))
        im = pics[n]
        for k, fn in JITTER.items():
            new, what = fn(im, r, g)
            pairs.append(Pair(n, side[n], "benign", k, what, 0.0, im, new))
        donors = [pics[m] for m in train if m != n and side[m] == side[n]]
        pairs += small_edits(n, im, donors, side[n], r, g)
        for draw in range(1, extra_draws + 1):
            r = random.Random(f"{CAL_SEED}:{n}:{draw}")
            g = np.random.default_rng(r.randrange(2**32))
            for k, fn in JITTER.items():
                new, what = fn(im, r, g)
                pairs.append(Pair(n, side[n], "benign", k, what, 0.0, im, new))
            pairs += small_edits(n, im, donors, side[n], r, g)
    names = sorted(train)
    related = {frozenset(p): k for k, ps in RELATED.items() for p in ps}
    for a, b in itertools.combinations(names, 2):
        if side[a] == side[b]:
            rel = related.get(frozenset((a, b)), "same video" if a.split(":")[0] == b.split(":")[0] == "vtest"
                              else "different")
            pairs.append(Pair(a, side[a], "different", rel, f"{a} vs {b}", 0.0, pics[a], pics[b]))
    ev = load_split("train")[:n_evqa]
    half = len(ev) // 2
    pairs += evqa_pairs("train", ev[:half], CAL_SEED, "cal") + evqa_pairs("train", ev[half:], CAL_SEED, "val")
    for sp, sel in (("cal", ev[:half]), ("val", ev[half:])):  # different easy-vqa pictures (neighbours in id order)
        ims = [Image.open(v.path).convert("RGB") for v in sel]
        for i in range(len(sel) - 1):
            pairs.append(Pair(f"evqa:{sel[i].image_id}", sp, "different", "easy-vqa other picture",
                              f"{sel[i].image_id} vs {sel[i + 1].image_id}", 0.0, ims[i], ims[i + 1]))
    return pairs


HELDOUT_COPIES: dict[str, Callable[[Image.Image, random.Random, np.random.Generator], Image.Image]] = {
    "JPEG q30": lambda im, r, g: imageops.jpeg(im, 30),
    "resize 40 %": lambda im, r, g: imageops.resize(im, 0.4),
    "rotation 3 deg": lambda im, r, g: rotate(im, 3.0 * r.choice((-1, 1))),
    "crop 6 %": lambda im, r, g: imageops.crop(im, 0.06, (r.random(), r.random())),
    "contrast 0.85": lambda im, r, g: contrast(im, 0.85),
    "blur 1.0": lambda im, r, g: im.filter(ImageFilter.GaussianBlur(1.0)),
}
HELDOUT_DRIFT: dict[str, Callable[[Image.Image, random.Random, np.random.Generator], Image.Image]] = {
    "shift 0.5 px": lambda im, r, g: subpixel_shift(im, 0.5, 0.5 * r.choice((-1, 1))),
    "shift 3 px": lambda im, r, g: imageops.shift(im, 3 * r.choice((-1, 1)), 3 * r.choice((-1, 1))),
    "noise 4": lambda im, r, g: imageops.noise(im, 4.0, g),
    "exposure x1.12": lambda im, r, g: exposure(im, 1.12),
    "exposure x0.88": lambda im, r, g: exposure(im, 0.88),
    "motion blur 3 px": lambda im, r, g: motion_blur(im, 3),
    "rotation 1 deg": lambda im, r, g: rotate(im, r.choice((-1, 1))),
    "rescale 90 %": lambda im, r, g: imageops.resize(im, 0.9),
    "JPEG q40 + shift 1 px": lambda im, r, g: imageops.jpeg(imageops.shift(im, 1, 0), 40),
}


HELDOUT_V2_SEED = 3303
HELDOUT_V3_SEED = 3304


def heldout_pairs(pics: dict[str, Image.Image], held: Sequence[str], version: int = 2) -> list[Pair]:
    """The held-out check of docs/results/image_heldout_spec.json (v1, seed HELDOUT_SEED,
    easy-vqa test 0-199) or image_heldout_spec_v2.json (v2, seed HELDOUT_V2_SEED, easy-vqa
    test 200-399 and pairs of different easy-vqa pictures)."""
    from ..sources.easyvqa import load_split

    seed = {1: HELDOUT_SEED, 2: HELDOUT_V2_SEED, 3: HELDOUT_V3_SEED}[version]
    pairs: list[Pair] = []
    for n in sorted(held):
        r = random.Random(f"{seed}:{n}")
        g = np.random.default_rng(r.randrange(2**32))
        im = pics[n]
        for k, fn in HELDOUT_COPIES.items():
            pairs.append(Pair(n, "held-out", "benign", "copy: " + k, k, 0.0, im, fn(im, r, g)))
        for k, fn in HELDOUT_DRIFT.items():
            pairs.append(Pair(n, "held-out", "benign", "drift: " + k, k, 0.0, im, fn(im, r, g)))
        pairs += small_edits(n, im, [pics[m] for m in held if m != n], "held-out", r, g)
    rel = {frozenset(p): k for k, ps in RELATED.items() for p in ps}
    for a, b in itertools.combinations(sorted(held), 2):
        kind = rel.get(frozenset((a, b)), "same video" if a.split(":")[0] == b.split(":")[0] == "tree" else "unrelated")
        pairs.append(Pair(a, "held-out", "different", kind, f"{a} vs {b}", 0.0, pics[a], pics[b]))
    ev = load_split("test")[200 * (version - 1):200 * version]
    pairs += evqa_pairs("test", ev, seed, "held-out")
    if version >= 2:
        ims = [Image.open(v.path).convert("RGB") for v in ev]
        for i in range(len(ev) - 1):
            pairs.append(Pair(f"evqa:{ev[i].image_id}", "held-out", "different", "easy-vqa other picture",
                              f"{ev[i].image_id} vs {ev[i + 1].image_id}", 0.0, ims[i], ims[i + 1]))
    return pairs


STAGED = ("peak", "overlap", "shift", "noise", "largest_region", "largest_cell", "changed_area")


def measure_staged(pairs: Sequence[Pair], encoder: Optional[str] = "efficientnet-lite0") -> list[dict[str, Any]]:
    """What :func:`~mlc_integrations.verify.image_change.judge` sees for each pair, for any
    rule: the early bounds, the change map at scale 1 (``s1_*``), and at the best other
    scale (``s2_*``, only when the scale-1 peak is not confident), and the global cosine."""
    from mlc_integrations.images import pixel_digest
    from mlc_integrations.verify.image_change import ANGLES, CONFIDENT_PEAK, SCALES, align, is_flat, prescreen
    from mlc_integrations.verify.image_change.alignment import spectrum_of
    from mlc_integrations.verify.image_change.descriptor import grey01

    enc = None
    if encoder:
        from mlc_integrations.embed.image_towers import resolve_image_encoder

        enc = resolve_image_encoder(encoder)
        enc.load()
    rows = []
    desc_cache: dict[int, Any] = {}
    for p in pairs:
        assert p.stored is not None and p.new is not None
        ds = desc_cache.setdefault(id(p.stored), describe(p.stored))
        t0 = time.perf_counter()
        dn = describe(p.new)
        gb, cb = prescreen(ds, dn)
        row: dict[str, Any] = {"source": p.source, "split": p.split, "label": p.label, "kind": p.kind,
                               "detail": p.detail, "area": p.area, "grey_bound": round(gb, 5), "colour_bound": round(cb, 5)}
        if is_flat(ds, dn):
            reps = {"s1": compare(ds, dn)}
        else:
            a, b = grey01(ds), grey01(dn)
            sp = (spectrum_of(ds), spectrum_of(dn))
            al1 = align(a, b, scales=(1.0,), spectra=sp)
            reps = {"s1": compare(ds, dn, al1)}
            if al1.peak <= CONFIDENT_PEAK:
                reps["s2"] = compare(ds, dn, align(a, b, SCALES, spectra=sp, skip=(1.0,), angles=ANGLES))
        row["ms"] = round((time.perf_counter() - t0) * 1000, 3)
        for k, rep in reps.items():
            for f in STAGED:
                row[f"{k}_{f}"] = round(float(getattr(rep, f)), 5)
        row["where"] = reps["s1"].where
        if enc is not None:
            vs = enc.embed_images([p.stored, p.new], [pixel_digest(p.stored), pixel_digest(p.new)])
            row["cosine"] = round(float(vs[0] @ vs[1]), 5)
        rows.append(row)
    return rows


def _cols(rows: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
    cols = {c: np.array([r.get(c, 1.0) for r in rows], float) for c in ("grey_bound", "colour_bound", "cosine")}
    for k in ("s1", "s2"):
        has = np.array([f"{k}_peak" in r for r in rows])
        cols[f"{k}_has"] = has
        for f in STAGED:
            cols[f"{k}_{f}"] = np.array([r.get(f"{k}_{f}", 0.0) for r in rows], float)
    return cols


def staged_accept(rule: ImageChangeRule, c: dict[str, np.ndarray], tau: float) -> np.ndarray:
    """:func:`judge` over arrays (same tests, same order), and the global cosine >= tau."""
    def ok(k: str) -> np.ndarray:
        return ((c[f"{k}_peak"] >= rule.min_peak) & (c[f"{k}_overlap"] >= rule.min_overlap)
                & (c[f"{k}_shift"] < rule.max_shift)
                & (c[f"{k}_noise"] <= rule.max_noise) & (c[f"{k}_largest_region"] < rule.max_region)
                & (c[f"{k}_largest_cell"] < rule.max_cell) & (c[f"{k}_changed_area"] < rule.max_area))

    from mlc_integrations.verify.image_change import CLOSE_AREA, CLOSE_REGION

    early = (c["grey_bound"] >= rule.max_grey_bound) | (c["colour_bound"] >= rule.max_colour_bound)
    close = (c["s1_changed_area"] < CLOSE_AREA) & (c["s1_largest_region"] < CLOSE_REGION)
    return ~early & (ok("s1") | (c["s2_has"] & close & ok("s2"))) & (c["cosine"] >= tau)


GRID2 = {
    "min_peak": (0.05, 0.08),
    "min_overlap": (0.6, 0.7, 0.8),
    "max_shift": (0.06, 0.1, 0.15, 1.01),
    "max_noise": (0.05, 0.07),
    "max_region": (0.0075, 0.01, 0.015, 0.02, 0.03),
    "max_area": (0.003, 0.005, 0.0075, 0.01, 0.015, 0.03),
    "max_cell": (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.6, 1.01),
}
TAU_GRID2 = (0.6, 0.65)
EARLY_MARGIN = 1.5  # the early bounds sit this far above every calibration benign pair's


_COLS: dict[int, tuple[Sequence[dict[str, Any]], dict[str, np.ndarray]]] = {}


def bars(rule: ImageChangeRule, rows: Sequence[dict[str, Any]], tau: float) -> dict[str, dict[str, Any]]:
    """Reuse of each bar's population (rows of one split)."""
    hit = _COLS.get(id(rows))
    if hit is None or hit[0] is not rows:
        hit = _COLS[id(rows)] = (rows, _cols(rows))
    c = hit[1]
    acc = staged_accept(rule, c, tau)
    lab = np.array([r["label"] for r in rows])
    kind = np.array([r["kind"] for r in rows])
    area = np.array([r["area"] for r in rows])
    evqa = np.array([r["source"].startswith("evqa:") for r in rows])
    sel = {
        "easy-vqa jittered frame (>= 80 %)": (lab == "benign") & evqa,
        "easy-vqa shape in another colour (<= 2 %)": kind == "easy-vqa shape colour",
        "benign copies of real photos (>= 90 %)": (lab == "benign") & ~evqa & np.char.startswith(kind.astype(str), "copy: "),
        "drift and jitter of real photos": (lab == "benign") & ~evqa & ~np.char.startswith(kind.astype(str), "copy: "),
        "all benign real photos (>= 95 %)": (lab == "benign") & ~evqa,
        "edits 1-1.5 % (<= 5 %)": (lab == "edit") & ~evqa & (area < 0.0175),
        "edits 2-3 % (<= 2 %)": (lab == "edit") & ~evqa & (area > 0.0175) & (area < 0.0299),
        "edits >= 3 % (<= 1 %)": (lab == "edit") & ~evqa & (area >= 0.0299),
        "different pictures (0)": (lab == "different") & ~np.isin(kind, SAME_SCENE),
        "different frames of one video (reported)": (lab == "different") & np.isin(kind, SAME_SCENE),
    }
    out = {}
    for k, m in sel.items():
        n = int(m.sum())
        out[k] = {"n": n, "reused": int(acc[m].sum()), "rate": float(acc[m].mean()) if n else float("nan")}
    if (lab == "benign").any():
        by = {}
        for k in sorted(set(kind[lab == "benign"])):
            m = (lab == "benign") & (kind == k) & ~evqa
            if m.any():
                by[k] = f"{int(acc[m].sum())}/{int(m.sum())}"
        out["benign by transform"] = by  # type: ignore[assignment]
        early = (c["grey_bound"] >= rule.max_grey_bound) | (c["colour_bound"] >= rule.max_colour_bound)
        out["refused before alignment"] = {k: f"{int(early[m].sum())}/{int(m.sum())}" for k, m in sel.items()}  # type: ignore[assignment]
    return out


# The calibration holds the reuse bars of edits and recolours at this share of the bar on the
# train side: the held-out checks reused 2-4 x more edits than the train side did (v2: edits
# 2-3 % 3.2 % held-out against 0.8 % / 0 % on cal / val), so a rule at the bar on train fails it.
BAR_MARGIN = 0.5


def _violation(b: dict[str, dict[str, Any]], margin: float = 1.0) -> float:
    lim = {"easy-vqa shape in another colour (<= 2 %)": 0.02, "edits 1-1.5 % (<= 5 %)": 0.05,
           "edits 2-3 % (<= 2 %)": 0.02, "edits >= 3 % (<= 1 %)": 0.01, "different pictures (0)": 0.0}
    return sum(max(0.0, b[k]["rate"] - margin * v) for k, v in lim.items() if b[k]["n"])


def _benefit(b: dict[str, dict[str, Any]]) -> float:
    return min(b["easy-vqa jittered frame (>= 80 %)"]["rate"] / 0.8, b["all benign real photos (>= 95 %)"]["rate"] / 0.95)


def calibrate_staged(rows: Sequence[dict[str, Any]], top: int = 40) -> tuple[ImageChangeRule, float, dict[str, Any]]:
    """Early bounds from the calibration half's benign pairs (x EARLY_MARGIN); the grid
    point (rule, tau) chosen in two steps: the ``top`` best on the calibration half
    (fewest bar violations, then most benign reuse; ties with the last included), then the best of those on the
    validation half (same order). A reuse bar counts as violated past ``BAR_MARGIN`` of it."""
    cal = [r for r in rows if r["split"] == "cal"]
    val = [r for r in rows if r["split"] == "val"]
    ben = [r for r in cal if r["label"] == "benign"]
    gmax = max(r["grey_bound"] for r in ben)
    cmax = max(r["colour_bound"] for r in ben)
    early = {"max_grey_bound": round(min(1.01, EARLY_MARGIN * gmax), 4), "max_colour_bound": round(min(1.01, EARLY_MARGIN * cmax), 4)}
    scored = []
    for tau in TAU_GRID2:
        for values in itertools.product(*GRID2.values()):
            rule = ImageChangeRule(**dict(zip(GRID2, values)), **early, source="calibrated")
            b = bars(rule, cal, tau)
            scored.append((-_violation(b, BAR_MARGIN), _benefit(b), -tau, rule, tau))
    scored.sort(key=lambda x: x[:3], reverse=True)
    # Every point tied with the ``top``-th on the calibration half goes on (a cut inside a tie
    # kept whichever tied points the grid happened to list first).
    shortlist = [s for s in scored if s[:3] >= scored[min(top, len(scored)) - 1][:3]]
    best = max(shortlist, key=lambda s: (-_violation(bars(s[3], val, s[4]), BAR_MARGIN), _benefit(bars(s[3], val, s[4])),
                                         s[0], s[1]))
    rule, tau = best[3], best[4]
    return rule, tau, {"early_from_cal_benign_max": {"grey": gmax, "colour": cmax}, "margin": EARLY_MARGIN,
                       "cal": bars(rule, cal, tau), "val": bars(rule, val, tau), "tau": tau,
                       "shortlist": len(shortlist), "grid": len(scored), "bar_margin": BAR_MARGIN}


def main_staged(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evaluation.training.image_pairs staged")
    p.add_argument("--out", default="mlc_report")
    p.add_argument("--rows", default=None, help="reuse measured calibration rows")
    p.add_argument("--heldout", action="store_true", help="also measure the held-out check with the chosen rule")
    p.add_argument("--heldout-version", type=int, default=3)
    p.add_argument("--heldout-rows", default=None, help="reuse measured held-out rows")
    p.add_argument("--measure-only", choices=("cal", "heldout"), default=None,
                   help="measure one set of rows and stop (to run both at once)")
    p.add_argument("--write-rule", action="store_true")
    p.add_argument("--shipped-rule", action="store_true", help="report the shipped rule instead of calibrating one")
    args = p.parse_args(argv)
    import torch

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pics, group = load_sources()
    train, held = split_sources(group)
    if args.measure_only == "heldout":
        hrows = measure_staged(heldout_pairs(pics, held, args.heldout_version))
        (out / "image_judge_heldout_rows.json").write_text(json.dumps({"rows": hrows}) + "\n", encoding="utf-8")
        return 0
    if args.rows:
        rows = json.loads(Path(args.rows).read_text())["rows"]
    else:
        pairs = calibration_pairs(pics, group, train)
        log.info("%d calibration pairs", len(pairs))
        rows = measure_staged(pairs)
        (out / "image_judge_cal_rows.json").write_text(json.dumps({"rows": rows}) + "\n", encoding="utf-8")
        if args.measure_only == "cal":
            return 0
    if args.shipped_rule:  # the rule in the package asset, as shipped (no calibration)
        rule = ImageChangeRule.load()
        tau = float(json.loads(DEFAULT_RULE_PATH.read_text())["global_tau"])
        cal = {"cal": bars(rule, [r for r in rows if r["split"] == "cal"], tau),
               "val": bars(rule, [r for r in rows if r["split"] == "val"], tau), "tau": tau}
    else:
        rule, tau, cal = calibrate_staged(rows)
    res: dict[str, Any] = {"generated": time.strftime("%Y-%m-%d %H:%M"), "commit": _commit(), "rule": rule.to_json(),
                           "tau": tau, "calibration": cal}
    if args.write_rule:
        DEFAULT_RULE_PATH.write_text(json.dumps(dict(rule.to_json(), global_tau=tau, source=(
            f"python -m evaluation.training.image_pairs staged (train side: cal/val by group, seeds {SPLIT_SEED}/{CAL_SEED}, "
            f"commit {res['commit']})"), calibration={"cal": cal["cal"], "val": cal["val"]}), indent=1) + "\n", encoding="utf-8")
    if args.heldout:
        if args.heldout_rows:
            hrows = json.loads(Path(args.heldout_rows).read_text())["rows"]
        else:
            hp = heldout_pairs(pics, held, args.heldout_version)
            log.info("%d held-out pairs", len(hp))
            hrows = measure_staged(hp)
            (out / "image_judge_heldout_rows.json").write_text(json.dumps({"rows": hrows}) + "\n", encoding="utf-8")
        res["heldout_version"] = args.heldout_version
        res["heldout"] = bars(rule, hrows, tau)
        ms = [r["ms"] for r in hrows]
        res["heldout_ms_per_pair"] = {"p50": float(np.percentile(ms, 50)), "p90": float(np.percentile(ms, 90))}
    (out / "image_judge.json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":  # pragma: no cover
    import sys

    if sys.argv[1:2] == ["staged"]:
        raise SystemExit(main_staged(sys.argv[2:]))
    raise SystemExit(main())
