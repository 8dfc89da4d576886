"""Thread-safe counters and latency percentiles for :meth:`MLCEngine.stats`."""

from __future__ import annotations

import logging
import threading
from collections import defaultdict, deque
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..engine import MLCEngine

log = logging.getLogger(__name__)

TIERS = ("L0.5", "L1", "L2")


class EngineStats:
    def __init__(self, window: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = defaultdict(int)
        self._tier: dict[str, dict[str, int]] = {t: defaultdict(int) for t in TIERS}
        self._lat: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=window))
        self._errors: dict[str, int] = defaultdict(int)

    def incr(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def tier(self, tier: str, outcome: str) -> None:
        """outcome: 'hit', 'miss' (searched, nothing reusable), 'refused' (candidate over
        threshold rejected by a check), 'skipped' (tier not applicable or off)."""
        with self._lock:
            self._tier[tier][outcome] += 1

    def error(self, kind: str) -> None:
        with self._lock:
            self._errors[kind] += 1

    def count(self, name: str) -> int:
        with self._lock:
            return self._counts.get(name, 0)

    def latency(self, name: str, ms: float) -> None:
        with self._lock:
            self._lat[name].append(ms)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            counts = dict(self._counts)
            tiers = {t: dict(v) for t, v in self._tier.items()}
            lat = {k: list(v) for k, v in self._lat.items()}
            errors = dict(self._errors)
        lookups = counts.get("lookups", 0)
        hits = sum(tiers[t].get("hit", 0) for t in TIERS)
        out: dict[str, Any] = {
            "lookups": lookups,
            "hits": hits,
            "misses": counts.get("misses", 0),
            "hit_rate": hits / lookups if lookups else 0.0,
            "updates": counts.get("updates", 0),
            "updates_failed": counts.get("updates_failed", 0),
            "bypassed": counts.get("bypassed", 0),  # lookups a call's cache control skipped (bypass, refresh)
            "not_stored": counts.get("not_stored", 0),  # answers a call's cache control kept out (bypass, no-store)
            "not_stored_empty": counts.get("not_stored_empty", 0),  # empty answers: never stored
            "evictions": counts.get("evictions", 0),
            "expired": counts.get("expired", 0),
            "orphans_removed": counts.get("orphans_removed", 0),
            "l1_prescreened": counts.get("l1_prescreened", 0),  # L1 lookups that needed no sentence model
            "l2_prescreened": counts.get("l2_prescreened", 0),  # L2 lookups with no stored picture near by fingerprint
            "l2_fingerprint_decided": counts.get("l2_fingerprint_decided", 0),  # ... decided on the fingerprint neighbours
            "l2_image_compared": counts.get("l2_image_compared", 0),  # L2 candidates compared locally
            "l2_image_refused": counts.get("l2_image_refused", 0),  # ... and refused: a region changed, ...
            "refusals": {k.split(":", 1)[1]: v for k, v in sorted(counts.items()) if k.startswith("refusals:")},
            "tiers": tiers,
            "errors": errors,
            "latency_ms": {},
        }
        for name, vals in sorted(lat.items()):
            if vals:
                a = np.asarray(vals)
                out["latency_ms"][name] = {
                    "n": len(vals),
                    "p50": float(np.percentile(a, 50)),
                    "p90": float(np.percentile(a, 90)),
                    "p99": float(np.percentile(a, 99)),
                }
        return out

    def persisted(self) -> dict[str, Any]:
        """What is kept at rest for `mlc stats`: the counts, not the latency windows."""
        snap = self.snapshot()
        return {k: snap[k] for k in ("lookups", "hits", "misses", "updates", "updates_failed", "bypassed",
                                     "refusals", "tiers", "errors")}

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
            for t in TIERS:
                self._tier[t].clear()
            self._lat.clear()
            self._errors.clear()


def engine_stats(engine: "MLCEngine", counters: EngineStats, warm_start: bool) -> dict[str, Any]:
    """:meth:`MLCEngine.stats`: ``counters``, the entry count and the configuration. It
    reads and never waits: ``entries`` are the entries written, ``write_behind_depth`` the
    accepted ones still queued (a metrics endpoint must not wait on storage writes)."""
    snap = counters.snapshot()
    snap["write_behind_depth"] = len(engine.pending) if engine.pending is not None else 0
    try:
        snap["entries"] = engine.entries.count()
    except Exception as exc:
        snap["entries"] = None
        snap["errors"]["stats_count"] = snap["errors"].get("stats_count", 0) + 1
        log.debug("stats: count failed: %s", exc)
    snap["config"] = {
        "storage": engine.storage_mode,
        "l1_threshold": engine.l1_threshold,
        "l2_image_threshold": engine.l2_image_threshold,
        "l2_prompt_threshold": engine.l2_prompt_threshold,
        "image_encoder": engine.encoders.image_model or None,
        "l1_prescreen": engine.text_tier.prescreen_threshold,
        "l2_prescreen": engine.multimodal_tier.prescreen_threshold,
        "tiers": {
            "L0.5": "on" if engine.enable_exact else "off",
            "L1": "on" if engine.enable_l1 else "off",
            "L2": engine.l2_status,
        },
        "ttl": engine.ttl,
        **engine.eviction.config(),
        "strict": engine.strict,
        "durable": engine.durable,
        "warm_start": warm_start,
        "check_index": engine.store.check_index_mode,
    }
    snap["verification"] = engine.verification.stats() if engine.verification is not None else {"mode": "off"}
    snap["inflight"] = engine.inflight.stats()  # identical requests that waited for a first one's answer
    snap["index"] = engine.store.index_stats()  # vectors found unreachable after a crash and repaired
    return snap
