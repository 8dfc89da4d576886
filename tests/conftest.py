"""Shared fixtures. Slow model-loading objects are session-scoped."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from PIL import Image  # noqa: E402

from mlc_integrations import MLCEngine  # noqa: E402
from evaluation.training.clip_training import save_clip_checkpoint  # noqa: E402 - training code: outside the wheel
from mlc_integrations.embed.models import TextEmbedder  # noqa: E402

# The checkout's own excerpts of the real data (data/README.md): tests never need ../shared.
REPO_DATA = Path(__file__).resolve().parents[1] / "data"

TINY_CLIP_CFG: dict[str, Any] = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


@pytest.fixture(scope="session", autouse=True)
def private_model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The ONNX text export lives in a per-session directory, not the user's
    ~/.cache: a run starts as a fresh machine does (the first text embedding exports the
    local MiniLM, offline) whatever an earlier run or the user left there."""
    from mlc_integrations.embed import text_onnx

    root = tmp_path_factory.mktemp("mlc-model-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv(text_onnx.ENV_CACHE_DIR, str(root))
    yield root
    mp.undo()


@pytest.fixture(scope="session")
def text_embedder() -> TextEmbedder:
    """The offline all-MiniLM-L6-v2, loaded once for the whole session."""
    emb = TextEmbedder.shared(None)
    emb.embed(["warm up"])
    return emb


@pytest.fixture(scope="session")
def tiny_clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight open_clip checkpoint written in the layout the engine loads:
    exercises the real open_clip loading path without any download."""
    import torch
    from open_clip.model import CLIP

    torch.manual_seed(0)
    model = CLIP(**TINY_CLIP_CFG)
    return save_clip_checkpoint(model, TINY_CLIP_CFG, tmp_path_factory.mktemp("clip") / "tiny-clip")


@pytest.fixture
def make_engine(text_embedder: TextEmbedder, tiny_clip_dir: Path) -> Iterator[Callable[..., MLCEngine]]:
    """Factory for engines on isolated in-memory (or given) storage; L2 uses the tiny CLIP."""
    engines: list[MLCEngine] = []

    def factory(**kw: Any) -> MLCEngine:
        kw.setdefault("image_encoder", str(tiny_clip_dir))
        eng = MLCEngine(**kw)
        engines.append(eng)
        return eng

    yield factory
    for e in engines:
        e.close()
