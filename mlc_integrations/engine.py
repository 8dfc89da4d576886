"""MLCEngine: the shared three-tier cache engine (exact -> text-semantic -> image+text).

Everything about matching, storage policy (TTL, eviction) and failure handling
lives here; the LangChain and LlamaIndex adapters only translate their framework's
request and response shapes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .errors import (
    InvalidRequestError,
    MLCError,
    ModelUnavailableError,
    PayloadError,
    StorageError,
)
from .images import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_MAX_IMAGE_PIXELS, DecodedImage, DecodeMemo, decode_image
from .models import (
    DEFAULT_CLIP_MODEL,
    DEFAULT_CLIP_PRETRAINED,
    ClipEmbedder,
    ClipSpec,
    TextEmbedder,
)
from .request import (
    CacheRequest,
    Hit,
    KeyedRequest,
    check_embedding,
    context_key,
    normalize_text,
    sha256_hex,
)
from .stats import EngineStats
from .storage import DEFAULT_SEARCH_EF, ChromaStore
from .verify import DEFAULT_EXPLORE_RATE, DEFAULT_MIN_PRECISION, Decision, VerificationPolicy, make_policy

log = logging.getLogger(__name__)

# Defaults chosen from measurements (see README "How the thresholds were chosen";
# reproduce with `python benchmarks/threshold_precision.py`).
# L1 and the L2 prompt side only *retrieve* candidates for the verifier (verify.py),
# which decides reuse: 0.80 reaches 76 % of qqp_val duplicates and every easy-vqa
# paraphrase above 0.80 (raw cosine alone needed 0.95 and still reused negations).
# Reproduce: `python -m mlc_integrations.eval.train_verifier train` (table "Retrieval
# floor") and `... train_verifier vqa`; see docs/verification.md. With verifier="off"
# pass l1_threshold=0.95 for the old raw-cosine behaviour.
DEFAULT_L1_THRESHOLD = 0.80
DEFAULT_L2_IMAGE_THRESHOLD = 0.95
DEFAULT_L2_PROMPT_THRESHOLD = 0.80

KEY_VERSION = "mlc1"
_NO_EXPIRY = 1e18
_TEXT_META_CHARS = 4096
_ANSWER_META_CHARS = 8192


def answer_of(payload: Any) -> str:
    """The answer text of an engine-level payload when the caller gave none: a string
    itself, the ``"text"`` of a ``{"text": ...}`` payload, else its canonical JSON."""
    if isinstance(payload, str):
        return payload
    if isinstance(payload, dict) and isinstance(payload.get("text"), str):
        return payload["text"]
    return json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)


@dataclass
class _Candidate:
    entry_id: str
    scores: dict[str, float]
    thresholds: dict[str, float]

    @property
    def margin(self) -> float:
        return min(self.scores[k] - self.thresholds[k] for k in self.thresholds)


class MLCEngine:
    """Decide whether an earlier response can be reused for a multimodal request.

    Tiers run cheapest first and stop at the first hit:

    * ``L0.5`` exact: same scope, namespace, context, normalized text, image pixels.
    * ``L1`` text semantics: same scope, namespace, context and image pixels; text
      embedding cosine >= ``l1_threshold``.
    * ``L2`` multimodal: same scope, namespace and context; every image's CLIP
      similarity >= ``l2_image_threshold`` *and* prompt similarity >=
      ``l2_prompt_threshold``, each on its own.

    Storage is Chroma: in memory by default, ``persist_directory`` for an embedded
    persistent cache, ``chroma_host``/``chroma_port`` for a shared server (each request
    bounded by ``chroma_timeout`` seconds; an unreachable server makes lookups fast misses).
    ``hnsw_search_ef`` is the HNSW beam width of vector queries (recall vs speed; set
    when a collection is created).

    Default fail-open: a lookup error is a counted miss, an update error a logged,
    counted no-op. ``strict=True`` raises :class:`~mlc_integrations.errors.MLCError`
    subclasses instead.
    """

    def __init__(
        self,
        *,
        persist_directory: Optional[str] = None,
        chroma_host: Optional[str] = None,
        chroma_port: int = 8000,
        chroma_timeout: Optional[float] = 5.0,
        hnsw_search_ef: int = DEFAULT_SEARCH_EF,
        chroma_client: Any = None,
        collection_prefix: str = "mlc",
        text_model: Optional[str] = None,
        clip_model: Any = DEFAULT_CLIP_MODEL,
        clip_pretrained: Optional[str] = DEFAULT_CLIP_PRETRAINED,
        l2_prompt_encoder: str = "text",
        enable_exact: bool = True,
        enable_l1: bool = True,
        enable_l2: bool = True,
        l1_threshold: float = DEFAULT_L1_THRESHOLD,
        l2_threshold: Optional[float] = None,
        l2_image_threshold: float = DEFAULT_L2_IMAGE_THRESHOLD,
        l2_prompt_threshold: float = DEFAULT_L2_PROMPT_THRESHOLD,
        ttl: Optional[float] = None,
        max_entries: Optional[int] = None,
        strict: bool = False,
        store_prompts: bool = True,
        max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
        max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
        max_prompt_chars: int = 8192,
        max_response_bytes: int = 4 * 1024 * 1024,
        n_candidates: int = 16,
        clock: Callable[[], float] = time.time,
        verifier: Any = "default",
        verifier_precision: float = DEFAULT_MIN_PRECISION,
        max_false_hit_rate: Optional[float] = None,
        explore_rate: float = DEFAULT_EXPLORE_RATE,
        verifier_embedding_head: bool = False,
    ) -> None:
        if l2_threshold is not None:
            l2_image_threshold = l2_prompt_threshold = l2_threshold
        for name, v in (("l1_threshold", l1_threshold), ("l2_image_threshold", l2_image_threshold),
                        ("l2_prompt_threshold", l2_prompt_threshold)):
            if not (-1.0 <= float(v) <= 1.0):
                raise ValueError(f"{name} must be a cosine similarity in [-1, 1], got {v}")
        if l2_prompt_encoder not in ("text", "clip"):
            raise ValueError("l2_prompt_encoder must be 'text' (the L1 sentence model) or 'clip' (CLIP text tower)")
        if ttl is not None and ttl <= 0:
            raise ValueError("ttl must be positive seconds or None")
        if max_entries is not None and max_entries < 1:
            raise ValueError("max_entries must be >= 1 or None")

        self.store = ChromaStore(
            persist_directory=persist_directory,
            chroma_host=chroma_host,
            chroma_port=chroma_port,
            collection_prefix=collection_prefix,
            client=chroma_client,
            timeout=chroma_timeout,
            hnsw_search_ef=hnsw_search_ef,
        )
        self.text_model_name = text_model
        self.enable_exact = enable_exact
        self.enable_l1 = enable_l1
        self.enable_l2 = enable_l2 and clip_model is not None
        self.l1_threshold = float(l1_threshold)
        self.l2_image_threshold = float(l2_image_threshold)
        self.l2_prompt_threshold = float(l2_prompt_threshold)
        self.l2_prompt_encoder = l2_prompt_encoder
        self.ttl = ttl
        self.max_entries = max_entries
        self.strict = strict
        self.store_prompts = store_prompts
        self.max_image_pixels = max_image_pixels
        self.max_image_bytes = max_image_bytes
        self.max_prompt_chars = max_prompt_chars
        self.max_response_bytes = max_response_bytes
        self.n_candidates = n_candidates
        self._decode_memo = DecodeMemo()
        self._clock = clock  # wall-clock seconds; injectable so TTL tests need no sleeping

        self._clip_spec = ClipSpec.parse(clip_model, clip_pretrained) if clip_model is not None else None
        self._l2_off_reason: Optional[str] = None if self.enable_l2 else "disabled"
        self._stats = EngineStats()
        self._access: dict[str, float] = {}
        self._access_lock = threading.Lock()
        self._evict_lock = threading.Lock()
        # Verifier between retrieval and reuse (verify.py, docs/verification.md); None = raw cosine only.
        self.verification: Optional[VerificationPolicy] = make_policy(
            verifier, min_precision=verifier_precision, max_false_hit_rate=max_false_hit_rate,
            explore_rate=explore_rate, text_model=text_model, embedding_head=verifier_embedding_head)
        if self.verification is None and self.l1_threshold < 0.95:
            log.warning("verifier is off and l1_threshold=%.2f: raw cosine alone reuses negated and reworded "
                        "questions below 0.95 (see docs/verification.md)", self.l1_threshold)

    # ------------------------------------------------------------------ models
    @property
    def text_embedder(self) -> TextEmbedder:
        return TextEmbedder.shared(self.text_model_name)

    @property
    def clip_embedder(self) -> Optional[ClipEmbedder]:
        """The CLIP model, or None when L2 is off (then ``l2_status`` says why)."""
        if not self.enable_l2 or self._clip_spec is None:
            return None
        emb = ClipEmbedder.shared(self._clip_spec)
        try:
            emb.load()
        except ModelUnavailableError as exc:
            self._disable_l2(str(exc))
            return None
        return emb

    def _disable_l2(self, reason: str) -> None:
        if self.enable_l2:
            self.enable_l2 = False
            self._l2_off_reason = reason
            log.warning(
                "L2 (image+text) tier switched off: %s. L0.5 and L1 keep serving. "
                "Point clip_model at a local open_clip checkpoint (or 'mlc-easyvqa-tiny' for the demo domain).",
                reason,
            )

    @property
    def storage_mode(self) -> str:
        """Where entries live: "memory", "persistent" or "server"."""
        return self.store.mode

    @property
    def l2_status(self) -> str:
        return "on" if self.enable_l2 else f"off ({self._l2_off_reason})"

    # ------------------------------------------------------------------ keying
    def decode_image(self, value: Any, what: str = "image") -> DecodedImage:
        """Decode an image under this engine's limits (memoized by its encoded form).

        Adapters call it to report a bad block by name; the result can be passed back
        in a :class:`CacheRequest` without being decoded again."""
        return self._decode(value, what)

    def _decode(self, value: Any, what: str) -> DecodedImage:
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
        """Validate a request and compute its exact keys (memoized on the request)."""
        if not isinstance(request, CacheRequest):
            raise InvalidRequestError(f"expected a CacheRequest, got {type(request).__name__}")
        kr = request._keyed
        if kr is not None:
            return kr
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
        images_in = request.images
        if images_in is None:
            images_in = []
        if not isinstance(images_in, (list, tuple)):
            images_in = [images_in]
        images = [self._decode(v, f"images[{i}]") for i, v in enumerate(images_in)]
        norm = normalize_text(text)
        if not norm and not images:
            raise InvalidRequestError("empty prompt: no text and no images to key")
        ctx = context_key(request.context or [], lambda v, path: self._decode(v, path))
        digests = [im.digest for im in images]
        images_key = sha256_hex("|".join(digests)) if digests else "none"
        scope_key = sha256_hex(request.scope)[:32]
        ns_key = sha256_hex(request.namespace)[:32]
        entry_id = sha256_hex(json.dumps([KEY_VERSION, scope_key, ns_key, ctx, norm, digests], separators=(",", ":")))
        kr = KeyedRequest(
            request=request,
            text=text,
            norm_text=norm,
            images=images,
            scope_key=scope_key,
            namespace=ns_key,
            context_key=ctx,
            images_key=images_key,
            entry_id=entry_id,
            embeddable=len(text) <= self.max_prompt_chars,
        )
        if request.text_embedding is not None:
            # Normalize in float64: huge finite values would overflow a float32 cast to inf/NaN.
            vec = np.asarray(check_embedding(request.text_embedding, "text_embedding"), dtype=np.float64)
            with np.errstate(over="ignore"):
                n = np.linalg.norm(vec)
            if n == 0 or not np.isfinite(n):
                raise InvalidRequestError("text_embedding is the zero vector or too large to normalize")
            kr.features["text"] = (vec / n).astype(np.float32)
        request._keyed = kr
        return kr

    def _text_vec(self, kr: KeyedRequest) -> np.ndarray:
        v = kr.features.get("text")
        if v is None:
            v = self.text_embedder.embed([kr.text])[0]
            kr.features["text"] = v
        return v

    def _prompt_vec(self, kr: KeyedRequest, clip: ClipEmbedder) -> np.ndarray:
        if self.l2_prompt_encoder == "text":
            return self._text_vec(kr)
        v = kr.features.get("clip_text")
        if v is None:
            v = clip.embed_texts([kr.text])[0]
            kr.features["clip_text"] = v
        return v

    def _image_vecs(self, kr: KeyedRequest, clip: ClipEmbedder) -> np.ndarray:
        v = kr.features.get("clip_images")
        if v is None:
            v = clip.embed_images([im.pil for im in kr.images], [im.digest for im in kr.images])
            kr.features["clip_images"] = v
        return v

    def _l2_applicable(self, kr: KeyedRequest) -> bool:
        return bool(kr.images) and all(not im.is_remote for im in kr.images) and kr.embeddable

    # ------------------------------------------------------------------ lookup
    def lookup(self, request: CacheRequest) -> Optional[Hit]:
        """Return a :class:`Hit` with a reusable response, or None.

        Never raises in the default mode: errors become counted misses.
        """
        t0 = time.perf_counter()
        self._stats.incr("lookups")
        hit: Optional[Hit] = None
        try:
            hit = self._lookup(request)
        except Exception as exc:
            self._stats.incr("misses")
            self._record_latency(t0, None)
            self._fail("lookup", exc)
            return None
        if hit is None:
            self._stats.incr("misses")
        ms = self._record_latency(t0, hit)
        if hit is not None:
            hit.lookup_ms = ms
        return hit

    async def alookup(self, request: CacheRequest) -> Optional[Hit]:
        """Async :meth:`lookup`; model and storage work runs in a worker thread."""
        return await asyncio.to_thread(self.lookup, request)

    def _record_latency(self, t0: float, hit: Optional[Hit]) -> float:
        ms = (time.perf_counter() - t0) * 1000.0
        self._stats.latency("lookup", ms)
        self._stats.latency(f"lookup_{hit.tier}_hit" if hit else "lookup_miss", ms)
        return ms

    def _lookup(self, request: CacheRequest) -> Optional[Hit]:
        kr = self.key(request)
        now = self._clock()
        kr.features.pop("verification", None)  # verdicts of this lookup only
        for tier, enabled, fn in (
            ("L0.5", self.enable_exact, self._lookup_exact),
            ("L1", self.enable_l1 and kr.embeddable and bool(kr.norm_text), self._lookup_l1),
            ("L2", self.enable_l2 and self._l2_applicable(kr), self._lookup_l2),
        ):
            if not enabled:
                self._stats.tier(tier, "skipped")
                continue
            hit = fn(kr, now)
            if hit is not None:
                self._stats.tier(tier, "hit")
                return hit
            refused = any(d.tier == tier and not d.accept for d in kr.features.get("verification", {}).values())
            self._stats.tier(tier, "refused" if refused else "miss")
        return None

    @staticmethod
    def _part(*keys: Any) -> str:
        """Partition key: one metadata value standing for every exact condition of a tier."""
        return sha256_hex("|".join(str(k) for k in keys))[:32]

    def _parts(self, kr: KeyedRequest) -> dict[str, Any]:
        n = len(kr.images)
        base = (kr.scope_key, kr.namespace, kr.context_key)
        return {
            "l1": self._part("l1", *base, kr.images_key),
            "l2_prompt": self._part("l2", *base, n),
            "l2_image": [self._part("l2i", *base, n, i) for i in range(n)],
        }

    def _fetch_entry(self, entry_id: str, now: float) -> "tuple[Any, dict[str, Any]] | str":
        """The stored (response, metadata) of an entry, or why not: "absent", "expired", "corrupt"."""
        return self._fetch_entries([entry_id], now)[entry_id]

    def _fetch_entries(self, entry_ids: Sequence[str], now: float) -> "dict[str, tuple[Any, dict[str, Any]] | str]":
        """:meth:`_fetch_entry` for several entries in one storage call."""
        ids = list(dict.fromkeys(entry_ids))
        res = self.store.call(
            "get", lambda: self.store.collection("exact").get(ids=ids, include=["documents", "metadatas"])
        )
        out: dict[str, Any] = {eid: "absent" for eid in ids}
        gone: list[str] = []
        for eid, doc, meta in zip(res["ids"], res["documents"], res["metadatas"]):
            meta = meta or {}
            if float(meta.get("expires_at", _NO_EXPIRY)) <= now:
                self._stats.incr("expired")
                gone.append(eid)
                out[eid] = "expired"
                continue
            try:
                out[eid] = (json.loads(doc), meta)
            except (TypeError, ValueError):
                log.warning("entry %s has an unreadable response; removing it", eid[:12])
                self._stats.error("corrupt_entry")
                gone.append(eid)
                out[eid] = "corrupt"
        if gone:
            self._delete_ids(gone)
        return out

    def _touch(self, entry_id: str, now: float) -> None:
        """Record a hit's last access (LRU), buffered in memory until flush."""
        with self._access_lock:
            self._access[entry_id] = now

    def _lookup_exact(self, kr: KeyedRequest, now: float) -> Optional[Hit]:
        found = self._fetch_entry(kr.entry_id, now)
        if isinstance(found, str):
            return None
        payload, meta = found
        self._touch(kr.entry_id, now)
        return Hit(payload=payload, tier="L0.5", entry_id=kr.entry_id, matched_text=meta.get("text"))

    # Unfiltered ANN first (cost independent of how many entries other scopes hold),
    # then a wider one, then a query filtered on the partition inside Chroma.
    _SEARCH_STEPS: tuple[tuple[bool, int], ...] = ((False, 16), (False, 256), (True, 256))

    def _neighbours(
        self, tier: str, vec: np.ndarray, part: str, threshold: float, model: str
    ) -> tuple[list[tuple[str, float, dict[str, Any]]], bool]:
        """Entries of partition ``part`` whose similarity is >= ``threshold``, best first.

        Returns (results, complete). An unfiltered top-k whose k-th similarity is below
        the threshold already holds every entry above it, so filtering it in Python is
        exact: a neighbour from another scope or tenant can neither leak (filtered
        out) nor hide a hit. When the top-k is saturated with entries above the
        threshold, the search widens, and finally runs filtered by ``part`` in Chroma.
        ``complete`` is False only if even that returned a full page above threshold.
        """
        dim = int(vec.shape[0])
        emb = [vec.tolist()]
        mine: list[tuple[str, float, dict[str, Any]]] = []
        for filtered, k in self._SEARCH_STEPS:
            where = {"part": part} if filtered else None

            def run(where: Any = where, k: int = k) -> Any:
                # Distances only: Chroma's metadata read costs more than the ANN search
                # (256 rows: 21 vs 2.5 ms, benchmarks/probes.py metadata), needed only above threshold.
                return self.store.collection(tier, dim=dim, model=model).query(
                    query_embeddings=emb, n_results=k, where=where, include=["distances"],
                )

            res = self.store.call(f"query {tier}", run)
            ids = res["ids"][0] if res["ids"] else []
            rows = [(i, float(min(1.0, 1.0 - d))) for i, d in zip(ids, res["distances"][0])]
            saturated = len(rows) >= k and rows[-1][1] >= threshold
            if saturated and not filtered:
                self._stats.incr(f"search_widened_{tier}")
                continue
            above = [r for r in rows if r[1] >= threshold]
            metas = self._metadatas(tier, [i for i, _s in above]) if above else {}
            mine = [(i, s_, metas[i]) for i, s_ in above if i in metas and metas[i].get("part") == part]
            return mine, not saturated
        return mine, False

    def _metadatas(self, tier: str, ids: list[str]) -> dict[str, dict[str, Any]]:
        res = self.store.call(f"get {tier}", lambda: self.store.collection(tier).get(ids=ids, include=["metadatas"]))
        return {i: (m or {}) for i, m in zip(res["ids"], res["metadatas"])}

    def _accept_best(self, cands: Sequence[_Candidate], kr: KeyedRequest, tier: str, now: float) -> Optional[Hit]:
        """The first candidate (best first) whose entry is live and passes verification.
        The best one is fetched alone (usually the hit), the rest 16 per storage call."""
        start, size = 0, 1
        while start < len(cands):
            chunk = cands[start:start + size]
            fetched = self._fetch_entries([c.entry_id for c in chunk], now)
            for cand in chunk:
                hit = self._accept(cand, kr, tier, fetched[cand.entry_id], now)
                if hit is not None:
                    return hit
            start, size = start + size, 16
        return None

    def _accept(self, hit_candidate: _Candidate, kr: KeyedRequest, tier: str,
                found: "tuple[Any, dict[str, Any]] | str", now: float) -> Optional[Hit]:
        if found == "absent":
            # Vector without its response (a crash between writes): drop it.
            self._stats.incr("orphans_removed")
            self._delete_ids([hit_candidate.entry_id])
        if isinstance(found, str):
            return None
        payload, meta = found
        scores, thresholds = hit_candidate.scores, hit_candidate.thresholds
        if self.verification is not None:
            d = self._verify(hit_candidate, kr, tier, payload, meta)
            if not d.accept:
                return None
            if d.verified:
                scores = dict(scores, verifier=d.probability)
                thresholds = dict(thresholds, verifier=d.threshold)
        self._touch(hit_candidate.entry_id, now)
        return Hit(
            payload=payload,
            tier=tier,
            entry_id=hit_candidate.entry_id,
            scores=scores,
            thresholds=thresholds,
            matched_text=meta.get("text"),
        )

    def _verify(self, cand: _Candidate, kr: KeyedRequest, tier: str, payload: Any, meta: dict[str, Any]) -> Decision:
        """The verifier's verdict on a candidate, asked once per entry and lookup."""
        seen: dict[str, Decision] = kr.features.setdefault("verification", {})
        d = seen.get(cand.entry_id)
        if d is None:
            # The cosine is the verifier's signal only when it comes from the sentence model.
            cosine = cand.scores["text"] if tier == "L1" else (
                cand.scores["prompt"] if self.l2_prompt_encoder == "text" else None)
            d = self.verification.decide(  # type: ignore[union-attr]
                kr.request.text, meta.get("text"), cosine,
                entry_id=cand.entry_id, request_key=kr.entry_id,
                stored_answer=meta["answer"] if isinstance(meta.get("answer"), str) else answer_of(payload),
                vectors=self._verifier_vectors(cand, kr, tier) if cosine is not None else None)
            d.tier = tier
            seen[cand.entry_id] = d
        return d

    def _verifier_vectors(self, cand: _Candidate, kr: KeyedRequest, tier: str) -> Optional[tuple[np.ndarray, np.ndarray]]:
        """(new, stored) text-model vectors behind the candidate's cosine, for the verifier's
        embedding head (its "vectors" model); None when it has none or the read fails
        (the verifier then judges on texts and cosine only). Not for a caller-supplied
        ``text_embedding``: the head was trained on the verifier's own text model."""
        if not self.verification.wants_vectors or kr.request.text_embedding is not None:  # type: ignore[union-attr]
            return None
        try:
            stored = self._get_vectors("l1" if tier == "L1" else "l2_prompt", [cand.entry_id]).get(cand.entry_id)
        except Exception as exc:  # a failed read only costs the head
            log.debug("stored vector of %s unavailable for the verifier: %s", cand.entry_id[:12], exc)
            return None
        return None if stored is None else (self._text_vec(kr), stored)

    def _lookup_l1(self, kr: KeyedRequest, now: float) -> Optional[Hit]:
        vec = self._text_vec(kr)
        found, _complete = self._neighbours("l1", vec, self._parts(kr)["l1"], self.l1_threshold, self.text_embedder.name)
        cands = [_Candidate(eid, {"text": sim}, {"text": self.l1_threshold}) for eid, sim, _meta in found]
        return self._accept_best(cands, kr, "L1", now)

    def _lookup_l2(self, kr: KeyedRequest, now: float) -> Optional[Hit]:
        clip = self.clip_embedder
        if clip is None:
            return None
        img_vecs = self._image_vecs(kr, clip)
        prompt_vec = self._prompt_vec(kr, clip)
        n = len(kr.images)
        parts = self._parts(kr)
        # A valid candidate passes every image threshold, so the complete set of
        # entries over the threshold for image 0 holds them all. When that set is
        # too large (one picture asked about many times), the prompt side bounds it.
        found, complete = self._neighbours("l2_image", img_vecs[0], parts["l2_image"][0], self.l2_image_threshold, self._clip_name())
        cand_ids = {str(m.get("entry_id")) for _i, _s, m in found}
        if not complete:
            p_found, p_complete = self._neighbours("l2_prompt", prompt_vec, parts["l2_prompt"], self.l2_prompt_threshold, self._prompt_model_name())
            p_ids = {eid for eid, _s, _m in p_found}
            cand_ids = p_ids if p_complete else cand_ids | p_ids
        if not cand_ids:
            return None
        ids = sorted(cand_ids)
        prompt_vecs = self._get_vectors("l2_prompt", ids)
        image_vecs = self._get_vectors("l2_image", [f"{e}#{i}" for e in ids for i in range(n)])
        cands: list[_Candidate] = []
        for eid in ids:
            pv = prompt_vecs.get(eid)
            ivs = [image_vecs.get(f"{eid}#{i}") for i in range(n)]
            if pv is None or any(v is None for v in ivs):
                continue
            img_sim = min(float(np.dot(img_vecs[i], ivs[i])) for i in range(n))  # type: ignore[arg-type]
            p_sim = float(np.dot(prompt_vec, pv))
            if img_sim >= self.l2_image_threshold and p_sim >= self.l2_prompt_threshold:
                cands.append(_Candidate(
                    eid,
                    {"image": min(1.0, img_sim), "prompt": min(1.0, p_sim)},
                    {"image": self.l2_image_threshold, "prompt": self.l2_prompt_threshold},
                ))
        return self._accept_best(sorted(cands, key=lambda c: -c.margin), kr, "L2", now)

    def _get_vectors(self, tier: str, ids: list[str]) -> dict[str, np.ndarray]:
        res = self.store.call(f"get {tier}", lambda: self.store.collection(tier).get(ids=ids, include=["embeddings"]))
        embs = res.get("embeddings")
        if embs is None:
            return {}
        return {i: np.asarray(e, dtype=np.float32) for i, e in zip(res["ids"], embs)}

    def _clip_name(self) -> str:
        return str(self._clip_spec.model if self._clip_spec else "")

    def _prompt_model_name(self) -> str:
        return self.text_embedder.name if self.l2_prompt_encoder == "text" else "clip-text:" + self._clip_name()

    # ------------------------------------------------------------------ update
    def update(self, request: CacheRequest, payload: Any, *, ttl: Optional[float] = None,
               answer: Optional[str] = None) -> Optional[str]:
        """Store ``payload`` (JSON-serializable) as the response to ``request``.

        ``answer`` is the response's text as the user reads it (adapters pass it; by
        default :func:`answer_of` the payload): the verifier's error-bounded mode
        compares answers, never framework payload fields.

        Returns the entry id, or None when the update failed (fail-open mode).
        Writes the response first and the tier vectors last, so a crash in between
        leaves at worst a response without vectors, never a vector without response.
        """
        t0 = time.perf_counter()
        try:
            eid = self._update(request, payload, ttl, answer)
        except Exception as exc:
            self._stats.incr("updates_failed")
            self._fail("update", exc)
            return None
        self._stats.incr("updates")
        self._stats.latency("update", (time.perf_counter() - t0) * 1000.0)
        return eid

    async def aupdate(self, request: CacheRequest, payload: Any, *, ttl: Optional[float] = None,
                      answer: Optional[str] = None) -> Optional[str]:
        """Async :meth:`update`, run in a worker thread."""
        return await asyncio.to_thread(self.update, request, payload, ttl=ttl, answer=answer)

    def _update(self, request: CacheRequest, payload: Any, ttl: Optional[float], answer: Optional[str]) -> str:
        kr = self.key(request)
        try:
            doc = json.dumps(payload, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise PayloadError(f"response payload is not JSON-serializable: {exc}") from exc
        if len(doc.encode("utf-8", "surrogatepass")) > self.max_response_bytes:
            raise PayloadError(f"response is larger than max_response_bytes={self.max_response_bytes}")
        now = self._clock()
        ttl = ttl if ttl is not None else self.ttl
        expires_at = now + ttl if ttl else _NO_EXPIRY
        base = {
            "scope": kr.scope_key,
            "ns": kr.namespace,
            "ctx": kr.context_key,
            "imgs": kr.images_key,
            "n_images": len(kr.images),
            "expires_at": expires_at,
            "v": 1,
        }
        parts = self._parts(kr)
        # Compute every vector before writing anything, so a model failure writes nothing.
        text_vec = self._text_vec(kr) if (self.enable_l1 or (self.enable_l2 and self.l2_prompt_encoder == "text")) and kr.embeddable and kr.norm_text else None
        clip = self.clip_embedder if (self.enable_l2 and self._l2_applicable(kr)) else None
        img_vecs = self._image_vecs(kr, clip) if clip is not None else None
        prompt_vec = self._prompt_vec(kr, clip) if clip is not None else None

        if answer is None:
            answer = answer_of(payload)
        exact_meta = dict(base, created_at=now, last_access=now, answer=str(answer)[:_ANSWER_META_CHARS])
        if self.store_prompts:
            exact_meta["text"] = kr.text[:_TEXT_META_CHARS].encode("utf-8", "replace").decode("utf-8")
        self.store.call("upsert exact", lambda: self.store.collection("exact").upsert(
            ids=[kr.entry_id], embeddings=[ChromaStore.dummy_vector()], documents=[doc], metadatas=[exact_meta]))
        if text_vec is not None and self.enable_l1:
            self.store.call("upsert l1", lambda: self.store.collection("l1", dim=len(text_vec), model=self.text_embedder.name).upsert(
                ids=[kr.entry_id], embeddings=[text_vec.tolist()], metadatas=[dict(base, part=parts["l1"])]))
        if clip is not None and img_vecs is not None and prompt_vec is not None:
            n = len(kr.images)
            self.store.call("upsert l2_image", lambda: self.store.collection("l2_image", dim=int(img_vecs.shape[1]), model=self._clip_name()).upsert(
                ids=[f"{kr.entry_id}#{i}" for i in range(n)],
                embeddings=[v.tolist() for v in img_vecs],
                metadatas=[dict(base, idx=i, entry_id=kr.entry_id, part=parts["l2_image"][i]) for i in range(n)]))
            self.store.call("upsert l2_prompt", lambda: self.store.collection("l2_prompt", dim=len(prompt_vec), model=self._prompt_model_name()).upsert(
                ids=[kr.entry_id], embeddings=[prompt_vec.tolist()], metadatas=[dict(base, part=parts["l2_prompt"])]))
        with self._access_lock:
            self._access[kr.entry_id] = now
        if self.max_entries is not None:
            self._evict_if_needed()
        if self.verification is not None:
            self.verification.observe(kr.entry_id, answer)  # labels refused/explored candidates
        return kr.entry_id

    # ------------------------------------------------------------------ policy
    def _evict_if_needed(self) -> None:
        count = self.store.call("count", lambda: self.store.collection("exact").count())
        if count <= self.max_entries:  # type: ignore[operator]
            return
        with self._evict_lock:
            res = self.store.call("get all", lambda: self.store.collection("exact").get(include=["metadatas"]))
            now = self._clock()
            with self._access_lock:
                access = dict(self._access)
            rows = []
            expired = []
            for eid, meta in zip(res["ids"], res["metadatas"]):
                meta = meta or {}
                if float(meta.get("expires_at", _NO_EXPIRY)) <= now:
                    expired.append(eid)
                    continue
                rows.append((max(float(meta.get("last_access", 0.0)), access.get(eid, 0.0)), eid))
            if expired:
                self._delete_ids(expired)
                self._stats.incr("expired", len(expired))
            target = self.max_entries - (self.max_entries // 20)  # evict in batches of ~5%
            excess = len(rows) - target if len(rows) > self.max_entries else 0  # type: ignore[operator]
            if excess > 0:
                rows.sort()
                victims = [eid for _, eid in rows[:excess]]
                self._delete_ids(victims)
                self._stats.incr("evictions", len(victims))
                with self._access_lock:
                    for v in victims:
                        self._access.pop(v, None)

    def purge_expired(self) -> int:
        """Delete every expired entry now (lookups already ignore them). Returns the count."""
        now = self._clock()
        res = self.store.call("get expired", lambda: self.store.collection("exact").get(
            where={"expires_at": {"$lte": now}}, include=[]))
        ids = list(res["ids"])
        if ids:
            self._delete_ids(ids)
            self._stats.incr("expired", len(ids))
        return len(ids)

    def _delete_ids(self, ids: Sequence[str]) -> None:
        ids = list(ids)
        if not ids:
            return
        # Vectors first, response last: an interrupted delete leaves no orphan vector visible.
        self.store.call("delete l2_image", lambda: self.store.collection("l2_image").delete(where={"entry_id": {"$in": ids}}))
        for tier in ("l2_prompt", "l1", "exact"):
            self.store.call(f"delete {tier}", lambda t=tier: self.store.collection(t).delete(ids=ids))
        if self.verification is not None:
            for eid in ids:
                self.verification.forget_entry(eid)

    def delete(self, entry_id: str) -> bool:
        """Delete one entry (all tiers). Returns True when it existed."""
        res = self.store.call("get", lambda: self.store.collection("exact").get(ids=[entry_id], include=[]))
        existed = bool(res["ids"])
        self._delete_ids([entry_id])
        with self._access_lock:
            self._access.pop(entry_id, None)
        return existed

    def clear(self, scope: Optional[str] = None, namespace: Optional[str] = None) -> None:
        """Delete every entry, or only those of one scope and/or namespace."""
        clauses: list[dict[str, Any]] = []
        if scope is not None:
            clauses.append({"scope": sha256_hex(scope)[:32]})
        if namespace is not None:
            clauses.append({"ns": sha256_hex(namespace)[:32]})
        where: dict[str, Any] = {"v": 1} if not clauses else (clauses[0] if len(clauses) == 1 else {"$and": clauses})
        for tier in ("l2_image", "l2_prompt", "l1", "exact"):
            self.store.call(f"clear {tier}", lambda t=tier: self.store.collection(t).delete(where=where))
        if not clauses:
            with self._access_lock:
                self._access.clear()

    async def aclear(self, scope: Optional[str] = None, namespace: Optional[str] = None) -> None:
        await asyncio.to_thread(self.clear, scope, namespace)

    def flush(self) -> None:
        """Write buffered last-access times to the store (used by LRU eviction across restarts)."""
        with self._access_lock:
            pending = dict(self._access)
        if not pending:
            return
        ids = list(pending)
        res = self.store.call("get", lambda: self.store.collection("exact").get(ids=ids, include=["metadatas"]))
        metas = []
        for eid, meta in zip(res["ids"], res["metadatas"]):
            m = dict(meta or {})
            m["last_access"] = max(float(m.get("last_access", 0.0)), pending[eid])
            metas.append(m)
        if res["ids"]:
            self.store.call("update", lambda: self.store.collection("exact").update(ids=list(res["ids"]), metadatas=metas))

    def close(self) -> None:
        try:
            self.flush()
        except Exception as exc:  # closing never raises in fail-open mode
            self._fail("flush", exc)

    def __enter__(self) -> "MLCEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ stats & errors
    def count(self) -> int:
        """Number of stored entries (responses)."""
        return int(self.store.call("count", lambda: self.store.collection("exact").count()))

    def stats(self) -> dict[str, Any]:
        """Per-tier hits/misses, lookup latency percentiles, errors, entries, configuration."""
        snap = self._stats.snapshot()
        try:
            snap["entries"] = self.count()
        except Exception as exc:
            snap["entries"] = None
            snap["errors"]["stats_count"] = snap["errors"].get("stats_count", 0) + 1
            log.debug("stats: count failed: %s", exc)
        snap["config"] = {
            "storage": self.storage_mode,
            "l1_threshold": self.l1_threshold,
            "l2_image_threshold": self.l2_image_threshold,
            "l2_prompt_threshold": self.l2_prompt_threshold,
            "tiers": {
                "L0.5": "on" if self.enable_exact else "off",
                "L1": "on" if self.enable_l1 else "off",
                "L2": self.l2_status,
            },
            "ttl": self.ttl,
            "max_entries": self.max_entries,
            "strict": self.strict,
        }
        snap["verification"] = self.verification.stats() if self.verification is not None else {"mode": "off"}
        return snap

    def reset_stats(self) -> None:
        self._stats.reset()
        if self.verification is not None:
            self.verification.reset_stats()

    def _fail(self, op: str, exc: BaseException) -> None:
        kind = type(exc).__name__
        self._stats.error(f"{op}:{kind}")
        if self.strict:
            if isinstance(exc, MLCError):
                raise exc
            raise StorageError(f"{op} failed: {kind}: {exc}") from exc
        if isinstance(exc, InvalidRequestError):
            log.info("cache %s skipped for bad input: %s", op, exc)
        else:
            log.warning("cache %s failed (fail-open, the LLM call goes on): %s: %s", op, kind, exc)
