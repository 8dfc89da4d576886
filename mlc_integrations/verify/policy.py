"""What the engine asks the verifier: accept or refuse a candidate.

Static mode accepts when the calibrated probability reaches ``min_precision``.
Error-bounded mode (``max_false_hit_rate``) also explores a small fraction of
would-be hits, turns the answers the application stores next into labels (compared
with :func:`exact_answer_match` unless told otherwise), and recalibrates itself
online, per probability band and per cached entry (:mod:`.bands`). See
``docs/verification.md``.
"""

from __future__ import annotations

import logging
import os
import random
import re
import threading
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy as np

from ..errors import ConfigurationError
from ..runtime.lru import LRU
from ..keys import exact_text
from .text.edits import analyse
from .bands import FalseHitEstimates
from .explain import refusal_reason
from .text.judge import ENV_JUDGE, PairJudge, default_judge
from .model import Verifier

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- answers
def normalize_answer(text: str) -> str:
    """Case, Unicode form, whitespace and surrounding punctuation folded."""
    t = unicodedata.normalize("NFKC", text).casefold()
    t = re.sub(r"\s+", " ", t).strip()
    return t.strip(" .!?,;:\"'")


AnswerMatcher = Callable[[str, str], bool]


def exact_answer_match(fresh: str, stored: str) -> bool:
    """Normalized exact match: a conservative label (a reworded but equal answer counts
    as a wrong reuse), which can only make the false-hit estimate pessimistic."""
    return normalize_answer(fresh) == normalize_answer(stored)


# ---------------------------------------------------------------------------- policy
# Default precision asked of the verifier: at 0.80 it refuses every negation and
# changed colour/shape word on easy-vqa's test split and all 300 changed-number qqp_val
# questions, and keeps 47 % of the paraphrases ("full" model, the default; 53 % with the
# opt-in "vectors" model);
# cross-validated precision 0.855 on qqp_val (0.908 class-balanced; 1.000 on easy-vqa)
# with "full" (0.881 / 0.926 with "vectors").
# At 0.90 and above it keeps under 10 % of easy-vqa's same-answer pairs. Reproduce:
#   python -m evaluation.training.train_verifier train   (table "Shipped model")
#   python -m evaluation.training.train_verifier vqa
DEFAULT_MIN_PRECISION = 0.80
DEFAULT_EXPLORE_RATE = 0.05
# The judge's knob: the tolerated share of answer-changing requests that reuse a stored
# answer, mapped to a threshold by the calibration table shipped in the judge file (built
# on held-out validation domains: docs/verification.md).
DEFAULT_MAX_WRONG_REUSE = 0.01


def check_max_wrong_reuse(value: Any) -> float:
    """``max_wrong_reuse`` as a float in (0, 1), else a :class:`ConfigurationError`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise ConfigurationError(f"max_wrong_reuse must be a share between 0 and 1 (e.g. 0.01 for 1 %), "
                                 f"not {value!r}")
    if not (0.0 < float(value) < 1.0):
        raise ConfigurationError(f"max_wrong_reuse={value!r} is outside (0, 1): it is a share "
                                 "(0.01 = at most 1 % of answer-changing requests reuse a stored answer)")
    return float(value)


@dataclass(frozen=True)
class JudgeChoice:
    """A verifier name with the judge's knob (what ``VerifierOptions`` hands the engine
    when ``max_wrong_reuse`` is not the default)."""

    name: Any = "default"
    max_wrong_reuse: float = DEFAULT_MAX_WRONG_REUSE


@dataclass
class Decision:
    """The verifier's verdict on one candidate.

    ``outcome``: ``accepted``; ``refused`` (probability under the threshold, or the
    entry's own labels say it is often wrong); ``explored`` (a would-be hit answered
    as a miss on purpose, to be labelled by the next update); ``unverified`` (no
    model applies: accepted on the raw cosine thresholds).
    """

    accept: bool
    probability: float
    threshold: float
    outcome: str
    model: str = ""
    band: int = -1
    tier: str = ""
    detail: str = ""  # on a refusal: the edit the model saw and its confidence ("swapped: Lyon ↔ Nice (verifier, ...)")

    @property
    def verified(self) -> bool:
        return self.outcome != "unverified"


@dataclass
class _PendingLabel:
    entry_id: str
    band: int
    stored_answer: str
    explored: bool
    at: float = field(default_factory=time.monotonic)


class VerificationPolicy:
    """Accept or refuse candidates; in error-bounded mode, keep checking itself.

    Static mode (default): accept when the calibrated probability reaches the
    threshold the verifier measured for ``min_precision``.

    Error-bounded mode (``max_false_hit_rate=δ``): probabilities are grouped in
    bands; each band's error rate is a posterior mean that starts at the offline
    calibration (worth ``prior_strength`` labels) and moves with online labels.
    The threshold is the lowest band such that an upper confidence bound on the
    false-hit rate of everything accepted (bands weighted by their traffic) stays
    <= δ. Labels come for free from refused candidates (the application calls the
    model and stores the fresh answer, which is compared with the candidate's),
    and from exploration: a fraction ``explore_rate`` of would-be hits whose band
    is not yet individually proven <= δ is answered as a miss on purpose.

    Per neighbourhood (a cached entry, within one band), labels shrink toward the
    band's estimate: an entry whose neighbours were often served wrongly is refused
    even when its band is accepted, and an entry whose own labels prove its
    neighbourhood <= δ (upper bound) is accepted even when its band is not: popular
    entries earn hits where the global threshold alone would refuse them.
    """

    def __init__(
        self,
        verifier: Verifier,
        *,
        min_precision: float = DEFAULT_MIN_PRECISION,
        max_false_hit_rate: Optional[float] = None,
        explore_rate: float = DEFAULT_EXPLORE_RATE,
        prior_strength: float = 20.0,
        entry_prior_strength: float = 5.0,
        confidence_z: float = 1.645,
        answer_match: Union[str, AnswerMatcher] = "exact",
        cosine_matches_verifier: bool = True,
        embedding_head: bool = False,
        max_pending: int = 10_000,
        pending_ttl: float = 3600.0,
        max_entries_tracked: int = 100_000,
        seed: Optional[int] = None,
        judge: Any = None,
        text_embedder: Any = None,
        max_wrong_reuse: float = DEFAULT_MAX_WRONG_REUSE,
    ) -> None:
        if not (0.0 < min_precision < 1.0):
            raise ValueError("min_precision must be in (0, 1)")
        if max_false_hit_rate is not None and not (0.0 < max_false_hit_rate < 1.0):
            raise ValueError("max_false_hit_rate must be in (0, 1) or None")
        if not (0.0 <= explore_rate <= 1.0):
            raise ValueError("explore_rate must be in [0, 1]")
        if answer_match == "exact":
            self._match: AnswerMatcher = exact_answer_match
        elif callable(answer_match):
            self._match = answer_match
        else:
            raise ValueError("answer_match must be 'exact' or a callable(fresh_answer, stored_answer) -> bool")
        self.verifier = verifier
        # The L1 judge (judge.py): a cross-encoder reading both texts, used when both texts
        # are known; the trees decide otherwise (no stored text, or no judge can run here).
        # The "full" judge reads the texts only; the earlier "lora" one also reads the L1
        # cosine (so it needs the engine's text model to be its own).
        # "default": the shipped judge (what make_policy gives the engine); None: trees only.
        self.max_wrong_reuse = check_max_wrong_reuse(max_wrong_reuse)
        j = default_judge() if judge == "default" else judge if isinstance(judge, PairJudge) else None
        if j is not None and j.kind != "full" and not cosine_matches_verifier:
            j = None
        self.judge: Optional[PairJudge] = j
        self.judge_threshold = (None if j is None else j.threshold_for(self.max_wrong_reuse) if j.calibration
                                else j.threshold)
        # The engine's sentence model (an object with ``embed(texts)``, or a function that
        # returns it when first needed): the judge's cosine on the L2 prompt side comes from
        # it, never from a second copy of the model. None: the shipped default model.
        self._text_embedder = text_embedder
        # Opt-in: the "vectors" model raised qqp_val's cross-validated AP (0.802 -> 0.817)
        # but lowered common paraphrases ("capital city of France" / "capital of France":
        # 0.88 -> 0.54; "picture" / "image": 0.89 -> 0.68): it learns Quora's labelling
        # quirks. Default: the texts + cosine ("full") model.
        self.embedding_head = bool(embedding_head)
        self.min_precision = float(min_precision)
        self.max_false_hit_rate = None if max_false_hit_rate is None else float(max_false_hit_rate)
        self.explore_rate = float(explore_rate)
        self.prior_strength = float(prior_strength)
        self.entry_prior_strength = float(entry_prior_strength)
        self.z = float(confidence_z)
        self.cosine_matches_verifier = cosine_matches_verifier
        self.max_pending = max_pending
        self.pending_ttl = pending_ttl
        self.max_entries_tracked = max_entries_tracked
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {k: 0 for k in ("candidates", "accepted", "refused", "explored", "unverified",
                                                     "refused_by_entry", "accepted_by_entry", "labels", "labels_wrong",
                                                     "explored_labels", "explored_wrong", "pending_expired")}
        self._latency: list[float] = []
        self._warned: set[str] = set()
        self._est = FalseHitEstimates(self.max_false_hit_rate, prior_strength=self.prior_strength,
                                      entry_prior_strength=self.entry_prior_strength, z=self.z,
                                      max_entries_tracked=max_entries_tracked)
        # request key -> the candidates it was refused or explored with, awaiting its answer
        self._pending: LRU[str, dict[str, _PendingLabel]] = LRU(max_pending)

    @property
    def error_bounded(self) -> bool:
        return self.max_false_hit_rate is not None

    @property
    def wants_vectors(self) -> bool:
        """True when the verifier has a model that uses the two texts' embeddings and
        the engine's cosine comes from its text model (worth fetching a stored vector)."""
        return self.embedding_head and self.cosine_matches_verifier and self.verifier.head_dim() is not None

    @property
    def mode(self) -> str:
        return "error_bounded" if self.error_bounded else "static"

    # ------------------------------------------------------------- thresholds
    def static_threshold(self, model: str) -> float:
        if model == "judge" and self.judge_threshold is not None:
            return self.judge_threshold  # max_wrong_reuse through the judge's calibration table
        return self.verifier.models[model].threshold_for_precision(self.min_precision)

    @property
    def threshold(self) -> float:
        """The current decision threshold on the probability (full model)."""
        if not self.error_bounded:
            return self.static_threshold("judge" if self.judge is not None else "full")
        with self._lock:
            return self._est.threshold

    # ------------------------------------------------------------- deciding
    def decide(
        self,
        new_text: Optional[Union[str, bytes]],
        stored_text: Optional[str],
        cosine: Optional[float],
        *,
        entry_id: str = "",
        request_key: str = "",
        stored_answer: Optional[str] = None,
        vectors: Optional[tuple[Any, Any]] = None,
    ) -> Decision:
        """Verdict on one candidate (``cosine`` None when it is not the verifier's text
        model's; ``vectors`` the (new, stored) embeddings behind that cosine, if known;
        ``stored_answer`` the candidate's answer text, which error-bounded mode compares
        with the fresh answer the application stores next)."""
        t0 = time.perf_counter()
        if isinstance(new_text, (bytes, bytearray)):
            new_text = bytes(new_text).decode("utf-8", "replace")
        if cosine is not None and not self.cosine_matches_verifier:
            cosine = None
        reads_cosine = self.judge is not None and self.judge.kind != "full"
        if reads_cosine and new_text is not None and stored_text is not None:
            if cosine is None and self.cosine_matches_verifier:
                cosine = self._text_cosine(new_text, stored_text)  # an L2 prompt (CLIP-scored): the judge's input
        if (self.judge is not None and new_text is not None and stored_text is not None
                and (cosine is not None or not reads_cosine)):
            # the same request text (an L2 candidate: a near-identical picture) is not second-guessed
            same = exact_text(new_text) == exact_text(stored_text)
            p, model = (1.0 if same else self.judge.probability(stored=stored_text, new=new_text, cosine=cosine)), "judge"
        else:
            uv = (vectors[1], vectors[0]) if vectors is not None and self.embedding_head else None  # (stored, new)
            p, model = self.verifier.probability(stored=stored_text, new=new_text, cosine=cosine, vectors=uv)
        if not model:
            self._warn_once("unverified", "verifier has no model for candidates without stored text and without "
                            "the cosine of its text model; accepting on the raw thresholds")
            with self._lock:
                self._counts["candidates"] += 1
                self._counts["unverified"] += 1
            return Decision(True, float("nan"), float("nan"), "unverified")
        if stored_text is None:
            self._warn_once("no_text", "prompts are not stored (store_prompts=False): verifying on the calibrated "
                            "cosine only, which needs a much higher similarity for the same precision")
        with self._lock:
            self._counts["candidates"] += 1
            if self.error_bounded:
                d = self._decide_bounded(p, model, entry_id, request_key, stored_answer)
            else:
                thr = self.static_threshold(model)
                d = Decision(p >= thr, p, thr, "accepted" if p >= thr else "refused", model)
            self._counts[d.outcome] += 1
            if len(self._latency) >= 10_000:
                del self._latency[:5000]
            self._latency.append((time.perf_counter() - t0) * 1000.0)
        if not d.accept:
            d.detail = f"model {model}"
            if new_text is not None and stored_text is not None:  # what the user changed, in their words
                d.detail = refusal_reason(stored=stored_text, new=new_text, probability=p, threshold=d.threshold,
                                          who="judge" if model == "judge" else f"verifier, model {model}")
        return d

    def text_embedder(self) -> Any:
        """The sentence model the judge's cosine comes from: the engine's (passed in), else
        the shipped default model."""
        emb = self._text_embedder
        if emb is None:
            from ..embed.models import TextEmbedder

            return TextEmbedder.shared(None)
        return emb if hasattr(emb, "embed") else emb()

    def _text_cosine(self, new_text: str, stored_text: str) -> Optional[float]:
        """The L1 model's cosine of two texts (memoized embeddings), for candidates scored by
        another model (L2's CLIP prompt side); None when it cannot be computed."""
        try:
            u, v = self.text_embedder().embed([new_text, stored_text])
            return float(np.dot(u, v))
        except Exception as exc:  # the judge is skipped, the trees decide
            log.debug("text cosine for the judge unavailable: %s", exc)
            return None

    def _decide_bounded(self, p: float, model: str, entry_id: str, request_key: str,
                        stored_answer: Optional[str]) -> Decision:
        assert self.max_false_hit_rate is not None
        delta = self.max_false_hit_rate
        est = self._est
        bi = est.band_of(p)
        band = est.bands[bi]
        band.traffic += 1
        if band.traffic & (band.traffic - 1) == 0:
            est.recompute()  # traffic shares moved (1st, 2nd, 4th, ... candidate of a band)
        thr = est.threshold
        entry = est.entry_view(entry_id, bi) if entry_id else None
        proven = est.proven(band)
        if bi < est.accept_from:
            # The band is not accepted; a neighbourhood whose own labels prove it <= δ is.
            if entry is None or entry[1] > delta:
                self._add_pending(request_key, entry_id, bi, stored_answer, explored=False)
                return Decision(False, p, thr, "refused", model, bi)
            self._counts["accepted_by_entry"] += 1
            proven = False  # keep checking it
        elif entry is not None and entry[0] > max(delta, est.error(band)):
            # The band is accepted, but this entry's neighbours were often served wrongly.
            self._counts["refused_by_entry"] += 1
            self._add_pending(request_key, entry_id, bi, stored_answer, explored=False)
            return Decision(False, p, thr, "refused", model, bi)
        if not proven and self._rng.random() < self.explore_rate:
            band.explored += 1
            self._add_pending(request_key, entry_id, bi, stored_answer, explored=True)
            return Decision(False, p, thr, "explored", model, bi)
        band.hits += 1
        return Decision(True, p, thr, "accepted", model, bi)

    def _add_pending(self, request_key: str, entry_id: str, band: int, stored_answer: Optional[str],
                     explored: bool) -> None:
        if not request_key or stored_answer is None:
            return
        slot = self._pending.get(request_key)  # (an existing slot becomes the most recent)
        if slot is None:
            slot = {}
            before = len(self._pending)
            self._pending.put(request_key, slot)
            self._counts["pending_expired"] += before + 1 - len(self._pending)  # the oldest, pushed out
        if entry_id not in slot and len(slot) < 4:
            slot[entry_id] = _PendingLabel(entry_id, band, str(stored_answer)[:8192], explored)

    # ------------------------------------------------------------- labels
    def observe(self, request_key: str, fresh_answer: Optional[str]) -> list[bool]:
        """The application stored a fresh answer (its text) for ``request_key``: label the
        candidates this request was refused or explored with. Returns the labels
        (True = reusing the candidate would have been right)."""
        if not self.error_bounded:
            return []
        with self._lock:
            slot = self._pending.pop(request_key)
        if not slot or fresh_answer is None:
            return []
        fresh = str(fresh_answer)
        now = time.monotonic()
        labels = []
        for pend in slot.values():
            if now - pend.at > self.pending_ttl:
                with self._lock:
                    self._counts["pending_expired"] += 1
                continue
            try:
                right = bool(self._match(fresh, pend.stored_answer))
            except Exception as exc:  # a user matcher must not break update()
                log.warning("answer_match failed (%s); label skipped", exc)
                continue
            labels.append(right)
            self.record_label(pend.entry_id, pend.band, right, explored=pend.explored)
        return labels

    def record_label(self, entry_id: str, band: int, right: bool, *, explored: bool = False) -> None:
        """Add one label (used by :meth:`observe`; public for offline replay)."""
        with self._lock:
            self._est.add_label(entry_id, band, right)
            self._counts["labels"] += 1
            self._counts["labels_wrong"] += 0 if right else 1
            if explored:
                self._counts["explored_labels"] += 1
                self._counts["explored_wrong"] += 0 if right else 1

    def forget_entry(self, entry_id: str) -> None:
        """Drop the labels of a deleted entry (the engine calls this on delete and eviction)."""
        with self._lock:
            self._est.forget(entry_id)

    # ------------------------------------------------------------- reporting
    def _warn_once(self, key: str, msg: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg)

    def stats(self) -> dict[str, Any]:
        """Counts, the current threshold, and a false-hit estimate only when labels back it."""
        with self._lock:
            out: dict[str, Any] = {"mode": self.mode, **self._counts}
            lat = list(self._latency)
            out["pending_labels"] = len(self._pending)
            out["latency_ms_per_candidate_p50"] = float(np.median(lat)) if lat else None
            out["decided_by"] = "judge" if self.judge is not None else "trees"
            if self.judge is not None:
                out["judge"] = {"kind": self.judge.kind, "max_wrong_reuse": self.max_wrong_reuse,
                                "threshold": self.judge_threshold, "backend": self.judge.backend or "not loaded yet"}
            if not self.error_bounded:
                out["min_precision"] = self.min_precision
                out["threshold"] = self.static_threshold("judge" if self.judge is not None else "full")
                out["false_hit_rate"] = None
                out["false_hit_rate_note"] = ("not measured online in static mode (set max_false_hit_rate to "
                                              "measure it); offline cross-validated precision at this threshold "
                                              f">= {self.min_precision} on qqp_val and easy-vqa")
                return out
            out["max_false_hit_rate"] = self.max_false_hit_rate
            out["explore_rate"] = self.explore_rate
            e = self._est
            out["threshold"] = e.threshold
            accepted = e.bands[e.accept_from:]
            labelled = sum(b.labels for b in accepted)
            if e.accept_from < len(e.bands) and labelled:
                est, ucb = e.aggregate(e.accept_from)
                out["false_hit_rate"] = {"estimate": est, "upper_bound": ucb, "labels": labelled,
                                         "basis": "online labels in the accepted bands, offline calibration as prior"}
            else:
                out["false_hit_rate"] = None
                out["false_hit_rate_note"] = "no labels yet in the accepted bands: no measured estimate"
            # Hits through neighbourhood evidence: each was accepted only while its own
            # upper bound was <= δ (counted in "accepted_by_entry").
            entries = list(e.entries.items())
            out["neighbourhoods_accepted"] = sum(
                1 for (_eid, bi), rec in entries
                if bi < e.accept_from and (v := e.record_view(rec, bi)) is not None
                and v[1] <= self.max_false_hit_rate)
            out["explored_measured_false_hit_rate"] = (
                self._counts["explored_wrong"] / self._counts["explored_labels"]
                if self._counts["explored_labels"] else None)
            out["bands"] = [
                {"p": [b.lo, min(b.hi, 1.0)], "traffic": b.traffic, "labels": b.labels, "wrong": b.wrong,
                 "hits": b.hits, "explored": b.explored, "error_estimate": e.error(b),
                 "accepted": i >= e.accept_from}
                for i, b in enumerate(e.bands) if b.traffic or b.labels
            ]
            out["entries_with_labels"] = len(entries)
            return out

    def warmup(self, judge: bool = True) -> float:
        """Load the WordNet lexicon now when the models read edit features (seconds; 0 if
        they do not): otherwise the first verified candidate pays ~0.5 s for it. Also loads
        the judge with ``judge`` (its ONNX export is built on first use, once per machine)."""
        if judge and self.judge is not None:
            self.judge.warmup()
        if not any(m.reads_edits for m in self.verifier.models.values()):
            return 0.0
        t0 = time.perf_counter()
        analyse(stored="warm up", new="warm up now")
        return time.perf_counter() - t0

    def reset_stats(self) -> None:
        with self._lock:
            for k in self._counts:
                self._counts[k] = 0
            self._latency.clear()


# The names the engine's ``verifier=`` option accepts (besides a file, a Verifier or a policy).
VERIFIER_NAMES = ("default", "judge", "off", "trees")

# Whether the shipped judge decides by default (L1 and L2's prompt side). Off: the fully
# fine-tuned judge of this round (0.24 epoch on a shared CPU) reused fewer blind natural
# rewordings than the trees at max_wrong_reuse=0.01 (27.1 % vs 29.8 %, 0.2 % vs 1.6 %
# answer-changing); the shipped (lora) judge, calibrated on the same validation split, reuses
# more (37.1 % / 0.5 %) but costs more per candidate (docs/verification.md). Reproduce:
#   python -m evaluation.studies.judge_full_eval report --judge FILE
JUDGE_BY_DEFAULT = False


def make_policy(
    verifier: Any = "default",
    *,
    min_precision: float = DEFAULT_MIN_PRECISION,
    max_false_hit_rate: Optional[float] = None,
    explore_rate: float = DEFAULT_EXPLORE_RATE,
    text_model: Optional[str] = None,
    seed: Optional[int] = None,
    embedding_head: bool = False,
    text_embedder: Any = None,
    max_wrong_reuse: Optional[float] = None,
) -> Optional[VerificationPolicy]:
    """The policy for the engine's ``verifier`` option.

    ``"default"`` the shipped judge where both texts are known (when
    :data:`JUDGE_BY_DEFAULT`), the shipped trees elsewhere and wherever the judge cannot
    run; ``"judge"`` the same, whatever the default; ``"trees"`` the trees alone;
    ``None``/``"off"``/``False`` no verification (raw cosine thresholds, as other semantic
    caches); a path to a verifier JSON; a :class:`Verifier`; a :class:`JudgeChoice` (a name
    with ``max_wrong_reuse``); or a ready :class:`VerificationPolicy` (used as is).
    ``max_wrong_reuse``: the judge's tolerated share of wrong reuse (default 0.01), read
    through its calibration table; the trees keep ``min_precision``.
    ``text_embedder``: the engine's loaded sentence model (or a function returning it), so
    that the verifier never loads a second copy; without it, the named ``text_model``.
    """
    if isinstance(verifier, JudgeChoice):
        if max_wrong_reuse is None:
            max_wrong_reuse = verifier.max_wrong_reuse
        verifier = verifier.name
    knob = check_max_wrong_reuse(DEFAULT_MAX_WRONG_REUSE if max_wrong_reuse is None else max_wrong_reuse)
    if verifier is None or verifier is False or verifier == "off":
        if max_false_hit_rate is not None:
            raise ValueError("max_false_hit_rate needs the verifier (verifier='off' was given)")
        return None
    if isinstance(verifier, VerificationPolicy):
        return verifier
    if verifier is True or verifier in ("default", "judge", "trees"):
        v = Verifier.default()
    elif isinstance(verifier, Verifier):
        v = verifier
    elif isinstance(verifier, (str, Path)):
        if not Path(verifier).is_file():
            raise ConfigurationError(f"verifier={str(verifier)!r} is neither a verifier name nor a verifier JSON file; "
                             f"the names are {', '.join(repr(n) for n in VERIFIER_NAMES)} "
                             "(or pass a path to a verifier JSON, a Verifier or a VerificationPolicy)")
        v = Verifier.load(verifier)
    else:
        raise ValueError("verifier must be 'default', 'judge', 'trees', 'off'/None, a path to a verifier JSON, a "
                         f"Verifier or a VerificationPolicy, not {type(verifier).__name__}")
    from ..embed.models import resolve_text_model

    same_model = resolve_text_model(text_model) == resolve_text_model(v.text_model or None)
    if not same_model:
        log.info("engine text model differs from the verifier's (%s): verifying without the cosine signal",
                 v.text_model)
    # The judge decides where both texts are known: by default (JUDGE_BY_DEFAULT, measured
    # against the trees on held-out natural pairs) or when asked (verifier="judge",
    # MLC_JUDGE=on / a judge file). MLC_JUDGE=off, verifier="trees", a verifier file or a
    # Verifier, and the opt-in embedding head keep the trees.
    env = os.environ.get(ENV_JUDGE, "")
    named_default = verifier is True or verifier == "default"
    wants_judge = (env != "off" and (verifier == "judge" or (named_default and (JUDGE_BY_DEFAULT or env != ""))))
    judge = "default" if wants_judge and not embedding_head else None
    return VerificationPolicy(v, min_precision=min_precision, max_false_hit_rate=max_false_hit_rate,
                              explore_rate=explore_rate, cosine_matches_verifier=same_model, seed=seed,
                              embedding_head=embedding_head, judge=judge, max_wrong_reuse=knob,
                              text_embedder=text_embedder if text_embedder is not None else _named_embedder(text_model))


def _named_embedder(text_model: Optional[str]) -> Callable[[], Any]:
    """The shared instance of the named sentence model, when first needed (the engine's,
    when it serves that model on the default backend)."""
    def get() -> Any:
        from ..embed.models import TextEmbedder

        return TextEmbedder.shared(text_model)

    return get
