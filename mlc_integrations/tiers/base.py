"""What every semantic tier shares: candidates, the outcome a tier returns, and the
acceptance loop (live entry -> the verifier's verdict -> LRU touch; L2 compares pictures first).

A tier returns its :class:`TierOutcome` as a value: the hit, every refused candidate with
its reason, and a note on what stopped it before any candidate (a pre-screen, the best
score under the retrieval floor). Per-lookup evidence (the image comparison of an entry,
the comparison budget left) lives in an :class:`Examination` made for one
tier call; the verifier's decisions are shared across the tiers of one lookup through the
``verdicts`` mapping the engine passes in (an entry judged by L1 is not judged again by L2).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import numpy as np

from ..embed.encoders import TierEncoders
from ..keys import KeyedRequest
from ..request import Hit, Refusal
from ..runtime.stats import EngineStats
from ..store.entries import EntryStore, Missing, StoredEntry
from ..store.eviction import AccessLog
from ..verify import Decision, VerificationPolicy
from ..verify.image_change import ComparisonBudget, ImageVerdict

log = logging.getLogger(__name__)

Verdicts = dict  # entry id -> verify.Decision, for one lookup (shared by its tiers)
# The exact tier and L1 look only at entries stored with the request's very pictures; the
# store's picture census (store/census.py) can say there are none without a storage call.
NO_ENTRY_WITH_THESE_PICTURES = "no stored entry has these pictures"


@dataclass
class Candidate:
    entry_id: str
    scores: dict[str, float]
    thresholds: dict[str, float]

    @property
    def margin(self) -> float:
        return min(self.scores[k] - self.thresholds[k] for k in self.thresholds)


@dataclass
class TierOutcome:
    """What one tier did for one lookup."""

    hit: Optional[Hit] = None
    refusals: list[Refusal] = field(default_factory=list)
    note: str = ""  # why no candidate was examined: "pre-screened: ...", "best cosine 0.62 < floor 0.80"

    @property
    def status(self) -> str:
        return "hit" if self.hit is not None else "refused" if self.refusals else "miss"


@dataclass
class Examination:
    """One tier call's working state: its outcome so far and the evidence it gathered."""

    kr: KeyedRequest
    now: float
    verdicts: Verdicts
    outcome: TierOutcome = field(default_factory=TierOutcome)
    image_verdicts: dict[str, ImageVerdict] = field(default_factory=dict)
    image_budget: Optional[ComparisonBudget] = None  # L2: full image comparisons left for this lookup


class SemanticTier:
    """Candidate acceptance shared by L1 and L2: live entry, verifier's verdict, LRU touch."""

    name = ""

    def __init__(self, entries: EntryStore, access: AccessLog, stats: EngineStats, encoders: TierEncoders,
                 verification: Optional[VerificationPolicy]) -> None:
        self.entries = entries
        self.access = access
        self.stats = stats
        self.encoders = encoders
        self.verification = verification

    def lookup(self, kr: KeyedRequest, now: float, verdicts: Verdicts) -> TierOutcome:
        ex = Examination(kr, now, verdicts)
        ex.outcome.hit = self._examine(ex)
        return ex.outcome

    def _examine(self, ex: Examination) -> Optional[Hit]:
        raise NotImplementedError

    def _accept_best(self, cands: Sequence[Candidate], ex: Examination) -> Optional[Hit]:
        """The first candidate (best first) whose entry is live and passes verification.
        The best one is fetched alone (usually the hit), the rest 16 per storage call."""
        start, size = 0, 1
        while start < len(cands):
            chunk = cands[start:start + size]
            fetched = self.entries.fetch([c.entry_id for c in chunk], ex.now)
            for cand in chunk:
                hit = self._accept(cand, ex, fetched[cand.entry_id])
                if hit is not None:
                    return hit
            start, size = start + size, 16
        return None

    def _accept(self, cand: Candidate, ex: Examination, found: Union[StoredEntry, Missing],
                image: Optional[ImageVerdict] = None) -> Optional[Hit]:
        """The hit, if ``found`` is live and the verifier accepts it (``image``: the local
        image comparison's accepting verdict, whose scores the hit carries)."""
        if found == "absent":
            # Vector without its response (a crash between writes): drop it.
            self.stats.incr("orphans_removed")
            self.entries.delete([cand.entry_id])
        if isinstance(found, str):
            return None
        scores, thresholds = cand.scores, cand.thresholds
        if image is not None:
            scores = dict(scores, **image.scores())
        if self.verification is not None:
            d = self._verify(cand, ex, found)
            if not d.accept:
                ex.outcome.refusals.append(Refusal(
                    tier=self.name, entry_id=cand.entry_id, matched_text=found.text,
                    scores=dict(scores, verifier=d.probability), thresholds=dict(thresholds, verifier=d.threshold),
                    reason="explored" if d.outcome == "explored" else "verifier",
                    detail=d.detail or f"model {d.model}"))
                return None
            if d.verified:
                scores = dict(scores, verifier=d.probability)
                thresholds = dict(thresholds, verifier=d.threshold)
        self.access.touch(cand.entry_id, ex.now)
        return Hit(payload=found.payload, tier=self.name, entry_id=cand.entry_id, scores=scores,
                   thresholds=thresholds, matched_text=found.text)

    def _cosine(self, cand: Candidate) -> Optional[float]:
        """The candidate's similarity when it is the verifier's signal (the sentence model's cosine)."""
        raise NotImplementedError

    def _stored_vector_tier(self) -> str:
        raise NotImplementedError

    def _verify(self, cand: Candidate, ex: Examination, found: StoredEntry) -> Decision:
        """The verifier's verdict on a candidate, asked once per entry and lookup."""
        assert self.verification is not None
        d = ex.verdicts.get(cand.entry_id)
        if d is None:
            cosine = self._cosine(cand)
            d = self.verification.decide(
                ex.kr.request.text, found.text, cosine, entry_id=cand.entry_id, request_key=ex.kr.entry_id,
                stored_answer=found.answer,
                vectors=self._verifier_vectors(cand, ex.kr) if cosine is not None else None)
            d.tier = self.name
            ex.verdicts[cand.entry_id] = d
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
