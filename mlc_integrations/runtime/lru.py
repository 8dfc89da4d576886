"""One bounded, thread-safe LRU map, used by every memo in the package.

Bounded by entry count and, optionally, by a total weight (e.g. pixels held by a
decode memo). Items heavier than ``max_item_weight`` are never kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, Iterator, Optional, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    """``get`` refreshes recency; ``put`` evicts the least recently used beyond the bounds."""

    def __init__(
        self,
        maxsize: int,
        *,
        max_weight: Optional[int] = None,
        weigh: Optional[Callable[[V], int]] = None,
        max_item_weight: Optional[int] = None,
    ) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be >= 1")
        if (max_weight is None) != (weigh is None):
            raise ValueError("max_weight and weigh go together")
        self.maxsize = maxsize
        self.max_weight = max_weight
        self.max_item_weight = max_item_weight
        self._weigh = weigh
        self._d: OrderedDict[K, V] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, key: K, default: Optional[V] = None) -> Optional[V]:
        with self._lock:
            if key not in self._d:
                return default
            self._d.move_to_end(key)
            return self._d[key]

    def put(self, key: K, value: V) -> None:
        w = self._weigh(value) if self._weigh is not None else 0
        if self.max_item_weight is not None and w > self.max_item_weight:
            return
        with self._lock:
            if key in self._d:
                self._weight -= self._weigh(self._d[key]) if self._weigh is not None else 0
            self._d[key] = value
            self._d.move_to_end(key)
            self._weight += w
            while len(self._d) > self.maxsize or (self.max_weight is not None and self._weight > self.max_weight):
                _, old = self._d.popitem(last=False)
                self._weight -= self._weigh(old) if self._weigh is not None else 0

    def pop(self, key: K, default: Optional[V] = None) -> Optional[V]:
        with self._lock:
            if key not in self._d:
                return default
            v = self._d.pop(key)
            self._weight -= self._weigh(v) if self._weigh is not None else 0
            return v

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
            self._weight = 0

    def items(self) -> list[tuple[K, V]]:
        """A snapshot, oldest first."""
        with self._lock:
            return list(self._d.items())

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._d

    def __len__(self) -> int:
        with self._lock:
            return len(self._d)

    def __iter__(self) -> Iterator[K]:
        return iter([k for k, _ in self.items()])
