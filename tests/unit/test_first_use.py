"""A fresh machine's first call: one-time work says what it is, and what failed once is not
retried by every later process (``model_files.ExportMemo``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlc_integrations.embed.files import ExportMemo

ROOT = Path(__file__).resolve().parents[2]

# The child blocks `onnx` (as an installation without it would be), in itself and in the
# image export's own child process (sitecustomize on PYTHONPATH), then stores and looks up
# a picture and a text once.
BLOCK_ONNX = '''
import sys
class _NoOnnx:
    def find_spec(self, name, path=None, target=None):
        if name == "onnx" or name.startswith("onnx."):
            raise ImportError("onnx blocked by the test (an installation without it)")
        return None
sys.meta_path.insert(0, _NoOnnx())
'''

CHILD = r'''
import logging, sys
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
from PIL import Image
from mlc_integrations import CacheRequest, MLCEngine
e = MLCEngine(image_encoder="efficientnet-lite0")
img = Image.new("RGB", (48, 48), (20, 140, 60))
e.update(CacheRequest(text="What colour is the square?", images=(img,)), {"text": "green"})
print("HIT" if e.lookup(CacheRequest(text="What colour is the square?", images=(img,))) else "MISS")
e.close()
'''


def _run(tmp: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    site = tmp / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCK_ONNX)
    env = dict(os.environ, MLC_CACHE_DIR=str(cache), HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))
    return subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, env=env, cwd=tmp)


def test_a_failed_export_is_announced_once_and_not_retried_by_the_next_process(tmp_path: Path) -> None:
    cache = tmp_path / "model-cache"
    first = _run(tmp_path, cache)
    assert first.returncode == 0 and first.stdout.strip() == "HIT", first.stderr[-2000:]
    # The first process says, at WARNING, what it is about to do (both towers).
    assert "exporting the text model" in first.stderr and "to ONNX once for this machine" in first.stderr
    assert "exporting the image tower efficientnet-lite0" in first.stderr
    memos = sorted(p.name for p in cache.rglob("*.failed.json"))
    assert len(memos) == 2, memos  # text and image: both exports need onnx
    second = _run(tmp_path, cache)
    assert second.returncode == 0 and second.stdout.strip() == "HIT", second.stderr[-2000:]
    assert "exporting" not in second.stderr  # remembered: served by torch without a retry


def test_an_export_memo_expires_when_the_installation_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    memo = ExportMemo(tmp_path / "text-onnx" / "abc-r3")
    assert memo.failed() is None
    memo.record_failure("ImportError: no onnx")
    assert memo.failed() == "ImportError: no onnx"
    assert json.loads(memo.path.read_text())["fingerprint"]["python"] == sys.executable
    changed = dict(ExportMemo.fingerprint(), onnx="9.9.9")
    monkeypatch.setattr(ExportMemo, "fingerprint", classmethod(lambda cls: changed))
    assert memo.failed() is None  # onnx installed or upgraded since: the next process retries
    memo.clear()
    assert not memo.path.exists()
