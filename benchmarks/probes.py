"""Small measurements behind figures quoted in the README and docs (each prints its own).

    ./dev python benchmarks/probes.py ef --n 100000          # HNSW recall@1 and query ms, search_ef 10 vs 100
    ./dev python benchmarks/probes.py metadata               # Chroma query with vs without metadata
    ./dev python benchmarks/probes.py minilm                 # one all-MiniLM-L6-v2 sentence, 1 vs 2 threads
    ./dev python benchmarks/probes.py update                 # lookup (miss) + update on an embedded persistent store
    ./dev python benchmarks/probes.py photos                 # mlc-easyvqa-tiny cosine between different skimage photos
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time
from typing import Any, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import numpy as np  # noqa: E402


def _median_ms(fn: Callable[[int], Any], n: int) -> float:
    xs = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        xs.append((time.perf_counter() - t) * 1000.0)
    return statistics.median(xs)


def _client() -> Any:
    import chromadb
    from chromadb.config import Settings

    return chromadb.EphemeralClient(Settings(anonymized_telemetry=False))


def _unit(rng: np.random.Generator, n: int, dim: int = 384) -> np.ndarray:
    x = rng.normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def ef(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(0)
    x = _unit(rng, args.n)
    probes = rng.choice(args.n, 200, replace=False)
    near = x[probes] + 0.01 * rng.normal(size=(200, 384)).astype(np.float32)
    cl = _client()
    for search_ef in (10, 100):
        col = cl.create_collection(f"ef{search_ef}", metadata={"hnsw:space": "cosine", "hnsw:search_ef": search_ef})
        for s in range(0, args.n, 5000):
            col.add(ids=[str(i) for i in range(s, min(args.n, s + 5000))], embeddings=x[s:s + 5000])
        found = sum(col.query(query_embeddings=[q.tolist()], n_results=16, include=[])["ids"][0][0] == str(p)
                    for q, p in zip(near, probes))
        ms = _median_ms(lambda i: col.query(query_embeddings=[near[i].tolist()], n_results=16, include=["distances"]), 200)
        print(f"{args.n:,} vectors, search_ef {search_ef}: recall@1 {found / 200:.2f}, query median {ms:.2f} ms")


def metadata(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(0)
    x = _unit(rng, 300)
    h = lambda s: hashlib.sha256(s.encode()).hexdigest()  # noqa: E731
    col = _client().create_collection("meta", metadata={"hnsw:space": "cosine"})
    for i in range(300):  # the engine's metadata shape: digests, expiry, partition key
        col.upsert(ids=[h(str(i))], embeddings=x[i:i + 1], metadatas=[{
            "scope": h("s")[:32], "ns": "", "ctx": h("c"), "imgs": h(f"i{i}"), "n_images": 1,
            "expires_at": 1e18, "v": 1, "part": h(f"p{i % 3}")[:32]}])
    for k in (16, 256):
        for inc in (["distances"], ["distances", "metadatas"]):
            ms = _median_ms(lambda i: col.query(query_embeddings=[x[i].tolist()], n_results=k, include=inc), 40)
            print(f"top-{k} include={inc}: {ms:.2f} ms")


def minilm(args: argparse.Namespace) -> None:
    import torch

    from mlc_integrations.embed.models import TextEmbedder

    model = TextEmbedder.shared(None, backend="torch")._ensure()  # the ONNX backends: benchmarks/text_encoder.py
    for threads in (1, 2):
        torch.set_num_threads(threads)
        ms = _median_ms(lambda i: model.encode([f"What colour is the shape number {i} in this image?"]), 30)
        print(f"all-MiniLM-L6-v2, one sentence, {threads} thread(s): {ms:.1f} ms")


def update(args: argparse.Namespace) -> None:
    from PIL import Image

    from mlc_integrations import CacheRequest, MLCEngine

    eng = MLCEngine(persist_directory=tempfile.mkdtemp(), image_encoder="mlc-easyvqa-tiny")
    pic = lambda i: Image.fromarray(np.random.default_rng(i).integers(0, 256, (64, 64, 3), dtype=np.uint8))  # noqa: E731
    eng.update(CacheRequest(text="warm up", images=[pic(999)]), "w")
    look, upd = [], []
    for i in range(40):
        r = CacheRequest(text=f"What shape is number {i} here?", images=[pic(i)])
        t = time.perf_counter()
        eng.lookup(r)
        look.append((time.perf_counter() - t) * 1000.0)
        t = time.perf_counter()
        eng.update(r, {"a": i})
        upd.append((time.perf_counter() - t) * 1000.0)
    print(f"embedded persistent store: miss lookup median {statistics.median(look):.1f} ms, "
          f"update median {statistics.median(upd):.1f} ms (p90 {np.percentile(upd, 90):.1f})")


def photos(args: argparse.Namespace) -> None:
    from evaluation.harness.workloads import local_photos
    from mlc_integrations.embed.models import ClipEmbedder, ClipSpec

    ph = local_photos()
    names = sorted(ph)
    clip = ClipEmbedder.shared(ClipSpec.parse("mlc-easyvqa-tiny"))
    v = clip.embed_images([ph[n].convert("RGB") for n in names], [f"probe-{n}" for n in names])
    off = (v @ v.T)[np.triu_indices(len(names), 1)]
    print(f"{len(off)} pairs of different photos: median cosine {np.median(off):.3f}, "
          f">= 0.95: {(off >= 0.95).mean():.0%}, max {off.max():.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="probe", required=True)
    e = sub.add_parser("ef")
    e.add_argument("--n", type=int, default=100_000)
    for name in ("metadata", "minilm", "update", "photos"):
        sub.add_parser(name)
    args = ap.parse_args()
    {"ef": ef, "metadata": metadata, "minilm": minilm, "update": update, "photos": photos}[args.probe](args)


if __name__ == "__main__":
    main()
