"""The change map: what differs between two aligned pictures, and where.

The new picture is warped onto the stored one, grey levels and colours are matched by a
robust global gain/offset (brightness, contrast, white balance and exposure are not
change), and a pixel counts as changed when it differs from every pixel of its 3x3
neighbourhood in the other picture by more than the noise level allows (JPEG noise,
resampling and a residual sub-pixel shift are not change either). Changed pixels are
grouped into cells; the largest changed region and the changed area are the evidence
(:class:`ChangeReport`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

import numpy as np

from .alignment import Alignment, align, spectrum_of
from .descriptor import CELL, CHROMA_SIDE, ImageDescriptor, grey01
from .maps import blur, local_range, median, neighbour_min_diff, neighbourhood_range, robust_affine, warp


@dataclass
class ChangeReport:
    """What the local comparison saw (every number is in the stored picture's frame)."""

    peak: float = 0.0  # alignment quality
    scale: float = 1.0
    shift: float = 0.0  # |shift| as a share of the picture side
    overlap: float = 0.0  # share of the stored picture the new one shows again
    noise: float = 0.0  # residual grey noise level after alignment (0..1 grey scale)
    changed_area: float = 0.0  # share of the compared area that changed (grey or colour)
    largest_region: float = 0.0  # area share of the largest connected changed region (cells)
    largest_cell: float = 0.0  # highest share of changed pixels in one cell
    colour_area: float = 0.0  # share that changed colour (not grey level)
    where: str = ""  # where the largest changed region lies ("top-left", ...)
    dx: float = 0.0  # signed shift of the new picture's content, as a share of the side (+ right)
    dy: float = 0.0  # ... (+ down)
    angle: float = 0.0  # rotation found, degrees
    trials: int = 0  # phase correlations computed for this pair (all stages)
    grey_bound: float = 0.0  # pre-alignment lower bound on the share of grey levels that moved (prescreen)
    colour_bound: float = 0.0  # ... of colours that moved
    stage: str = ""  # what decided: "prescreen" | "scale 1" | "scales" | "flat"
    cells: list[list[float]] = field(default_factory=list, repr=False)

    def features(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items() if isinstance(v, (int, float))}


def _where(cy: float, cx: float, n: int) -> str:
    v = ("top", "middle", "bottom")[min(2, int(3 * cy / n))]
    h = ("left", "centre", "right")[min(2, int(3 * cx / n))]
    return "centre" if (v, h) == ("middle", "centre") else f"{v}-{h}" if v != "middle" else f"middle-{h}"


def _largest_region(mask: np.ndarray) -> tuple[int, tuple[float, float]]:
    """Size (cells) and centroid of the largest 8-connected region of a small boolean grid."""
    seen = np.zeros(mask.shape, bool)
    best, centre = 0, (0.0, 0.0)
    n0, n1 = mask.shape
    for y0, x0 in zip(*np.nonzero(mask)):
        if seen[y0, x0]:
            continue
        stack, members = [(y0, x0)], []
        seen[y0, x0] = True
        while stack:
            y, x = stack.pop()
            members.append((y, x))
            for yy in range(max(0, y - 1), min(n0, y + 2)):
                for xx in range(max(0, x - 1), min(n1, x + 2)):
                    if mask[yy, xx] and not seen[yy, xx]:
                        seen[yy, xx] = True
                        stack.append((yy, xx))
        if len(members) > best:
            best = len(members)
            centre = (float(np.mean([m[0] for m in members])), float(np.mean([m[1] for m in members])))
    return best, centre


# Pixel-level constants (grey scale 0..1); the decision thresholds are calibrated, these are not.
NOISE_FLOOR = 0.02  # residual noise below this is treated as this (clean pictures)
NOISE_MULT = 4.0  # a pixel changed when its tolerant difference exceeds this many noise levels
ABS_MIN = 0.07  # ... and at least this much of the grey scale (~18 of 255 levels)
# The change map's colour test: a colour differs when it lies outside the other picture's 3x3
# neighbourhood interval by more than CHROMA_FLOOR plus CHROMA_EDGE_TOLERANCE x the width of
# the wider of the two intervals (either channel). Flat colour (a grey picture, a wall) is held
# to 0.03: a saturated hue laid over a region at a quarter of full brightness moves the opponent
# channels ~15 of 255 levels (0.059), under the old flat 0.06. At a colour edge the bound grows
# (a crop or rotation resamples the 4x coarser colour map there). Chosen on the train side's
# calibration and validation pairs (python -m evaluation.training.image_pairs staged).
CHROMA_FLOOR = 0.03
CHROMA_EDGE_TOLERANCE = 0.25
EDGE_TOLERANCE = 0.25  # share of the local 3x3 grey range added to the threshold
BRIGHT = 0.8  # grey level (0..1) from which a pixel may clip under an exposure step
DARK_ABS_MIN = 0.04  # ABS_MIN where neither picture is bright (~10 of 255 levels) ...
DARK_NOISE_FLOOR = 0.01  # ... and NOISE_FLOOR there (both chosen on the train side's cal/val pairs)
CELL_CHANGED = 0.2  # a cell whose share of changed pixels reaches this is a changed cell


FLAT_STD = 0.02  # grey standard deviation (0-1) under which a picture has no structure to align
FLAT_BRIGHTNESS = (0.75, 1.33)  # a flat picture may be this much darker or brighter (exposure) ...
FLAT_CHROMA_TOL = 12.0  # ... and its opponent colour may move this much (of 127.5) beyond that scaling


def _same_flat_colour(stored: "ImageDescriptor", new: "ImageDescriptor") -> bool:
    """Two flat pictures show the same colour when one is the other under an exposure
    change: grey scaled within :data:`FLAT_BRIGHTNESS`, opponent colour scaled alike."""
    ga, gb = float(stored.grey.mean()), float(new.grey.mean())
    gain = gb / max(ga, 1.0)
    if not FLAT_BRIGHTNESS[0] <= gain <= FLAT_BRIGHTNESS[1] and abs(gb - ga) > 8.0:
        return False
    oa = stored.chroma.astype(np.float32).reshape(2, -1).mean(axis=1) - 128.0
    ob = new.chroma.astype(np.float32).reshape(2, -1).mean(axis=1) - 128.0
    return bool(np.max(np.abs(ob - gain * oa)) <= FLAT_CHROMA_TOL)


def _blurred_of(desc: ImageDescriptor) -> tuple[np.ndarray, np.ndarray]:
    """The stored side's blurred grey map and its local range (the same for every comparison
    with this picture: a camera's last frame is compared with each new one)."""
    v = desc._memo.get("blurred")
    if v is None:
        a_s = blur(grey01(desc))
        v = desc._memo["blurred"] = (a_s, local_range(a_s))
    return v


def _chroma_of(desc: ImageDescriptor) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """The opponent-colour maps (0..1) and each channel's 3x3 neighbourhood (min, max)."""
    v = desc._memo.get("chroma01")
    if v is None:
        c = desc.chroma.astype(np.float32) / 255.0
        v = desc._memo["chroma01"] = (c, [neighbourhood_range(c[ch]) for ch in range(c.shape[0])])
    return v


def _grey_std(desc: ImageDescriptor) -> float:
    v = desc._memo.get("std")
    if v is None:
        v = desc._memo["std"] = float(grey01(desc).std())
    return v


def is_flat(stored: ImageDescriptor, new: ImageDescriptor) -> bool:
    """A featureless picture (a flat colour, a blank page) has no shift to find."""
    return max(_grey_std(stored), _grey_std(new)) < FLAT_STD


def compare(stored: ImageDescriptor, new: ImageDescriptor, alignment: Optional[Alignment] = None) -> ChangeReport:
    """Align ``new`` onto ``stored`` (or take ``alignment``) and measure what changed (see
    module docstring)."""
    a = grey01(stored)
    b = grey01(new)
    # A featureless picture (a flat colour, a blank page) has no shift to find: phase
    # correlation has no peak there, and nothing can be misaligned -- compare as it is.
    flat = is_flat(stored, new)
    if flat:
        al = Alignment(1.0, 0.0, 0.0, 1.0)
    elif alignment is not None:
        al = alignment
    else:
        al = align(a, b, spectra=(spectrum_of(stored), spectrum_of(new)))
    n = a.shape[0]
    rep = ChangeReport(peak=al.peak, scale=al.scale, shift=float(np.hypot(al.dx, al.dy)) / n,
                       dx=al.dx / n, dy=al.dy / n, angle=al.angle, trials=al.trials, stage="flat" if flat else "")
    if flat and not _same_flat_colour(stored, new):
        # The global grey/colour matching below would explain any flat colour by any other.
        rep.overlap, rep.changed_area, rep.colour_area, rep.largest_region = 1.0, 1.0, 1.0, 1.0
        rep.where = "everywhere"
        return rep
    bw = warp(b, al.scale, al.dx, al.dy, fill=-1.0, angle=al.angle)
    valid = bw >= 0.0
    # Pixels next to the border of what the new picture covers are resampled from the fill: leave them out.
    valid[1:-1, 1:-1] &= valid[:-2, 1:-1] & valid[2:, 1:-1] & valid[1:-1, :-2] & valid[1:-1, 2:]
    valid[[0, -1], :] = False
    valid[:, [0, -1]] = False
    rep.overlap = float(valid.mean())
    if rep.overlap < 0.05:
        return rep
    bw = np.where(valid, bw, a)
    g, o = robust_affine(bw[valid], a[valid])
    bn = np.clip(g * bw + o, 0.0, 1.0)
    (a_s, a_range), b_s = _blurred_of(stored), blur(bn)
    d = np.maximum(neighbour_min_diff(a_s, b_s), neighbour_min_diff(b_s, a_s))
    d[~valid] = 0.0
    noise = median(d[valid]) if valid.any() else 0.0
    rep.noise = noise
    # At an edge, half a pixel of residual misalignment or interpolation blur moves grey
    # levels by a share of the local contrast: the threshold grows with it there.
    # Below BRIGHT in both pictures nothing clips, and a clean pair is held to the lower floor
    # (a low-contrast paste moves grey levels by 10-20 of 255); where either is bright, an
    # exposure step clips highlights, which the global gain does not undo: the old floor there.
    dark = (a_s < BRIGHT) & (blur(np.clip(bw, 0.0, 1.0)) < BRIGHT)
    floor = np.where(dark, max(DARK_ABS_MIN, NOISE_MULT * max(noise, DARK_NOISE_FLOOR)),
                     max(ABS_MIN, NOISE_MULT * max(noise, NOISE_FLOOR)))
    thr = floor + EDGE_TOLERANCE * np.maximum(a_range, local_range(b_s))
    changed = (d > thr) & valid
    # Colour: the opponent maps, new warped likewise, matched by a global offset per channel.
    k = n // CHROMA_SIDE
    ca, ca_ranges = _chroma_of(stored)
    cb = new.chroma.astype(np.float32) / 255.0
    vsmall = valid.reshape(CHROMA_SIDE, k, CHROMA_SIDE, k).all(axis=(1, 3))  # every grey pixel under it valid
    colour = np.zeros((CHROMA_SIDE, CHROMA_SIDE), bool)
    if vsmall.any():
        cdiff = np.zeros((CHROMA_SIDE, CHROMA_SIDE), np.float32)
        width = np.zeros((CHROMA_SIDE, CHROMA_SIDE), np.float32)
        for ch in range(2):
            cw = warp(cb[ch], al.scale, al.dx / k, al.dy / k, fill=0.5, angle=al.angle)
            gc, oc = robust_affine(cw[vsmall], ca[ch][vsmall], gains=(0.8, 1.25))
            cwn = gc * cw + oc
            # The colour map is 4x coarser than the grey one: a residual shift of a quarter grey
            # pixel blends colours across an edge there; a blend of neighbours is not a change.
            # So each colour is measured against [min, max] of the other map over its 3x3
            # neighbourhood (a blend lies inside; a new colour does not, unless already next door).
            lo_a, hi_a = ca_ranges[ch]
            lo_b, hi_b = neighbourhood_range(cwn)
            outside = np.maximum(np.maximum(np.maximum(lo_b - ca[ch], ca[ch] - hi_b), np.maximum(lo_a - cwn, cwn - hi_a)), 0.0)
            np.maximum(cdiff, outside, out=cdiff)
            np.maximum(width, np.maximum(hi_a - lo_a, hi_b - lo_b), out=width)
        colour = (cdiff > CHROMA_FLOOR + CHROMA_EDGE_TOLERANCE * width) & vsmall
        rep.colour_area = float(colour.sum() / max(1, vsmall.sum()))
        changed |= np.repeat(np.repeat(colour, k, axis=0), k, axis=1) & valid
    # Isolated changed pixels (noise, a JPEG block edge) do not count: a changed pixel needs a changed 4-neighbour.
    p = np.zeros((changed.shape[0] + 2, changed.shape[1] + 2), bool)
    p[1:-1, 1:-1] = changed
    changed &= p[:-2, 1:-1] | p[2:, 1:-1] | p[1:-1, :-2] | p[1:-1, 2:]
    nv = max(1, int(valid.sum()))
    rep.changed_area = float(changed.sum() / nv)
    m = n // CELL
    cell_valid = valid.reshape(m, CELL, m, CELL).sum(axis=(1, 3))
    cell_changed = changed.reshape(m, CELL, m, CELL).sum(axis=(1, 3))
    frac = np.where(cell_valid >= CELL * CELL // 4, cell_changed / np.maximum(cell_valid, 1), 0.0)
    rep.cells = np.round(frac, 3).tolist()
    rep.largest_cell = float(frac.max())
    size, (cy, cx) = _largest_region(frac >= CELL_CHANGED)
    if size:
        rep.largest_region = float(min(1.0, size * CELL * CELL / nv))
        rep.where = _where((cy + 0.5) * CELL, (cx + 0.5) * CELL, n)
    elif rep.largest_cell > 0:
        iy, ix = np.unravel_index(int(np.argmax(frac)), frac.shape)
        rep.where = _where((iy + 0.5) * CELL, (ix + 0.5) * CELL, n)
    return rep
