"""What L2's in-memory fingerprint and prompt vectors take when both tiers are full.

``MAX_RESIDENT_ROWS`` rows in each of ``l2_fprint`` (256-d) and ``l2_prompt`` (384-d), with
metadata as the store returns it (64-character digests), measured with tracemalloc after
the rows are held (store/resident.py).

    python benchmarks/resident_memory.py
"""

from __future__ import annotations

import gc
import hashlib
import tracemalloc

import numpy as np


def main() -> int:
    from mlc_integrations.store.resident import MAX_RESIDENT_ROWS, ResidentVectors

    rng = np.random.default_rng(0)
    tracemalloc.start()
    res = ResidentVectors(lambda: True)
    for tier, dim in (("l2_fprint", 256), ("l2_prompt", 384)):
        rows = []
        for i in range(MAX_RESIDENT_ROWS):
            eid = hashlib.sha256(str(i).encode()).hexdigest()
            meta = {"part": hashlib.sha256(b"p%d" % (i % 7)).hexdigest(), "entry_id": eid, "idx": 0,
                    "scope": "s" * 64, "ns": "n" * 64, "ctx": "c" * 64, "imgs": "i" * 64, "n_images": 1}
            v = rng.normal(size=dim).astype(np.float32)
            rows.append((f"{eid}#0" if tier == "l2_fprint" else eid, v / np.linalg.norm(v), meta))
        res.put(tier, rows)
        del rows
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    assert res.serves("l2_fprint") and res.serves("l2_prompt")
    print(f"{MAX_RESIDENT_ROWS} rows per tier, both tiers: {held / 1e6:.1f} MB held")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
