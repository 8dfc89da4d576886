"""Write-behind: ``update()`` appends to memory and returns; one background thread writes.

Pending entries are visible to lookups at once (:class:`PendingEntries`: exact by id,
semantic by brute force over the few pending vectors), so a request stored a moment ago
hits in this process before it reaches Chroma. The writer takes up to ``batch`` entries
per round and writes each tier once for all of them (response rows first, vectors last,
as a single update does). The queue is bounded: when ``max_pending`` entries wait,
``update()`` blocks until the writer catches up (back-pressure, never unbounded memory).

The writer yields to lookups (a storage write makes every concurrent Chroma query wait:
an embedded query's mean went from 2.6 to 5.9 ms with one entry written every 50 ms beside
it, `python benchmarks/chroma_write_contention.py`). A batch starts when a lookup has missed
since its oldest entry arrived (the caller is now calling its model, which takes far longer
than the write), when neither a lookup nor an update has run for ``quiet_s`` (an update is
where a streaming caller is busiest: its next lookup follows at once), when the oldest entry
has waited ``max_delay_s``, when the batch is full, or when someone drains. So in a stream the writes go where the caller waits for its model,
not where it waits for the cache.

A crash loses at most the pending window (entries acknowledged but not yet written, at
most ``max_delay_s`` old unless the store is slower); ``durable=True`` on the engine writes
synchronously instead (docs/operations.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .entries import NewEntry
from .schema import PART, entry_of_row

log = logging.getLogger(__name__)

DEFAULT_MAX_PENDING = 256
DEFAULT_BATCH = 32
DEFAULT_QUIET_S = 0.05  # no lookup for this long: the caller is doing something else
DEFAULT_MAX_DELAY_S = 0.25  # ... but no entry waits longer than this for a quiet moment


class PendingEntries:
    """Entries accepted by ``update()`` and not yet written, and the writer that drains them."""

    def __init__(self, write: Callable[[list[NewEntry]], None], *, after_write: Callable[[], None],
                 max_pending: int = DEFAULT_MAX_PENDING, batch: int = DEFAULT_BATCH,
                 on_error: Callable[[BaseException, int], None], quiet_s: float = DEFAULT_QUIET_S,
                 max_delay_s: float = DEFAULT_MAX_DELAY_S, monotonic: Callable[[], float] = time.monotonic) -> None:
        if max_pending < 1 or batch < 1:
            raise ValueError("max_pending and batch must be >= 1")
        self.quiet_s = quiet_s
        self.max_delay_s = max_delay_s
        self._monotonic = monotonic
        self._lookups = 0  # lookups running now
        self._last_lookup = -1e18  # when the last one ended
        self._last_submit = -1e18  # when update() last handed an entry over
        self._last_miss = -1e18  # when the last one ended in a miss
        self._queued_at: dict[str, float] = {}  # entry id -> when it was first queued
        self._draining = 0
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
            self._last_submit = self._monotonic()
            self._queued_at.setdefault(entry.entry_id, self._last_submit)
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

    def lookup_started(self) -> None:
        """A lookup is reading the store: the writer holds back (see the module docstring)."""
        with self._cond:
            self._lookups += 1

    def lookup_ended(self, missed: bool) -> None:
        """``missed``: the lookup found nothing, so its caller is calling the model now."""
        with self._cond:
            self._lookups -= 1
            self._last_lookup = self._monotonic()
            if missed:
                self._last_miss = self._last_lookup
            if not self._lookups and self._queue:
                self._cond.notify_all()

    def drain(self, timeout: Optional[float] = None) -> bool:
        """Wait until every accepted entry is written (or dropped on error). False on timeout."""
        with self._cond:
            self._draining += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(lambda: not self._queue and not self._in_flight, timeout)
            finally:
                self._draining -= 1

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

    def _hold_back(self) -> float:
        """Seconds to wait before writing (0: write now). Under the condition's lock."""
        if self._stopping or self._draining or len(self._queue) >= self.batch or not self._queue:
            return 0.0
        now = self._monotonic()
        oldest = min((self._queued_at.get(e, now) for e in self._queue), default=now)
        left = oldest + self.max_delay_s - now
        if left <= 0:
            return 0.0
        if self._lookups:
            return left  # lookup_ended() wakes the writer
        if self._last_miss >= oldest:
            return 0.0
        quiet = max(self._last_lookup, self._last_submit) + self.quiet_s - now
        return min(left, quiet) if quiet > 0 else 0.0

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._stopping)
                if self._stopping and not self._queue:
                    return
                wait = self._hold_back()
                while wait > 0:
                    self._cond.wait(wait)
                    wait = self._hold_back()
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
                            self._queued_at.pop(e.entry_id, None)
                    self._in_flight = 0
                    self._cond.notify_all()
