"""L0.5: the entry stored under the request's exact key (scope, namespace, context, the
text after NFC and trimming, the pictures' pixel digests)."""

from __future__ import annotations

from ..keys import KeyedRequest
from ..store.entries import EntryStore
from ..store.eviction import AccessLog
from .base import NO_ENTRY_WITH_THESE_PICTURES, TierOutcome, Verdicts
from ..request import Hit


class ExactTier:
    name = "L0.5"

    def __init__(self, entries: EntryStore, access: AccessLog) -> None:
        self.entries = entries
        self.access = access

    def lookup(self, kr: KeyedRequest, now: float, verdicts: Verdicts) -> TierOutcome:
        if kr.images and not self.entries.census.may_hold(kr.images_key):
            return TierOutcome(note=NO_ENTRY_WITH_THESE_PICTURES)
        found = self.entries.fetch([kr.entry_id], now)[kr.entry_id]
        if isinstance(found, str):
            return TierOutcome()
        self.access.touch(kr.entry_id, now)
        return TierOutcome(hit=Hit(payload=found.payload, tier=self.name, entry_id=kr.entry_id,
                                   matched_text=found.text))
