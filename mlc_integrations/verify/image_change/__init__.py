"""Image-change verification for L2: do two globally similar pictures show the same content?

A global embedding retrieves the stored picture; it is trained to ignore exactly the
changes that change answers (an object pasted, moved, removed or recoloured). This
package compares the two pictures *locally*, after aligning them, one module per job:

* :mod:`.descriptor` -- what is kept of a picture (a 96-pixel grey thumbnail and a
  24-pixel opponent-colour map, stored with the entry), computed once per picture;
* :mod:`.histograms` -- the early refusal: what the two pictures' histograms prove
  must differ before any alignment;
* :mod:`.alignment` -- phase correlation at a few scales and small rotations;
* :mod:`.change_map` -- the new picture warped onto the stored one, matched in
  brightness and colour, and what still differs, where;
* :mod:`.rule` -- the calibrated decision (``assets/image_change.json``, chosen on
  labelled pairs of real pictures and drifting / re-shot frames:
  ``python -m evaluation.training.image_pairs staged``, see docs/image-change.md) and
  its words;
* :mod:`.verifier` -- :func:`judge`, the stages cheapest first (the early refusal, one
  alignment at scale 1 and its change map, and only when that is neither accepted nor
  confidently refused, other scales and rotations), and :class:`ImageChangeVerifier`,
  what L2 calls, with one :class:`ComparisonBudget` per lookup; :mod:`.maps` holds the
  small-map operations they share.

Everything is numpy + Pillow; ~2-4 ms per candidate (``benchmarks/judge_pairs.py``).
"""

from .alignment import ANGLES, CONFIDENT_PEAK, SCALES, Alignment, align
from .change_map import ChangeReport, compare, is_flat
from .descriptor import (CELL, CHROMA_SIDE, DESCRIPTOR_MAX_BYTES, GREY_SIDE, DescriptorError, ImageDescriptor,
                         describe, describe_memoized, descriptor_bytes, read_memoized, text_of)
from .histograms import prescreen
from .rule import DEFAULT_RULE_PATH, ImageChangeRule, ImageVerdict, describe_alignment
from .verifier import CLOSE_AREA, CLOSE_REGION, DEFAULT_COMPARISONS, ComparisonBudget, ImageChangeVerifier, judge

__all__ = [
    "ANGLES", "CELL", "CHROMA_SIDE", "CLOSE_AREA", "CLOSE_REGION", "CONFIDENT_PEAK", "DEFAULT_COMPARISONS",
    "DEFAULT_RULE_PATH", "DESCRIPTOR_MAX_BYTES", "GREY_SIDE", "SCALES", "Alignment", "ChangeReport",
    "ComparisonBudget", "DescriptorError", "ImageChangeRule", "ImageChangeVerifier", "ImageDescriptor",
    "ImageVerdict", "align", "compare", "describe", "describe_alignment", "describe_memoized",
    "descriptor_bytes", "is_flat", "judge", "prescreen", "read_memoized", "text_of",
]
