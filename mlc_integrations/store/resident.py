"""The small vector tiers held in this process, where it is the store's only writer.

A lookup asks small vector tiers before anything else: L1 the stored texts' static vectors
(its pre-screen) and sentence vectors (384 numbers each) in its partition; L2 the stored
pictures' 16 x 16 fingerprints (256 numbers) near the new one, then the prompt vectors of
those few entries. Against embedded Chroma each is a round trip of 1-3 ms -- more than the
comparison that decides a camera's next frame. Where the picture census is complete
(census.py: this process is the only writer, and it read the whole store at warm start or
created it empty) every row of those tiers (``schema.Tier.resident``) is known here too: the
rows read at warm start, and every row this process writes, added right after its storage
write and before the write-behind queue lets it go (so a lookup sees each row in the queue,
here, or both). Queries are then exact cosines over the partition's rows in numpy. The
image tower's 1,280-d vectors stay in Chroma only.

Deleted entries leave at once; after a ``clear`` the tiers are read again (the rows keep
no keys here: a vector and its partition), the store answering meanwhile. A row whose entry
expired or was removed otherwise only costs a candidate whose entry read says "absent"
-- never a hit (the entry read decides, as for a row Chroma returns). Past
:data:`MAX_RESIDENT_ROWS` rows in one tier this process stops keeping that tier (the memory
stays bounded) and the tiers ask the store, as they do whenever the census is not complete.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np

from .schema import BY_NAME, ENTRY_ID, IDX, PART, RESIDENT_TIERS, ROW_PER_IMAGE, entry_of_row

MAX_RESIDENT_ROWS = 5_000  # per tier: all four full hold 46 MB (benchmarks/resident_memory.py)


class _Partition:
    """The rows of one partition: a growing matrix, dead slots masked."""

    def __init__(self, dim: int) -> None:
        self.vecs = np.zeros((4, dim), np.float32)  # grows by doubling: many partitions stay small
        self.alive = np.zeros(4, bool)
        self.ids: list[Optional[str]] = []
        self.slot: dict[str, int] = {}
        self.free: list[int] = []  # slots of dropped rows, reused first (churn does not grow the matrix)

    def put(self, rid: str, vec: np.ndarray) -> None:
        i = self.slot.get(rid)
        if i is None:
            if self.free:
                i = self.free.pop()
                self.ids[i] = rid
            else:
                i = len(self.ids)
                if i == self.vecs.shape[0]:
                    self.vecs = np.concatenate([self.vecs, np.zeros_like(self.vecs)])
                    self.alive = np.concatenate([self.alive, np.zeros_like(self.alive)])
                self.ids.append(rid)
            self.slot[rid] = i
        self.vecs[i] = vec
        self.alive[i] = True

    def drop(self, rid: str) -> None:
        i = self.slot.pop(rid, None)
        if i is not None:
            self.ids[i] = None
            self.alive[i] = False
            self.free.append(i)

    def nearest(self, vec: np.ndarray, threshold: float, limit: int) -> list[tuple[str, float]]:
        """The ``limit`` best rows at or above ``threshold``, best first."""
        n = len(self.ids)
        if not self.slot or limit < 1:
            return []
        sims = self.vecs[:n] @ vec
        idx = np.flatnonzero((sims >= threshold) & self.alive[:n])
        if idx.size > limit:
            idx = idx[np.argpartition(-sims[idx], limit - 1)[:limit]]
        idx = idx[np.argsort(-sims[idx], kind="stable")]
        return [(self.ids[i], float(min(1.0, sims[i]))) for i in idx]  # type: ignore[misc]


class ResidentVectors:
    """``serves(tier)``: whether this process holds every row of ``tier``; then
    :meth:`nearest` and :meth:`vectors` answer from memory."""

    def __init__(self, complete: Callable[[], bool], max_rows: int = MAX_RESIDENT_ROWS,
                 possible: Callable[[], bool] = lambda: True) -> None:
        """``complete``: whether every stored row can be here (the census); ``possible``:
        False once it never can be again (another writer): rows are then not kept."""
        self._complete = complete
        self._possible = possible
        self.max_rows = max_rows
        self._lock = threading.Lock()
        self._parts: dict[str, dict[str, _Partition]] = {t: {} for t in RESIDENT_TIERS}
        self._part_of: dict[str, dict[str, str]] = {t: {} for t in RESIDENT_TIERS}  # row id -> partition
        self._image_rows: dict[str, set[str]] = {}  # entry id -> its per-picture row ids (all such tiers)
        self._given_up: set[str] = set()
        self._refilling = 0

    def serves(self, tier: str) -> bool:
        """Whether the queries of ``tier`` are answered here now (:meth:`nearest` and
        :meth:`vectors` decide under their lock, and say None when they are not)."""
        return (tier in self._parts and tier not in self._given_up and not self._refilling and self._possible()
                and self._complete())

    def put(self, tier: str, rows: Iterable[tuple[str, Sequence[float], dict[str, Any]]]) -> None:
        """Rows (id, vector, metadata with the row's partition) now in the store's ``tier``."""
        if tier not in self._parts:
            return
        per_image = BY_NAME[tier].rows == ROW_PER_IMAGE
        with self._lock:
            if tier in self._given_up:
                return
            if not self._possible():
                self._give_up(tier)
                return
            parts, part_of = self._parts[tier], self._part_of[tier]
            for rid, vec, meta in rows:
                v = np.asarray(vec, np.float32)
                part = sys.intern(str(meta.get(PART, "")))  # one string per partition, not per row
                old = part_of.get(rid)
                if old is not None and old != part:
                    parts[old].drop(rid)
                p = parts.get(part)
                if p is None:
                    p = parts[part] = _Partition(int(v.shape[0]))
                elif p.vecs.shape[1] != v.shape[0]:  # another model's vectors in one partition: not comparable
                    self._give_up(tier)
                    return
                p.put(rid, v)
                part_of[rid] = part
                if per_image:
                    self._image_rows.setdefault(entry_of_row(rid), set()).add(rid)
            if len(part_of) > self.max_rows:
                self._give_up(tier)

    def stop(self) -> None:
        """Keep no rows from now on (the store is too large to be held whole)."""
        with self._lock:
            for tier in RESIDENT_TIERS:
                self._give_up(tier)

    def _give_up(self, tier: str) -> None:
        self._given_up.add(tier)
        self._empty(tier)

    def _empty(self, tier: str) -> None:
        self._parts[tier].clear()
        self._part_of[tier].clear()
        if BY_NAME[tier].rows == ROW_PER_IMAGE:
            self._image_rows.clear()

    def forget_entries(self, entry_ids: Iterable[str]) -> None:
        """Every row of these entries (an entry's own row, or its per-picture rows)."""
        with self._lock:
            for eid in set(entry_ids):
                rows = self._image_rows.pop(eid, set())
                for tier in RESIDENT_TIERS:
                    self._drop(tier, rows if BY_NAME[tier].rows == ROW_PER_IMAGE else (eid,))

    def refill(self, read: Callable[[], None]) -> None:
        """Forget every row and hold what ``read`` puts back (the store's rows, read after a
        clear). Meanwhile lookups ask the store: a half-read tier must not answer. A write
        concurrent with the refill is kept: its row was in the store before it was put here."""
        with self._lock:
            self._refilling += 1
            for tier in RESIDENT_TIERS:
                self._empty(tier)
        if not self._possible():  # nothing would be kept
            with self._lock:
                self._refilling -= 1
            return
        try:
            read()
        finally:
            with self._lock:
                self._refilling -= 1

    def _drop(self, tier: str, rids: Iterable[str]) -> None:
        part_of = self._part_of[tier]
        for rid in rids:
            part = part_of.pop(rid, None)
            if part is not None:
                self._parts[tier][part].drop(rid)

    def nearest(self, tier: str, vec: np.ndarray, part: str, threshold: float,
                k: int) -> Optional[list[tuple[str, float, dict[str, Any], None]]]:
        """Up to ``k`` + 1 rows of partition ``part`` at or above ``threshold``, best first,
        with the metadata a lookup reads (one more than asked, so the caller knows whether
        more exist; ``k`` = 0: the best one). None: not answered here now (ask the store)."""
        per_image = BY_NAME[tier].rows == ROW_PER_IMAGE
        with self._lock:
            if not self.serves(tier):
                return None
            p = self._parts[tier].get(part)
            if p is None:
                return []
            if p.vecs.shape[1] != vec.shape[0]:
                return None  # another model's vectors: the store's collection check says so
            found = p.nearest(np.asarray(vec, np.float32), threshold, k + 1)
        out = []
        for rid, sim in found:
            meta: dict[str, Any] = {PART: part}
            if per_image:
                eid, _, idx = rid.rpartition("#")
                meta.update({ENTRY_ID: eid, IDX: int(idx)})
            out.append((rid, sim, meta, None))
        return out

    def vectors(self, tier: str, ids: Sequence[str]) -> Optional[dict[str, np.ndarray]]:
        """The held vectors of rows ``ids`` (a row not here is not stored); None: ask the store."""
        with self._lock:
            if not self.serves(tier):
                return None
            out = {}
            for rid in ids:
                part = self._part_of[tier].get(rid)
                if part is not None:
                    p = self._parts[tier][part]
                    out[rid] = p.vecs[p.slot[rid]].copy()
            return out

