"""The engine's own cost, without model time: lookups and updates with supplied text
embeddings on in-memory Chroma (200 entries): medians of 300 L0.5 hits, 300 L1 hits,
300 misses and 200 synchronous updates. Used to compare two checkouts side by side:

    for r in 1 2 3; do for d in ../before ../after; do (cd $d && ./dev python benchmarks/engine_overhead.py); done; done

(run in each checkout, alternating, so both see the same machine load).
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Callable

import numpy as np

from mlc_integrations import CacheRequest, MLCEngine


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


def main() -> None:
    try:
        eng = MLCEngine(durable=True, image_encoder=None)  # writes on the caller's path, as before write-behind
    except TypeError:  # a checkout from before the durable option: always synchronous
        eng = MLCEngine(image_encoder=None)
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(200, 384))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    upd = [timed(lambda i=i: eng.update(CacheRequest(text=f"stored question {i}", scope="s",
                                                     text_embedding=vecs[i].tolist()), i)) for i in range(200)]
    exact = [timed(lambda i=i: eng.lookup(CacheRequest(text=f"stored question {i % 200}", scope="s",
                                                       text_embedding=vecs[i % 200].tolist()))) for i in range(300)]
    l1 = []
    for i in range(300):
        near = vecs[i % 200] + 0.001 * rng.normal(size=384)
        l1.append(timed(lambda near=near, i=i: eng.lookup(CacheRequest(
            text=f"stored question {i % 200}?", scope="s", text_embedding=near.tolist()))))
    miss = [timed(lambda i=i: eng.lookup(CacheRequest(text=f"other {i}", scope="s",
                                                      text_embedding=rng.normal(size=384).tolist()))) for i in range(300)]
    print(json.dumps({"update": statistics.median(upd), "L0.5 hit": statistics.median(exact),
                      "L1 hit": statistics.median(l1), "miss": statistics.median(miss)}))


if __name__ == "__main__":
    main()
