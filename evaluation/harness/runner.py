"""Run a workload through LangChain's cache path and judge every answer against the
ground truth.

Each request is sent as LangChain messages to a chat model with the cache installed
by ``set_llm_cache`` -- exactly the path an application uses. A request whose backend
was not called was answered from the cache (a hit); a hit is correct only if the
reused response was produced for a request with the same ground-truth answer.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Optional

from langchain_core.caches import BaseCache
from langchain_core.globals import set_llm_cache
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from .baselines import TimedCache
from .workloads import WorkItem, Workload

log = logging.getLogger(__name__)


def to_messages(item: WorkItem) -> list[BaseMessage]:
    """The request as a user would send it: earlier turns, then text (+ image) last."""
    msgs: list[BaseMessage] = []
    for role, text in item.context:
        msgs.append(AIMessage(content=text) if role == "ai" else HumanMessage(content=text))
    if item.image is None:
        msgs.append(HumanMessage(content=item.text))
    else:
        msgs.append(HumanMessage(content=[
            {"type": "text", "text": item.text},
            {"type": "image_url", "image_url": {"url": item.data_url()}},
        ]))
    return msgs


@dataclass
class RunResult:
    """Outcome of one workload x cache configuration x backend run (all measured)."""

    workload: str
    config: str
    label: str
    backend: str
    params: dict[str, Any] = field(default_factory=dict)
    n: int = 0
    hits: int = 0
    wrong_hits: int = 0
    backend_calls: int = 0
    wall_s: float = 0.0
    request_ms: list[float] = field(default_factory=list)
    lookup_ms: list[float] = field(default_factory=list)
    update_ms: list[float] = field(default_factory=list)
    tier_hits: dict[str, int] = field(default_factory=dict)
    tier_wrong: dict[str, int] = field(default_factory=dict)
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    outcomes: list[str] = field(default_factory=list)  # per request: "miss", "hit" or "wrong" (a wrong hit)
    speedup: Optional[float] = None  # vs the no-cache run of the same workload and backend

    @property
    def hit_rate(self) -> float:
        return self.hits / self.n if self.n else 0.0

    @property
    def accuracy(self) -> float:
        """Share of responses equal to the request's own ground truth (misses are answered
        by the backend; with the oracle they are always right)."""
        return (self.n - self.wrong_hits) / self.n if self.n else 1.0

    @property
    def false_hit_rate(self) -> float:
        """Share of hits that returned a wrong answer."""
        return self.wrong_hits / self.hits if self.hits else 0.0

    @property
    def lookup_p50_ms(self) -> Optional[float]:
        return statistics.median(self.lookup_ms) if self.lookup_ms else None

    @property
    def mean_request_ms(self) -> float:
        return statistics.fmean(self.request_ms) if self.request_ms else 0.0

    def summary(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k not in ("request_ms", "lookup_ms", "update_ms", "outcomes")}
        d.update(hit_rate=self.hit_rate, accuracy=self.accuracy, false_hit_rate=self.false_hit_rate,
                 lookup_p50_ms=self.lookup_p50_ms,
                 update_p50_ms=statistics.median(self.update_ms) if self.update_ms else None,
                 mean_request_ms=self.mean_request_ms)
        return d


def reset_model_memos() -> None:
    """Forget memoized embeddings so each run pays its own model costs (a later run must
    not look cheaper because an earlier one already embedded the same pictures)."""
    from mlc_integrations.embed import models

    for obj in list(getattr(models, "_registry", {}).values()):  # text, CLIP and image encoders
        for attr in ("_memo", "_image_memo", "_text_memo"):
            memo = getattr(obj, attr, None)
            if memo is None:
                continue
            if hasattr(memo, "clear"):
                memo.clear()
            elif hasattr(memo, "_d"):
                with memo._lock:
                    memo._d.clear()


def _tier_of(cache: Optional[BaseCache]) -> Optional[str]:
    inner = cache.inner if isinstance(cache, TimedCache) else cache
    rec = getattr(inner, "last_lookup", None)
    hit = getattr(rec, "hit", None)
    return getattr(hit, "tier", None)


def run_workload(
    workload: Workload,
    cache: Optional[BaseCache],
    backend: Any,
    *,
    config: str,
    label: str = "",
    params: Optional[dict[str, Any]] = None,
    progress: Any = None,
) -> RunResult:
    """Send every item of ``workload`` through ``backend.invoke`` with ``cache`` installed
    globally (``set_llm_cache``); None runs without a cache."""
    timed = TimedCache(cache) if cache is not None else None
    res = RunResult(workload=workload.name, config=config, label=label or config,
                    backend=getattr(backend, "label", type(backend).__name__), params=dict(params or {}))
    produced: dict[str, set[str]] = {}
    reset_model_memos()
    set_llm_cache(timed)
    t_start = time.perf_counter()
    try:
        for item in workload.items:
            msgs = to_messages(item)
            backend.expect(item.truth)
            calls = backend.calls
            t0 = time.perf_counter()
            out = backend.invoke(msgs)
            res.request_ms.append((time.perf_counter() - t0) * 1000.0)
            answer = out.text if hasattr(out, "text") else str(out.content)
            hit = backend.calls == calls
            k = res.by_kind.setdefault(item.kind, {"n": 0, "hits": 0, "wrong": 0})
            k["n"] += 1
            res.n += 1
            if hit:
                ok = item.truth in produced.get(answer, ())
                tier = _tier_of(timed) or "hit"
                res.hits += 1
                k["hits"] += 1
                res.tier_hits[tier] = res.tier_hits.get(tier, 0) + 1
                if not ok:
                    res.wrong_hits += 1
                    k["wrong"] += 1
                    res.tier_wrong[tier] = res.tier_wrong.get(tier, 0) + 1
            else:
                res.backend_calls += 1
                produced.setdefault(answer, set()).add(item.truth)
            res.outcomes.append(("hit" if ok else "wrong") if hit else "miss")
            if progress is not None:
                progress.update(1)
    finally:
        res.wall_s = time.perf_counter() - t_start
        set_llm_cache(None)
    if timed is not None:
        res.lookup_ms = timed.lookup_ms
        res.update_ms = timed.update_ms
        try:
            timed.inner.clear()
        except Exception as exc:  # a cleanup failure must not lose the measurement
            log.debug("clear after run failed: %s", exc)
        close = getattr(timed.inner, "close", None)
        if callable(close):
            close()
    return res


def attach_speedups(results: Iterable[RunResult]) -> None:
    """Speedup = wall time of the no-cache run / wall time of each run (same workload
    and backend), both measured."""
    results = list(results)
    base = {(r.workload, r.backend): r.wall_s for r in results if r.config == "no cache"}
    for r in results:
        b = base.get((r.workload, r.backend))
        r.speedup = (b / r.wall_s) if b and r.wall_s > 0 else None
