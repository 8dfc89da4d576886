"""The first text-semantic (L1) lookup of an in-memory engine against the second, in one
process: the verifier's lexicon loads in the background when the engine is built, so the
first judged candidate must not pay for it.

    python benchmarks/first_l1_lookup.py
"""

from __future__ import annotations

import time


def main() -> None:
    from mlc_integrations import CacheRequest, MLCEngine

    e = MLCEngine(image_encoder=None)
    e.update(CacheRequest(text="What is the capital of France?"), {"text": "Paris"})
    e.lookup(CacheRequest(text="How tall is Mount Everest?"))  # the sentence model loads (first use)
    e.flush()
    t0 = time.perf_counter()
    first = e.lookup_explained(CacheRequest(text="What's the capital city of France?"))
    t1 = time.perf_counter()
    second = e.lookup_explained(CacheRequest(text="Tell me the capital of France."))
    t2 = time.perf_counter()
    print(f"first judged L1 lookup {1000 * (t1 - t0):.0f} ms ({first.tiers.get('L1')}), "
          f"second {1000 * (t2 - t1):.0f} ms ({second.tiers.get('L1')}); ratio {(t1 - t0) / (t2 - t1):.1f}x")
    e.close()


if __name__ == "__main__":
    main()
