"""Write-behind: ``update()`` appends to memory and returns; one background thread writes.

Pending entries are visible to lookups at once (:class:`PendingEntries`: exact by id,
semantic by brute force over the few pending vectors), so a request stored a moment ago
hits in this process before it reaches Chroma. The writer takes up to ``batch`` entries
per round and writes each tier once for all of them (response rows first, vectors last,
as a single update does). The queue is bounded: when ``max_pending`` entries wait,
``update()`` blocks until the writer catches up (back-pressure, never unbounded memory).

A crash loses at most the pending window (entries acknowledged but not yet written);
``durable=True`` on the engine writes synchronously instead (docs/operations.md).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .entries import NewEntry
from .schema import PART, entry_of_row

log = logging.getLogger(__name__)

DEFAULT_MAX_PENDING = 256
DEFAULT_BATCH = 32


class PendingEntries:
    """Entries accepted by ``update()`` and not yet written, and the writer that drains them."""

    def __init__(self, write: Callable[[list[NewEntry]], None], *, after_write: Callable[[], None],
                 max_pending: int = DEFAULT_MAX_PENDING, batch: int = DEFAULT_BATCH,
                 on_error: Callable[[BaseException, int], None]) -> None:
        if max_pending < 1 or batch < 1:
            raise ValueError("max_pending and batch must be >= 1")
        self._write = write
        self._after_write = after_write
        self._on_error = on_error
        self.max_pending = max_pending
        self.batch = batch
        self._entries: dict[str, NewEntry] = {}
        self._queue: deque[str] = deque()
        self._in_flight = 0
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._stopping = False

    # ------------------------------------------------------------------ caller side
    def submit(self, entry: NewEntry) -> None:
        with self._cond:
            while len(self._entries) >= self.max_pending and entry.entry_id not in self._entries:
                self._ensure_thread()
                self._cond.wait(0.5)
            self._entries[entry.entry_id] = entry
            self._queue.append(entry.entry_id)
            self._ensure_thread()
            self._cond.notify_all()

    def get(self, entry_id: str) -> Optional[NewEntry]:
        with self._cond:
            return self._entries.get(entry_id)

    def __len__(self) -> int:
        with self._cond:
            return len(self._entries)

    def neighbours(self, tier: str, vec: np.ndarray, part: str,
                   threshold: float) -> list[tuple[str, float, dict[str, Any]]]:
        """Pending rows of partition ``part`` in ``tier`` at or above ``threshold``, by brute
        force. Entries of other partitions are passed over before any vector is touched: a
        deferred encoding runs only for an entry of the caller's own partition (the
        pre-screen found it near this request), never for another tenant's."""
        with self._cond:
            entries = list(self._entries.values())
        rows = []
        for e in entries:
            if not e.in_partition(tier, part):
                continue
            for rid, v, meta in e.rows(tier):
                if meta[PART] != part or v.shape != vec.shape:
                    continue
                sim = min(1.0, float(np.dot(vec, v)))
                if sim >= threshold:
                    rows.append((rid, sim, meta))
        return rows

    def vectors(self, tier: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Pending vectors of the rows ``ids`` of ``tier``; only the entries those rows
        belong to are read (and their deferred vectors computed)."""
        want = set(ids)
        owners = {entry_of_row(i) for i in want} | want  # an entry row's id is the entry id
        with self._cond:
            entries = [e for eid, e in self._entries.items() if eid in owners]
        return {rid: v for e in entries for rid, v, _m in e.rows(tier) if rid in want}

    def drain(self, timeout: Optional[float] = None) -> bool:
        """Wait until every accepted entry is written (or dropped on error). False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._in_flight, timeout)

    def close(self) -> None:
        """Stop the writer (after :meth:`drain`, which the engine's release runs first)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(5)

    # ------------------------------------------------------------------ writer thread
    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="mlc-write-behind", daemon=True)
            self._thread.start()

    def _take(self) -> list[NewEntry]:
        """Up to ``batch`` distinct entries in arrival order (the latest version of each)."""
        ids: list[str] = []
        while self._queue and len(ids) < self.batch:
            eid = self._queue.popleft()
            if eid not in ids and eid in self._entries:
                ids.append(eid)
        return [self._entries[eid] for eid in ids]

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._stopping)
                if self._stopping and not self._queue:
                    return
                batch = self._take()
                self._in_flight = len(batch)
            try:
                if batch:
                    self._write(batch)
                    self._after_write()
            except Exception as exc:  # the writer never dies: counted, logged, the batch dropped
                self._on_error(exc, len(batch))
            finally:
                with self._cond:
                    for e in batch:
                        if self._entries.get(e.entry_id) is e:  # a newer version stays pending
                            del self._entries[e.entry_id]
                    self._in_flight = 0
                    self._cond.notify_all()
