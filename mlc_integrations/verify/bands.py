"""Error-bounded mode's estimates: the false-hit rate per probability band and per
cached entry, from the offline calibration (a prior) and the labels seen online.

Each band's error rate is a posterior mean that starts at the calibration's error
(worth ``prior_strength`` labels) and moves with labels. The accepted bands are the
ones from the lowest band whose traffic-weighted upper confidence bound on the
false-hit rate of everything accepted stays <= δ. An entry's labels within a band
are shrunk toward the band's estimate (``entry_prior_strength``).

Not thread-safe by itself: :class:`~.policy.VerificationPolicy` calls it under its lock.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

import numpy as np

# Bands of calibrated probability in which the online calibration counts labels;
# finer near 1, where the decision threshold lives.
BAND_EDGES: tuple[float, ...] = (0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.96, 0.97,
                                 0.98, 0.99, 0.995, 1.0)


@dataclass
class Band:
    lo: float
    hi: float
    prior_error: float
    traffic: int = 0
    labels: int = 0
    wrong: int = 0
    hits: int = 0
    explored: int = 0


@dataclass
class EntryRecord:
    """Labels of one cached entry's neighbourhood within one band."""

    labels: int = 0
    wrong: int = 0


class FalseHitEstimates:
    """Per-band and per-entry false-hit estimates with their upper confidence bounds."""

    def __init__(self, max_false_hit_rate: Optional[float], *, prior_strength: float, entry_prior_strength: float,
                 z: float, max_entries_tracked: int) -> None:
        self.delta = max_false_hit_rate
        self.prior_strength = prior_strength
        self.entry_prior_strength = entry_prior_strength
        self.z = z
        self.bands = [Band(lo, hi, max(1e-4, 1.0 - (lo + min(hi, 1.0)) / 2.0))
                      for lo, hi in zip(BAND_EDGES[:-1], BAND_EDGES[1:])]
        # (entry id, band) -> labels, bounded: the least recently *labelled* go first.
        # Not the shared LRU (_lru.LRU), whose get() counts a read as use: consulting
        # an entry's evidence for a candidate must not keep old evidence alive, only
        # new labels do (with a read-refreshing map, decisions change once the bound is hit).
        self.max_entries_tracked = max_entries_tracked
        self.entries: OrderedDict[tuple[str, int], EntryRecord] = OrderedDict()
        self.accept_from = len(self.bands)  # index of the lowest accepted band
        if self.delta is not None:
            self.recompute()

    # ------------------------------------------------------------- bands
    @property
    def threshold(self) -> float:
        """The lowest accepted probability (1.0 while no band is accepted)."""
        return self.bands[self.accept_from].lo if self.accept_from < len(self.bands) else 1.0

    def band_of(self, p: float) -> int:
        for i, b in enumerate(self.bands):
            if p < b.hi:
                return i
        return len(self.bands) - 1

    def error(self, b: Band) -> float:
        return (b.wrong + self.prior_strength * b.prior_error) / (b.labels + self.prior_strength)

    def variance(self, b: Band) -> float:
        # Agresti-Coull style: z^2/2 extra pseudo-errors keep rare-event bounds honest.
        n = b.labels + self.prior_strength + self.z ** 2
        e = (b.wrong + self.prior_strength * b.prior_error + self.z ** 2 / 2) / n
        return e * (1 - e) / n

    def proven(self, b: Band) -> bool:
        """The band's own upper bound is <= δ."""
        assert self.delta is not None
        return self.error(b) + self.z * math.sqrt(self.variance(b)) <= self.delta

    def aggregate(self, start: int) -> tuple[float, float]:
        """(estimate, upper bound) of the false-hit rate when bands >= start are accepted."""
        sel = self.bands[start:]
        weights = np.array([float(b.traffic) for b in sel])
        # Bands without traffic serve nobody: they weigh nothing (uniform before any traffic).
        weights = weights / weights.sum() if weights.sum() > 0 else np.full(len(sel), 1.0 / len(sel))
        errs = np.array([self.error(b) for b in sel])
        var = np.array([self.variance(b) for b in sel])
        est = float(weights @ errs)
        return est, est + self.z * float(math.sqrt(float((weights ** 2) @ var)))

    def recompute(self) -> None:
        assert self.delta is not None
        k = len(self.bands)
        for start in range(len(self.bands) - 1, -1, -1):
            if not self.bands[start].traffic:
                continue  # a band is opened only once it is seen (its first candidate recomputes)
            if self.aggregate(start)[1] <= self.delta:
                k = start  # the lowest band whose accepted set keeps the bound
        self.accept_from = k

    # ------------------------------------------------------------- entries
    def entry_view(self, entry_id: str, bi: int) -> Optional[tuple[float, float]]:
        """(error estimate, upper bound) of one entry's neighbourhood in one band, its
        labels shrunk toward the band's estimate; None without labels."""
        rec = self.entries.get((entry_id, bi))
        return self.record_view(rec, bi) if rec is not None else None

    def record_view(self, rec: EntryRecord, bi: int) -> Optional[tuple[float, float]]:
        if not rec.labels:
            return None
        e_band = self.error(self.bands[bi])
        m = self.entry_prior_strength
        est = (rec.wrong + m * e_band) / (rec.labels + m)
        n = rec.labels + m + self.z ** 2
        e = (rec.wrong + m * e_band + self.z ** 2 / 2) / n
        return est, est + self.z * math.sqrt(e * (1 - e) / n)

    # ------------------------------------------------------------- labels
    def add_label(self, entry_id: str, band: int, right: bool) -> None:
        b = self.bands[band]
        b.labels += 1
        b.wrong += 0 if right else 1
        if entry_id:
            key = (entry_id, band)
            rec = self.entries.get(key)
            if rec is None:
                rec = self.entries[key] = EntryRecord()
                while len(self.entries) > self.max_entries_tracked:
                    self.entries.popitem(last=False)
            else:
                self.entries.move_to_end(key)
            rec.labels += 1
            rec.wrong += 0 if right else 1
        if self.delta is not None:
            self.recompute()

    def forget(self, entry_id: str) -> None:
        """Drop a deleted entry's labels (its id never comes back)."""
        for bi in range(len(self.bands)):
            self.entries.pop((entry_id, bi), None)
