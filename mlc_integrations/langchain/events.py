"""The cache's decision as a LangChain custom callback event, on the wrapper's own run.

``CachedChatModel`` has a run (LangChain's ``run_manager``), so every lookup it makes is
reported to that run's handlers as ``on_custom_event(CACHE_EVENT, data, run_id=...)``:
LangSmith, ``astream_events`` (``{"event": "on_custom_event", "name": CACHE_EVENT}``) and
any ``BaseCallbackHandler`` see it. ``data`` is :func:`~mlc_integrations.runtime.telemetry.decision`:
hit, tier, entry id, scores and thresholds, each tier's outcome, the refusal on a miss;
no prompt text. ``set_llm_cache`` gets no run from LangChain, so there the decision is
in the OpenTelemetry span only.

LangChain's ``stream()``/``astream()`` create the run but do not hand it to ``_stream``:
:class:`StreamRunMixin` names the run (``config["run_id"]``) and makes it known to
each step of the stream, so a streamed call reports to its own run too.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, AsyncIterator, Iterator, Optional

from langchain_core.callbacks.manager import AsyncCallbackManager, CallbackManager, ahandle_event, handle_event
from langchain_core.runnables.config import ensure_config
from langchain_core.utils.uuid import uuid7

from ..adapters.kit import LookupRecord
from ..runtime.telemetry import decision

CACHE_EVENT = "mlc_cache_lookup"

__all__ = ["CACHE_EVENT", "report_lookup", "areport_lookup", "StreamRunMixin"]

# The run of the stream step running now: (model, run id, config), set by StreamRunMixin
# around each step only (so a stream abandoned in another context resets nothing there).
_STREAM_RUN: ContextVar[Optional[tuple[Any, Any, dict[str, Any]]]] = ContextVar("mlc_stream_run", default=None)


def _target(run_manager: Any) -> Any:
    handlers = getattr(run_manager, "handlers", None)
    return handlers if handlers else None


def _stream_manager(async_: bool) -> Optional[tuple[Any, Any]]:
    """The callback manager of the streamed run in progress (as LangChain configured it
    for that run: the call's callbacks, the model's own, tags, metadata) and its id."""
    current = _STREAM_RUN.get()
    if current is None:
        return None
    model, run_id, config = current
    cls = AsyncCallbackManager if async_ else CallbackManager
    manager = cls.configure(config.get("callbacks"), model.callbacks, model.verbose, config.get("tags"),
                            model.tags, config.get("metadata"), model.metadata)
    return manager, run_id


def report_lookup(run_manager: Any, record: LookupRecord) -> None:
    """Send ``record``'s decision to the handlers of ``run_manager``'s run (none: the
    streamed run in progress, if any)."""
    handlers = _target(run_manager)
    if handlers is None:
        streamed = _stream_manager(False) if run_manager is None else None
        if streamed is not None:
            streamed[0].on_custom_event(CACHE_EVENT, decision(record=record), run_id=streamed[1])
        return
    # The run manager's own on_custom_event is the handler-side no-op (RunManagerMixin):
    # dispatch as CallbackManager.on_custom_event does, under this run's id.
    handle_event(handlers, "on_custom_event", "ignore_custom_event", CACHE_EVENT, decision(record=record),
                 run_id=run_manager.run_id, tags=run_manager.tags, metadata=run_manager.metadata)


async def areport_lookup(run_manager: Any, record: LookupRecord) -> None:
    """:func:`report_lookup` for an async run manager."""
    handlers = _target(run_manager)
    if handlers is None:
        streamed = _stream_manager(True) if run_manager is None else None
        if streamed is not None:
            await streamed[0].on_custom_event(CACHE_EVENT, decision(record=record), run_id=streamed[1])
        return
    await ahandle_event(handlers, "on_custom_event", "ignore_custom_event", CACHE_EVENT, decision(record=record),
                        run_id=run_manager.run_id, tags=run_manager.tags, metadata=run_manager.metadata)


def _named_run(config: Any) -> tuple[dict[str, Any], Any]:
    config = dict(ensure_config(config))
    run_id = config.get("run_id") or uuid7()
    config["run_id"] = run_id  # LangChain's stream() takes the run's id from here
    return config, run_id


class StreamRunMixin:
    """``stream``/``astream`` of a ``BaseChatModel`` whose ``_stream``/``_astream`` can
    report to the run LangChain created for the call (see the module docstring)."""

    def stream(self, input: Any, config: Any = None, *, stop: Optional[list[str]] = None,
               **kwargs: Any) -> Iterator[Any]:
        config, run_id = _named_run(config)
        inner = super().stream(input, config, stop=stop, **kwargs)  # type: ignore[misc]
        state = (self, run_id, config)
        try:
            while True:
                token = _STREAM_RUN.set(state)
                try:
                    item = next(inner)
                except StopIteration:
                    return
                finally:
                    _STREAM_RUN.reset(token)
                yield item
        finally:
            inner.close()

    async def astream(self, input: Any, config: Any = None, *, stop: Optional[list[str]] = None,
                      **kwargs: Any) -> AsyncIterator[Any]:
        config, run_id = _named_run(config)
        inner = super().astream(input, config, stop=stop, **kwargs)  # type: ignore[misc]
        state = (self, run_id, config)
        try:
            while True:
                token = _STREAM_RUN.set(state)
                try:
                    item = await inner.__anext__()
                except StopAsyncIteration:
                    return
                finally:
                    _STREAM_RUN.reset(token)
                yield item
        finally:
            await inner.aclose()
