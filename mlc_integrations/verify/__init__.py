"""Verification: is a retrieved neighbour's answer the answer to the new request?

A cosine threshold alone cannot separate paraphrases from requests whose answer
differs ("is there a cat?" / "is there no cat?" are closer than many true
paraphrases). This package sits between candidate retrieval and reuse:

* :mod:`.signals` -- cheap deterministic signals of a (new text, stored text) pair
  (:func:`extract_signals`) and :func:`pair_features` of their embeddings: the one
  definition of what the models read, at training and at run time.
* :mod:`.model` -- :class:`Verifier`, a small calibrated model read from plain JSON
  (``assets/verifier.json``) and evaluated with numpy only. It outputs the
  probability that reusing the stored answer is correct.
* :mod:`.policy` -- :class:`VerificationPolicy`, what the engine asks: accept or
  refuse a candidate; in error-bounded mode it also labels its own refusals and
  explorations with the answers stored next, and recalibrates online (:mod:`.bands`).

See ``docs/verification.md``.
"""

from __future__ import annotations

from .bands import BAND_EDGES
from .model import (
    DEFAULT_VERIFIER_PATH,
    VERIFIER_FORMAT,
    VERIFIER_FORMAT_VERSION,
    Verifier,
    VerifierFormatError,
    VerifierModel,
)
from .policy import (
    DEFAULT_EXPLORE_RATE,
    DEFAULT_MIN_PRECISION,
    AnswerMatcher,
    Decision,
    VerificationPolicy,
    exact_answer_match,
    make_policy,
    normalize_answer,
)
from .text.signals import (
    FEATURE_NAMES,
    SIGNAL_NAMES,
    TEXT_FEATURE_NAMES,
    VECTOR_SIGNAL_NAMES,
    TextProfile,
    WordWeights,
    extract_signals,
    pair_features,
    profile,
    signals_from_profiles,
    text_features,
)

__all__ = [
    "AnswerMatcher",
    "BAND_EDGES",
    "DEFAULT_EXPLORE_RATE",
    "DEFAULT_MIN_PRECISION",
    "DEFAULT_VERIFIER_PATH",
    "Decision",
    "FEATURE_NAMES",
    "SIGNAL_NAMES",
    "TEXT_FEATURE_NAMES",
    "TextProfile",
    "VECTOR_SIGNAL_NAMES",
    "VERIFIER_FORMAT",
    "VERIFIER_FORMAT_VERSION",
    "VerificationPolicy",
    "Verifier",
    "VerifierFormatError",
    "VerifierModel",
    "WordWeights",
    "exact_answer_match",
    "extract_signals",
    "make_policy",
    "normalize_answer",
    "pair_features",
    "profile",
    "signals_from_profiles",
    "text_features",
]
