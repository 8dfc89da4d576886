"""How often embedded Chroma writes freed process memory holding a prompt to disk.

hnswlib, under Chroma's HNSW segments, allocates each index's buffers with ``malloc`` at
the index's full capacity and persists the whole capacity (chroma-core/chroma#7688), so
the slots past the live elements of ``length.bin`` and ``data_level0.bin`` hold whatever
the writing process's heap held before. With ``store_prompts=False`` the cache hands
Chroma no prompt text (``tests/unit/test_isolation.py``); this study measures what that
heap residue can still carry. Each trial fills the heap with freed copies of a secret
prompt (as CPython's UCS-2 strings, the form a string with any character past U+00FF
takes), stores and finds the secret through a fresh persistent engine with
``store_prompts=False``, closes it and scans every file of its directory for the
secret's words in UTF-8 and UTF-16::

    python -m evaluation.studies.heap_at_rest --trials 30
    MALLOC_PERTURB_=165 python -m evaluation.studies.heap_at_rest --trials 30

The second run sets glibc's allocator to fill every allocation, so the unused capacity
is a fixed byte pattern. Prints one JSON line: trials, trials with a find, the files.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
from collections import Counter
from pathlib import Path

from mlc_integrations import CacheRequest, MLCEngine, WriteOptions

SECRET = "Patient Zyxwvutsr Quintanilla-Oberholzer reports symptom QX-7741 since March"
WORDS = ("Zyxwvutsr", "Quintanilla-Oberholzer", "QX-7741")
NEEDLES = tuple(w.encode(enc) for w in WORDS for enc in ("utf-8", "utf-16-le"))


def _spray(n: int = 20000) -> None:
    junk = [f"\u2192 {SECRET} {i}" * (1 + i % 40) for i in range(n)]
    del junk
    gc.collect()


def trial(directory: Path) -> list[str]:
    """One trial; the files (by name) in which a needle was found."""
    _spray()
    eng = MLCEngine(persist_directory=str(directory), writes=WriteOptions(store_prompts=False), image_encoder=None)
    eng.update(CacheRequest(text=SECRET, scope="m"), {"answer": "see a doctor"})
    _spray()
    assert eng.lookup(CacheRequest(text=f" {SECRET}\n", scope="m")) is not None
    eng.close()
    return [p.name for p in sorted(directory.rglob("*")) if p.is_file() and any(n in p.read_bytes() for n in NEEDLES)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=30)
    args = ap.parse_args()
    files: Counter[str] = Counter()
    found = 0
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.trials):
            names = trial(Path(tmp) / f"t{k}")
            found += bool(names)
            files.update(set(names))
    print(json.dumps({"trials": args.trials, "trials_with_prompt_bytes_on_disk": found, "files": dict(files),
                      "MALLOC_PERTURB_": os.environ.get("MALLOC_PERTURB_")}))


if __name__ == "__main__":
    main()
