"""The offline L2 model: packaged checkpoint loads by name; training is reproducible."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("easy_vqa")

from mlc_integrations import MLCEngine  # noqa: E402
from mlc_integrations.embed.models import NAMED_CLIP_MODELS  # noqa: E402
from mlc_integrations.request import CacheRequest  # noqa: E402
from tests.helpers import jpeg_bytes  # noqa: E402
from mlc_integrations import TierOptions


def test_packaged_checkpoint_is_small_and_loads_by_name(text_embedder: Any) -> None:
    from PIL import Image

    from evaluation.sources.easyvqa import load_split
    from evaluation.training.train_clip import MODEL_CFG

    d = NAMED_CLIP_MODELS["mlc-easyvqa-tiny"]
    weights = d / "open_clip_model.safetensors"
    assert weights.stat().st_size < 8_000_000
    assert json.loads((d / "open_clip_config.json").read_text())["model_cfg"] == MODEL_CFG
    eng = MLCEngine(image_encoder="mlc-easyvqa-tiny")
    test = load_split("test")
    red = next(i for i in test if i.color == "red")
    blue = next(i for i in test if i.color == "blue")
    pic = Image.open(red.path).convert("RGB")
    eng.update(CacheRequest(text="what color is the shape?", images=[pic]), {"a": "red"})
    hit = eng.lookup(CacheRequest(text="what color is the shape?", images=[jpeg_bytes(pic, 80)]))
    assert eng.l2_status == "on" and hit is not None and hit.tier == "L2"
    other = Image.open(blue.path).convert("RGB")
    assert eng.lookup(CacheRequest(text="what color is the shape?", images=[other])) is None


def test_training_is_deterministic(tmp_path: Path) -> None:
    from evaluation.training.train_clip import train

    a = train(tmp_path / "a", steps=2, progress=False, evaluate_after=False)
    b = train(tmp_path / "b", steps=2, progress=False, evaluate_after=False)
    digest = [hashlib.sha256((tmp_path / x / "open_clip_model.safetensors").read_bytes()).hexdigest() for x in "ab"]
    assert digest[0] == digest[1]
    assert a["final_loss"] == b["final_loss"] and a["checkpoint_bytes"] < 8_000_000
    eng = MLCEngine(image_encoder=str(tmp_path / "a"), tiers=TierOptions(l1=False))
    assert eng.image_tower is not None
