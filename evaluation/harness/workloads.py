"""Workloads: deterministic request streams with a ground-truth answer per request.

Every item carries the answer that is correct for *that* request. A cache that
returns an earlier response is right only when that response equals the new
request's own truth: this is how every number in the reports is judged.

* ``vqa``: sessions of questions about one easy-vqa image -- the dataset's own
  questions, exact repeats, paraphrases, negations, the image re-saved losslessly,
  re-encoded as JPEG, resized; later sessions ask earlier questions about other images
  and revisit earlier images.
* ``camera``: frames of a slowly drifting easy-vqa image (shifts, brightness, sensor
  noise), one question every frame, scene cuts to other images (the truth can change
  at a cut).
* ``photos``: real photos from ``skimage.data`` (those that ship with the package)
  re-encoded, resized, cropped, noised -- must hit -- among different photos -- must not.
* ``video`` (:mod:`.image_streams`): frames of real camera videos (``../shared/data/video``: vtest.avi, a fixed
  camera over a plaza, and tree.avi), each sent as a JPEG with "What is in this frame?";
  the truth is what a real ImageNet classifier (EfficientNet-Lite2) answers for that
  frame, so a reuse is right when the earlier frame's answer equals the new frame's.
* ``photo-classes``: the real pictures of :mod:`.photos` and their near-duplicates, the
  same question and the same classifier truth (Experiment 1's photo stream).
* ``qqp``: Quora question pairs (duplicate / not duplicate) from the shared data folder.
* ``contextual``: MeanCache's main query / follow-up pairs: a follow-up (asked in the
  conversation after the main query) must not reuse the main query's answer.
* ``scenes``, ``scenes-edit``: GQA-like questions about procedural multi-object scenes,
  and a camera over scenes that get small edits (:mod:`.scene_workloads`).
"""

from __future__ import annotations

import base64
import csv
import importlib
import json
import logging
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..paths import shared_data_dir

import numpy as np
from PIL import Image

from ..sources import imageops
from ..sources.easyvqa import (
    COLOR_QUESTIONS,
    HAS_COLOR,
    HAS_NO_COLOR,
    HAS_NO_SHAPE,
    HAS_SHAPE,
    SHAPE_QUESTIONS,
    VQAImage,
    _kind,
    load_split,
)

log = logging.getLogger(__name__)


@dataclass
class WorkItem:
    """One request of a stream.

    ``image`` is the encoded file the user sends (PNG or JPEG bytes) or None;
    ``context`` the earlier turns of the conversation as ``(role, text)`` pairs;
    ``truth`` the correct answer for this request; ``kind`` what the item tests;
    ``meta`` what a workload knows about the item beyond that (the scene streams: scene,
    scene state, question meaning, whether an ideal cache could reuse an answer).
    """

    text: str
    truth: str
    kind: str
    image: Optional[bytes] = None
    mime: str = "image/png"
    context: tuple[tuple[str, str], ...] = ()
    meta: dict[str, object] = field(default_factory=dict)

    def data_url(self) -> str:
        assert self.image is not None
        return f"data:{self.mime};base64,{base64.b64encode(self.image).decode('ascii')}"


@dataclass
class Workload:
    name: str
    description: str
    items: list[WorkItem]
    multimodal: bool
    meta: dict[str, object] = field(default_factory=dict)

    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for it in self.items:
            out[it.kind] = out.get(it.kind, 0) + 1
        return out




# ---------------------------------------------------------------------------- easy-vqa
_GROUPS = {
    ("color", False): COLOR_QUESTIONS,
    ("shape", False): SHAPE_QUESTIONS,
    ("has_color", False): HAS_COLOR,
    ("has_color", True): HAS_NO_COLOR,
    ("has_shape", False): HAS_SHAPE,
    ("has_shape", True): HAS_NO_SHAPE,
}


def rephrase(question: str, im: VQAImage, rng: random.Random, *, negate: bool = False) -> Optional[str]:
    """Another template asking the same thing (``negate``: the opposite yes/no question)."""
    kind, word, neg = _kind(question)
    if negate:
        if kind not in ("has_color", "has_shape"):
            return None
        neg = not neg
    templates = _GROUPS[(kind, neg)]
    fill = {"c": word if kind == "has_color" else im.color, "s": word if kind == "has_shape" else im.shape}
    options = [t.format(**fill) for t in templates]
    options = [o for o in options if o != question.strip().lower()] if not negate else options
    return rng.choice(options) if options else None


def _open(path: str) -> Image.Image:
    with Image.open(path) as f:
        return f.convert("RGB")


def vqa_stream(split: str = "test", n_sessions: int = 40, seed: int = 0) -> Workload:
    """Sessions of questions about one picture each (see module docstring)."""
    rng = random.Random(seed)
    images = list(load_split(split))
    rng.shuffle(images)
    chosen = images[:n_sessions]
    items: list[WorkItem] = []
    earlier: list[tuple[VQAImage, Image.Image, str]] = []  # (image, pixels, question) of past sessions
    for s, im in enumerate(chosen):
        pil = _open(im.path)
        base = imageops.png_bytes(pil)
        asked: list[str] = []

        def add(q: str, img: bytes, kind: str, mime: str = "image/png", on: VQAImage = im) -> None:
            items.append(WorkItem(text=q, truth=on.answer(q), kind=kind, image=img, mime=mime))

        for q, _a in rng.sample(im.qa, min(rng.randint(2, 3), len(im.qa))):
            add(q, base, "new question")
            asked.append(q)
        if earlier and rng.random() < 0.6:
            # An earlier session's question, asked about this (different) picture.
            _, _, q = rng.choice(earlier)
            add(q, base, "same question, other image")
            asked.append(q)
        follow = ["exact repeat", "paraphrase", "negation", "re-saved PNG", "JPEG re-encode", "resized",
                  "paraphrase + JPEG"]
        for kind in rng.sample(follow, rng.randint(3, 5)):
            q = rng.choice(asked)
            if kind == "exact repeat":
                add(q, base, kind)
            elif kind == "paraphrase":
                p = rephrase(q, im, rng)
                if p:
                    add(p, base, kind)
            elif kind == "negation":
                p = rephrase(q, im, rng, negate=True)
                if p:
                    add(p, base, kind)
            elif kind == "re-saved PNG":
                add(q, imageops.png_bytes(pil, compress_level=rng.choice([0, 1, 9])), kind)
            elif kind == "JPEG re-encode":
                add(q, imageops.jpeg_bytes(pil, rng.choice([75, 85, 95])), kind, "image/jpeg")
            elif kind == "resized":
                add(q, imageops.png_bytes(imageops.resize(pil, rng.choice([0.75, 1.5, 2.0]))), kind)
            elif kind == "paraphrase + JPEG":
                p = rephrase(q, im, rng)
                if p:
                    add(p, imageops.jpeg_bytes(pil, 90), kind, "image/jpeg")
        if earlier and rng.random() < 0.3:
            # Revisit an earlier picture, re-encoded, with a question asked about it before.
            pim, ppil, pq = rng.choice(earlier)
            if pim.image_id != im.image_id:
                add(pq, imageops.jpeg_bytes(ppil, 85), "revisit earlier image (JPEG)", "image/jpeg", on=pim)
        earlier.extend((im, pil, q) for q in asked)
    return Workload(
        name="vqa",
        description=f"easy-vqa {split} split: {len(chosen)} sessions of questions about one image each",
        items=items,
        multimodal=True,
        meta={"split": split, "sessions": len(chosen), "seed": seed},
    )


CAMERA_QUESTIONS = ("what color is the shape?", "what shape is in the image?")


def camera_stream(split: str = "test", n_scenes: int = 8, frames_per_scene: int = 12, seed: int = 0) -> Workload:
    """Two cameras (one asks the colour, one the shape) watching drifting easy-vqa
    scenes; every frame is a new picture, every scene cut may change the answer."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    images = list(load_split(split))
    items: list[WorkItem] = []
    for cam, question in enumerate(CAMERA_QUESTIONS):
        scenes = rng.sample(images, n_scenes)
        for sc, im in enumerate(scenes):
            pil = _open(im.path)
            dx = dy = 0
            bright = 1.0
            for f in range(frames_per_scene):
                if f:
                    dx = max(-6, min(6, dx + rng.choice([-1, 0, 1])))
                    dy = max(-6, min(6, dy + rng.choice([-1, 0, 1])))
                    bright = max(0.88, min(1.12, bright + rng.uniform(-0.02, 0.02)))
                frame = imageops.shift(pil, dx, dy)
                frame = imageops.brightness(frame, bright)
                frame = imageops.noise(frame, rng.uniform(1.5, 4.0), nrng)
                kind = "scene cut" if f == 0 and sc > 0 else ("first frame" if f == 0 else "drifted frame")
                items.append(WorkItem(text=question, truth=im.answer(question), kind=kind,
                                      image=imageops.png_bytes(frame, compress_level=1)))
    return Workload(
        name="camera",
        description=f"easy-vqa {split} split: 2 cameras x {n_scenes} scenes x {frames_per_scene} drifting frames",
        items=items,
        multimodal=True,
        meta={"split": split, "scenes": n_scenes, "frames_per_scene": frames_per_scene, "seed": seed},
    )


# ---------------------------------------------------------------------------- photos
# skimage.data photos that ship inside the package (others are fetched on first use).
SKIMAGE_PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "camera", "coins", "moon", "horse", "page",
                  "text", "clock", "hubble_deep_field", "immunohistochemistry", "retina",
                  "brick", "grass", "gravel", "colorwheel", "logo", "cell", "microaneurysms")


def local_photos(max_side: int = 256) -> dict[str, Image.Image]:
    """The ``skimage.data`` photos available without network, downscaled."""
    import skimage.data as sd

    out: dict[str, Image.Image] = {}
    for name in SKIMAGE_PHOTOS:
        fn: Optional[Callable[[], np.ndarray]] = getattr(sd, name, None)
        if fn is None:
            continue
        try:
            arr = np.asarray(fn())
        except Exception as exc:  # needs a download: skip it
            log.debug("skimage.data.%s unavailable offline: %s", name, exc)
            continue
        if arr.dtype != np.uint8:
            arr = (255 * (arr.astype(np.float64) / max(1e-9, float(arr.max())))).astype(np.uint8)
        if arr.ndim == 3 and arr.shape[2] == 4:
            arr = arr[:, :, :3]
        im = Image.fromarray(arr).convert("RGB")
        im.thumbnail((max_side, max_side), Image.BICUBIC)
        out[name] = im
    return out


def photo_stream(seed: int = 0, variants_per_photo: int = 5) -> Workload:
    """Each photo once as the original, then near-duplicates of it, among other photos."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    photos = local_photos()
    question = "Describe this photo in one sentence."
    originals: list[WorkItem] = []
    variants: list[WorkItem] = []
    for name, im in photos.items():
        originals.append(WorkItem(question, name, "original photo", imageops.png_bytes(im)))
        makers = [
            ("JPEG q=60", lambda: (imageops.jpeg_bytes(im, 60), "image/jpeg")),
            ("JPEG q=90", lambda: (imageops.jpeg_bytes(im, 90), "image/jpeg")),
            ("resized 50%", lambda: (imageops.png_bytes(imageops.resize(im, 0.5)), "image/png")),
            ("cropped 10%", lambda: (imageops.png_bytes(imageops.crop(im, 0.1, (rng.random(), rng.random()))), "image/png")),
            ("noise sigma=6", lambda: (imageops.png_bytes(imageops.noise(im, 6.0, nrng)), "image/png")),
            ("brightness 1.1", lambda: (imageops.png_bytes(imageops.brightness(im, 1.1)), "image/png")),
        ]
        for kind, make in rng.sample(makers, min(variants_per_photo, len(makers))):
            data, mime = make()
            variants.append(WorkItem(question, name, kind, data, mime))
    rng.shuffle(variants)
    # Originals first (in shuffled order), then the near-duplicates interleaved.
    rng.shuffle(originals)
    return Workload(
        name="photos",
        description=f"{len(photos)} skimage.data photos and {len(variants)} near-duplicates",
        items=originals + variants,
        multimodal=True,
        meta={"photos": sorted(photos), "seed": seed},
    )


# ---------------------------------------------------------------------------- builders in other modules
def _lazy(module: str, name: str) -> Callable[..., Workload]:
    """A workload builder of another evaluation module, imported on first use (those
    modules import this one)."""
    def build(**kw: object) -> Workload:
        return getattr(importlib.import_module(f"evaluation.{module}"), name)(**kw)

    build.__name__ = name
    return build


# ---------------------------------------------------------------------------- text
class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


def _qqp_rows(path: Optional[Path] = None) -> list[tuple[str, str, int]]:
    path = path or shared_data_dir() / "qqp_val.csv"
    with open(path, newline="", encoding="utf-8") as f:
        return [(r["question1"], r["question2"], int(r["is_duplicate"])) for r in csv.DictReader(f)]


def qqp_stream(n_pairs: int = 200, seed: int = 0, path: Optional[Path] = None) -> Workload:
    """Each pair's first question, then (later, shuffled) each pair's second question.

    Truth is the duplicate cluster (union of all duplicate pairs in the file): reusing
    an answer is right only between questions of one cluster."""
    rows = _qqp_rows(path)
    uf = _UnionFind()
    for a, b, d in rows:
        uf.find(a)
        uf.find(b)
        if d:
            uf.union(a, b)
    rng = random.Random(seed)
    pick = rng.sample(rows, min(n_pairs, len(rows)))
    firsts = [WorkItem(a, "cluster:" + uf.find(a), "first question") for a, _b, _d in pick]
    seconds = [WorkItem(b, "cluster:" + uf.find(b), "duplicate" if d else "not duplicate") for _a, b, d in pick]
    rng.shuffle(seconds)
    return Workload(
        name="qqp",
        description=f"Quora question pairs: {len(pick)} pairs ({sum(d for *_, d in pick)} duplicates)",
        items=firsts + seconds,
        multimodal=False,
        meta={"pairs": len(pick), "duplicates": sum(d for *_, d in pick), "seed": seed},
    )


def contextual_stream(seed: int = 0, n: Optional[int] = None, path: Optional[Path] = None) -> Workload:
    """Main queries, their follow-ups asked in the conversation after the main query, and
    repeats of the main queries. A follow-up reusing the main query's answer is wrong."""
    path = path or shared_data_dir() / "meancache_contextual_queries.json"
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    rng = random.Random(seed)
    if n is not None:
        data = rng.sample(data, min(n, len(data)))
    mains, follows, repeats = [], [], []
    for i, d in enumerate(data):
        main, resp, follow = d["Main Query"], d["Main Query Response"], d["Follow-Up Query"]
        mains.append(WorkItem(main, f"main:{i}", "main query"))
        follows.append(WorkItem(follow, f"follow:{i}", "follow-up in conversation",
                                context=(("human", main), ("ai", resp))))
        repeats.append(WorkItem(main, f"main:{i}", "main query repeated"))
    rng.shuffle(follows)
    rng.shuffle(repeats)
    return Workload(
        name="contextual",
        description=f"MeanCache contextual queries: {len(data)} main queries, follow-ups, repeats",
        items=mains + follows + repeats,
        multimodal=False,
        meta={"pairs": len(data), "seed": seed},
    )


WORKLOADS: dict[str, Callable[..., Workload]] = {
    "vqa": vqa_stream,
    "camera": camera_stream,
    "photos": photo_stream,
    "qqp": qqp_stream,
    "contextual": contextual_stream,
    "video": _lazy("harness.image_streams", "video_stream"),  # real camera frames, real classifier (image_streams.py)
    "camera-video": _lazy("harness.image_streams", "camera_truth_stream"),  # real camera frames, checked annotation (image_streams.py)
    "photo-classes": _lazy("harness.image_streams", "classified_photo_stream"),
    "scenes": _lazy("scenes.workloads", "scene_stream"),
    "scenes-edit": _lazy("scenes.workloads", "edit_stream"),
}

# Sizes: full run vs --quick.
SIZES: dict[str, dict[str, dict[str, int]]] = {
    "vqa": {"full": {"n_sessions": 40}, "quick": {"n_sessions": 8}},
    "camera": {"full": {"n_scenes": 8, "frames_per_scene": 12}, "quick": {"n_scenes": 3, "frames_per_scene": 6}},
    "photos": {"full": {"variants_per_photo": 5}, "quick": {"variants_per_photo": 2}},
    "qqp": {"full": {"n_pairs": 300}, "quick": {"n_pairs": 40}},
    "contextual": {"full": {}, "quick": {"n": 25}},
    "video": {"full": {"stride": 4}, "quick": {"stride": 8, "max_frames": 40}},
    "camera-video": {"full": {"vtest_frames": 159}, "quick": {"vtest_frames": 80}},
    "photo-classes": {"full": {"variants_per_photo": 3}, "quick": {"variants_per_photo": 1}},
    "scenes": {"full": {"n_sessions": 32}, "quick": {"n_sessions": 2}},
    "scenes-edit": {"full": {"n_scenes": 16}, "quick": {"n_scenes": 1}},
}


def build(name: str, *, quick: bool = False, seed: int = 0, split: str = "test") -> Workload:
    """A workload by name at the full or quick size."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    kw: dict[str, object] = dict(SIZES[name]["quick" if quick else "full"])
    kw["seed"] = seed
    if name in ("vqa", "camera", "scenes", "scenes-edit"):
        kw["split"] = split
    return WORKLOADS[name](**kw)


def workload_names() -> Sequence[str]:
    return tuple(WORKLOADS)
