"""What a request and a hit are: defined in this one place.

A :class:`CacheRequest` is scope (model + parameters), namespace (tenant), context
(all earlier turns, images included), the last user turn's text and images.
:class:`mlc_integrations.keys.Keyer` turns it into the exact keys every tier filters on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from .errors import ConfigurationError

DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class CacheControl:
    """What one call may do with the cache, in the words of HTTP's Cache-Control.

    * ``"default"``: look up, and store the model's answer on a miss;
    * ``"bypass"``: neither read nor write (the call goes to the model, nothing is kept);
    * ``"refresh"``: do not read; call the model and store its answer over the old one;
    * ``"no-store"``: look up, but do not keep this call's answer.

    ``ttl`` (seconds) is this entry's lifetime when it is stored (None: the cache's ``ttl``).
    Every adapter accepts a ``CacheControl``, a mode name or ``{"mode": ..., "ttl": ...}``
    (:meth:`of`); errors and empty answers are never stored, whatever the mode.
    """

    mode: str = "default"
    ttl: Optional[float] = None

    MODES = ("default", "bypass", "refresh", "no-store")

    def __post_init__(self) -> None:
        if self.mode not in self.MODES:
            raise ConfigurationError(f"cache control mode {self.mode!r}: use one of {', '.join(self.MODES)}")
        if self.ttl is not None and not (isinstance(self.ttl, (int, float)) and self.ttl > 0):
            raise ConfigurationError(f"cache control ttl must be a number of seconds > 0, not {self.ttl!r}")

    @classmethod
    def of(cls, value: Any) -> "CacheControl":
        """A ``CacheControl`` from what a caller passed: itself, a mode name, a dict or None."""
        if value is None:
            return DEFAULT_CONTROL
        if isinstance(value, CacheControl):
            return value
        if isinstance(value, str):
            return cls(mode=value)
        if isinstance(value, dict):
            unknown = set(value) - {"mode", "ttl"}
            if unknown:
                raise ConfigurationError(f"cache control takes 'mode' and 'ttl', not {sorted(unknown)}")
            return cls(**value)
        raise ConfigurationError(f"cache control: a CacheControl, a mode name or a dict, not {type(value).__name__}")

    @property
    def reads(self) -> bool:
        return self.mode in ("default", "no-store")

    @property
    def writes(self) -> bool:
        return self.mode in ("default", "refresh")


DEFAULT_CONTROL = CacheControl()


def is_empty_payload(payload: Any) -> bool:
    """True for an answer not worth keeping: nothing, blank text, or an empty container
    (a ``{"text": ...}`` payload with blank text too). Adapters decide for their
    framework's reply types (a tool-call reply has no text and is not empty)."""
    if payload is None:
        return True
    if isinstance(payload, str):
        return not payload.strip()
    if isinstance(payload, dict) and set(payload) == {"text"}:
        return not str(payload["text"] or "").strip()
    if isinstance(payload, (dict, list, tuple)):
        return len(payload) == 0
    return False


@dataclass(frozen=True)
class CacheRequest:
    """A multimodal request as the engine sees it: an immutable value.

    Frozen, with its sequences stored as tuples: a request changed after its lookup
    would otherwise be stored under the key computed for its old content. Build a new
    one (``dataclasses.replace(request, text=...)``) to ask something else.

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

    def __post_init__(self) -> None:
        for name in ("images", "context", "text_embedding"):
            value = getattr(self, name)
            if isinstance(value, list):  # other types are validated (and refused) by the keyer
                object.__setattr__(self, name, tuple(value))


@dataclass
class Hit:
    """A reusable earlier response, and why it was reused.

    ``scores`` holds the similarities that were compared (e.g. ``{"text": 0.93}`` for
    L1; for L2 ``{"fingerprint": 0.99, "prompt": 0.91}`` when the picture was found by its
    pixel fingerprint, ``{"image": 0.97, "prompt": 0.91}`` when by the image encoder, plus
    the local comparison's ``image_*`` figures; ``{}`` for L0.5); ``thresholds`` the
    thresholds they had to clear.
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


@dataclass
class Refusal:
    """A candidate that cleared the similarity thresholds and was not reused, and why.

    ``reason`` names what refused it: ``"verifier"`` (its probability that the stored
    answer fits is under the threshold; ``detail`` says which difference it saw),
    ``"explored"`` (error-bounded mode answered it as a miss on purpose, to label it).
    """

    tier: str
    entry_id: str
    scores: dict[str, float] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=dict)
    reason: str = "verifier"
    detail: str = ""
    matched_text: Optional[str] = None

    def explain(self) -> str:
        parts = [f"refused tier={self.tier}", f"entry={self.entry_id[:12]}", f"reason={self.reason}"]
        for k, v in self.scores.items():
            t = self.thresholds.get(k)
            parts.append(f"{k}={v:.3f}" + ((">=" if v >= t else "<") + f"{t:.3f}" if t is not None else ""))
        if self.detail:
            parts.append(f"({self.detail})")
        return " ".join(parts)


@dataclass
class Lookup:
    """What one lookup did: the hit, or the best refused candidate; each tier's outcome
    (``hit``, ``miss``, ``refused``, ``skipped``)."""

    hit: Optional[Hit]
    refused: Optional[Refusal] = None
    tiers: dict[str, str] = field(default_factory=dict)
    ms: float = 0.0
    # The verifier's decision per candidate entry id (verify.Decision: probability, model, detail).
    verdicts: dict[str, Any] = field(default_factory=dict)
    error: str = ""  # why the lookup failed ("ImageDecodeError: images[0]: ..."); "" when it ran
    # Per tier, what stopped it before any candidate: "best cosine 0.62 < floor 0.80", "pre-screened: ...".
    notes: dict[str, str] = field(default_factory=dict)

    def explain(self) -> str:
        if self.hit is not None:
            return self.hit.explain()
        if self.error:
            return f"miss: the lookup failed: {self.error}"
        tiers = " ".join(f"{t}:{o}" + (f" ({self.notes[t]})" if t in self.notes else "") for t, o in self.tiers.items())
        return f"miss [{tiers}]" + (f"; best {self.refused.explain()}" if self.refused else "")
