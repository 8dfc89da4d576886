"""How much a concurrent write slows an embedded Chroma query (why the write-behind writer
yields to lookups, store/writebehind.py).

Six persistent collections of 200 rows (256-d, 2 kB documents, like an entry's tiers); the
main thread queries them (k=8, distances and metadata) with and without a background thread
upserting one entry into all six every ``--every`` seconds; median and mean query ms, side
by side in one run.

    python benchmarks/chroma_write_contention.py [--every 0.05] [--queries 60]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time

import numpy as np


def main() -> int:
    import chromadb

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--every", type=float, default=0.05, help="seconds between written entries")
    p.add_argument("--queries", type=int, default=60)
    args = p.parse_args()
    client = chromadb.PersistentClient(path=tempfile.mkdtemp(prefix="mlc-contention-"))
    cols = [client.get_or_create_collection(f"tier{i}", metadata={"hnsw:space": "cosine"}) for i in range(6)]
    rng = np.random.default_rng(0)
    for col in cols:
        col.add(ids=[f"i{i}" for i in range(200)], embeddings=rng.normal(size=(200, 256)).tolist(),
                metadatas=[{"part": f"p{i % 30}"} for i in range(200)], documents=["d" * 2000] * 200)
    q = [rng.normal(size=256).tolist()]

    def timed() -> tuple[float, float]:
        ts = []
        for j in range(args.queries):
            t0 = time.perf_counter()
            cols[j % 6].query(query_embeddings=q, n_results=8, include=["distances", "metadatas"])
            ts.append((time.perf_counter() - t0) * 1000.0)
            time.sleep(0.005)
        return statistics.median(ts), statistics.fmean(ts)

    stop = threading.Event()

    def writer() -> None:
        j = 0
        while not stop.is_set():
            for col in cols:
                col.upsert(ids=[f"w{j}"], embeddings=rng.normal(size=(1, 256)).tolist(),
                           metadatas=[{"part": "p1"}], documents=["d" * 2000])
            j += 1
            time.sleep(args.every)

    alone = timed()
    th = threading.Thread(target=writer, daemon=True)
    th.start()
    beside = timed()
    stop.set()
    th.join()
    print(f"query alone: median {alone[0]:.2f} ms, mean {alone[1]:.2f} ms")
    print(f"beside one entry written every {args.every:g} s: median {beside[0]:.2f} ms, mean {beside[1]:.2f} ms "
          f"({beside[1] / alone[1]:.1f}x the mean)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
