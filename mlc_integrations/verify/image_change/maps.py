"""Operations on the judge's small float maps (96 x 96 grey, 24 x 24 colour): warping,
3x3 neighbourhood filters, one quantile, the median and a robust gain/offset fit.

Each is written for maps this small, where numpy's generic machinery (np.pad, np.quantile, np.median)
costs more than the arithmetic; each gives numpy's numbers (tests/unit/test_image_change.py).
"""

from __future__ import annotations

import numpy as np
from PIL import Image


def warp(img: np.ndarray, scale: float, dx: float, dy: float, fill: float = -1.0, angle: float = 0.0) -> np.ndarray:
    """Sample ``img`` (the new picture) in the stored picture's frame: stored pixel x sees
    new-picture pixel c + scale * R(angle) (x - c) + (dx, dy); outside it -> ``fill``."""
    n = img.shape[0]
    c = (n - 1) / 2.0
    if angle == 0.0:  # cos 0 = 1 and sin 0 = 0 exactly: the same coefficients without numpy's scalar calls
        cos_t, sin_t = 1.0, 0.0
    else:
        t = np.deg2rad(angle)
        cos_t, sin_t = float(np.cos(t)), float(np.sin(t))
    a, b = scale * cos_t, -scale * sin_t
    d, e = scale * sin_t, scale * cos_t
    coeffs = (a, b, c - (a * c + b * c) + dx, d, e, c - (d * c + e * c) + dy)
    # The map's own float32 buffer, not a copy (Image.fromarray's mode= path copies and is deprecated).
    im = Image.frombuffer("F", (img.shape[1], n), np.ascontiguousarray(img, dtype=np.float32), "raw", "F", 0, 1)
    return np.asarray(im.transform((n, n), Image.AFFINE, coeffs, resample=Image.BILINEAR, fillcolor=fill),
                      dtype=np.float32)


def pad_edge(x: np.ndarray) -> np.ndarray:
    """``np.pad(x, 1, mode="edge")`` (the same values), without its generic machinery: a
    comparison pads a dozen small maps, and np.pad's overhead was most of their cost."""
    n0, n1 = x.shape
    p = np.empty((n0 + 2, n1 + 2), x.dtype)
    p[1:-1, 1:-1] = x
    p[0, 1:-1] = x[0]
    p[-1, 1:-1] = x[-1]
    p[:, 0] = p[:, 1]
    p[:, -1] = p[:, -2]
    return p


def blur(x: np.ndarray) -> np.ndarray:
    """A [1 2 1]^2 / 16 blur (edges replicated)."""
    p = pad_edge(x)
    h = p[:, :-2] + 2 * p[:, 1:-1] + p[:, 2:]
    return (h[:-2] + 2 * h[1:-1] + h[2:]) / 16.0


def neighbour_min_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each pixel: min over the 3x3 neighbourhood o of |a(x) - b(x + o)|."""
    p = pad_edge(b)
    n0, n1 = a.shape
    best = np.full(a.shape, np.inf, np.float32)
    for oy in range(3):
        for ox in range(3):
            np.minimum(best, np.abs(a - p[oy:oy + n0, ox:ox + n1]), out=best)
    return best


def neighbourhood_range(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(min, max) of ``x`` over each pixel's 3x3 neighbourhood (edges repeated)."""
    p = pad_edge(x)
    n0, n1 = x.shape
    hi = x.copy()
    lo = x.copy()
    for oy in range(3):
        for ox in range(3):
            w = p[oy:oy + n0, ox:ox + n1]
            np.maximum(hi, w, out=hi)
            np.minimum(lo, w, out=lo)
    return lo, hi


def local_range(x: np.ndarray) -> np.ndarray:
    """max - min over each pixel's 3x3 neighbourhood."""
    lo, hi = neighbourhood_range(x)
    return hi - lo


def quantile_linear(x: np.ndarray, q: float, presorted: bool = False) -> float:
    """``np.quantile(x, q)`` (its default 'linear' method, the same arithmetic) from two order
    statistics by partition (or indexing, when ``x`` is sorted): np.quantile sorted copies of
    every residual array and was a third of :func:`compare`'s time (cProfile, easy-vqa pairs)."""
    n = x.size
    pos = q * (n - 1)
    k = int(np.floor(pos))
    t = pos - k
    if presorted:
        a, b = x[k], x[min(k + 1, n - 1)]
    else:
        part = np.partition(x, (k, min(k + 1, n - 1)))
        a, b = part[k], part[min(k + 1, n - 1)]
    t = x.dtype.type(t) if x.dtype.kind == "f" else t  # numpy interpolates in the array's precision
    d = b - a
    return float(b - d * (1 - t) if t >= 0.5 else a + d * t)


def median(x: np.ndarray) -> float:
    """``np.median`` of a 1-D array (the same arithmetic: the middle order statistic, or the
    mean of the two middle ones in the array's precision), from one partition."""
    n = x.size
    h = n // 2
    if n % 2:
        return float(np.partition(x, h)[h])
    p = np.partition(x, (h - 1, h))
    return float(np.mean(p[h - 1:h + 1]))


def robust_affine(x: np.ndarray, y: np.ndarray, gains: tuple[float, float] = (0.7, 1.4)) -> tuple[float, float]:
    """Gain (within ``gains``: exposure and contrast, not a change of content) and offset
    with y ~ g * x + o, fitted twice (the second time without the quarter of pixels that
    fit worst, so a changed region does not bend the fit)."""
    g, o = 1.0, 0.0
    xs, ys = x.ravel(), y.ravel()
    for fit in range(2):
        if xs.size < 16:
            break
        mx, my = xs.mean(), ys.mean()
        dx = xs - mx  # xs.var() computes this again: the same numbers, once
        vx = float(np.add.reduce(dx * dx) / xs.size)
        if vx < 1e-6:
            g, o = 1.0, float(my - mx)
        else:
            g = float(np.clip((dx * (ys - my)).mean() / vx, *gains))
            o = float(my - g * mx)
        if fit == 0:
            res = np.abs(y - (g * x + o))
            keep = res <= quantile_linear(res, 0.75)
            xs, ys = x[keep], y[keep]
    return g, o
