"""The early refusal: what two pictures' histograms prove before any alignment.

No shift or scale changes a histogram, so the share of the picture whose grey level or
colour must differ however the pictures are aligned is bounded from the two sorted level
lists alone (:func:`prescreen`).
"""

from __future__ import annotations

import functools

import numpy as np

from .change_map import ABS_MIN
from .descriptor import ImageDescriptor, grey01
from .maps import blur

CHROMA_MIN = 0.06  # colour difference (opponent channels, 0..1) the early refusal counts as a colour change


def levy_gap(sa: np.ndarray, sb: np.ndarray, t: float) -> float:
    """max over x of F_a(x) - F_b(x + t) and F_b(x) - F_a(x + t), for sorted samples.

    For ANY one-to-one matching of the pixels of a and b, the share of matched pairs that
    differ by more than ``t`` is at least this: P(A <= x) <= P(B <= x + t) + P(|A - B| > t).
    No alignment (a shift, a scale) changes the histograms, so this needs none."""
    na, nb = sa.size, sb.size
    d1 = _steps(na) - np.searchsorted(sb, sa + t, side="right") / nb
    d2 = _steps(nb) - np.searchsorted(sa, sb + t, side="right") / na
    return float(max(0.0, d1.max(), d2.max()))


@functools.lru_cache(maxsize=8)
def _steps(n: int) -> np.ndarray:
    """The empirical distribution's steps 1/n, 2/n, ..., 1 (the same few sizes every call)."""
    v = np.arange(1, n + 1) / n
    v.flags.writeable = False
    return v


QS = np.linspace(0.1, 0.9, 9)


def deciles(x: np.ndarray) -> np.ndarray:
    """:func:`quantile_linear` of sorted float ``x`` at each of :data:`QS`, in one pass
    (the same arithmetic, element by element, in the array's precision)."""
    n = x.size
    pos = QS * (n - 1)
    k = np.floor(pos).astype(np.intp)
    t = (pos - k).astype(x.dtype)
    a, b = x[k], x[np.minimum(k + 1, n - 1)]
    d = b - a
    return np.where(t >= 0.5, b - d * (1 - t), a + d * t).astype(np.float64)


def _matched(sa: np.ndarray, sb: np.ndarray, gains: tuple[float, float]) -> np.ndarray:
    """``sb`` under the gain (within ``gains``) and offset that best map its deciles onto
    ``sa``'s -- the same freedom the comparison's global matching has."""
    qa, qb = deciles(sa), deciles(sb)
    vb = float(qb.var())
    g = 1.0 if vb < 1e-8 else float(np.clip(((qb - qb.mean()) * (qa - qa.mean())).mean() / vb, *gains))
    return g * sb + float((qa - g * qb).mean())


def _sorted_levels(desc: ImageDescriptor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted blurred grey levels and sorted opponent colours (two channels), memoized."""
    v = desc._memo.get("levels")
    if v is None:
        v = desc._memo["levels"] = (np.sort(blur(grey01(desc)).ravel()),
                                    *(np.sort(desc.chroma[c].astype(np.float32).ravel() / 255.0) for c in range(2)))
    return v


def prescreen(stored: ImageDescriptor, new: ImageDescriptor) -> tuple[float, float]:
    """Lower bounds, before any alignment, on the share of the picture whose grey level
    (by more than :data:`ABS_MIN`) and whose colour (by more than :data:`CHROMA_MIN`)
    would have to differ however the pictures are aligned: :func:`levy_gap` of their
    histograms after the same global gain/offset matching the comparison allows.

    Not an exact bound on :func:`compare`'s changed area (that matches each pixel within a
    3x3 neighbourhood, leaves out what a crop removed, and adds an edge tolerance), so the
    rule's limits on it are calibrated on benign pairs with a margin (``max_grey_bound``)."""
    ga, ca0, ca1 = _sorted_levels(stored)
    gb, cb0, cb1 = _sorted_levels(new)
    # A positive gain, an offset and a clip keep sorted levels sorted: no sort needed.
    grey = levy_gap(ga, np.clip(_matched(ga, gb, (0.7, 1.4)), 0.0, 1.0), ABS_MIN)
    colour = max(levy_gap(ca, _matched(ca, cb, (0.8, 1.25)), CHROMA_MIN) for ca, cb in ((ca0, cb0), (ca1, cb1)))
    return grey, colour
