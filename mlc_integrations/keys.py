"""Keying: validate a :class:`CacheRequest`, decode its images, and compute the exact keys
every tier filters on — the one place that says what makes two requests "the same".

* text: Unicode NFC and outer whitespace trimmed, nothing else (:func:`exact_text`): case
  and inner spacing can change an answer (code, regexes, quoted strings, YAML), so
  variants that differ only there go to L1, where the verifier decides;
* images: the digest of their decoded pixels (:mod:`mlc_integrations.images`);
* context: the canonical JSON of all earlier turns, images replaced by pixel digests;
* scope and namespace: :func:`scope_digest` (also what ``clear(scope=...)`` filters on).

A :class:`Keyer` belongs to one engine (its image and prompt limits) and memoizes the
keyed form of the request objects it has seen, so ``update()`` after ``lookup()`` reuses
the decoded images and the embeddings computed for the lookup.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import math
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .runtime.lru import LRU
from .errors import InvalidRequestError
from .images import DecodedImage, DecodeMemo, ImageRef, decode_image
from .request import CacheRequest

# Part of every entry id: bump it and old entries are never matched exactly (they still
# answer semantically). mlc2: exact text is NFC + outer trim (mlc1 folded case and spaces).
KEY_VERSION = "mlc2"


def exact_text(text: str) -> str:
    """What the exact tier compares: Unicode NFC (the same characters however composed),
    outer whitespace trimmed — no case folding, no inner-space collapsing, no NFKC."""
    return unicodedata.normalize("NFC", text).strip()


def check_text(value: str, what: str) -> str:
    """Text a tokenizer and a JSON store can take: valid Unicode (no lone surrogates,
    which Python strings can hold, e.g. from ``surrogateescape`` decoding)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequestError(
            f"{what} is not valid Unicode: {exc.reason} {value[exc.start:exc.end]!r} at position {exc.start}; "
            "decode its bytes with errors='replace' or fix the source") from None
    return value


def sha256_hex(data: str) -> str:
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()


def scope_digest(value: str) -> str:
    """How a scope or a namespace is stored and filtered on (never the raw string)."""
    return sha256_hex(value)[:32]


# Where a framework's scope string names its model, first match wins (LangChain chat models
# and LLMs call it model / model_name / model_id; Azure deployments, older ones engine).
MODEL_FIELDS = ("model", "model_name", "model_id", "deployment_name", "engine")


@functools.lru_cache(maxsize=256)
def model_label(scope: str) -> str:
    """The model a scope names, or ``""``: read from LangChain's ``llm_string`` (the
    serialized model's kwargs before ``---``, or the sorted parameter list of a model that
    is not serializable) or a LlamaIndex wrapper's scope (the inner LLM's settings). Stored
    beside each entry so ``mlc clear --model NAME`` and ``mlc scopes`` can name models;
    the scope itself stays a digest. Falls back to the model's type when no field names it."""
    params: dict[str, Any] = {}
    kind = ""
    try:
        if scope.startswith("llamaindex:"):
            body = json.loads(scope[len("llamaindex:"):])
            params = {k: _json_value(v) for k, v in (body.get("settings") or {}).items()}
            kind = str(body.get("class", "")).rpartition(".")[2]
        elif "---" in scope and scope.lstrip().startswith("{"):
            head = json.loads(scope.partition("---")[0])
            params = dict(head.get("kwargs") or {})
            kind = str((head.get("id") or [""])[-1])
        elif scope.startswith("[("):
            params = dict(ast.literal_eval(scope))  # a literal only: no code runs
            kind = str(params.get("_type", ""))
    except (ValueError, TypeError, SyntaxError, AttributeError, MemoryError, RecursionError):
        return ""
    for name in MODEL_FIELDS:
        value = params.get(name)
        if isinstance(value, str) and value:
            return value[:200]
    return kind[:200]


def _json_value(v: Any) -> Any:
    try:
        return json.loads(v) if isinstance(v, str) else v
    except ValueError:
        return v


def partition_key(*keys: Any) -> str:
    """One metadata value standing for every exact condition of a tier."""
    return sha256_hex("|".join(str(k) for k in keys))[:32]


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
    # Embeddings of this content (pure functions of it: shared by every keying of equal
    # requests). A lookup's own state (refusals, verdicts) is the tiers' outcome, not here.
    features: dict[str, Any] = field(default_factory=dict)

    def partitions(self) -> dict[str, Any]:
        """Partition keys of the vector tiers: a neighbour counts only inside its partition."""
        n = len(self.images)
        base = (self.scope_key, self.namespace, self.context_key)
        return {
            "l1": partition_key("l1", *base, self.images_key),
            "l2_prompt": partition_key("l2", *base, n),
            "l2_image": [partition_key("l2i", *base, n, i) for i in range(n)],
        }


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
    return sha256_hex(check_text(json.dumps(canon, sort_keys=True, ensure_ascii=False, separators=(",", ":")),
                                 "context"))


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


def _unit_embedding(value: Sequence[float]) -> np.ndarray:
    # Normalize in float64: huge finite values would overflow a float32 cast to inf/NaN.
    vec = np.asarray(check_embedding(value, "text_embedding"), dtype=np.float64)
    with np.errstate(over="ignore"):
        n = np.linalg.norm(vec)
    if n == 0 or not np.isfinite(n):
        raise InvalidRequestError("text_embedding is the zero vector or too large to normalize")
    return (vec / n).astype(np.float32)


class Keyer:
    """Keys requests under one engine's limits.

    Nothing is keyed by object identity: every call keys the request's content (cheap:
    digests; pictures given as bytes, paths or data URLs are decoded once, DecodeMemo).
    What is expensive to compute from that content -- its embeddings -- is memoized by
    a digest of the content, so a lookup and the update after it encode once, and a
    request whose content changed in between can never reuse the old one's keys."""

    def __init__(self, *, max_image_pixels: int, max_image_bytes: int, max_prompt_chars: int,
                 memo_size: int = 1024) -> None:
        self.max_image_pixels = max_image_pixels
        self.max_image_bytes = max_image_bytes
        self.max_prompt_chars = max_prompt_chars
        self._decode_memo = DecodeMemo()
        # content digest -> features (embeddings) of that content
        self._features: LRU[str, dict[str, Any]] = LRU(memo_size)

    def decode(self, value: Any, what: str = "image") -> DecodedImage:
        """Decode an image under the limits (memoized by its encoded form)."""
        if isinstance(value, DecodedImage):
            return value
        key = self._decode_memo.key(value)
        if key is not None:
            found = self._decode_memo.get(key)
            if found is not None:
                return found
        img = decode_image(value, max_pixels=self.max_image_pixels, max_bytes=self.max_image_bytes, what=what)
        if key is not None:
            self._decode_memo.put(key, img)
        return img

    def key(self, request: CacheRequest) -> KeyedRequest:
        if not isinstance(request, CacheRequest):
            raise InvalidRequestError(f"expected a CacheRequest, got {type(request).__name__}")
        kr = self._key(request)
        supplied = kr.features.get("text")
        content = sha256_hex(json.dumps([kr.entry_id, kr.text, None if supplied is None else supplied.tobytes().hex()],
                                        separators=(",", ":")))
        shared = self._features.get(content)
        if shared is None:
            self._features.put(content, kr.features)
        else:
            kr.features = shared
        return kr

    def _key(self, request: CacheRequest) -> KeyedRequest:
        text = request.text
        if isinstance(text, (bytes, bytearray)):
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidRequestError(f"prompt text is not valid UTF-8 ({exc})") from exc
        if not isinstance(text, str):
            raise InvalidRequestError(f"prompt text must be str, got {type(text).__name__}")
        if not isinstance(request.scope, str) or not isinstance(request.namespace, str):
            raise InvalidRequestError("scope and namespace must be strings")
        for value, what in ((text, "prompt text"), (request.scope, "scope"), (request.namespace, "namespace")):
            check_text(value, what)
        images_in = request.images
        if images_in is None:
            images_in = []
        if not isinstance(images_in, (list, tuple)):
            images_in = [images_in]
        images = [self.decode(v, f"images[{i}]") for i, v in enumerate(images_in)]
        norm = exact_text(text)
        if not norm and not images:
            raise InvalidRequestError("empty prompt: no text and no images to key")
        ctx = context_key(request.context or [], self.decode)
        digests = [im.digest for im in images]
        scope_key = scope_digest(request.scope)
        ns_key = scope_digest(request.namespace)
        kr = KeyedRequest(
            request=request,
            text=text,
            norm_text=norm,
            images=images,
            scope_key=scope_key,
            namespace=ns_key,
            context_key=ctx,
            images_key=sha256_hex("|".join(digests)) if digests else "none",
            entry_id=sha256_hex(json.dumps([KEY_VERSION, scope_key, ns_key, ctx, norm, digests],
                                           separators=(",", ":"))),
            embeddable=len(text) <= self.max_prompt_chars,
        )
        if request.text_embedding is not None:
            kr.features["text"] = _unit_embedding(request.text_embedding)
        return kr

