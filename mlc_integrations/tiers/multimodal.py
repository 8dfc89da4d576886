"""L2: same scope, namespace and context; every picture's similarity *and* the prompt's
similarity must each pass their own threshold, then the image-change verifier compares the
pictures locally (verify/image_change.py: a changed region refuses) and the verifier
decides on the texts. A pixel-fingerprint pre-screen settles pictures no stored one can
match, so no image encoder runs for them."""

from __future__ import annotations

import logging
from typing import Optional

import numpy as np

from ..images import FINGERPRINT_MODEL
from ..keys import KeyedRequest
from ..request import Hit
from ..store.entries import image_row_id
from ..verify.image_change import ImageChangeVerifier, ImageVerdict
from .base import Candidate, Examination, SemanticTier

log = logging.getLogger(__name__)

DEFAULT_L2_IMAGE_THRESHOLD = 0.95  # for an image encoder without its own calibrated threshold
DEFAULT_L2_PROMPT_THRESHOLD = 0.80
# A stored fingerprint this close to a new picture's is needed before the image encoder runs:
# at 0.5 it lost 0 of 517 encoder hits among near-duplicates of 67 real pictures and 0 of 178
# among consecutive video frames, and saved the encoder for 97.5 % of pairs of different
# pictures (`python -m evaluation.studies.prescreen`, docs/results/prescreen.md).
DEFAULT_L2_PRESCREEN = 0.5
# Local comparisons per lookup (best candidates first, ~3 ms each); a candidate beyond the
# budget is refused unexamined (a miss costs a backend call, a wrong reuse more).
MAX_IMAGE_CHECKS = 6
# Rows the image query returns (and reads metadata and descriptors of): the best few only.
L2_QUERY_K = 8


class MultimodalTier(SemanticTier):
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

    def _image_check(self, cand: Candidate, ex: Examination) -> Optional[ImageVerdict]:
        """Compare every picture of the request with the candidate's, locally (once per
        entry and lookup, at most :data:`MAX_IMAGE_CHECKS` entries). The first refusing
        picture refuses; an unreadable stored descriptor is a counted refusal, never an error."""
        if self.image_verifier is None:
            return None
        kr = ex.kr
        seen = ex.image_verdicts
        v = seen.get(cand.entry_id)
        if v is not None:
            return v
        if len(seen) >= MAX_IMAGE_CHECKS:
            v = ImageVerdict(False, "budget", None, f"not compared: {MAX_IMAGE_CHECKS} candidates were compared already")
        else:
            try:
                news = self.encoders.image_descriptors(kr)
                rows = [image_row_id(cand.entry_id, i) for i in range(len(news))]
                known = ex.descriptors  # read with the ANN query
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

    def _examine(self, ex: Examination) -> Optional[Hit]:
        kr = ex.kr
        if self._prescreened_out(kr):
            ex.outcome.note = f"pre-screened: no stored picture within fingerprint cosine {self.prescreen_threshold:.2f}"
            return None
        clip = self.encoders.image_tower
        if clip is None:
            ex.outcome.note = "no image tower"
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
            L2_QUERY_K, documents=False)
        # Descriptors are not read with the query: an examined candidate's come from this
        # process's memory, else one read of that candidate's rows (entries.image_descriptors).
        # Reading them for all L2_QUERY_K rows (~10 kB each) took the demo's VQA median lookup from
        # 65.6 to 107.7 ms (`./dev demo`, same run conditions, persistent cache with evidence at rest).
        docs = ex.descriptors
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
        if not cands:
            ex.outcome.note = (f"no stored picture within image cosine {self.image_threshold:.2f} "
                               f"and prompt cosine {self.prompt_threshold:.2f}")
        if self.image_verifier is not None:  # candidates past the comparison budget would be refused unread
            cands = cands[:MAX_IMAGE_CHECKS]
        return self._accept_best(cands, ex)

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
