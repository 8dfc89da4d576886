"""L1: same scope, namespace, context and pictures; the sentence model's cosine retrieves
candidates above a floor chosen for recall, and the verifier decides.

A static-embedding pre-screen (embed/static_text.py) settles new texts no stored text can
reach, so the sentence model does not run on the caller's path for them."""

from __future__ import annotations

import logging
from collections import deque
from typing import Optional

from ..keys import KeyedRequest
from ..request import Hit
from .base import NO_ENTRY_WITH_THESE_PICTURES, Candidate, Examination, SemanticTier

log = logging.getLogger(__name__)

# The retrieval floor: 0.80 reaches 76 % of qqp_val duplicates and every easy-vqa paraphrase
# (`python -m evaluation.training.train_verifier train`, table "Retrieval floor"); the
# verifier decides above it.
DEFAULT_L1_THRESHOLD = 0.80
# A stored static vector this close to a new text's is needed before the sentence model
# runs; chosen so that pairs the sentence model puts over the floor pass it
# (`python -m evaluation.studies.text_prescreen`, docs/results/text_prescreen.md). None: off.
DEFAULT_L1_PRESCREEN: Optional[float] = 0.51
# The screen costs a storage query per new text and saves an encode only when it settles
# one: where it settled fewer than SCREEN_MIN_SETTLED of the last SCREEN_WINDOW texts, it
# runs on one text in SCREEN_RESAMPLE only. Skipping it never changes a decision.
SCREEN_WINDOW, SCREEN_MIN_SETTLED, SCREEN_RESAMPLE = 32, 0.3, 4


class TextSemanticTier(SemanticTier):
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

    def _examine(self, ex: Examination) -> Optional[Hit]:
        kr = ex.kr
        if kr.images and not self.entries.census.may_hold(kr.images_key):
            ex.outcome.note = NO_ENTRY_WITH_THESE_PICTURES
            return None
        if self._prescreened_out(kr):
            ex.outcome.note = f"pre-screened: no stored text within static cosine {self.prescreen_threshold:.2f}"
            return None
        vec = self.encoders.text_vec(kr)
        below: list[float] = []
        found, _complete = self.entries.neighbours("l1", vec, kr.partitions()["l1"], self.threshold,
                                                   self.encoders.text_model, best_below=below)
        if not found:
            ex.outcome.note = (f"best cosine {below[0]:.2f} < floor {self.threshold:.2f}" if below
                               else "no stored text in this scope and context")
        cands = [Candidate(eid, {"text": sim}, {"text": self.threshold}) for eid, sim, _meta in found]
        return self._accept_best(cands, ex)
