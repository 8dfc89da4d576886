"""Expiry and eviction: which entries leave the cache, and when.

Hits record their access in memory (:class:`AccessLog`); the buffer reaches the store on
:meth:`Eviction.flush` (and close), so a hit costs no storage write. When the cache holds
more than ``max_entries``, the policy ranks entries and the lowest ~5 % go in one batch.
Policies are a table (:data:`EVICTION_POLICIES`): a rank function over what the store
knows of an entry plus the in-memory access buffer.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from .entries import NO_EXPIRY, EntryStore
from .schema import CREATED_AT, EXPIRES_AT, LAST_ACCESS
from ..runtime.stats import EngineStats


@dataclass(frozen=True)
class EntryAge:
    entry_id: str
    created_at: float
    last_access: float  # max of the stored value and the in-memory buffer


# Lower rank = evicted first.
EVICTION_POLICIES: dict[str, Callable[[EntryAge], tuple[float, ...]]] = {
    "lru": lambda e: (e.last_access, e.created_at),  # least recently used (hits refresh)
    "fifo": lambda e: (e.created_at, e.last_access),  # oldest stored first
}
DEFAULT_EVICTION_POLICY = "lru"
EVICT_BATCH_DIVISOR = 20  # evict down to max_entries - max_entries // 20: one scan per ~5 % of inserts


class AccessLog:
    """Last-access times of entries served since the last flush (thread-safe)."""

    def __init__(self) -> None:
        self._d: dict[str, float] = {}
        self._lock = threading.Lock()

    def touch(self, entry_id: str, now: float) -> None:
        with self._lock:
            self._d[entry_id] = now

    def get(self, entry_id: str) -> Optional[float]:
        with self._lock:
            return self._d.get(entry_id)

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self._d)

    def discard(self, ids: Sequence[str]) -> None:
        with self._lock:
            for eid in ids:
                self._d.pop(eid, None)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()

    def __getitem__(self, entry_id: str) -> float:
        with self._lock:
            return self._d[entry_id]


class Eviction:
    """TTL purge and size-bounded eviction over an :class:`EntryStore`."""

    def __init__(self, entries: EntryStore, stats: EngineStats, clock: Callable[[], float], *,
                 max_entries: Optional[int], policy: str = DEFAULT_EVICTION_POLICY) -> None:
        if policy not in EVICTION_POLICIES:
            raise ValueError(f"eviction_policy must be one of {sorted(EVICTION_POLICIES)}, got {policy!r}")
        if max_entries is not None and max_entries < 1:
            raise ValueError("max_entries must be >= 1 or None")
        self.entries = entries
        self.max_entries = max_entries
        self.policy = policy
        self.access = AccessLog()
        self._stats = stats
        self._clock = clock
        self._lock = threading.Lock()

    def after_insert(self) -> None:
        """Evict when an insert took the cache over ``max_entries``."""
        if self.max_entries is None or self.entries.count() <= self.max_entries:
            return
        with self._lock:
            now = self._clock()
            buffered = self.access.snapshot()
            ages, expired = [], []
            for eid, meta in self.entries.all_metadata():
                if float(meta.get(EXPIRES_AT, NO_EXPIRY)) <= now:
                    expired.append(eid)
                    continue
                last = max(float(meta.get(LAST_ACCESS, 0.0)), buffered.get(eid, 0.0))
                ages.append(EntryAge(eid, float(meta.get(CREATED_AT, 0.0)), last))
            if expired:
                self.entries.delete(expired)
                self._stats.incr("expired", len(expired))
            target = self.max_entries - self.max_entries // EVICT_BATCH_DIVISOR
            excess = len(ages) - target if len(ages) > self.max_entries else 0
            if excess > 0:
                ages.sort(key=EVICTION_POLICIES[self.policy])
                victims = [a.entry_id for a in ages[:excess]]
                self.entries.delete(victims)
                self._stats.incr("evictions", len(victims))

    def purge_expired(self) -> int:
        """Delete every expired entry now (lookups already ignore them). Returns the count."""
        ids = self.entries.expired_ids(self._clock())
        if ids:
            self.entries.delete(ids)
            self._stats.incr("expired", len(ids))
        return len(ids)

    def flush(self) -> None:
        """Write buffered last-access times to the store (LRU across restarts)."""
        self.entries.write_last_access(self.access.snapshot())

    def config(self) -> dict[str, Any]:
        return {"max_entries": self.max_entries, "eviction_policy": self.policy}
