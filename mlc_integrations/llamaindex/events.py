"""The cache's decision as a LlamaIndex instrumentation event, and on the response.

Every lookup of :class:`~mlc_integrations.llamaindex.CachedMultiModalLLM` dispatches a
:class:`CacheLookupEvent` on the dispatcher its endpoints' ``LLMChatStartEvent`` /
``LLMCompletionStartEvent`` go through, so an event handler there or on the root
dispatcher sees it among them (``span_id`` is the caller's active span). On a hit, the
response's ``additional_kwargs["mlc_cache"]`` names the tier, entry and scores, as
LangChain's ``response_metadata["mlc_cache"]`` does.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from llama_index.core.instrumentation.events.base import BaseEvent
from llama_index.core.llms.callbacks import dispatcher

from ..adapters.kit import LookupRecord
from ..runtime.telemetry import decision

CACHE_METADATA_KEY = "mlc_cache"

__all__ = ["CacheLookupEvent", "CACHE_METADATA_KEY", "report_lookup"]


class CacheLookupEvent(BaseEvent):
    """One lookup's decision. ``hit``; ``tier`` (the tier that answered, None on a miss);
    ``api`` (``chat`` or ``complete``, ``invalid`` for a call that could not be keyed);
    ``decision``: :func:`~mlc_integrations.runtime.telemetry.decision` (entry id, scores,
    thresholds, each tier's outcome, the refusal on a miss; no prompt text)."""

    hit: bool
    tier: Optional[str] = None
    api: str = ""
    decision: Dict[str, Any] = {}

    @classmethod
    def class_name(cls) -> str:
        return "CacheLookupEvent"


def report_lookup(record: LookupRecord, response: Any) -> Any:
    """Dispatch ``record`` as a :class:`CacheLookupEvent`; mark a hit's ``response``.
    Returns ``response``."""
    data = decision(record=record)
    if response is not None and record.hit is not None:
        hit = record.hit
        extra = getattr(response, "additional_kwargs", None)
        if isinstance(extra, dict):
            extra[CACHE_METADATA_KEY] = {"hit": True, "tier": hit.tier, "entry_id": hit.entry_id,
                                         "scores": dict(hit.scores), "thresholds": dict(hit.thresholds)}
    dispatcher.event(CacheLookupEvent(hit=data["hit"], tier=data.get("tier"), api=record.kind, decision=data))
    return response
