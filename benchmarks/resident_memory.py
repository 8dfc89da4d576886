"""What the vector tiers held in memory take when every one is full.

``MAX_RESIDENT_ROWS`` rows in each tier of ``schema.RESIDENT_TIERS`` at the size the shipped
models give (fingerprints 256-d, MiniLM and its static table 384-d), with metadata as the
store returns it (64-character digests), measured with tracemalloc after the rows are held
(store/resident.py).

    python benchmarks/resident_memory.py
"""

from __future__ import annotations

import gc
import hashlib
import tracemalloc

import numpy as np


def main() -> int:
    from mlc_integrations.store.resident import MAX_RESIDENT_ROWS, ResidentVectors
    from mlc_integrations.store.schema import BY_NAME, RESIDENT_TIERS, ROW_PER_IMAGE

    dims = {"l2_fprint": 256}  # the others: 384-d (all-MiniLM-L6-v2 and its static table)

    rng = np.random.default_rng(0)
    tracemalloc.start()
    res = ResidentVectors(lambda: True)
    for tier in RESIDENT_TIERS:
        dim = dims.get(tier, 384)
        per_image = BY_NAME[tier].rows == ROW_PER_IMAGE
        rows = []
        for i in range(MAX_RESIDENT_ROWS):
            eid = hashlib.sha256(str(i).encode()).hexdigest()
            meta = {"part": hashlib.sha256(b"p%d" % (i % 7)).hexdigest(), "entry_id": eid, "idx": 0,
                    "scope": "s" * 64, "ns": "n" * 64, "ctx": "c" * 64, "imgs": "i" * 64, "n_images": 1}
            v = rng.normal(size=dim).astype(np.float32)
            rows.append((f"{eid}#0" if per_image else eid, v / np.linalg.norm(v), meta))
        res.put(tier, rows)
        del rows
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    assert all(res.serves(t) for t in RESIDENT_TIERS)
    print(f"{MAX_RESIDENT_ROWS} rows in each of {', '.join(RESIDENT_TIERS)}: {held / 1e6:.1f} MB held")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
