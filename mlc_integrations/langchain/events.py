"""The cache's decision as a LangChain custom callback event, on the wrapper's own run.

``CachedChatModel`` has a run (LangChain's ``run_manager``), so every lookup it makes is
reported to that run's handlers as ``on_custom_event(CACHE_EVENT, data, run_id=...)``:
LangSmith, ``astream_events`` (``{"event": "on_custom_event", "name": CACHE_EVENT}``) and
any ``BaseCallbackHandler`` see it. ``data`` is :func:`~mlc_integrations.runtime.telemetry.decision`:
hit, tier, entry id, scores and thresholds, each tier's outcome, the refusal on a miss;
no prompt text. ``set_llm_cache`` gets no run from LangChain, so there the decision is
in the OpenTelemetry span only.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks.manager import ahandle_event, handle_event

from ..adapters.kit import LookupRecord
from ..runtime.telemetry import decision

CACHE_EVENT = "mlc_cache_lookup"

__all__ = ["CACHE_EVENT", "report_lookup", "areport_lookup"]


def _target(run_manager: Any) -> Any:
    handlers = getattr(run_manager, "handlers", None)
    return handlers if handlers else None


def report_lookup(run_manager: Any, record: LookupRecord) -> None:
    """Send ``record``'s decision to the handlers of ``run_manager``'s run (none: nothing)."""
    handlers = _target(run_manager)
    if handlers is None:
        return
    # The run manager's own on_custom_event is the handler-side no-op (RunManagerMixin):
    # dispatch as CallbackManager.on_custom_event does, under this run's id.
    handle_event(handlers, "on_custom_event", "ignore_custom_event", CACHE_EVENT, decision(record=record),
                 run_id=run_manager.run_id, tags=run_manager.tags, metadata=run_manager.metadata)


async def areport_lookup(run_manager: Any, record: LookupRecord) -> None:
    """:func:`report_lookup` for an async run manager."""
    handlers = _target(run_manager)
    if handlers is None:
        return
    await ahandle_event(handlers, "on_custom_event", "ignore_custom_event", CACHE_EVENT, decision(record=record),
                        run_id=run_manager.run_id, tags=run_manager.tags, metadata=run_manager.metadata)
