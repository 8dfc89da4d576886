"""The three tiers, cheapest first; each returns a :class:`TierOutcome`.

* :class:`ExactTier` (L0.5): the entry stored under the request's exact key.
* :class:`TextSemanticTier` (L1): same exact keys but the text; the sentence model's cosine
  retrieves candidates, the verifier decides.
* :class:`MultimodalTier` (L2): same scope and context; a near stored picture (by pixel
  fingerprint first, by the image encoder when that cannot settle it) and a near prompt,
  the pictures compared locally, the verifier deciding on the texts.

Candidates are examined best first; the first live one the judges accept is the hit.
Only a served hit refreshes an entry's LRU access.
"""

from .base import Candidate, Examination, SemanticTier, TierOutcome
from .exact import ExactTier
from .multimodal import (DEFAULT_L2_IMAGE_THRESHOLD, DEFAULT_L2_PRESCREEN, DEFAULT_L2_PROMPT_THRESHOLD, L2_QUERY_K,
                         MultimodalTier)
from .text import (DEFAULT_L1_PRESCREEN, DEFAULT_L1_THRESHOLD, SCREEN_MIN_SETTLED, SCREEN_RESAMPLE, SCREEN_WINDOW,
                   TextSemanticTier)

__all__ = ["Candidate", "Examination", "SemanticTier", "TierOutcome", "ExactTier", "TextSemanticTier", "MultimodalTier",
           "DEFAULT_L1_THRESHOLD", "DEFAULT_L1_PRESCREEN", "DEFAULT_L2_IMAGE_THRESHOLD", "DEFAULT_L2_PROMPT_THRESHOLD",
           "DEFAULT_L2_PRESCREEN", "L2_QUERY_K", "SCREEN_WINDOW", "SCREEN_MIN_SETTLED",
           "SCREEN_RESAMPLE"]
