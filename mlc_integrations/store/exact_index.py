"""The exact tier's in-process copy of stored entries: an exact repeat is answered from
memory, without a storage round trip (issue 27: an exact hit cost 1.8 ms through Chroma,
LangChain's ``InMemoryCache`` 0.006 ms).

Kept consistent with this process's writes, deletes, expiry and eviction by
:class:`~mlc_integrations.store.entries.EntryStore`, which owns it. Another process can write
and delete the same entries only through a Chroma server; then a remembered entry is
re-read from the store once it is older than ``revalidate_s`` (default 1 s), so an entry
another process deleted is never served later than that after the delete, and one it
wrote is found at once (a miss here falls through to the store). An embedded directory
has a single writer (dirlock.py): nothing to revalidate.

Bounded by entries and by bytes (payload text + metadata, ~0.5-2 kB for a typical LLM
answer); the least recently used are dropped first and found in the store again.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Optional

DEFAULT_MAX_ITEMS = 100_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_REVALIDATE_S = 1.0  # server mode: the cross-process visibility bound


class ExactIndex:
    """entry id -> (response document text, metadata), newest use last."""

    def __init__(self, *, max_items: int = DEFAULT_MAX_ITEMS, max_bytes: int = DEFAULT_MAX_BYTES,
                 revalidate_s: Optional[float] = None, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.revalidate_s = revalidate_s  # None: this process is the only writer
        self._monotonic = monotonic
        self._rows: "OrderedDict[str, tuple[str, dict[str, Any], float, int]]" = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def bytes(self) -> int:
        return self._bytes

    def get(self, entry_id: str) -> Optional[tuple[str, dict[str, Any]]]:
        """The remembered row, or None (never seen, dropped, or due for a re-read)."""
        with self._lock:
            row = self._rows.get(entry_id)
            if row is None:
                return None
            if self.revalidate_s is not None and self._monotonic() - row[2] > self.revalidate_s:
                return None  # the caller reads the store and puts the row back (or forgets it)
            self._rows.move_to_end(entry_id)
            return row[0], row[1]

    def put(self, entry_id: str, document: str, meta: dict[str, Any]) -> None:
        size = len(document) + 64 * len(meta) + 100
        with self._lock:
            old = self._rows.pop(entry_id, None)
            if old is not None:
                self._bytes -= old[3]
            if size > self.max_bytes:
                return
            self._rows[entry_id] = (document, dict(meta), self._monotonic(), size)
            self._bytes += size
            while len(self._rows) > self.max_items or self._bytes > self.max_bytes:
                _eid, dropped = self._rows.popitem(last=False)
                self._bytes -= dropped[3]

    def update_meta(self, entry_id: str, meta: dict[str, Any]) -> None:
        with self._lock:
            row = self._rows.get(entry_id)
            if row is not None:
                self._rows[entry_id] = (row[0], dict(meta), row[2], row[3])

    def forget(self, entry_ids: Any) -> None:
        with self._lock:
            for eid in entry_ids:
                old = self._rows.pop(eid, None)
                if old is not None:
                    self._bytes -= old[3]

    def forget_where(self, keep: Callable[[dict[str, Any]], bool]) -> None:
        """Drop every row whose metadata ``keep`` rejects (a cleared scope or namespace)."""
        with self._lock:
            for eid in [e for e, row in self._rows.items() if not keep(row[1])]:
                self._bytes -= self._rows.pop(eid)[3]

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()
            self._bytes = 0
