"""The decision: when two aligned pictures show the same content, and the words for it.

:class:`ImageChangeRule` holds the calibrated bounds (``assets/image_change.json``);
:class:`ImageVerdict` is its answer with the evidence and a sentence that says what and
where ("a region changed: 2.4 % of the picture, top-left") or the alignment a hit found.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Union

from ...assets import ASSETS_DIR
from .change_map import ChangeReport

log = logging.getLogger(__name__)

DEFAULT_RULE_PATH = ASSETS_DIR / "image_change.json"


RULE_FIELDS = ("min_peak", "min_overlap", "max_shift", "max_noise", "max_region", "max_area", "max_cell",
               "max_grey_bound", "max_colour_bound")


@dataclass(frozen=True)
class ImageChangeRule:
    """When two aligned pictures show the same content. Every bound is a refusal:

    * ``max_grey_bound`` / ``max_colour_bound``: before any alignment, the histograms say at
      least this share of the picture must differ (:func:`prescreen`; the cheap early refusal);
    * ``min_peak``: the alignment found no consistent shift (another picture, another pose);
    * ``min_overlap``: the new picture shows too little of the stored one again;
    * ``max_shift``: the pictures align only shifted by at least this share of the side --
      another framing, not a drifting camera (two pictures of one shape on one flat
      background align perfectly with the shape pushed out of the compared part);
    * ``max_noise``: after alignment the pictures still differ everywhere (texture, pose);
    * ``max_region``: a connected changed region covers at least this share of the picture;
    * ``max_cell``: one cell (1/144 of the picture) has at least this share of its pixels
      changed -- a small compact change (an object of ~1 % of the picture), not the thin
      lines along edges that a residual shift or blur leaves;
    * ``max_area``: changed pixels, wherever they are, cover at least this share.

    Calibrated on the train split of ``python -m evaluation.training.image_pairs`` (held-out pairs
    never tuned on); the shipped values are in ``assets/image_change.json``. A bound absent
    from the file is off (1.0 or more never refuses).
    """

    min_peak: float = 0.12
    min_overlap: float = 0.7
    max_shift: float = 1.01
    max_noise: float = 0.05
    max_region: float = 0.02
    max_area: float = 0.02
    max_cell: float = 1.01
    max_grey_bound: float = 1.01
    max_colour_bound: float = 1.01
    source: str = "built-in defaults"

    @classmethod
    def load(cls, path: Union[str, Path, None] = None) -> "ImageChangeRule":
        p = Path(path) if path is not None else DEFAULT_RULE_PATH
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            log.warning("image-change rule %s not found: built-in defaults", p)
            return cls()
        fields = {k: data[k] for k in RULE_FIELDS if k in data}
        return cls(**{k: float(v) for k, v in fields.items()}, source=str(data.get("source", p.name)))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def refuses_early(self, grey_bound: float, colour_bound: float) -> bool:
        return grey_bound >= self.max_grey_bound or colour_bound >= self.max_colour_bound

    def decide(self, rep: ChangeReport) -> "ImageVerdict":
        if self.refuses_early(rep.grey_bound, rep.colour_bound):
            what, share = (("colours", rep.colour_bound) if rep.colour_bound >= self.max_colour_bound
                           else ("grey levels", rep.grey_bound))
            return ImageVerdict(False, "prescreen", rep, f"the pictures' {what} differ before any alignment: at least "
                                                         f"{_pct(share)} of the picture would have to change")
        if rep.peak < self.min_peak:
            return ImageVerdict(False, "alignment", rep, f"the pictures do not align (peak {rep.peak:.2f} < {self.min_peak:.2f})")
        if rep.shift >= self.max_shift:
            return ImageVerdict(False, "alignment", rep, f"the pictures align only shifted by {_pct(rep.shift)} of the "
                                                         f"side (>= {_pct(self.max_shift)}): another framing")
        if rep.overlap < self.min_overlap:
            return ImageVerdict(False, "overlap", rep,
                                f"only {rep.overlap:.0%} of the stored picture is seen again (< {self.min_overlap:.0%})")
        if rep.noise > self.max_noise:
            return ImageVerdict(False, "noise", rep, f"the aligned pictures differ everywhere (noise {rep.noise:.3f})")
        if rep.largest_region >= self.max_region:
            return ImageVerdict(False, "region", rep,
                                f"a region changed: {_pct(rep.largest_region)} of the picture, {rep.where}")
        if rep.largest_cell >= self.max_cell:
            return ImageVerdict(False, "region", rep,
                                f"a small region changed: {_pct(rep.largest_cell / 144)} of the picture or more, {rep.where}")
        if rep.changed_area >= self.max_area:
            return ImageVerdict(False, "area", rep,
                                f"changes spread over {_pct(rep.changed_area)} of the picture, most near {rep.where}")
        return ImageVerdict(True, "", rep, f"same content: {describe_alignment(rep)}; changed {_pct(rep.changed_area)}, "
                                           f"largest region {_pct(rep.largest_region)}")


def describe_alignment(rep: ChangeReport) -> str:
    """The alignment a comparison found, in words ("shifted 1.2 % right and 0.4 % down, ...")."""
    if rep.stage == "flat":
        return "a featureless picture, compared as it is"
    moves = [f"{_pct(abs(v))} {word[v < 0]}" for v, word in ((rep.dx, ("right", "left")), (rep.dy, ("down", "up")))
             if abs(v) >= 0.0005]
    parts = ["shifted " + " and ".join(moves) if moves else "not shifted"]
    if abs(rep.scale - 1.0) > 1e-6:
        parts.append(f"at scale {rep.scale:.3f}")
    if rep.angle:  # the warp turns the new picture back by ``angle``: its content is turned by -angle
        parts.append(f"rotated {-rep.angle:+.1f} deg (counter-clockwise positive)")
    parts.append(f"alignment peak {rep.peak:.2f}")
    parts.append(f"{rep.overlap:.0%} of the stored picture seen again")
    return ", ".join(parts)


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %" if x < 0.1 else f"{100 * x:.0f} %"


@dataclass
class ImageVerdict:
    """The image verifier's answer for one candidate: accept, and what it saw."""

    accept: bool
    reason: str  # "" when accepted; "prescreen" | "alignment" | "overlap" | "noise" | "region" | "area" | "descriptor" | "budget"
    report: Optional[ChangeReport]
    detail: str

    def scores(self) -> dict[str, float]:
        """The numbers a Hit / Refusal shows (``image_*`` keys)."""
        r = self.report
        if r is None:
            return {}
        out = {"image_align": round(r.peak, 4), "image_changed": round(r.changed_area, 4),
               "image_region": round(r.largest_region, 4)}
        if r.stage != "prescreen":
            out.update(image_scale=round(r.scale, 4), image_dx=round(r.dx, 4), image_dy=round(r.dy, 4))
        return out
