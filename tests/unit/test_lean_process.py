"""Load only what the traffic uses: text-only traffic imports no torch and loads no image
tower; pictures are embedded through ONNX Runtime (no torch in the serving process) with
the same vectors as the torch model (so no decision changes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.conftest import REPO_DATA

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys, tempfile
from mlc_integrations import CacheRequest, MLCEngine
eng = MLCEngine(persist_directory=tempfile.mkdtemp(), image_encoder="efficientnet-lite0")
eng._warm.join(300)
r = CacheRequest(text="What is the capital of France?", scope="m")
eng.lookup(r); eng.update(r, "Paris"); eng.flush()
out = {"text_only": {"torch": "torch" in sys.modules, "tower_loaded": eng.encoders.image_encoder._model is not None}}
if sys.argv[1] == "pictures":
    pic = eng.decode_image(open(sys.argv[2], "rb").read())
    p = CacheRequest(text="What is in this picture?", images=[pic], scope="m")
    eng.lookup(p); eng.update(p, "a squirrel"); eng.flush()
    out["pictures"] = {"torch": "torch" in sys.modules, "tower": type(eng.encoders.image_encoder._model).__name__,
                       "hit": eng.lookup(p).tier}
eng.close()
print(json.dumps(out))
"""


def run(kind: str, cache_root: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(REPO), MLC_CACHE_DIR=str(cache_root))
    env.pop("MLC_IMAGE_BACKEND", None)
    res = subprocess.run([sys.executable, "-c", SCRIPT, kind, str(REPO_DATA / "photos" / "squirrel_cls.jpg")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def exported(private_model_cache: Path) -> Path:
    """A model cache where a machine's first process already ran: the one-time exports
    (text and image towers to ONNX; they import torch, once) are done, whatever other
    tests ran before, so the processes under test are the ones every later start is."""
    run("pictures", private_model_cache)
    return private_model_cache


def test_text_only_traffic_imports_no_torch_and_loads_no_image_tower(exported: Path) -> None:
    out = run("text", exported)
    assert out["text_only"] == {"torch": False, "tower_loaded": False}


def test_pictures_are_embedded_through_onnx_without_importing_torch(exported: Path) -> None:
    out = run("pictures", exported)
    assert out["pictures"] == {"torch": False, "tower": "OnnxImageSession", "hit": "L0.5"}


def test_onnx_image_tower_gives_the_torch_models_vectors() -> None:
    from mlc_integrations.embed.image_towers import EFFICIENTNET_LITE, EfficientNetLiteEncoder

    enc = EfficientNetLiteEncoder(EFFICIENTNET_LITE["efficientnet-lite0"])  # not the shared one: its own memo
    pics = [Image.open(REPO_DATA / "photos" / n).convert("RGB") for n in ("orange.jpg", "squirrel_cls.jpg")]
    served = enc.embed_images(pics, ["a", "b"])
    assert type(enc.load()).__name__ == "OnnxImageSession"
    ref = enc.features(enc.preprocess(pics)).detach().numpy()
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    assert (ref * served).sum(1).min() >= 0.9999
