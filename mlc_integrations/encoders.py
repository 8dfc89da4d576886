"""Which model gives each tier its vectors, computed at most once per request.

* L1 and (by default) L2's prompt side: the sentence model (:class:`TextEmbedder`);
* L2's image side (and its prompt side with ``l2_prompt_encoder="clip"``): the image model.

Vectors are memoized on the :class:`KeyedRequest`, so ``update()`` after ``lookup()``
never embeds twice. When the image model cannot be had, L2 switches off with a warning
(L0.5 and L1 keep serving) and :attr:`TierEncoders.l2_status` says why.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Optional

import numpy as np

from .errors import ModelUnavailableError
from .keys import KeyedRequest
from .models import ClipEmbedder, ClipSpec, TextEmbedder

log = logging.getLogger(__name__)


class TierEncoders:
    def __init__(self, *, text_model: Optional[str], clip_model: Any, clip_pretrained: Optional[str],
                 l2_prompt_encoder: str, enable_l2: bool) -> None:
        if l2_prompt_encoder not in ("text", "clip"):
            raise ValueError("l2_prompt_encoder must be 'text' (the L1 sentence model) or 'clip' (CLIP text tower)")
        self.text_model_name = text_model
        self.l2_prompt_encoder = l2_prompt_encoder
        self.clip_spec = ClipSpec.parse(clip_model, clip_pretrained) if clip_model is not None else None
        self.l2_enabled = enable_l2 and self.clip_spec is not None
        self._l2_off_reason: Optional[str] = None if self.l2_enabled else "disabled"

    # ------------------------------------------------------------------ models
    @property
    def text_embedder(self) -> TextEmbedder:
        return TextEmbedder.shared(self.text_model_name)

    @property
    def clip_embedder(self) -> Optional[ClipEmbedder]:
        """The image model, loaded; None when L2 is off (then :attr:`l2_status` says why)."""
        if not self.l2_enabled or self.clip_spec is None:
            return None
        emb = ClipEmbedder.shared(self.clip_spec)
        try:
            emb.load()
        except ModelUnavailableError as exc:
            self.disable_l2(str(exc))
            return None
        return emb

    def disable_l2(self, reason: str) -> None:
        if self.l2_enabled:
            self.l2_enabled = False
            self._l2_off_reason = reason
            log.warning(
                "L2 (image+text) tier switched off: %s. L0.5 and L1 keep serving. "
                "Point clip_model at a local open_clip checkpoint (or 'mlc-easyvqa-tiny' for the demo domain).",
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
        return str(self.clip_spec.model if self.clip_spec else "")

    @property
    def prompt_model(self) -> str:
        return self.text_model if self.l2_prompt_encoder == "text" else "clip-text:" + self.image_model

    @property
    def prompt_is_text_model(self) -> bool:
        """True when L2's prompt similarity is the sentence model's cosine (the verifier's signal)."""
        return self.l2_prompt_encoder == "text"

    def warmup(self, *, text: bool = True) -> dict[str, float]:
        """Load the models now (seconds per model). Calls made meanwhile wait for the model
        they need and never load it twice. Never raises: a model that cannot be had is
        reported by :attr:`l2_status` / the first lookup, as without warm-up."""
        took: dict[str, float] = {}
        steps = ((("text", lambda: self.text_embedder.embed(["warm up"])),) if text else ()) + (
            ("image", lambda: self.clip_embedder if self.l2_enabled else None),)
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

    # ------------------------------------------------------------------ vectors (memoized per request)
    def text_vec(self, kr: KeyedRequest) -> np.ndarray:
        v = kr.features.get("text")
        if v is None:
            v = self.text_embedder.embed([kr.text])[0]
            kr.features["text"] = v
        return v

    def prompt_vec(self, kr: KeyedRequest, clip: ClipEmbedder) -> np.ndarray:
        if self.l2_prompt_encoder == "text":
            return self.text_vec(kr)
        v = kr.features.get("clip_text")
        if v is None:
            v = clip.embed_texts([kr.text])[0]
            kr.features["clip_text"] = v
        return v

    def image_vecs(self, kr: KeyedRequest, clip: ClipEmbedder) -> np.ndarray:
        v = kr.features.get("clip_images")
        if v is None:
            v = clip.embed_images([im.pil for im in kr.images], [im.digest for im in kr.images])
            kr.features["clip_images"] = v
        return v
