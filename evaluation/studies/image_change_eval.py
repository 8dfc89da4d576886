"""The image-change verifier through the engine, on real camera streams, easy-vqa and photos.

* ``camera``: consecutive frames of ``tree.avi`` (every frame; wind, then a hand from
  frame 54) and ``vtest.avi`` (every 5th frame; people walking), each sent as a JPEG q90
  with one question; the truth per frame is the committed annotation
  (:mod:`.video_truth`). A reuse is wrong when the reused frame's truth differs.
* ``easyvqa``: 60 easy-vqa test pictures, each stored with "what color is the shape?";
  then (a) a jittered copy (+-2 px shift, noise sigma 3, brightness +-6 %) must reuse,
  (b) the same picture with the shape in another colour, and (c) another test picture of
  the same shape in another colour must not.
* ``photos``: the real photos of :mod:`.photos` -- each near-duplicate against its own
  original must reuse; every pair of different originals (related ones included:
  the chessboard in five poses, two viewpoints of one scene, ...) must not.

Each runs per global image threshold tau (the shipped default marked) with the local
verifier on, and at the default with it off::

    python -m evaluation.studies.image_change_eval --out docs/results

writes ``image_change_eval.md`` / ``.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import random
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
from PIL import Image

from mlc_integrations import TierOptions, CacheRequest, MLCEngine
from mlc_integrations.embed.image_towers import DEFAULT_IMAGE_ENCODER, resolve_image_encoder
from mlc_integrations.images import pixel_digest
from mlc_integrations.verify.image_change import ImageChangeVerifier, compare, describe
from ..sources import imageops
from ..sources.video_truth import TREE_HAND_FRAME, load_annotation
from ..harness.workloads import shared_data_dir

log = logging.getLogger(__name__)

TAUS = (0.6, 0.7, 0.75, 0.8, 0.87)
EASYVQA_COLOURS = {"red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255), "yellow": (255, 255, 0),
                   "teal": (0, 128, 128), "brown": (165, 42, 42), "black": (0, 0, 0), "gray": (128, 128, 128)}


def _engine(tau: Optional[float], verifier: bool) -> MLCEngine:
    return MLCEngine(persist_directory=None, l2_image_threshold=tau, durable=True,
                     tiers=TierOptions(image_verifier="default" if verifier else None))


def _label(tau: Optional[float], default: float, verifier: bool) -> str:
    t = default if tau is None else tau
    return f"tau={t:.2f}{' (default)' if abs(t - default) < 1e-9 else ''}{'' if verifier else ', verifier off'}"


GLOBAL_ONLY_TAU = 0.87  # Lite0's threshold before issue 24, when the global cosine alone decided


def _settings(taus: Sequence[float]) -> list[tuple[Optional[float], bool]]:
    return [(t, True) for t in taus] + [(GLOBAL_ONLY_TAU, False)]


# ---------------------------------------------------------------------------- camera streams
def camera(taus: Sequence[float], default: float) -> dict[str, Any]:
    from ..harness.image_streams import video_frames

    ann = load_annotation()
    video = shared_data_dir() / "video"
    streams: dict[str, list[tuple[bytes, str]]] = {}
    tree = video_frames(video / "tree.avi")
    streams["tree.avi"] = [(imageops.jpeg_bytes(tree[r["frame"]], 90), r["answer"]) for r in ann["tree.avi"]["frames"]]
    vt = video_frames(video / "vtest.avi")
    streams["vtest.avi"] = [(imageops.jpeg_bytes(vt[r["frame"]], 90), f"{r['people']} people")
                            for r in ann["vtest.avi"]["frames"]]
    questions = {"tree.avi": ann["tree.avi"]["question"], "vtest.avi": ann["vtest.avi"]["question"]}
    out: dict[str, Any] = {}
    for name, frames in streams.items():
        rows = []
        for tau, ver in _settings(taus):
            eng = _engine(tau, ver)
            truth_of: dict[str, str] = {}
            hits = wrong = wind_hits = wind_n = 0
            ms = []
            for k, (data, truth) in enumerate(frames):
                req = CacheRequest(text=questions[name], images=[data])
                t0 = time.perf_counter()
                hit = eng.lookup(req)
                ms.append((time.perf_counter() - t0) * 1000)
                wind = name == "tree.avi" and k < TREE_HAND_FRAME
                wind_n += wind
                if hit is not None:
                    hits += 1
                    wind_hits += wind
                    wrong += truth_of.get(hit.entry_id) != truth
                    continue
                eid = eng.update(req, truth)
                if eid is not None:
                    truth_of[eid] = truth
            n = len(frames)
            row = {"setting": _label(tau, default, ver), "n": n, "hits": hits, "hit_rate": hits / n, "wrong": wrong,
                   "wrong_rate": wrong / n, "lookup_p50_ms": float(np.median(ms))}
            if name == "tree.avi":
                row.update(wind_frames=wind_n, wind_hits=wind_hits, wind_hit_rate=wind_hits / max(1, wind_n - 1))
            rows.append(row)
            eng.close()
            log.info("%s %s: %s", name, row["setting"], row)
        out[name] = rows
    return out


# ---------------------------------------------------------------------------- easy-vqa
def _jitter(im: Image.Image, r: random.Random, g: np.random.Generator) -> Image.Image:
    out = imageops.shift(im, r.randint(-2, 2), r.randint(-2, 2))
    out = imageops.noise(out, 3.0, g)
    return imageops.brightness(out, 1 + r.uniform(-0.06, 0.06))


def _recolour_shape(im: Image.Image, colour: str) -> Image.Image:
    """The shape (pixels far from the background colour) painted in ``colour``, anti-aliased edges blended."""
    a = np.asarray(im.convert("RGB"), np.float32)
    bg = np.median(np.concatenate([a[0], a[-1], a[:, 0], a[:, -1]]), axis=0)
    dist = np.abs(a - bg).max(axis=2)
    alpha = np.clip(dist / max(1.0, float(dist.max())), 0, 1)[..., None]
    # Un-blend: each pixel = alpha * shape + (1 - alpha) * bg  ->  repaint with the new shape colour.
    new = alpha * np.array(EASYVQA_COLOURS[colour], np.float32) + (1 - alpha) * bg
    return Image.fromarray(np.clip(new, 0, 255).round().astype(np.uint8))


def easyvqa(taus: Sequence[float], default: float, n: int = 60, seed: int = 0) -> list[dict[str, Any]]:
    from ..sources.easyvqa import load_split

    test = load_split("test")
    r = random.Random(seed)
    g = np.random.default_rng(seed)
    chosen = r.sample(list(test), n)
    cases = []
    for img in chosen:
        with Image.open(img.path) as f:
            im = f.convert("RGB")
        other_colour = r.choice([c for c in EASYVQA_COLOURS if c != img.color])
        others = [t for t in test if t.shape == img.shape and t.color != img.color]
        with Image.open(r.choice(others).path) as f:
            other = f.convert("RGB")
        cases.append((im, img.color, _jitter(im, r, g), _recolour_shape(im, other_colour), other))
    q = "what color is the shape?"
    rows = []
    for tau, ver in _settings(taus):
        eng = _engine(tau, ver)
        jit = rec = oth = 0
        for im, colour, j, rc, ot in cases:
            eng.update(CacheRequest(text=q, images=[imageops.png_bytes(im)]), colour)
            jit += eng.lookup(CacheRequest(text=q, images=[imageops.png_bytes(j)])) is not None
            rec += eng.lookup(CacheRequest(text=q, images=[imageops.png_bytes(rc)])) is not None
            oth += eng.lookup(CacheRequest(text=q, images=[imageops.png_bytes(ot)])) is not None
            eng.clear()
        rows.append({"setting": _label(tau, default, ver), "n": n, "jitter_reused": jit, "jitter_rate": jit / n,
                     "recoloured_reused": rec, "recoloured_rate": rec / n, "other_picture_reused": oth,
                     "other_rate": oth / n})
        eng.close()
        log.info("easy-vqa %s", rows[-1])
    return rows


# ---------------------------------------------------------------------------- photos
def photos(taus: Sequence[float], default: float, seed: int = 0) -> list[dict[str, Any]]:
    """Pair-level: reuse = global cosine >= tau and the local verifier accepts (what L2
    decides for one stored candidate)."""
    from .photos import NEAR_DUPLICATES, load_pictures, related_pairs

    pics = load_pictures(max_side=1024)
    names = sorted(pics)
    enc = resolve_image_encoder(DEFAULT_IMAGE_ENCODER)
    ver = ImageChangeVerifier()
    emb = {n: enc.embed_images([pics[n]], [pixel_digest(pics[n])])[0] for n in names}
    desc = {n: describe(pics[n]) for n in names}
    near = []
    for n in names:
        rr = random.Random(f"{seed}:{n}")
        gg = np.random.default_rng(rr.randrange(2**32))
        for kind, make in NEAR_DUPLICATES.items():
            v = make(pics[n], rr, gg)
            c = float(enc.embed_images([v], [pixel_digest(v)])[0] @ emb[n])
            near.append((n, kind, c, ver.rule.decide(compare(desc[n], describe(v))).accept))
    rel = related_pairs(names)
    diff = []
    for a, b in itertools.combinations(names, 2):
        c = float(emb[a] @ emb[b])
        ok = ver.rule.decide(compare(desc[a], desc[b])).accept and ver.rule.decide(compare(desc[b], desc[a])).accept
        diff.append((a, b, rel.get(frozenset((a, b)), "different"), c, ok))
    rows = []
    for tau, on in _settings(taus):
        t = default if tau is None else tau
        nr = [c >= t and (ok or not on) for _, _, c, ok in near]
        dh = [(a, b, k, round(c, 3)) for a, b, k, c, ok in diff if c >= t and (ok or not on)]
        rows.append({"setting": _label(tau, default, on), "near_dups": len(near), "near_reused": int(sum(nr)),
                     "near_rate": float(np.mean(nr)), "different_pairs": len(diff),
                     "related_pairs": sum(x[2] != "different" for x in diff),
                     "false_hits": len(dh), "false_hit_pairs": dh[:10],
                     "near_refused": [(n, k, round(c, 3)) for (n, k, c, ok), x in zip(near, nr) if not x][:10]})
        log.info("photos %s: %s", rows[-1]["setting"], {k: v for k, v in rows[-1].items() if "pairs" not in k})
    return rows


# ---------------------------------------------------------------------------- scenes
def scenes(names: Sequence[str] = ("scenes-edit", "scenes"), latency_ms: float = 20.0) -> dict[str, Any]:
    """``MLCEngine()`` as shipped (the ``MLC as shipped`` row of ``python -m evaluation sweep
    --workload scenes-edit``: LangChain cache, no scene-trained CLIP) on the full scene
    streams, scored like that sweep (:func:`.scene_experiments.score`)."""
    from ..harness.backends import GroundTruthOracle
    from ..harness.runner import run_workload
    from ..scenes.experiments import _shipped, score
    from ..harness.workloads import build

    out = {}
    for name in names:
        wl = build(name, quick=False, seed=0, split="test")
        r = run_workload(wl, _shipped(), GroundTruthOracle(latency_s=latency_ms / 1000.0), config="MLC as shipped")
        sc = score(wl, r)
        out[name] = {"n": r.n, "hits": r.hits, "hit_rate": r.hit_rate, "accuracy": r.accuracy, "wrong": r.wrong_hits,
                     "tier_hits": r.tier_hits, "by_kind": r.by_kind, **sc}
        log.info("%s: %s", name, {k: v for k, v in out[name].items() if k != "by_kind"})
    return out


# ---------------------------------------------------------------------------- report
def markdown(data: dict[str, Any], command: str) -> str:
    L = ["# Image-change verifier through the engine: camera streams, easy-vqa, photos", "",
         f"Generated {data['generated']} by `{command}` at commit `{data['commit']}` "
         f"(MLCEngine defaults, in-memory Chroma, {DEFAULT_IMAGE_ENCODER}; tau = the global L2 image threshold; "
         "'verifier off' = the global thresholds alone, as before issue 24).", ""]
    if "camera" in data:
        L += ["## Camera streams (truth: evaluation/data/video_truth.json)", "",
              "| stream | setting | frames | reused | hit rate | wrong reuses | wrong / requests | tree: wind-only frames reused | lookup p50 ms |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name, rows in data["camera"].items():
            for r in rows:
                wind = f"{r['wind_hits']}/{r['wind_frames'] - 1} ({r['wind_hit_rate']:.1%})" if "wind_hits" in r else "–"
                L.append(f"| {name} | {r['setting']} | {r['n']} | {r['hits']} | {r['hit_rate']:.1%} | {r['wrong']} | "
                         f"{r['wrong_rate']:.1%} | {wind} | {r['lookup_p50_ms']:.1f} |")
        L += ["", "tree.avi: every frame; the first is stored, so at most n - 1 reuses; frames from 54 show a hand "
              "(their reuse of a hand-less frame is wrong). vtest.avi: every 5th frame; the answer is the number of "
              "people (walking groups) in the frame.", ""]
    if "easyvqa" in data:
        L += ["## easy-vqa test pictures (\"what color is the shape?\")", "",
              "| setting | jittered copy reused | shape recoloured reused | other picture, same shape, other colour reused |",
              "|---|---:|---:|---:|"]
        for r in data["easyvqa"]:
            L.append(f"| {r['setting']} | {r['jitter_rate']:.1%} ({r['jitter_reused']}/{r['n']}) | "
                     f"{r['recoloured_rate']:.1%} ({r['recoloured_reused']}/{r['n']}) | "
                     f"{r['other_rate']:.1%} ({r['other_picture_reused']}/{r['n']}) |")
        L.append("")
    if "scenes" in data:
        L += ["## Scenes as shipped (MLCEngine() through the LangChain cache; oracle backend)", "",
              "| workload | requests | hit rate | accuracy | wrong reuses | changed answers reused | oracle-reusable served |",
              "|---|---:|---:|---:|---:|---:|---:|"]
        for name, r in data["scenes"].items():
            ch = f"{r['changed_answer_reused']} of {r['changed_answer_requests']}" if r["changed_answer_requests"] else "–"
            sf = f"{r['served_fraction']:.1%} ({r['served_reusable']}/{r['oracle_reusable']})" if r["served_fraction"] is not None else "–"
            L.append(f"| {name} | {r['n']} | {r['hit_rate']:.3f} | {r['accuracy']:.3f} | {r['wrong']} | {ch} | {sf} |")
        L.append("")
    if "photos" in data:
        L += ["## Real photos (pair level: global cosine >= tau and the local verifier)", "",
              "| setting | near-duplicates reused | false hits among different pictures (pairs; related ones included) | first false hits |",
              "|---|---:|---:|---|"]
        for r in data["photos"]:
            L.append(f"| {r['setting']} | {r['near_rate']:.1%} ({r['near_reused']}/{r['near_dups']}) | "
                     f"{r['false_hits']} ({r['different_pairs']}) | {r['false_hit_pairs'][:4]} |")
        L.append("")
    return "\n".join(L)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evaluation.studies.image_change_eval", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="mlc_report")
    p.add_argument("--only", default="camera,easyvqa,photos")
    p.add_argument("--taus", default=",".join(str(t) for t in TAUS))
    args = p.parse_args(argv)
    import torch

    from ..training.image_pairs import _commit

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("mlc_integrations").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    taus = [float(t) for t in args.taus.split(",") if t]
    default = float(resolve_image_encoder(DEFAULT_IMAGE_ENCODER).default_image_threshold)
    data: dict[str, Any] = {"generated": time.strftime("%Y-%m-%d %H:%M"), "commit": _commit(), "taus": taus,
                            "default_tau": default}
    only = set(args.only.split(","))
    if "camera" in only:
        data["camera"] = camera(taus, default)
    if "easyvqa" in only:
        data["easyvqa"] = easyvqa(taus, default)
    if "photos" in only:
        data["photos"] = photos(taus, default)
    if "scenes" in only:
        data["scenes"] = scenes()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = f"python -m evaluation.studies.image_change_eval --out {args.out}" + (f" --only {args.only}" if args.only != p.get_default("only") else "") + (
        f" --taus {args.taus}" if args.taus != p.get_default("taus") else "")
    suffix = "" if args.only == p.get_default("only") else "_" + args.only.replace(",", "_")
    (out / f"image_change_eval{suffix}.md").write_text(markdown(data, cmd) + "\n", encoding="utf-8")
    (out / f"image_change_eval{suffix}.json").write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
    print(markdown(data, cmd))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
