"""The three tiers: how each finds a candidate and decides whether to reuse it.

* :class:`ExactTier` (L0.5): the entry stored under the request's exact key.
* :class:`TextSemanticTier` (L1): same exact keys but the text; the sentence-model cosine
  retrieves candidates, the verifier decides.
* :class:`MultimodalTier` (L2): same scope and context; every image's similarity *and*
  the prompt's similarity must each pass their own threshold, then the image-change
  verifier compares the pictures locally (verify/image_change.py: a changed region
  refuses) and the verifier decides on the texts.

Candidates are examined best first; the first live one the verifier accepts is the hit.
Only a served hit refreshes an entry's LRU access.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import numpy as np

from .embed.encoders import TierEncoders
from .store.entries import EntryStore, Missing, StoredEntry, image_row_id
from .store.eviction import AccessLog
from .images import FINGERPRINT_MODEL
from .keys import KeyedRequest
from .request import Hit, Refusal
from .runtime.stats import EngineStats
from .verify import Decision, VerificationPolicy
from .verify.image_change import ImageChangeVerifier, ImageVerdict

log = logging.getLogger(__name__)

# L1 and the L2 prompt side only *retrieve* candidates for the verifier (verify/),
# which decides reuse: 0.80 reaches 76 % of qqp_val duplicates and every easy-vqa
# paraphrase above 0.80 (raw cosine alone needed 0.95 and still reused negations).
# Reproduce: `python -m evaluation.training.train_verifier train` (table "Retrieval
# floor") and `... train_verifier vqa`; see docs/verification.md. With verifier="off"
# pass l1_threshold=0.95 for the old raw-cosine behaviour.
DEFAULT_L1_THRESHOLD = 0.80
DEFAULT_L2_IMAGE_THRESHOLD = 0.95  # for an image encoder without its own calibrated threshold
DEFAULT_L2_PROMPT_THRESHOLD = 0.80
# The L2 pre-screen: a stored fingerprint this close to a new picture's is needed before the
# image encoder runs. At 0.5 it lost 0 of 517 encoder hits among near-duplicates of 67 real
# pictures and 0 of 178 among consecutive real video frames, and saved the encoder run for
# 97.5 % of pairs of different pictures (`python -m evaluation.studies.prescreen`,
# docs/results/prescreen.md).
DEFAULT_L2_PRESCREEN = 0.5
# Local image comparisons per lookup (best candidates first): ~3 ms each; a candidate
# beyond the budget is refused unexamined (a miss costs a backend call, a wrong reuse more).
MAX_IMAGE_CHECKS = 6
# Rows the L2 image query returns (and reads metadata and descriptors of): the best few only.
L2_QUERY_K = 8
# The L1 pre-screen: a stored static vector (static_text.py) this close to a new text's is
# needed before the sentence model runs; chosen on training pairs so that pairs the sentence
# model puts over DEFAULT_L1_THRESHOLD pass it (`python -m evaluation.studies.text_prescreen`,
# docs/results/text_prescreen.md). None turns it off.
DEFAULT_L1_PRESCREEN: Optional[float] = 0.51
# The pre-screen costs a storage query on every new text and saves an encode only when it
# settles one: where it settled fewer than SCREEN_MIN_SETTLED of the last SCREEN_WINDOW
# texts (one large partition: a chat app's single model and context), it runs on one text
# in SCREEN_RESAMPLE only, to notice when that changes. Skipping it never changes a decision.
SCREEN_WINDOW, SCREEN_MIN_SETTLED, SCREEN_RESAMPLE = 32, 0.3, 4


@dataclass
class Candidate:
    entry_id: str
    scores: dict[str, float]
    thresholds: dict[str, float]

    @property
    def margin(self) -> float:
        return min(self.scores[k] - self.thresholds[k] for k in self.thresholds)


class ExactTier:
    name = "L0.5"

    def __init__(self, entries: EntryStore, access: AccessLog) -> None:
        self.entries = entries
        self.access = access

    def lookup(self, kr: KeyedRequest, now: float) -> Optional[Hit]:
        found = self.entries.fetch([kr.entry_id], now)[kr.entry_id]
        if isinstance(found, str):
            return None
        self.access.touch(kr.entry_id, now)
        return Hit(payload=found.payload, tier=self.name, entry_id=kr.entry_id, matched_text=found.text)


class _SemanticTier:
    """Candidate acceptance shared by L1 and L2: live entry, verifier's verdict, LRU touch."""

    name = ""

    def __init__(self, entries: EntryStore, access: AccessLog, stats: EngineStats, encoders: TierEncoders,
                 verification: Optional[VerificationPolicy]) -> None:
        self.entries = entries
        self.access = access
        self.stats = stats
        self.encoders = encoders
        self.verification = verification

    def _accept_best(self, cands: Sequence[Candidate], kr: KeyedRequest, now: float) -> Optional[Hit]:
        """The first candidate (best first) whose entry is live and passes verification.
        The best one is fetched alone (usually the hit), the rest 16 per storage call."""
        start, size = 0, 1
        while start < len(cands):
            chunk = cands[start:start + size]
            fetched = self.entries.fetch([c.entry_id for c in chunk], now)
            for cand in chunk:
                hit = self._accept(cand, kr, fetched[cand.entry_id], now)
                if hit is not None:
                    return hit
            start, size = start + size, 16
        return None

    def _accept(self, cand: Candidate, kr: KeyedRequest, found: Union[StoredEntry, Missing],
                now: float) -> Optional[Hit]:
        if found == "absent":
            # Vector without its response (a crash between writes): drop it.
            self.stats.incr("orphans_removed")
            self.entries.delete([cand.entry_id])
        if isinstance(found, str):
            return None
        scores, thresholds = cand.scores, cand.thresholds
        img = self._image_check(cand, kr)
        if img is not None:
            if not img.accept:
                kr.scratch.setdefault("refusals", []).append(Refusal(
                    tier=self.name, entry_id=cand.entry_id, matched_text=found.text,
                    scores=dict(scores, **img.scores()), thresholds=dict(thresholds), reason="image",
                    detail=img.detail))
                return None
            scores = dict(scores, **img.scores())
        if self.verification is not None:
            d = self._verify(cand, kr, found)
            if not d.accept:
                kr.scratch.setdefault("refusals", []).append(Refusal(
                    tier=self.name, entry_id=cand.entry_id, matched_text=found.text,
                    scores=dict(scores, verifier=d.probability), thresholds=dict(thresholds, verifier=d.threshold),
                    reason="explored" if d.outcome == "explored" else "verifier",
                    detail=d.detail or f"model {d.model}"))
                return None
            if d.verified:
                scores = dict(scores, verifier=d.probability)
                thresholds = dict(thresholds, verifier=d.threshold)
        self.access.touch(cand.entry_id, now)
        return Hit(payload=found.payload, tier=self.name, entry_id=cand.entry_id, scores=scores,
                   thresholds=thresholds, matched_text=found.text)

    def _cosine(self, cand: Candidate) -> Optional[float]:
        """The candidate's similarity when it is the verifier's signal (the sentence model's cosine)."""
        raise NotImplementedError

    def _image_check(self, cand: Candidate, kr: KeyedRequest) -> Optional[ImageVerdict]:
        """The local image comparison's verdict (None: this tier compares no pictures)."""
        return None

    def _stored_vector_tier(self) -> str:
        raise NotImplementedError

    def _verify(self, cand: Candidate, kr: KeyedRequest, found: StoredEntry) -> Decision:
        """The verifier's verdict on a candidate, asked once per entry and lookup."""
        assert self.verification is not None
        seen: dict[str, Decision] = kr.scratch.setdefault("verification", {})
        d = seen.get(cand.entry_id)
        if d is None:
            cosine = self._cosine(cand)
            d = self.verification.decide(
                kr.request.text, found.text, cosine, entry_id=cand.entry_id, request_key=kr.entry_id,
                stored_answer=found.answer,
                vectors=self._verifier_vectors(cand, kr) if cosine is not None else None)
            d.tier = self.name
            seen[cand.entry_id] = d
        return d

    def _verifier_vectors(self, cand: Candidate, kr: KeyedRequest) -> Optional[tuple[np.ndarray, np.ndarray]]:
        """(new, stored) text-model vectors behind the candidate's cosine, for the verifier's
        embedding head (its "vectors" model); None when it has none or the read fails
        (the verifier then judges on texts and cosine only). Not for a caller-supplied
        ``text_embedding``: the head was trained on the verifier's own text model."""
        assert self.verification is not None
        if not self.verification.wants_vectors or kr.request.text_embedding is not None:
            return None
        try:
            stored = self.entries.vectors(self._stored_vector_tier(), [cand.entry_id]).get(cand.entry_id)
        except Exception as exc:  # a failed read only costs the head
            log.debug("stored vector of %s unavailable for the verifier: %s", cand.entry_id[:12], exc)
            return None
        return None if stored is None else (self.encoders.text_vec(kr), stored)


class TextSemanticTier(_SemanticTier):
    name = "L1"

    def __init__(self, *args: object, threshold: float, prescreen_threshold: Optional[float] = DEFAULT_L1_PRESCREEN,
                 **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.threshold = threshold
        self.prescreen_threshold = prescreen_threshold
        self._store_screened: Optional[bool] = None  # every stored L1 row has a static row
        self._screened: deque[bool] = deque(maxlen=SCREEN_WINDOW)  # recent outcomes: settled or not
        self._passed_over = 0

    def warm(self) -> None:
        """Open this tier's collections and read whether the store is screened now (warm
        start), not on the first call: creating a Chroma collection costs ~15 ms."""
        self.entries.count("exact")
        self.entries.count("l1")
        if self.prescreen_threshold is not None and self.encoders.static_embedder is not None:
            self._store_screened = self.entries.count("l1_static") >= self.entries.count("l1")

    def _prescreened_out(self, kr: KeyedRequest) -> bool:
        """True when no stored text could reach the retrieval floor: no stored static vector
        of the same partition is within the pre-screen threshold of the text's. Then the
        sentence model does not run (its vector for the store is computed by the writer)."""
        if self.prescreen_threshold is None or "text" in kr.features:  # the vector is free: no screen
            return False
        static = self.encoders.static_embedder
        if static is None:
            return False
        if self._store_screened is None:  # entries written before static rows existed
            self._store_screened = self.entries.count("l1_static") >= self.entries.count("l1")
            if not self._store_screened:
                log.info("L1 pre-screen off for this cache: it holds texts stored without static vectors")
        if not self._store_screened:
            return False
        recent = list(self._screened)
        if len(recent) == SCREEN_WINDOW and sum(recent) < SCREEN_MIN_SETTLED * SCREEN_WINDOW:
            self._passed_over += 1
            if self._passed_over % SCREEN_RESAMPLE:
                return False  # it rarely settles here lately: the encode is cheaper than asking
        vec = self.encoders.static_vec(kr)
        near = self.entries.any_within("l1_static", vec, kr.partitions()["l1"],  # type: ignore[arg-type]
                                       self.prescreen_threshold, static.name)
        self._screened.append(not near)
        if near:
            return False
        self.stats.incr("l1_prescreened")
        return True

    def _cosine(self, cand: Candidate) -> Optional[float]:
        return cand.scores["text"]

    def _stored_vector_tier(self) -> str:
        return "l1"

    def lookup(self, kr: KeyedRequest, now: float) -> Optional[Hit]:
        if self._prescreened_out(kr):
            return None
        vec = self.encoders.text_vec(kr)
        found, _complete = self.entries.neighbours("l1", vec, kr.partitions()["l1"], self.threshold,
                                                   self.encoders.text_model)
        cands = [Candidate(eid, {"text": sim}, {"text": self.threshold}) for eid, sim, _meta in found]
        return self._accept_best(cands, kr, now)


class MultimodalTier(_SemanticTier):
    name = "L2"

    def __init__(self, *args: object, image_threshold: float, prompt_threshold: float,
                 prescreen_threshold: Optional[float], image_verifier: object = "default", **kwargs: object) -> None:
        """``image_verifier``: an :class:`ImageChangeVerifier`, ``"default"`` (the shipped
        rule) or None (global thresholds alone decide, as before issue 24)."""
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.image_threshold = image_threshold
        self.prompt_threshold = prompt_threshold
        self.prescreen_threshold = prescreen_threshold
        self.image_verifier: Optional[ImageChangeVerifier] = (
            ImageChangeVerifier() if image_verifier == "default" else image_verifier)  # type: ignore[assignment]
        self._store_fingerprinted: Optional[bool] = None  # every stored image row has a fingerprint

    def _prescreened_out(self, kr: KeyedRequest) -> bool:
        """True when no stored picture could pass the image threshold: no stored fingerprint
        of the same partition is within the pre-screen threshold of the first picture's
        (measured to keep every encoder hit; docs/operations.md). Then no encoder runs."""
        if self.prescreen_threshold is None:
            return False
        if self._store_fingerprinted is None:  # entries written before fingerprints existed
            self._store_fingerprinted = self.entries.count("l2_fprint") >= self.entries.count("l2_image")
            if not self._store_fingerprinted:
                log.info("L2 pre-screen off for this cache: it holds pictures stored without fingerprints")
        if not self._store_fingerprinted:
            return False
        fps = self.encoders.fingerprints(kr)
        # One near fingerprint is enough: the best row alone is read (not every frame of a static scene).
        near, _saturated = self.entries.nearest("l2_fprint", fps[0], kr.partitions()["l2_image"][0],
                                                self.prescreen_threshold, FINGERPRINT_MODEL, 1)
        if near:
            return False
        self.stats.incr("l2_prescreened")
        return True

    def _cosine(self, cand: Candidate) -> Optional[float]:
        return cand.scores["prompt"] if self.encoders.prompt_is_text_model else None

    def _image_check(self, cand: Candidate, kr: KeyedRequest) -> Optional[ImageVerdict]:
        """Compare every picture of the request with the candidate's, locally (once per
        entry and lookup, at most :data:`MAX_IMAGE_CHECKS` entries). The first refusing
        picture refuses; an unreadable stored descriptor is a counted refusal, never an error."""
        if self.image_verifier is None:
            return None
        seen: dict[str, ImageVerdict] = kr.scratch.setdefault("image_verdicts", {})
        v = seen.get(cand.entry_id)
        if v is not None:
            return v
        if len(seen) >= MAX_IMAGE_CHECKS:
            v = ImageVerdict(False, "budget", None, f"not compared: {MAX_IMAGE_CHECKS} candidates were compared already")
        else:
            try:
                news = self.encoders.image_descriptors(kr)
                rows = [image_row_id(cand.entry_id, i) for i in range(len(news))]
                known = kr.scratch.get("l2_docs", {})  # read with the ANN query
                stored = {r: known[r] for r in rows if known.get(r)}
                if len(stored) < len(rows):
                    stored.update(self.entries.image_descriptors([r for r in rows if r not in stored]))
                v = None
                for row, new in zip(rows, news):
                    v = self.image_verifier.verify(stored.get(row), new, self.entries.missing_evidence())
                    if not v.accept:
                        break
                self.stats.incr("l2_image_compared")
            except Exception as exc:  # a corrupt descriptor or a failed read: a counted miss
                log.warning("image comparison with %s failed: %s", cand.entry_id[:12], exc)
                self.stats.error("image_verifier")
                v = ImageVerdict(False, "descriptor", None, f"image comparison failed: {type(exc).__name__}: {exc}")
            if v is None:  # no pictures: nothing to compare
                return None
            if not v.accept:
                self.stats.incr("l2_image_refused")
        seen[cand.entry_id] = v
        return v

    def _stored_vector_tier(self) -> str:
        return "l2_prompt"

    def lookup(self, kr: KeyedRequest, now: float) -> Optional[Hit]:
        if self._prescreened_out(kr):
            return None
        clip = self.encoders.image_tower
        if clip is None:
            return None
        img_vecs = self.encoders.image_vecs(kr, clip)
        prompt_vec = self.encoders.prompt_vec(kr, clip)
        parts = kr.partitions()
        # Only the best few stored pictures are ever examined (MAX_IMAGE_CHECKS local
        # comparisons), so the ANN query asks for L2_QUERY_K rows and reads the metadata
        # and descriptors of those alone -- never of every stored frame over the threshold
        # (a camera watching a static scene: all of them pass a low global threshold).
        found, saturated = self.entries.nearest(
            "l2_image", img_vecs[0], parts["l2_image"][0], self.image_threshold, self.encoders.image_model,
            L2_QUERY_K, documents=self.image_verifier is not None)
        docs = kr.scratch.setdefault("l2_docs", {})
        image0: dict[str, float] = {}
        for rid, sim, meta, doc in found:
            eid = str(meta.get("entry_id") or rid.rpartition("#")[0])
            image0.setdefault(eid, sim)
            if doc is not None:
                docs[rid] = doc or None
        cands = self._candidates(kr, image0, img_vecs, prompt_vec)
        if not cands and saturated:
            # One picture asked about many times: the best pictures' prompts all differ from
            # this one; the prompt side finds the entries about this question instead.
            p_found, _ = self.entries.nearest("l2_prompt", prompt_vec, parts["l2_prompt"], self.prompt_threshold,
                                              self.encoders.prompt_model, L2_QUERY_K)
            ids = [rid for rid, _s, _m, _d in p_found if rid not in image0]
            vecs0 = self.entries.vectors("l2_image", [image_row_id(e, 0) for e in ids])
            extra = {e: float(np.dot(img_vecs[0], vecs0[image_row_id(e, 0)])) for e in ids if image_row_id(e, 0) in vecs0}
            cands = self._candidates(kr, {e: s for e, s in extra.items() if s >= self.image_threshold}, img_vecs,
                                     prompt_vec)
        if self.image_verifier is not None:  # candidates past the comparison budget would be refused unread
            cands = cands[:MAX_IMAGE_CHECKS]
        return self._accept_best(cands, kr, now)

    def _candidates(self, kr: KeyedRequest, image0: dict[str, float], img_vecs: np.ndarray,
                    prompt_vec: np.ndarray) -> list[Candidate]:
        """Entries (with their first picture's similarity) whose every picture and prompt pass
        their thresholds, best margin first: one read of their prompt vectors (and of the
        other pictures' vectors for a request with several)."""
        if not image0:
            return []
        ids = sorted(image0)
        n = len(kr.images)
        prompt_vecs = self.entries.vectors("l2_prompt", ids)
        more = (self.entries.vectors("l2_image", [image_row_id(e, i) for e in ids for i in range(1, n)])
                if n > 1 else {})
        cands: list[Candidate] = []
        for eid in ids:
            pv = prompt_vecs.get(eid)
            ivs = [more.get(image_row_id(eid, i)) for i in range(1, n)]
            if pv is None or any(v is None for v in ivs):
                continue
            img_sim = min([image0[eid]] + [float(np.dot(img_vecs[i], ivs[i - 1])) for i in range(1, n)])  # type: ignore[arg-type]
            p_sim = float(np.dot(prompt_vec, pv))
            if img_sim >= self.image_threshold and p_sim >= self.prompt_threshold:
                cands.append(Candidate(
                    eid,
                    {"image": min(1.0, img_sim), "prompt": min(1.0, p_sim)},
                    {"image": self.image_threshold, "prompt": self.prompt_threshold},
                ))
        cands.sort(key=lambda c: -c.margin)
        return cands
