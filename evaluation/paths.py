"""Where the evaluation finds its data: the checkout, never the installed package."""

from __future__ import annotations

import os
from pathlib import Path

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
