"""EfficientNet-Lite through ONNX Runtime: L2's image tower without torch in the serving process.

``import torch`` alone holds about 700 MB of resident memory here (its CUDA libraries are
mapped even on a CPU machine); the image tower through ONNX Runtime serves the *same*
network (fp32, the pooled 1280-d features before the classifier) in a few tens of MB.
The ONNX file is exported once per machine, offline, from the installed weights package,
in a **child process** (so the serving process never imports torch), checked against
torch on probe inputs (every probe's vector within :data:`MIN_PROBE_COSINE`, else the
export is discarded and torch serves), and cached under ``cache_root()/image-onnx``,
keyed by the weights file's SHA-256 and :data:`RECIPE`. ``MLC_IMAGE_BACKEND=torch`` turns
it off. ``python -m mlc_integrations.embed.image_onnx_export [NAME]`` builds it ahead of first use.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .files import ExportMemo

log = logging.getLogger(__name__)

RECIPE = "i1"
MIN_PROBE_COSINE = 0.9999
ENV_IMAGE_BACKEND = "MLC_IMAGE_BACKEND"  # "auto" (ONNX when it can be had) or "torch"
EXPORT_TIMEOUT_S = 600
EXPORT_SECONDS_HINT = 10  # child process: import torch, export, probe check; 6-7 s here (first_call timing in the closing note)


class OnnxImageUnavailable(RuntimeError):
    pass


# The child process that exports (it imports torch and the encoder; this module does neither).
EXPORTER = "mlc_integrations.embed.image_onnx_export"


def wanted() -> bool:
    return os.environ.get(ENV_IMAGE_BACKEND, "auto").strip().lower() != "torch"


def _file_digest(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def cache_dir(card: Any, weights: Path) -> Path:
    from .text_onnx import cache_root

    return cache_root() / "image-onnx" / f"{card.name}-{_file_digest(weights)[:16]}-{RECIPE}"


class OnnxImageSession:
    """One ONNX Runtime session: preprocessed pixels (N, 3, S, S) -> pooled features (N, 1280)."""

    def __init__(self, path: Path, threads: int = 1) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        self.num_features = int(self._session.get_outputs()[0].shape[-1])

    def features(self, batch: np.ndarray) -> np.ndarray:
        return self._session.run(None, {"pixels": np.ascontiguousarray(batch, dtype=np.float32)})[0]


def open_session(card: Any, weights: Path) -> OnnxImageSession:
    """The cached export of ``card`` (exported now, in a child process, when absent)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        raise OnnxImageUnavailable(f"onnxruntime not importable: {exc}") from exc
    final = cache_dir(card, weights)
    if not (final / "meta.json").exists():
        memo = ExportMemo(final)
        earlier = memo.failed()
        if earlier is not None:  # failed before in this installation: not retried on every start
            raise OnnxImageUnavailable(f"the ONNX export of {card.name} failed earlier on this machine ({earlier}); "
                                       f"delete {memo.path} or change the installation to retry")
        log.warning("exporting the image tower %s to ONNX once for this machine (about %d s); "
                    "later processes reuse %s", card.name, EXPORT_SECONDS_HINT, final)
        try:
            _export_in_child(card, final)
        except Exception as exc:
            memo.record_failure(f"{type(exc).__name__}: {exc}")
            raise
    meta = json.loads((final / "meta.json").read_text())
    if not meta.get("ok"):
        raise OnnxImageUnavailable(f"the ONNX export of {card.name} reached cosine {meta.get('probe_min_cosine')} "
                                   f"< {MIN_PROBE_COSINE} to torch on this machine")
    return OnnxImageSession(final / "model.onnx")


def _export_in_child(card: Any, final: Path) -> None:
    """Export ``card`` into ``final`` in a child process (torch is imported there, never here)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}-"))
    try:
        here = str(Path(__file__).resolve().parents[2])  # the child imports this very package
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p))
        res = subprocess.run([sys.executable, "-m", EXPORTER, "--export", card.name, str(work)],
                             capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, env=env)
        if res.returncode != 0 or not (work / "meta.json").exists():
            raise OnnxImageUnavailable(f"export of {card.name} failed: {res.stderr.strip()[-500:]}")
        try:
            os.replace(work, final)
        except OSError:  # another process finished first
            if not (final / "meta.json").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
