"""Which sets of pictures the store holds entries about, when this process can know it.

A lookup with pictures asks the exact tier (its key includes the pictures' pixel digests)
and L1 (its partition does) only about entries stored with *those* pictures. A camera
frame, a re-encoded photo or any picture never stored has none, yet each tier paid a
storage round trip to learn it. Where this process is the store's only writer -- an
in-memory store (its own collections), or a directory no other engine of this process
opened (another process cannot: dirlock.py) -- the set of stored picture keys is known:
read at warm start from the entries preloaded into the exact index (all of them, or the
census is not used), and kept by every write of this process before the entry becomes
visible. Then "no entry has these pictures" is answered from memory.

A picture set is never removed when its entries are deleted or expire: a stale member
only costs the round trip the census saves, never a hit. Anything the census does not
know for sure (not loaded yet, a shared server, a second engine on the directory) answers
"maybe", and the tiers ask the store as before.
"""

from __future__ import annotations

import threading
from typing import Callable, Iterable


class PictureCensus:
    """``may_hold(images_key)``: False only when no stored entry has exactly these pictures
    (ask it about requests with pictures: every text-only entry shares one images key)."""

    def __init__(self, sole_writer: Callable[[], bool]) -> None:
        self._sole_writer = sole_writer
        self._keys: set[str] = set()
        self._complete = False
        self._lock = threading.Lock()

    @property
    def complete(self) -> bool:
        return self._complete and self._sole_writer()

    @property
    def may_complete(self) -> bool:
        """False once another writer may exist (then never complete again in this engine)."""
        return self._sole_writer()

    def start_empty(self) -> None:
        """The store was created empty by this engine (an in-memory store)."""
        with self._lock:
            self._complete = True

    def load(self, images_keys: Iterable[str]) -> None:
        """Every stored entry's images key (the whole store was read)."""
        with self._lock:
            self._keys.update(images_keys)
            self._complete = True

    def add(self, images_key: str) -> None:
        """An entry about these pictures is being written (call before it is visible)."""
        with self._lock:
            self._keys.add(images_key)

    def may_hold(self, images_key: str) -> bool:
        if not self.complete:
            return True
        with self._lock:
            return images_key in self._keys
