"""The three tiers: how each finds a candidate and decides whether to reuse it.

* :class:`ExactTier` (L0.5): the entry stored under the request's exact key.
* :class:`TextSemanticTier` (L1): same exact keys but the text; the sentence-model cosine
  retrieves candidates, the verifier decides.
* :class:`MultimodalTier` (L2): same scope and context; every image's similarity *and*
  the prompt's similarity must each pass their own threshold, then the verifier decides.

Candidates are examined best first; the first live one the verifier accepts is the hit.
Only a served hit refreshes an entry's LRU access.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import numpy as np

from .encoders import TierEncoders
from .entries import EntryStore, Missing, StoredEntry, image_row_id
from .eviction import AccessLog
from .images import FINGERPRINT_MODEL
from .keys import KeyedRequest
from .request import Hit, Refusal
from .stats import EngineStats
from .verify import Decision, VerificationPolicy

log = logging.getLogger(__name__)

# L1 and the L2 prompt side only *retrieve* candidates for the verifier (verify/),
# which decides reuse: 0.80 reaches 76 % of qqp_val duplicates and every easy-vqa
# paraphrase above 0.80 (raw cosine alone needed 0.95 and still reused negations).
# Reproduce: `python -m evaluation.train_verifier train` (table "Retrieval
# floor") and `... train_verifier vqa`; see docs/verification.md. With verifier="off"
# pass l1_threshold=0.95 for the old raw-cosine behaviour.
DEFAULT_L1_THRESHOLD = 0.80
DEFAULT_L2_IMAGE_THRESHOLD = 0.95  # for an image encoder without its own calibrated threshold
DEFAULT_L2_PROMPT_THRESHOLD = 0.80
# The L2 pre-screen: a stored fingerprint this close to a new picture's is needed before the
# image encoder runs. At 0.5 it lost 0 of 517 encoder hits among near-duplicates of 67 real
# pictures and 0 of 178 among consecutive real video frames, and saved the encoder run for
# 97.5 % of pairs of different pictures (`python -m evaluation.prescreen`,
# docs/results/prescreen.md).
DEFAULT_L2_PRESCREEN = 0.5
# The L1 pre-screen: a stored static vector (static_text.py) this close to a new text's is
# needed before the sentence model runs; chosen on training pairs so that pairs the sentence
# model puts over DEFAULT_L1_THRESHOLD pass it (`python -m evaluation.text_prescreen`,
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
                 prescreen_threshold: Optional[float], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.image_threshold = image_threshold
        self.prompt_threshold = prompt_threshold
        self.prescreen_threshold = prescreen_threshold
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
        near, _complete = self.entries.neighbours("l2_fprint", fps[0], kr.partitions()["l2_image"][0],
                                                  self.prescreen_threshold, FINGERPRINT_MODEL)
        if near:
            return False
        self.stats.incr("l2_prescreened")
        return True

    def _cosine(self, cand: Candidate) -> Optional[float]:
        return cand.scores["prompt"] if self.encoders.prompt_is_text_model else None

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
        n = len(kr.images)
        parts = kr.partitions()
        # A valid candidate passes every image threshold, so the complete set of entries
        # over the threshold for image 0 holds them all. When that set is too large (one
        # picture asked about many times), the prompt side bounds it.
        found, complete = self.entries.neighbours("l2_image", img_vecs[0], parts["l2_image"][0],
                                                  self.image_threshold, self.encoders.image_model)
        cand_ids = {str(m.get("entry_id")) for _i, _s, m in found}
        if not complete:
            p_found, p_complete = self.entries.neighbours("l2_prompt", prompt_vec, parts["l2_prompt"],
                                                          self.prompt_threshold, self.encoders.prompt_model)
            p_ids = {eid for eid, _s, _m in p_found}
            cand_ids = p_ids if p_complete else cand_ids | p_ids
        if not cand_ids:
            return None
        ids = sorted(cand_ids)
        prompt_vecs = self.entries.vectors("l2_prompt", ids)
        image_vecs = self.entries.vectors("l2_image", [image_row_id(e, i) for e in ids for i in range(n)])
        cands: list[Candidate] = []
        for eid in ids:
            pv = prompt_vecs.get(eid)
            ivs = [image_vecs.get(image_row_id(eid, i)) for i in range(n)]
            if pv is None or any(v is None for v in ivs):
                continue
            img_sim = min(float(np.dot(img_vecs[i], ivs[i])) for i in range(n))  # type: ignore[arg-type]
            p_sim = float(np.dot(prompt_vec, pv))
            if img_sim >= self.image_threshold and p_sim >= self.prompt_threshold:
                cands.append(Candidate(
                    eid,
                    {"image": min(1.0, img_sim), "prompt": min(1.0, p_sim)},
                    {"image": self.image_threshold, "prompt": self.prompt_threshold},
                ))
        return self._accept_best(sorted(cands, key=lambda c: -c.margin), kr, now)
