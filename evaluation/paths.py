"""Where the evaluation finds its data: the checkout, never the installed package."""

from __future__ import annotations

import os
import logging
from pathlib import Path

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
EVAL_DATA = Path(__file__).resolve().parent / "data"
EVAL_ASSETS = Path(__file__).resolve().parent / "assets"
# Small excerpts of the real photos and video that ship with the checkout (demo, tests).
REPO_DATA = REPO_ROOT / "data"


def shared_data_dir() -> Path:
    """The full evaluation data: ``../shared/data`` beside the checkout, or ``MLC_SHARED_DATA``.

    It is optional: the demo and the tests run on the excerpts in :data:`REPO_DATA`;
    the full sweeps say what is missing when it is absent.
    """
    env = os.environ.get("MLC_SHARED_DATA")
    if env:
        return Path(env)
    return REPO_ROOT.parent / "shared" / "data"


# The excerpts in data/video keep every n-th frame of the original (data/README.md):
# vtest every 5th (the annotation's stride, evaluation/data/video_truth.json), tree every frame.
EXCERPT_FRAME_STEP = {"vtest.avi": 5, "tree.avi": 1}
_said: set[str] = set()


def video_source(name: str) -> tuple[Path, int]:
    """The video ``name`` and how many original frames one of its frames stands for: the
    full file from the shared data (1) or, when it is absent, the checkout's excerpt
    (:data:`EXCERPT_FRAME_STEP`), said once at WARNING so that no figure is mistaken for
    one measured on the full video."""
    full = shared_data_dir() / "video" / name
    if full.exists():
        return full, 1
    excerpt = REPO_DATA / "video" / name
    if not excerpt.exists():
        raise FileNotFoundError(f"video {name!r}: neither {full} (the full data set: set MLC_SHARED_DATA) "
                                f"nor the checkout's excerpt {excerpt} exists")
    step = EXCERPT_FRAME_STEP[name]
    if name not in _said:
        _said.add(name)
        log.warning("video %s: %s is absent; using the checkout's excerpt %s (every %d. frame, half size): "
                    "figures are not comparable to the full video's", name, full, excerpt, step)
    return excerpt, step


def photo_dir() -> Path:
    """The real photos: the full shared set when present, else the checkout's 8 excerpts."""
    full = shared_data_dir() / "photos"
    return full if full.is_dir() else REPO_DATA / "photos"
