"""Picture streams answered by a real image classifier (the ``video`` and
``photo-classes`` workloads of :mod:`.workloads`).

The truth of every request is what the backend -- an ImageNet EfficientNet-Lite2,
:class:`.backends.ImageNetClassifierChat` -- answers for that picture exactly as sent,
so a reuse is right when the earlier picture's answer equals the new picture's.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from PIL import Image

from ..sources import imageops
from ..paths import video_source
from .workloads import WorkItem, Workload

VIDEOS = ("vtest.avi", "tree.avi")
FRAME_QUESTION = "What is in this frame?"
PHOTO_QUESTION = "What is in this picture?"
CLASSIFIER = "efficientnet-lite2"
_TRUTH: dict[tuple[str, str], str] = {}  # (classifier, sha256 of the bytes sent) -> its answer


def video_frames(path: str | Path, stride: int = 1, max_frames: Optional[int] = None) -> list[Image.Image]:
    """Every ``stride``-th frame of a video file as RGB pictures (decoded by PyAV).

    ``path`` is a file, or the bare name of a video of the data set (``"vtest.avi"``):
    then the full video when it is there, else the checkout's excerpt, whose frames
    each stand for several original ones (``stride`` counts original frames)."""
    import av

    if isinstance(path, str) and "/" not in path and path in VIDEOS:
        path, step = video_source(path)
        stride = max(1, stride // step)
    out: list[Image.Image] = []
    with av.open(str(path)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i % stride == 0:
                out.append(frame.to_image().convert("RGB"))
                if max_frames is not None and len(out) >= max_frames:
                    break
    return out


def classifier_truths(sent: Sequence[bytes], classifier: str = CLASSIFIER, batch: int = 16) -> list[str]:
    """What the classifier backend answers for each encoded picture, as it will see it
    (decoded from the same bytes); memoized per process by content hash."""
    import hashlib
    import io

    from .backends import ImageNetClassifierChat

    keys = [(classifier, hashlib.sha256(b).hexdigest()) for b in sent]
    todo = [i for i, k in enumerate(keys) if k not in _TRUTH]
    clf = ImageNetClassifierChat(model=classifier)
    for start in range(0, len(todo), batch):
        idx = todo[start:start + batch]
        pics = []
        for i in idx:
            with Image.open(io.BytesIO(sent[i])) as f:
                pics.append(f.convert("RGB"))
        for i, label in zip(idx, clf.classify(pics)):
            _TRUTH[keys[i]] = label
    return [_TRUTH[k] for k in keys]


def _label_kinds(truths: Sequence[str], first: str) -> list[str]:
    kinds = []
    for i, t in enumerate(truths):
        kinds.append(first if i == 0 else ("next frame, same answer" if t == truths[i - 1] else "next frame, answer changed"))
    return kinds


def video_stream(videos: Sequence[str] = VIDEOS, stride: int = 2, max_frames: Optional[int] = None,
                 quality: int = 90, seed: int = 0, classifier: str = CLASSIFIER) -> Workload:
    """Real camera streams, one request per frame (see module docstring). ``seed`` is
    unused: the frames come in recorded order."""
    items: list[WorkItem] = []
    counts = {}
    for name in videos:
        frames = video_frames(name, stride, max_frames)
        sent = [imageops.jpeg_bytes(f, quality) for f in frames]
        truths = classifier_truths(sent, classifier)
        for data, truth, kind in zip(sent, truths, _label_kinds(truths, f"first frame of {name}")):
            items.append(WorkItem(FRAME_QUESTION, truth, kind, data, "image/jpeg"))
        counts[name] = len(frames)
    return Workload(
        name="video",
        description=(f"real camera video frames ({', '.join(f'{k}: {v}' for k, v in counts.items())}; every {stride}. "
                     f"frame, JPEG q{quality}); truth = {classifier} ImageNet top-1 of each frame"),
        items=items,
        multimodal=True,
        meta={"videos": counts, "stride": stride, "quality": quality, "backend": "classifier", "classifier": classifier},
    )


def camera_truth_stream(vtest_frames: int = 80, quality: int = 90, seed: int = 0) -> Workload:
    """Real camera streams with a truth that does not flicker (issue 24): consecutive
    sampled frames of vtest.avi (people walking; "How many people are in this frame?",
    answered from the checked annotation in ``evaluation/data/video_truth.json``) and of
    tree.avi (wind, then a hand; "What is in this frame?"). The backend answers the
    annotation (the ground-truth oracle), so a reuse is right exactly when the reused
    frame's answer is the new frame's. Runs on the checkout's excerpts when the full
    videos are absent (the first ``vtest_frames`` sampled frames exist in both). ``seed``
    is unused: frames come in recorded order."""
    from ..sources.video_truth import load_annotation

    ann = load_annotation()
    items: list[WorkItem] = []
    counts = {}
    for name, answer in (("vtest.avi", lambda r: f"{r['people']} people"), ("tree.avi", lambda r: r["answer"])):
        spec = ann[name]
        rows = sorted(spec["frames"], key=lambda r: r["frame"])[: vtest_frames if name == "vtest.avi" else None]
        frames = video_frames(name, stride=int(spec["stride"]), max_frames=len(rows))
        rows = rows[: len(frames)]
        truths = [answer(r) for r in rows]
        for frame, truth, kind in zip(frames, truths, _label_kinds(truths, f"first frame of {name}")):
            items.append(WorkItem(spec["question"], truth, kind, imageops.jpeg_bytes(frame, quality), "image/jpeg"))
        counts[name] = len(rows)
    return Workload(
        name="camera-video",
        description=(f"real camera video frames ({', '.join(f'{k}: {v}' for k, v in counts.items())}, JPEG q{quality}); "
                     "truth = the checked annotation (people per vtest frame, tree / hand)"),
        items=items,
        multimodal=True,
        meta={"videos": counts, "quality": quality, "truth": "evaluation/data/video_truth.json"},
    )


def classified_photo_stream(seed: int = 0, variants_per_photo: int = 3, classifier: str = CLASSIFIER) -> Workload:
    """The real pictures of :mod:`.photos` once each, then near-duplicates of them in
    random order; truth = the classifier's answer for each picture as sent."""
    from ..studies.photos import NEAR_DUPLICATES, load_pictures

    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    pictures = load_pictures(max_side=768)
    originals: list[tuple[bytes, str, str]] = []
    variants: list[tuple[bytes, str, str]] = []
    for name in sorted(pictures):
        im = pictures[name]
        originals.append((imageops.png_bytes(im, compress_level=1), "image/png", "original picture"))
        for kind in rng.sample(sorted(NEAR_DUPLICATES), variants_per_photo):
            v = NEAR_DUPLICATES[kind](im, rng, nrng)
            jpeg = kind.startswith("JPEG")
            data = imageops.jpeg_bytes(v, 95) if jpeg else imageops.png_bytes(v, compress_level=1)
            variants.append((data, "image/jpeg" if jpeg else "image/png", f"near-duplicate: {kind}"))
    rng.shuffle(originals)
    rng.shuffle(variants)
    stream = originals + variants
    truths = classifier_truths([d for d, _, _ in stream], classifier)
    items = [WorkItem(PHOTO_QUESTION, t, kind, d, mime) for (d, mime, kind), t in zip(stream, truths)]
    return Workload(
        name="photo-classes",
        description=(f"{len(pictures)} real pictures, then {len(variants)} near-duplicates; truth = {classifier} "
                     "ImageNet top-1 of each picture as sent"),
        items=items,
        multimodal=True,
        meta={"pictures": len(pictures), "seed": seed, "backend": "classifier", "classifier": classifier},
    )
