"""Which tiers' searches are crowded by other partitions' rows, so they query their own first.

The entry store searches a tier unfiltered first (its cost does not grow with other scopes'
rows) and filtered on the request's partition only when the unfiltered top-k is full of
other partitions' rows. Some traffic makes that the rule -- one question asked about many
pictures puts one L1 partition per picture in the top-k -- and then the first query is a
wasted round trip (store/entries.py)."""

from __future__ import annotations

import threading
from collections import deque

# Where most of the last CROWD_WINDOW unfiltered queries of a tier were crowded by other
# partitions' rows (one question asked about many pictures: its L1 rows sit in one partition
# per picture), queries go to the filtered step at once, and one in CROWD_RESAMPLE tries the
# unfiltered one again. Either order returns the same rows; this saves a round trip.
CROWD_WINDOW, CROWD_SHARE, CROWD_RESAMPLE = 16, 0.75, 8


class Crowding:
    """Per tier: were its recent unfiltered queries crowded by other partitions?"""

    def __init__(self) -> None:
        self._recent: dict[str, deque[bool]] = {}
        self._skipped: dict[str, int] = {}
        self._lock = threading.Lock()

    def filtered_first(self, tier: str) -> bool:
        with self._lock:
            recent = self._recent.get(tier)
            if recent is None or len(recent) < CROWD_WINDOW or sum(recent) < CROWD_SHARE * CROWD_WINDOW:
                return False
            n = self._skipped[tier] = self._skipped.get(tier, 0) + 1
            return n % CROWD_RESAMPLE != 0

    def record(self, tier: str, crowded: bool) -> None:
        with self._lock:
            self._recent.setdefault(tier, deque(maxlen=CROWD_WINDOW)).append(crowded)
