"""What the OpenTelemetry hooks cost a lookup, side by side in one run.

One in-memory engine (200 entries, supplied text embeddings: no model time), four ways
of running the same lookups, interleaved round by round in a shuffled order so every
way sees the same machine load:

* ``no-op build``: the engine's lookup without the hooks (the undecorated method);
* ``no-op build again``: the same, a second time: the A/A ratio is the noise floor;
* ``hooks, no SDK``: the engine as shipped, no SDK provider installed (what every
  application that does not use OpenTelemetry runs);
* ``hooks, SDK``: an SDK tracer provider (spans to a no-op processor) and meter provider
  (an in-memory reader): what a traced application pays.

For each way and workload (L0.5 exact hits, misses) it prints the median per-lookup time
(the median of the rounds' medians), its ratio to the no-op build, and the interquartile
range of the per-round ratios (the A/A row's range is the noise floor):

    PYTHONPATH=. python benchmarks/telemetry_overhead.py [--rounds 30] [--n 200]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import types
from typing import Any, Callable

import numpy as np

from mlc_integrations import CacheRequest, MLCEngine
from mlc_integrations.runtime import telemetry


def build_engine(n: int) -> tuple[MLCEngine, list[CacheRequest], list[CacheRequest]]:
    eng = MLCEngine(durable=True, image_encoder=None, verifier="off", l1_threshold=0.95)
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(n, 384))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    stored = [CacheRequest(text=f"stored question {i}", scope="s", text_embedding=vecs[i].tolist()) for i in range(n)]
    for i, req in enumerate(stored):
        eng.update(req, f"answer {i}")
    others = rng.normal(size=(n, 384))
    others /= np.linalg.norm(others, axis=1, keepdims=True)
    misses = [CacheRequest(text=f"other question {i}", scope="s", text_embedding=others[i].tolist()) for i in range(n)]
    return eng, stored, misses


def per_lookup_ms(eng: MLCEngine, requests: list[CacheRequest]) -> float:
    times = []
    for req in requests:
        t0 = time.perf_counter()
        eng.lookup_explained(req)
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--n", type=int, default=200)
    args = ap.parse_args()

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    eng, stored, misses = build_engine(args.n)
    hooked = type(eng)._lookup_explained
    raw = hooked.__wrapped__  # the method as written, without telemetry.traced_lookup
    sdk_tp = TracerProvider()
    sdk_tp.add_span_processor(SpanProcessor())  # spans are built and ended, then dropped
    sdk_mp = MeterProvider(metric_readers=[InMemoryMetricReader()])

    def use(hooks: bool, sdk: bool) -> Callable[[], None]:
        def apply() -> None:
            if hooks:
                eng.__dict__.pop("_lookup_explained", None)
            else:
                eng._lookup_explained = types.MethodType(raw, eng)  # type: ignore[method-assign]
            if sdk:
                telemetry.configure(tracer_provider=sdk_tp, meter_provider=sdk_mp)
            else:
                telemetry.reset()
        return apply

    ways: dict[str, Callable[[], None]] = {
        "no-op build": use(False, False),
        "no-op build again": use(False, False),
        "hooks, no SDK": use(True, False),
        "hooks, SDK": use(True, True),
    }
    workloads = {"L0.5 hit": stored, "miss": misses}
    for apply in ways.values():  # warm every path once
        apply()
        per_lookup_ms(eng, stored[:20])
        per_lookup_ms(eng, misses[:20])
    samples: dict[str, dict[str, list[float]]] = {w: {k: [] for k in ways} for w in workloads}
    order = list(ways)
    rnd = random.Random(0)
    for _ in range(args.rounds):
        rnd.shuffle(order)
        for way in order:
            ways[way]()
            for wl, reqs in workloads.items():
                samples[wl][way].append(per_lookup_ms(eng, reqs))
    telemetry.reset()
    eng.__dict__.pop("_lookup_explained", None)
    out: dict[str, Any] = {"rounds": args.rounds, "lookups_per_round": args.n}
    for wl in workloads:
        base_rounds = samples[wl]["no-op build"]
        base = statistics.median(base_rounds)
        out[wl] = {}
        for way, v in samples[wl].items():
            # the same round's ratio to the no-op build: its spread is what the machine's noise allows
            paired = sorted(x / b for x, b in zip(v, base_rounds))
            q1, q3 = paired[len(paired) // 4], paired[(3 * len(paired)) // 4]
            out[wl][way] = {"ms": round(statistics.median(v), 4), "ratio": round(statistics.median(v) / base, 3),
                            "round_ratio_iqr": [round(q1, 3), round(q3, 3)]}
    print(json.dumps(out, indent=2))
    eng.close()


if __name__ == "__main__":
    main()
