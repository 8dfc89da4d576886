"""L2's small vectors held in this process, where it is the store's only writer.

An L2 lookup with a picture asks two small vector tiers first: the stored pictures'
16 x 16 fingerprints (``l2_fprint``, 256 numbers) near the new one, then the prompt vectors
(``l2_prompt``, 384 numbers) of those few entries. Against embedded Chroma each is a round
trip of 1-3 ms, more than the comparison that decides a camera's next frame. Where the
picture census is complete (census.py: this process is the only writer, and it read the
whole store at warm start or created it empty) every row of those tiers is known here too:
the rows read at warm start, and every row this process writes, added right after its
storage write and before the write-behind queue lets it go (so a lookup sees each row in
the queue, here, or both). Queries are then exact cosine over the partition's rows in numpy.

Deleted entries leave at once; a scoped ``clear`` leaves by its keys. A row whose entry
expired or was removed otherwise only costs a candidate whose entry read says "absent"
-- never a hit (the entry read decides, as for a row Chroma returns). Past
:data:`MAX_RESIDENT_ROWS` rows in one tier this process stops keeping them (the memory
stays bounded) and the tiers ask the store, as they do whenever the census is not complete.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np

from .schema import ENTRY_ID, IDX, NS, PART, RESIDENT_TIERS, SCOPE

MAX_RESIDENT_ROWS = 10_000  # per tier, as many as the census reads at warm start (both tiers full: 53 MB, benchmarks/resident_memory.py)
# What a row keeps of its metadata: the lookup reads the partition and entry; a scoped clear the keys.
KEPT = (PART, ENTRY_ID, IDX, SCOPE, NS)


class _Partition:
    """The rows of one partition: a growing matrix, dead slots masked."""

    def __init__(self, dim: int) -> None:
        self.vecs = np.zeros((16, dim), np.float32)
        self.ids: list[Optional[str]] = []
        self.slot: dict[str, int] = {}

    def put(self, rid: str, vec: np.ndarray) -> bool:
        """True when the row is new."""
        i = self.slot.get(rid)
        new = i is None
        if i is None:
            i = len(self.ids)
            if i == self.vecs.shape[0]:
                self.vecs = np.concatenate([self.vecs, np.zeros_like(self.vecs)])
            self.ids.append(rid)
            self.slot[rid] = i
        self.vecs[i] = vec
        return new

    def drop(self, rid: str) -> bool:
        i = self.slot.pop(rid, None)
        if i is None:
            return False
        self.ids[i] = None
        return True

    def nearest(self, vec: np.ndarray, threshold: float) -> list[tuple[str, float]]:
        n = len(self.ids)
        if not self.slot or n == 0:
            return []
        sims = self.vecs[:n] @ vec
        hits = np.flatnonzero(sims >= threshold)
        out = [(self.ids[i], float(min(1.0, sims[i]))) for i in hits if self.ids[i] is not None]
        out.sort(key=lambda r: -r[1])
        return out  # type: ignore[return-value]


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
        self._meta: dict[str, dict[str, dict[str, Any]]] = {t: {} for t in RESIDENT_TIERS}  # row id -> metadata
        self._part_of: dict[str, dict[str, str]] = {t: {} for t in RESIDENT_TIERS}
        self._rows_of: dict[str, dict[str, set[str]]] = {t: {} for t in RESIDENT_TIERS}  # entry id -> row ids
        self._given_up: set[str] = set()

    def serves(self, tier: str) -> bool:
        return tier in self._parts and tier not in self._given_up and self._complete()

    def put(self, tier: str, rows: Iterable[tuple[str, Sequence[float], dict[str, Any]]]) -> None:
        """Rows (id, vector, metadata) now in the store's ``tier``."""
        if tier not in self._parts:
            return
        with self._lock:
            if tier in self._given_up:
                return
            if not self._possible():
                self._give_up(tier)
                return
            for rid, vec, meta in rows:
                v = np.asarray(vec, np.float32)
                part = str(meta.get(PART, ""))
                old = self._part_of[tier].get(rid)
                if old is not None and old != part:
                    self._parts[tier][old].drop(rid)
                p = self._parts[tier].get(part)
                if p is None or p.vecs.shape[1] != v.shape[0]:
                    if p is not None:  # another model's vectors in this partition: not comparable
                        self._give_up(tier)
                        return
                    p = self._parts[tier][part] = _Partition(int(v.shape[0]))
                p.put(rid, v)
                self._part_of[tier][rid] = part
                self._meta[tier][rid] = {k: meta[k] for k in KEPT if k in meta}
                self._rows_of[tier].setdefault(str(meta.get(ENTRY_ID) or rid), set()).add(rid)
            if len(self._meta[tier]) > self.max_rows:
                self._give_up(tier)

    def _give_up(self, tier: str) -> None:
        self._given_up.add(tier)
        self._empty(tier)

    def _empty(self, tier: str) -> None:
        for d in (self._parts, self._meta, self._part_of, self._rows_of):
            d[tier].clear()

    def forget_entries(self, entry_ids: Iterable[str]) -> None:
        """Every row of these entries (an entry's own row, or its per-picture rows)."""
        gone = set(entry_ids)
        with self._lock:
            for tier in RESIDENT_TIERS:
                self._drop(tier, [rid for eid in gone for rid in self._rows_of[tier].get(eid, ())])

    def forget_where(self, keep: Callable[[dict[str, Any]], bool]) -> None:
        """Every row whose metadata ``keep`` rejects (a cleared scope or namespace)."""
        with self._lock:
            for tier in RESIDENT_TIERS:
                self._drop(tier, [rid for rid, m in self._meta[tier].items() if not keep(m)])

    def clear(self) -> None:
        with self._lock:
            for tier in RESIDENT_TIERS:
                self._empty(tier)

    def _drop(self, tier: str, rids: list[str]) -> None:
        for rid in rids:
            part = self._part_of[tier].pop(rid, None)
            if part is not None:
                self._parts[tier][part].drop(rid)
            meta = self._meta[tier].pop(rid, None)
            if meta is not None:
                eid = str(meta.get(ENTRY_ID) or rid)
                rows = self._rows_of[tier].get(eid)
                if rows is not None:
                    rows.discard(rid)
                    if not rows:
                        del self._rows_of[tier][eid]

    def nearest(self, tier: str, vec: np.ndarray, part: str, threshold: float,
                k: int) -> list[tuple[str, float, dict[str, Any], None]]:
        """Up to ``k`` + 1 rows of partition ``part`` at or above ``threshold``, best first
        (one more than asked, so the caller knows whether more exist)."""
        with self._lock:
            p = self._parts[tier].get(part)
            if p is None or p.vecs.shape[1] != vec.shape[0]:
                return []
            found = p.nearest(np.asarray(vec, np.float32), threshold)[: k + 1]
            return [(rid, sim, dict(self._meta[tier][rid]), None) for rid, sim in found]

    def vectors(self, tier: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        with self._lock:
            out = {}
            for rid in ids:
                part = self._part_of[tier].get(rid)
                if part is not None:
                    p = self._parts[tier][part]
                    out[rid] = p.vecs[p.slot[rid]].copy()
            return out
