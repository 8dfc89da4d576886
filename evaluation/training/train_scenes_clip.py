"""Train ``mlc-scenes-tiny``: a small open_clip CLIP for the procedural scenes of
:mod:`.scenes`, on the *train* split only, CPU, fixed seeds, minutes.

Same machinery as ``mlc-easyvqa-tiny`` (:mod:`.train_clip`): open_clip's
:class:`~open_clip.model.CLIP` with a ModifiedResNet image tower, open_clip's
:class:`~open_clip.loss.ClipLoss`, the shared optimizer, schedule, step loop and
checkpoint report of :mod:`.clip_training`. What differs is the data and one extra
term:

* captions list a scene's objects left to right and top to bottom ("left to right:
  small red circle, large blue square. top to bottom: ..."), so a caption changes when
  an object moves across another, changes colour or disappears;
* each batch holds scenes *and an edited copy of each* (one object moved, recoloured
  or removed), so in-batch negatives include the near-duplicates the cache must not
  confuse; an image-image ClipLoss between two camera views of one scene state (shift,
  zoom, exposure, noise, JPEG) pulls views of one state together and pushes the edited
  state away.

Opt-in only: the library never loads it by itself. Point an engine at it with
``MLCEngine(image_encoder=str(MODEL_DIR))``. Reproduce with
``python -m evaluation.training.train_scenes_clip`` (writes ``MODEL_DIR``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ..paths import EVAL_ASSETS
from ..sources import imageops
from .clip_training import fit, save_with_report
from ..scenes.graphs import EDIT_KINDS, Camera, Scene, generate_scene, propose_edit, render, render_canvas, view

log = logging.getLogger(__name__)

MODEL_NAME = "mlc-scenes-tiny"
MODEL_DIR = EVAL_ASSETS / MODEL_NAME

MODEL_CFG: dict[str, Any] = {
    "embed_dim": 64,
    # 64-pixel input (easy-vqa's model uses 32): a small object is ~7 pixels across. 96
    # pixels cost 1.7x the CPU and separated moved objects no better (docs/evaluation.md).
    "vision_cfg": {"image_size": 64, "layers": [1, 1, 1, 1], "width": 16, "head_width": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1, "mlp_ratio": 2.0},
}
TRAIN_CANVAS = 128  # training views are drawn at half size (memory): 112 px, the model sees 64


def caption(scene: Scene, template: int = 0) -> str:
    """The objects in reading order, left to right then top to bottom."""
    lr = ", ".join(o.name for o in sorted(scene.objects, key=lambda o: o.x))
    tb = ", ".join(o.name for o in sorted(scene.objects, key=lambda o: o.y))
    forms = (f"left to right: {lr}. top to bottom: {tb}.",
             f"a picture of {lr}, from left to right; from top to bottom: {tb}.",
             f"{len(scene.objects)} objects, left to right {lr}; top to bottom {tb}.")
    return forms[template % len(forms)]


def _states(scene: Scene, rng: np.random.Generator) -> list[Scene]:
    """The scene and its edits: one recolour, one removal, three moves (a moved object
    changes the fewest pixels, so it is the negative the model most needs)."""
    out = [scene]
    for kind in EDIT_KINDS + ("move", "move"):
        e = propose_edit(scene, kind, rng)
        if e is not None:
            out.append(e)
    return out


def _view(canvas: np.ndarray, rng: np.random.Generator) -> Any:
    """A random camera view of a rendered canvas, maybe JPEG'd or rescaled."""
    cam = Camera.drifted(rng, Camera(dx=int(rng.integers(-5, 6)), dy=int(rng.integers(-5, 6)),
                                     brightness=float(rng.uniform(0.92, 1.08))))
    im = view(canvas, cam)
    if rng.random() < 0.4:
        im = imageops.jpeg(im, int(rng.integers(60, 96)))
    if rng.random() < 0.25:
        im = imageops.resize(im, float(rng.uniform(0.75, 1.5)))
    return im


def train(out_dir: Optional[Path] = None, *, steps: int = 1200, n_scenes: int = 400, scenes_per_step: int = 16,
          seed: int = 0, lr: float = 2e-3, threads: int = 1, progress: bool = True,
          evaluate_after: bool = True) -> dict[str, Any]:
    """Train and save the model; returns the training report (also written as JSON)."""
    import open_clip
    import torch
    from open_clip.loss import ClipLoss
    from open_clip.model import CLIP

    t_start, cpu_start = time.perf_counter(), time.process_time()
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    out_dir = Path(out_dir) if out_dir is not None else MODEL_DIR
    pool = [_states(generate_scene("train", i), rng) for i in range(n_scenes)]
    # Drawn once (the lru cache of render_canvas is far smaller than the pool).
    canvases = {s: render_canvas.__wrapped__(s, TRAIN_CANVAS) for group in pool for s in group}
    preprocess = open_clip.image_transform(MODEL_CFG["vision_cfg"]["image_size"], is_train=False)
    tokenizer = open_clip.get_tokenizer("ViT-B-32", context_length=MODEL_CFG["text_cfg"]["context_length"])
    model = CLIP(**MODEL_CFG)
    model.train()
    loss_fn = ClipLoss()

    def batch_loss() -> Any:
        # Each picked scene brings its original and one edited state: 2 x scenes_per_step states.
        states: list[Scene] = []
        for k in rng.choice(len(pool), size=scenes_per_step, replace=False):
            group = pool[int(k)]
            states += [group[0], group[1 + int(rng.integers(len(group) - 1))]] if len(group) > 1 else [group[0]]
        v1 = torch.stack([preprocess(_view(canvases[s], rng)) for s in states])
        v2 = torch.stack([preprocess(_view(canvases[s], rng)) for s in states])
        tokens = tokenizer([caption(s, int(rng.integers(3))) for s in states])
        f1, txt, scale = model(torch.cat([v1, v2]), tokens)
        n = len(states)
        # Caption-image alignment, plus image-image: the two views of a state are the
        # positives, every other state (its own edit included) a negative.
        return 0.5 * (loss_fn(f1[:n], txt, scale) + loss_fn(f1[n:], txt, scale)) + loss_fn(f1[:n], f1[n:], scale)

    losses = fit(model, batch_loss, steps=steps, lr=lr, desc=f"train {MODEL_NAME}", progress=progress, window=25)
    train_seconds, cpu_seconds = time.perf_counter() - t_start, time.process_time() - cpu_start
    report: dict[str, Any] = {
        "model": MODEL_NAME,
        "command": "python -m evaluation.training.train_scenes_clip",
        "seed": seed, "steps": steps, "threads": threads,
        "train_scenes": n_scenes,
        "train_states": sum(len(g) for g in pool),
        "batch": f"{scenes_per_step} scenes x (original + one edit) x 2 views",
        "train_seconds": round(train_seconds, 1),
        "train_cpu_seconds": round(cpu_seconds, 1),
        "load_avg_1min_after": round(os.getloadavg()[0], 2),
    }
    return save_with_report(model, MODEL_CFG, out_dir, report, losses, window=25,
                            evaluate=(lambda d: evaluate(d, seed=seed)) if evaluate_after else None)


def evaluate(model_dir: Path, *, seed: int = 0, n_scenes: int = 150, threshold: float = 0.95) -> dict[str, Any]:
    """Image-image cosines on *test* scenes through the engine's loading path: a
    picture vs a drifted/re-encoded picture of the same scene state (should reach the
    L2 image threshold) vs the scene after each kind of edit (should not) vs other scenes."""
    from mlc_integrations.embed.models import ClipEmbedder, ClipSpec

    emb = ClipEmbedder(ClipSpec(model=str(model_dir)))
    rng = np.random.default_rng(seed + 1)
    base, drift, jpeg = [], [], []
    edits: dict[str, list[Any]] = {k: [] for k in EDIT_KINDS}
    edit_of: dict[str, list[int]] = {k: [] for k in EDIT_KINDS}
    for i in range(n_scenes):
        s = generate_scene("test", i)
        cam = Camera(noise_seed=int(rng.integers(2**31)))
        pic = render(s, cam)
        base.append(pic)
        d = Camera.drifted(rng, Camera.drifted(rng, cam))
        drift.append(render(s, d))
        jpeg.append(imageops.jpeg(pic, 75))
        for k in EDIT_KINDS:
            e = propose_edit(s, k, rng)
            if e is not None:
                edits[k].append(render(e, Camera.drifted(rng, cam)))
                edit_of[k].append(i)

    def vecs(ims: list[Any], tag: str) -> np.ndarray:
        return emb.embed_images(ims, [f"{tag}{j}" for j in range(len(ims))])

    vb = vecs(base, "b")
    stats: dict[str, Any] = {"scenes": n_scenes, "threshold": threshold}

    def summary(sims: np.ndarray) -> dict[str, float]:
        return {"pairs": int(len(sims)), "median": round(float(np.median(sims)), 4),
                "p05": round(float(np.percentile(sims, 5)), 4), "p95": round(float(np.percentile(sims, 95)), 4),
                f"share_at_or_above_{threshold:g}": round(float(np.mean(sims >= threshold)), 4)}

    stats["same state, drifted camera"] = summary(np.sum(vb * vecs(drift, "d"), axis=1))
    stats["same state, JPEG q75"] = summary(np.sum(vb * vecs(jpeg, "j"), axis=1))
    for k in EDIT_KINDS:
        if edits[k]:
            stats[f"after {k}"] = summary(np.sum(vb[edit_of[k]] * vecs(edits[k], k), axis=1))
    other = (vb @ vb.T)[np.triu_indices(len(vb), 1)]
    stats["other scene"] = summary(other)
    return stats


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=f"train {MODEL_NAME} on the scenes train split (CPU)")
    p.add_argument("--out", type=Path, default=None, help=f"output directory (default: {MODEL_DIR})")
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--scenes", type=int, default=400, help="train-split scenes in the pool")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--evaluate-only", action="store_true", help="only evaluate the saved model on the test split")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.evaluate_only:
        print(json.dumps(evaluate(args.out or MODEL_DIR, seed=args.seed), indent=2))
        return 0
    report = train(args.out, steps=args.steps, n_scenes=args.scenes, seed=args.seed, threads=args.threads)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
