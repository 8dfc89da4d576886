"""What a request and a hit are: defined in this one place.

A :class:`CacheRequest` is scope (model + parameters), namespace (tenant), context
(all earlier turns, images included), the last user turn's text and images.
:func:`key_request` turns it into the exact keys every tier filters on.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from .errors import InvalidRequestError
from .images import DecodedImage, ImageRef

DEFAULT_NAMESPACE = "default"


def normalize_text(text: str) -> str:
    """Unicode NFKC, case folded, whitespace collapsed and stripped."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text).casefold()).strip()


def sha256_hex(data: str) -> str:
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class CacheRequest:
    """A multimodal request as the engine sees it.

    ``context`` is a list of earlier messages compared exactly. Each message is a
    JSON-like value; inside it, a part ``{"type": "image", "image": <image input>}``
    is keyed by the decoded pixels of the image (see :mod:`mlc_integrations.images`),
    everything else by its canonical JSON. ``images`` are the last user turn's images
    in order (PIL image, bytes, path, data URL, base64 text, remote URL).
    ``text_embedding`` optionally supplies the L1 embedding instead of computing it.
    """

    text: str = ""
    images: Sequence[Any] = field(default_factory=list)
    context: Sequence[Any] = field(default_factory=list)
    scope: str = ""
    namespace: str = DEFAULT_NAMESPACE
    text_embedding: Optional[Sequence[float]] = None

    # Filled lazily by the engine so that update() after lookup() reuses the work.
    _keyed: "Optional[KeyedRequest]" = field(default=None, repr=False, compare=False)


@dataclass
class KeyedRequest:
    """A validated request with its exact keys and decoded images."""

    request: CacheRequest
    text: str  # the prompt text as str (bytes input decoded as UTF-8)
    norm_text: str
    images: list[DecodedImage]
    scope_key: str
    namespace: str
    context_key: str
    images_key: str
    entry_id: str  # also the L0.5 exact key
    embeddable: bool  # text short enough to embed (longer text is still keyed exactly)
    features: dict[str, Any] = field(default_factory=dict)  # memoized embeddings


def _canonical(value: Any, decode: Callable[[Any, str], DecodedImage], path: str, depth: int = 0) -> Any:
    if depth > 64:
        raise InvalidRequestError(f"context nested deeper than 64 levels at {path}")
    if isinstance(value, dict):
        if value.get("type") == "image" and "image" in value:
            img = value["image"]
            if isinstance(img, DecodedImage):
                return {"type": "image", "digest": img.digest}
            return {"type": "image", "digest": decode(img, path).digest}
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                k = str(k)
            out[k] = _canonical(v, decode, f"{path}.{k}", depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_canonical(v, decode, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, ImageRef):
        return {"type": "image", "digest": decode(value, path).digest}
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return {"type": "image", "digest": decode(bytes(value), path).digest}
    try:
        from PIL import Image

        if isinstance(value, Image.Image):
            return {"type": "image", "digest": decode(value, path).digest}
    except ImportError:  # pragma: no cover
        pass
    raise InvalidRequestError(f"context value at {path} has unsupported type {type(value).__name__}")


def context_key(context: Sequence[Any], decode: Callable[[Any, str], DecodedImage]) -> str:
    """Digest of the canonical JSON of the context (images replaced by pixel digests)."""
    if not context:
        return "none"
    if not isinstance(context, (list, tuple)):
        raise InvalidRequestError(f"context must be a list of messages, not {type(context).__name__}")
    canon = _canonical(list(context), decode, "context")
    return sha256_hex(json.dumps(canon, sort_keys=True, ensure_ascii=False, separators=(",", ":")))


def check_embedding(vec: Sequence[float], what: str) -> list[float]:
    try:
        out = [float(x) for x in vec]
    except (TypeError, ValueError) as exc:
        raise InvalidRequestError(f"{what} must be a sequence of numbers ({exc})") from exc
    if not out:
        raise InvalidRequestError(f"{what} is empty")
    if not all(math.isfinite(x) for x in out):
        raise InvalidRequestError(f"{what} contains NaN or infinite values")
    return out


@dataclass
class Hit:
    """A reusable earlier response, and why it was reused.

    ``scores`` holds the similarities that were compared (e.g. ``{"text": 0.93}`` for
    L1, ``{"image": 0.97, "prompt": 0.91}`` for L2, ``{}`` for L0.5); ``thresholds``
    the thresholds they had to clear.
    """

    payload: Any
    tier: str
    entry_id: str
    scores: dict[str, float] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=dict)
    matched_text: Optional[str] = None
    lookup_ms: float = 0.0

    def explain(self) -> str:
        parts = [f"tier={self.tier}", f"entry={self.entry_id[:12]}"]
        for k, v in self.scores.items():
            t = self.thresholds.get(k)
            parts.append(f"{k}={v:.3f}" + (f">={t:.3f}" if t is not None else ""))
        return " ".join(parts)
