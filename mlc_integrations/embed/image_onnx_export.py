"""The export of an image tower to ONNX, run in a child process by
:func:`mlc_integrations.embed.image_onnx.open_session` (torch is imported here, never in the
serving process), and ``python -m mlc_integrations.embed.image_onnx_export [NAME]`` to build
the cached export ahead of first use."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .image_towers import EFFICIENTNET_LITE, EfficientNetLiteEncoder, weights_path
from .image_onnx import MIN_PROBE_COSINE, RECIPE, OnnxImageSession, cache_dir, open_session


def export(name: str, out_dir: Path) -> dict[str, Any]:
    """(In the child process.) Write ``model.onnx`` and ``meta.json`` for image encoder ``name``."""
    import torch

    torch.set_num_threads(1)
    card = EFFICIENTNET_LITE[name]
    model = EfficientNetLiteEncoder(card)._build()

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, x: Any) -> Any:
            return self.m.forward_head(self.m.forward_features(x), pre_logits=True)

    pooled = Pooled().eval()
    s = card.input_size
    rng = np.random.default_rng(0)
    probes = rng.uniform(-1, 1, size=(4, 3, s, s)).astype(np.float32)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as work:
        raw = Path(work) / "model.onnx"
        torch.onnx.export(pooled, (torch.from_numpy(probes[:1]),), str(raw), dynamo=False, input_names=["pixels"],
                          output_names=["features"], dynamic_axes={"pixels": {0: "batch"}, "features": {0: "batch"}},
                          opset_version=17)
        shutil.move(str(raw), out_dir / "model.onnx")
    with torch.inference_mode():
        ref = pooled(torch.from_numpy(probes)).numpy()
    got = OnnxImageSession(out_dir / "model.onnx").features(probes)
    cos = (ref * got).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
    meta = {"name": name, "recipe": RECIPE, "probe_min_cosine": float(cos.min()), "ok": bool(cos.min() >= MIN_PROBE_COSINE),
            "versions": {"torch": torch.__version__}}
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=2))
    return meta


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", nargs="?", default="efficientnet-lite0")
    ap.add_argument("--export", nargs=2, metavar=("NAME", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.export:
        print(json.dumps(export(args.export[0], Path(args.export[1]))))
        return
    card = EFFICIENTNET_LITE[args.name]
    open_session(card, weights_path(card))
    print(cache_dir(card, weights_path(card)))


if __name__ == "__main__":
    main()
