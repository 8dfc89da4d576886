"""Alignment: the scale, shift and rotation that map a new grey thumbnail onto a stored one.

Phase correlation (numpy FFT) of the two thumbnails at a few scales (camera drift, crop,
rescale) and small rotations (a hand-held re-shoot); the best peak gives the alignment and
its quality.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .descriptor import GREY_SIDE, ImageDescriptor, grey01
from .maps import warp

SCALES = (1.0, 1.05, 0.95, 1.1, 0.9)


@dataclass
class Alignment:
    scale: float  # new picture's content size relative to the stored one's
    dx: float  # shift, in stored grey pixels, of the new picture's content
    dy: float
    peak: float  # phase-correlation peak (1 = identical up to a shift; ~0.05 unrelated)
    trials: int = 0  # phase correlations computed to find it
    angle: float = 0.0  # rotation of the new picture's content, degrees (counter-clockwise)


def _window(n: int) -> np.ndarray:
    w = np.hanning(n).astype(np.float32)
    return np.outer(w, w)


_WIN = _window(GREY_SIDE)


def spectrum(x: np.ndarray) -> np.ndarray:
    return np.fft.rfft2((x - x.mean()) * _WIN)


def _phase_correlation(a: np.ndarray, b: np.ndarray, fa: Optional[np.ndarray] = None,
                       fb: Optional[np.ndarray] = None) -> tuple[float, float, float]:
    """Shift (dx, dy) with b(x + d) ~ a(x), and the peak height (``fa`` / ``fb``: the
    spectra when already known)."""
    fa = spectrum(a) if fa is None else fa
    fb = spectrum(b) if fb is None else fb
    cross = fb * np.conj(fa)
    cross /= np.abs(cross) + 1e-9
    r = np.fft.irfft2(cross, s=a.shape)
    iy, ix = np.unravel_index(int(np.argmax(r)), r.shape)
    n0, n1 = r.shape

    def sub(m1: float, m0: float, p1: float) -> float:
        den = m1 - 2 * m0 + p1
        return 0.0 if abs(den) < 1e-12 else float(np.clip(0.5 * (m1 - p1) / den, -0.5, 0.5))

    peak = float(r[iy, ix])
    ddy = sub(r[(iy - 1) % n0, ix], peak, r[(iy + 1) % n0, ix])
    ddx = sub(r[iy, (ix - 1) % n1], peak, r[iy, (ix + 1) % n1])
    dy = iy + ddy
    dx = ix + ddx
    if dy > n0 / 2:
        dy -= n0
    if dx > n1 / 2:
        dx -= n1
    return float(dx), float(dy), peak


# A phase-correlation peak this high at scale 1 means a plain shift explains the pair:
# no other scale is tried (a resized copy maps onto the same grid, the descriptor squashes).
CONFIDENT_PEAK = 0.6


ANGLES = (-3.0, -1.5, 1.5, 3.0)  # rotations tried at scale 1 in the last stage (a hand-held re-shoot)


def align(stored: np.ndarray, new: np.ndarray, scales: tuple[float, ...] = SCALES,
          spectra: tuple[Optional[np.ndarray], Optional[np.ndarray]] = (None, None),
          skip: tuple[float, ...] = (), angles: tuple[float, ...] = ()) -> Alignment:
    """The scale and shift that map the new grey thumbnail onto the stored one: the best
    phase-correlation peak over ``scales``, refined by half a step either side of the best.
    ``spectra``: the (stored, new) spectra at scale 1 when already known; ``skip``: scales
    already tried (their peaks are not compared again). ``Alignment.trials`` counts FFTs."""
    a = stored.astype(np.float32)
    b = new.astype(np.float32)
    best = Alignment(1.0, 0.0, 0.0, -1.0)
    fa = spectra[0] if spectra[0] is not None else spectrum(a)
    trials = 0

    def trial(s: float) -> None:
        nonlocal best, trials
        if s in skip:
            return
        trials += 1
        if s == 1.0:
            dx, dy, peak = _phase_correlation(a, b, fa, spectra[1])
        else:
            dx, dy, peak = _phase_correlation(a, warp(b, s, 0.0, 0.0, fill=float(b.mean())), fa)
        if peak > best.peak:
            best = Alignment(s, dx * s, dy * s, peak)

    for s in scales:
        trial(s)
        if s == 1.0 and best.peak > CONFIDENT_PEAK:  # a plain shift explains it: no need to try scales
            best.trials = trials
            return best
    step = min(abs(x - y) for x, y in itertools.combinations(sorted(scales), 2)) / 2 if len(scales) > 1 else 0.0
    if step and best.peak > -1.0:
        s0 = best.scale
        trial(s0 - step)
        trial(s0 + step)
    for ang in angles:
        # The shift is measured after rotating about the centre: R(angle) then (dx, dy).
        trials += 1
        dx, dy, peak = _phase_correlation(a, warp(b, 1.0, 0.0, 0.0, fill=float(b.mean()), angle=ang), fa)
        if peak > best.peak:
            t = np.deg2rad(ang)
            best = Alignment(1.0, float(np.cos(t) * dx - np.sin(t) * dy), float(np.sin(t) * dx + np.cos(t) * dy),
                             peak, angle=ang)
    best.trials = trials
    return best

def spectrum_of(desc: ImageDescriptor) -> np.ndarray:
    f = desc._memo.get("spectrum")
    if f is None:
        f = desc._memo["spectrum"] = spectrum(grey01(desc))
    return f
