"""Train the offline L2 model ``mlc-easyvqa-tiny``: a small open_clip CLIP on easy-vqa's
*train* split, CPU only, fixed seeds, a few minutes.

Why: no pretrained CLIP weights can be installed on these machines, yet the L2 tier
must run for real in the demo, the evaluation and the tests. The model is built from
open_clip's own classes (:class:`open_clip.model.CLIP`) and trained with open_clip's
own loss (:class:`open_clip.loss.ClipLoss`); it is saved in the directory layout
that :class:`mlc_integrations.embed.models.ClipSpec` loads like any local open_clip
checkpoint. It only knows easy-vqa's world (eight colours, three shapes): real
deployments point L2 at a real CLIP.

Reproduce with ``./dev mlc train-clip`` (writes ``mlc_integrations/assets/mlc-easyvqa-tiny``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from mlc_integrations.embed.models import NAMED_CLIP_MODELS
from ..sources import imageops
from .clip_training import fit, save_with_report
from ..sources.easyvqa import COLORS, SHAPES, VQAImage, load_split

log = logging.getLogger(__name__)

MODEL_NAME = "mlc-easyvqa-tiny"

# Small towers: the text tower's token embedding (49,408 x width) dominates the size.
MODEL_CFG: dict[str, Any] = {
    "embed_dim": 64,
    # open_clip's ModifiedResNet (layers given as a 4-tuple): on this data it learns
    # colour and shape several times faster per CPU-second than a ViT of equal cost.
    "vision_cfg": {"image_size": 32, "layers": [1, 1, 1, 1], "width": 16, "head_width": 16},
    "text_cfg": {"context_length": 32, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1, "mlp_ratio": 2.0},
}

# Captions derived from the dataset's questions and answers (colour and shape).
CAPTION_TEMPLATES = (
    "a {c} {s}",
    "{c} {s}",
    "a photo of a {c} {s}",
    "a picture of a {c} {s}",
    "an image containing a {c} {s}",
    "a {c} {s} on a plain background",
    "the shape is a {c} {s}",
    "the {s} is {c}",
    "the {c} shape is a {s}",
)


def caption(color: str, shape: str, template: int = 0) -> str:
    return CAPTION_TEMPLATES[template % len(CAPTION_TEMPLATES)].format(c=color, s=shape)


def _preprocess() -> Callable[[Any], Any]:
    import open_clip

    return open_clip.image_transform(MODEL_CFG["vision_cfg"]["image_size"], is_train=False)


def _class_index(images: tuple[VQAImage, ...]) -> dict[str, list[int]]:
    by: dict[str, list[int]] = {}
    for k, im in enumerate(images):
        by.setdefault(im.caption_key, []).append(k)
    return by


def train(
    out_dir: Optional[Path] = None,
    *,
    steps: int = 500,
    groups: int = 2,
    seed: int = 0,
    lr: float = 2e-3,
    threads: int = 1,
    progress: bool = True,
    evaluate_after: bool = True,
) -> dict[str, Any]:
    """Train and save the model; returns the training report (also written as JSON)."""
    import torch
    from open_clip.loss import ClipLoss
    from open_clip.model import CLIP
    from PIL import Image

    t_start = time.perf_counter()
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    out_dir = Path(out_dir) if out_dir is not None else NAMED_CLIP_MODELS[MODEL_NAME]

    train_images = load_split("train")
    pil = [Image.open(im.path).convert("RGB") for im in train_images]
    for p in pil:
        p.load()
    classes = sorted(_class_index(train_images).items())
    preprocess = _preprocess()

    model = CLIP(**MODEL_CFG)
    model.train()
    loss_fn = ClipLoss()

    import open_clip

    tokenizer = open_clip.get_tokenizer("ViT-B-32", context_length=MODEL_CFG["text_cfg"]["context_length"])

    def batch_loss() -> Any:
        # ``groups`` sub-batches of one image per (colour, shape) class: every caption
        # within a sub-batch is distinct, so ClipLoss's in-batch negatives are true
        # negatives; the sub-batches share one forward pass.
        batch_imgs, batch_txt = [], []
        for _ in range(groups):
            for key, idxs in classes:
                k = idxs[int(rng.integers(len(idxs)))]
                view = imageops.random_view(pil[k], rng)
                batch_imgs.append(preprocess(view))
                c, s = key.split(" ")
                batch_txt.append(caption(c, s, int(rng.integers(len(CAPTION_TEMPLATES)))))
        img_f, txt_f, scale = model(torch.stack(batch_imgs), tokenizer(batch_txt))
        n = len(classes)
        return sum(loss_fn(img_f[i * n:(i + 1) * n], txt_f[i * n:(i + 1) * n], scale) for i in range(groups)) / groups

    losses = fit(model, batch_loss, steps=steps, lr=lr, desc="train mlc-easyvqa-tiny", progress=progress, window=50)
    train_seconds = time.perf_counter() - t_start
    report: dict[str, Any] = {
        "model": MODEL_NAME,
        "command": "./dev mlc train-clip",
        "seed": seed,
        "steps": steps,
        "batch": f"{groups} x {len(classes)} (one image per colour+shape class per sub-batch)",
        "threads": threads,
        "train_images": len(train_images),
        "train_seconds": round(train_seconds, 1),
    }
    return save_with_report(model, MODEL_CFG, out_dir, report, losses, window=50,
                            evaluate=(lambda d: evaluate(d, seed=seed)) if evaluate_after else None)


def evaluate(model_dir: Path, *, seed: int = 0, n_images: int = 400) -> dict[str, Any]:
    """Check the saved checkpoint on easy-vqa's *test* split through the engine's own
    loading path: zero-shot colour+shape accuracy, and image-image cosine between a
    picture and its perturbed copies vs other pictures."""
    from PIL import Image

    from mlc_integrations.embed.models import ClipEmbedder, ClipSpec

    emb = ClipEmbedder(ClipSpec(model=str(model_dir)))
    rng = np.random.default_rng(seed + 1)
    test = load_split("test")
    pick = rng.choice(len(test), size=min(n_images, len(test)), replace=False)
    imgs = [test[int(i)] for i in pick]
    pil = [Image.open(im.path).convert("RGB") for im in imgs]
    keys = [f"{c} {s}" for c in COLORS for s in SHAPES]
    txt = emb.embed_texts([caption(*k.split(" ")) for k in keys])
    iv = emb.embed_images(pil, [f"t{k}" for k in range(len(pil))])
    pred = [keys[int(j)] for j in np.argmax(iv @ txt.T, axis=1)]
    acc = float(np.mean([p == im.caption_key for p, im in zip(pred, imgs)]))
    views = [imageops.random_view(p, rng) for p in pil]
    vv = emb.embed_images(views, [f"v{k}" for k in range(len(views))])
    same = np.sum(iv * vv, axis=1)
    sims = iv @ iv.T
    same_class, diff_class = [], []
    for a in range(len(imgs)):
        for b in range(a + 1, len(imgs)):
            (same_class if imgs[a].caption_key == imgs[b].caption_key else diff_class).append(sims[a, b])
    pv = [keys[int(j)] for j in np.argmax(vv @ txt.T, axis=1)]
    return {
        "images": len(imgs),
        "zero_shot_accuracy": round(acc, 4),
        "zero_shot_accuracy_perturbed": round(float(np.mean([p == im.caption_key for p, im in zip(pv, imgs)])), 4),
        "cos_perturbed_copy": {"min": round(float(same.min()), 4), "median": round(float(np.median(same)), 4)},
        "cos_same_class_other_image": {"median": round(float(np.median(same_class)), 4)},
        "cos_other_class": {"median": round(float(np.median(diff_class)), 4),
                            "p99": round(float(np.percentile(diff_class, 99)), 4),
                            "max": round(float(np.max(diff_class)), 4)},
    }
