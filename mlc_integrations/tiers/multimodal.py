"""L2: same scope, namespace and context; a stored picture near the new one and a prompt
near the new one, then the image-change verifier compares the pictures locally
(verify/image_change/: a changed region refuses) and the verifier decides on the texts.

Near stored pictures are found two ways, the cheap one first:

1. **By pixel fingerprint** (images.fingerprint, 16 x 16 grey, no model): the stored
   pictures whose fingerprint cosine reaches ``prescreen_threshold``, best first. A near
   copy -- re-encoded, resized, the next frame of a camera -- is found and decided here by
   the local comparison alone, and no image encoder runs. When fewer than ``L2_QUERY_K``
   stored pictures are that near, they are every stored picture that could match (the
   threshold keeps every near duplicate the encoder finds: docs/results/prescreen.md), so a
   refusal of all of them is a miss without the encoder too; none at all is the pre-screen.
   When the neighbours are too many to read (one picture asked about many times, a camera
   watching one scene), the stored entries with a near prompt are read instead and their
   fingerprints checked: when *they* are fewer than ``L2_QUERY_K``, the lookup is settled.
2. **By the image encoder's embedding** (cosine >= ``image_threshold``), only when neither
   side could be read whole and none of the best was reused.

Each lookup spends at most one comparison budget (``ImageChangeVerifier.budget()``: full
comparisons; an early refusal costs none) and compares a candidate's pictures before it
reads the candidate's entry."""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import numpy as np

from ..images import FINGERPRINT_MODEL
from ..keys import KeyedRequest
from ..request import Hit, Refusal
from ..store.entries import image_row_id
from ..store.schema import ENTRY_ID
from ..verify.image_change import ImageChangeVerifier, ImageVerdict
from .base import Candidate, Examination, SemanticTier

log = logging.getLogger(__name__)

DEFAULT_L2_IMAGE_THRESHOLD = 0.95  # for an image encoder without its own calibrated threshold
DEFAULT_L2_PROMPT_THRESHOLD = 0.80
# The fingerprint floor: a stored picture this close is a candidate, and one is needed before
# the image encoder runs: at 0.5 it lost 0 of 517 encoder hits among near-duplicates of 67
# real pictures and 0 of 178 among consecutive video frames, and saved the encoder for 97.5 %
# of pairs of different pictures (`python -m evaluation.studies.prescreen`,
# docs/results/prescreen.md).
DEFAULT_L2_PRESCREEN = 0.5
# Rows each image query returns (and reads the metadata of): the best few only.
L2_QUERY_K = 8


class MultimodalTier(SemanticTier):
    name = "L2"

    def __init__(self, *args: object, image_threshold: float, prompt_threshold: float,
                 prescreen_threshold: Optional[float], image_verifier: object = "default", **kwargs: object) -> None:
        """``image_verifier``: an :class:`ImageChangeVerifier`, ``"default"`` (the shipped
        rule) or None (the global thresholds alone decide: every lookup runs the encoder).
        ``prescreen_threshold``: the fingerprint floor (None: no fingerprint stage)."""
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.image_threshold = image_threshold
        self.prompt_threshold = prompt_threshold
        self.prescreen_threshold = prescreen_threshold
        self.image_verifier: Optional[ImageChangeVerifier] = (
            ImageChangeVerifier() if image_verifier == "default" else image_verifier)  # type: ignore[assignment]
        self._store_fingerprinted: Optional[bool] = None  # every stored image row has a fingerprint

    def _fingerprint_neighbours(self, kr: KeyedRequest) -> Optional[tuple[list[tuple[str, float]], bool]]:
        """(entry id, fingerprint cosine) of the stored pictures at or above the floor nearest
        the request's first picture, best first, and whether more may exist (the query was
        full). None when fingerprints cannot answer (no floor, or pictures stored without
        fingerprints). Without an image verifier only the best row is read: it only decides
        whether the encoder runs."""
        if self.prescreen_threshold is None:
            return None
        if self._store_fingerprinted is None:  # entries written before fingerprints existed
            self._store_fingerprinted = self.entries.count("l2_fprint") >= self.entries.count("l2_image")
            if not self._store_fingerprinted:
                log.info("L2 fingerprint stage off for this cache: it holds pictures stored without fingerprints")
        if not self._store_fingerprinted:
            return None
        fps = self.encoders.fingerprints(kr)
        k = L2_QUERY_K if self.image_verifier is not None else 1
        rows, saturated = self.entries.nearest("l2_fprint", fps[0], kr.partitions()["l2_image"][0],
                                               self.prescreen_threshold, FINGERPRINT_MODEL, k)
        best: dict[str, float] = {}
        for rid, sim, meta, _doc in rows:
            best.setdefault(str(meta.get(ENTRY_ID) or rid.rpartition("#")[0]), sim)
        return sorted(best.items(), key=lambda e: -e[1]), saturated

    def _cosine(self, cand: Candidate) -> Optional[float]:
        return cand.scores["prompt"] if self.encoders.prompt_is_text_model else None

    def _stored_vector_tier(self) -> str:
        return "l2_prompt"

    def _image_check(self, cand: Candidate, ex: Examination) -> Optional[ImageVerdict]:
        """Compare every picture of the request with the candidate's, locally, once per entry
        and lookup, from the lookup's comparison budget. The first refusing picture refuses;
        an unreadable stored descriptor is a counted refusal, never an error. None: no
        verifier, or no pictures to compare."""
        assert self.image_verifier is not None
        seen = ex.image_verdicts
        v = seen.get(cand.entry_id)
        if v is not None:
            return v
        budget = ex.image_budget
        if budget is not None and budget.used >= budget.limit:
            # Only a refusal is left (early or for want of budget): the stored evidence is not read.
            v = ImageVerdict(False, "budget", None,
                             f"not compared: {budget.limit} pictures were compared in this lookup already")
        else:
            try:
                news = self.encoders.image_descriptors(ex.kr)
                rows = [image_row_id(cand.entry_id, i) for i in range(len(news))]
                stored = self.entries.image_descriptors(rows)
                v = None
                for row, new in zip(rows, news):
                    v = self.image_verifier.verify(stored.get(row), new, self.entries.missing_evidence(), budget=budget)
                    if not v.accept:
                        break
                if v is not None and v.reason != "budget":
                    self.stats.incr("l2_image_compared")
            except Exception as exc:  # a corrupt descriptor or a failed read: a counted miss
                log.warning("image comparison with %s failed: %s", cand.entry_id[:12], exc)
                self.stats.error("image_verifier")
                v = ImageVerdict(False, "descriptor", None, f"image comparison failed: {type(exc).__name__}: {exc}")
            if v is None:
                return None
        if not v.accept:
            self.stats.incr("l2_image_refused")
        seen[cand.entry_id] = v
        return v

    def _accept_best(self, cands: Sequence[Candidate], ex: Examination) -> Optional[Hit]:
        """Best first: the candidate's pictures are compared before its entry is read, and
        the first candidate whose pictures pass and whose entry the verifier accepts is the
        hit (no comparison after it)."""
        if self.image_verifier is None:
            return super()._accept_best(cands, ex)
        for cand in cands:
            if cand.entry_id in ex.image_verdicts:  # examined by the other retrieval of this lookup
                continue
            judged = ex.verdicts.get(cand.entry_id)
            if judged is not None and not judged.accept:  # L1 refused its text in this lookup: so would L2
                continue
            v = self._image_check(cand, ex)
            if v is not None and not v.accept:
                ex.outcome.refusals.append(Refusal(
                    tier=self.name, entry_id=cand.entry_id, scores=dict(cand.scores, **v.scores()),
                    thresholds=dict(cand.thresholds), reason="image", detail=v.detail))
                continue
            found = self.entries.fetch([cand.entry_id], ex.now)[cand.entry_id]
            hit = self._accept(cand, ex, found, image=v)
            if hit is not None:
                return hit
        return None

    def _examine(self, ex: Examination) -> Optional[Hit]:
        kr = ex.kr
        near = self._fingerprint_neighbours(kr)
        if near is not None and not near[0]:
            self.stats.incr("l2_prescreened")
            ex.outcome.note = f"pre-screened: no stored picture within fingerprint cosine {self.prescreen_threshold:.2f}"
            return None
        clip = self.encoders.image_tower
        if clip is None:
            ex.outcome.note = "no image tower"
            return None
        prompt_vec = self.encoders.prompt_vec(kr, clip)
        if self.image_verifier is not None:
            ex.image_budget = self.image_verifier.budget()
        if near is not None and self.image_verifier is not None:
            hit, settled = self._fingerprint_stage(ex, near, prompt_vec)
            if settled:
                self.stats.incr("l2_fingerprint_decided")
                return hit
        return self._encoder_stage(ex, clip, prompt_vec)

    def _fingerprint_stage(self, ex: Examination, near: tuple[list[tuple[str, float]], bool],
                           prompt_vec: np.ndarray) -> tuple[Optional[Hit], bool]:
        """The hit among the stored pictures near by fingerprint, and whether that settles the
        lookup: a hit, or every entry that could match was examined -- all fingerprint
        neighbours when they were fewer than a query reads, else all entries with a near
        prompt when *those* were (one picture asked about many times: its entries crowd the
        fingerprint query; the prompt side names the few about this question)."""
        kr, budget = ex.kr, ex.image_budget
        assert budget is not None and self.prescreen_threshold is not None
        rows, crowded = near
        cands = self._fingerprint_candidates(kr, rows, prompt_vec)
        hit = self._accept_best(cands, ex)
        if hit is not None or not crowded:
            if hit is None:
                ex.outcome.note = (
                    f"every stored picture within fingerprint cosine {self.prescreen_threshold:.2f} was examined"
                    if cands else f"no stored picture within fingerprint cosine {self.prescreen_threshold:.2f} "
                                  f"and prompt cosine {self.prompt_threshold:.2f}")
            return hit, True
        if budget.used >= budget.limit:
            ex.outcome.note = "comparison budget spent on the fingerprint neighbours"
            return None, True
        p_found, p_crowded = self.entries.nearest("l2_prompt", prompt_vec, kr.partitions()["l2_prompt"],
                                                  self.prompt_threshold, self.encoders.prompt_model, L2_QUERY_K)
        seen = {eid for eid, _fp in rows}
        ids = [rid for rid, _s, _m, _d in p_found if rid not in seen]
        fps = self.entries.vectors("l2_fprint", [image_row_id(e, 0) for e in ids]) if ids else {}
        mine = self.encoders.fingerprints(kr)[0]
        more = sorted(((e, float(np.dot(mine, fps[image_row_id(e, 0)]))) for e in ids if image_row_id(e, 0) in fps),
                      key=lambda x: -x[1])
        more = [(e, fp) for e, fp in more if fp >= self.prescreen_threshold]
        p_sims = {rid: sim for rid, sim, _m, _d in p_found}
        hit = self._accept_best(self._fingerprint_candidates(kr, more, prompt_vec, p_sims), ex)
        if hit is None and not p_crowded:
            ex.outcome.note = (f"every stored entry within prompt cosine {self.prompt_threshold:.2f} and fingerprint "
                               f"cosine {self.prescreen_threshold:.2f} was examined")
        return hit, hit is not None or not p_crowded

    def _fingerprint_candidates(self, kr: KeyedRequest, near: list[tuple[str, float]], prompt_vec: np.ndarray,
                                prompt_sims: Optional[dict[str, float]] = None) -> list[Candidate]:
        """The fingerprint neighbours whose prompt passes (``prompt_sims`` when known, else
        one read of their prompt vectors), nearest picture first; the local comparison
        decides on every picture."""
        if not near:
            return []
        if prompt_sims is None:
            prompt_vecs = self.entries.vectors("l2_prompt", [eid for eid, _s in near])
            prompt_sims = {e: float(np.dot(prompt_vec, v)) for e, v in prompt_vecs.items()}
        cands = []
        for eid, fp in near:
            p_sim = prompt_sims.get(eid, -1.0)
            if p_sim >= self.prompt_threshold:
                cands.append(Candidate(eid, {"fingerprint": min(1.0, fp), "prompt": min(1.0, p_sim)},
                                       {"fingerprint": float(self.prescreen_threshold),  # type: ignore[arg-type]
                                        "prompt": self.prompt_threshold}))
        return cands

    def _encoder_stage(self, ex: Examination, clip: object, prompt_vec: np.ndarray) -> Optional[Hit]:
        """Candidates by the image encoder's embedding (cosine >= ``image_threshold``)."""
        kr = ex.kr
        img_vecs = self.encoders.image_vecs(kr, clip)  # type: ignore[arg-type]
        parts = kr.partitions()
        # The ANN query asks for L2_QUERY_K rows and reads the metadata of those alone --
        # never of every stored frame over the threshold (a camera watching a static scene:
        # all of them pass a low global threshold). Descriptors are read only for a candidate
        # that is compared (memory first): reading them for all L2_QUERY_K rows (~10 kB each)
        # took the demo's VQA median lookup from 65.6 to 107.7 ms.
        found, saturated = self.entries.nearest(
            "l2_image", img_vecs[0], parts["l2_image"][0], self.image_threshold, self.encoders.image_model,
            L2_QUERY_K, documents=False)
        image0: dict[str, float] = {}
        for rid, sim, meta, _doc in found:
            image0.setdefault(str(meta.get(ENTRY_ID) or rid.rpartition("#")[0]), sim)
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
