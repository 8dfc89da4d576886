"""The policy online: error-bounded mode over a long candidate stream with known
correctness, and the latency the verifier adds per candidate."""

from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mlc_integrations.verify import VerificationPolicy, Verifier
from .data import SEED, EmbeddingCache, load_qqp


def simulate_stream(verifier: Verifier, pairs: Sequence[tuple[str, str]], cos: np.ndarray, labels: np.ndarray,
                    delta: float, steps: int, explore_rate: float, seed: int = SEED,
                    window: int = 2000) -> list[dict[str, float]]:
    """Error-bounded policy over a long stream of candidates with known correctness.

    Each step draws a (new, stored) pair uniformly from the pool (so stored questions
    recur, as popular entries do); a hit is scored against its label; a miss
    (refused or explored) is followed by the application's update, whose fresh answer
    equals the stored one exactly when reuse would have been right.
    """
    rng = np.random.default_rng(seed)
    pol = VerificationPolicy(verifier, max_false_hit_rate=delta, explore_rate=explore_rate, seed=seed)
    order = rng.integers(0, len(pairs), size=steps)
    rows = []
    hits = wrong = 0
    w_hits = w_wrong = 0
    for step, i in enumerate(order, start=1):
        a, b = pairs[i]
        stored = f"answer-{i}"
        # The cached entry is the stored question: its neighbourhood recurs in the stream.
        d = pol.decide(a, b, float(cos[i]), entry_id=b, request_key=f"r{step}", stored_answer=stored)
        if d.accept:
            hits += 1
            w_hits += 1
            if not labels[i]:
                wrong += 1
                w_wrong += 1
        else:
            fresh = stored if labels[i] else f"other-{i}"
            pol.observe(f"r{step}", fresh)
        if step % window == 0:
            st = pol.stats()
            fhr = st["false_hit_rate"]
            rows.append({"step": step, "hit_rate_window": w_hits / window,
                         "false_hit_rate_window": w_wrong / w_hits if w_hits else float("nan"),
                         "false_hit_rate_cumulative": wrong / hits if hits else float("nan"),
                         "threshold": st["threshold"], "labels": st["labels"],
                         "estimate": fhr["estimate"] if fhr else float("nan"),
                         "upper_bound": fhr["upper_bound"] if fhr else float("nan"),
                         "explored": st["explored"], "by_entry": st["accepted_by_entry"]})
            w_hits = w_wrong = 0
    return rows


def simulation_pool(args: argparse.Namespace) -> tuple[list[tuple[str, str]], np.ndarray, np.ndarray]:
    """Candidate pairs with known correctness: qqp_val pairs and easy-vqa *test* same-image
    pairs whose cosine reaches the retrieval threshold."""
    import easy_vqa

    from mlc_integrations.engine import DEFAULT_L1_THRESHOLD

    qqp = load_qqp(Path(args.data_dir))
    qs, ans, ids = easy_vqa.get_test_questions()
    by_img: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for q, a, i in zip(qs, ans, ids):
        by_img[int(i)].append((q, a))
    va, vb, vy = [], [], []
    for qa in by_img.values():
        for q1, a1 in qa:
            for q2, a2 in qa:
                if q1 != q2:
                    va.append(q1)
                    vb.append(q2)
                    vy.append(int(a1 == a2))
    emb = EmbeddingCache(args.text_model, Path(args.cache_dir))
    a = qqp.a + va
    b = qqp.b + vb
    y = np.concatenate([qqp.y, np.asarray(vy)])
    cos = emb.cosines(a, b)
    keep = cos >= DEFAULT_L1_THRESHOLD
    idx = np.nonzero(keep)[0]
    return [(a[i], b[i]) for i in idx], cos[idx], y[idx]


def cmd_simulate(args: argparse.Namespace) -> None:
    verifier = Verifier.load(args.verifier) if args.verifier else Verifier.default()
    pairs, cos, y = simulation_pool(args)
    print(f"## Error-bounded mode: {args.steps} candidates drawn from {len(pairs)} pairs "
          f"(qqp_val + easy-vqa test, cosine >= retrieval threshold; {1 - y.mean():.1%} would be wrong hits)\n")
    for delta in args.deltas:
        rows = simulate_stream(verifier, pairs, cos, y, delta, args.steps, args.explore_rate)
        print(f"### δ = {delta}, explore_rate = {args.explore_rate}\n")
        print("| candidates so far | hit rate (window) | false-hit rate (window) | false-hit rate (cumulative) | "
              "estimate / upper bound in stats() | band threshold | labels | hits via entry evidence |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['step']} | {r['hit_rate_window']:.3f} | {r['false_hit_rate_window']:.3f} | "
                  f"{r['false_hit_rate_cumulative']:.3f} | {r['estimate']:.3f} / {r['upper_bound']:.3f} | "
                  f"{r['threshold']:.3f} | {r['labels']} | {r['by_entry']} |")
        print()


def cmd_latency(args: argparse.Namespace) -> None:
    verifier = Verifier.load(args.verifier) if args.verifier else Verifier.default()
    qqp = load_qqp(Path(args.data_dir))
    n = min(args.n, len(qqp))
    use_vectors = verifier.head_dim() is not None and args.vectors
    # the policy serves the "vectors" model only with embedding_head=True (else "full")
    pol = VerificationPolicy(verifier, embedding_head=use_vectors)
    vecs: list[Any] = [None] * n
    if use_vectors:
        emb = EmbeddingCache(args.text_model, Path(args.cache_dir))
        u, v = emb.vectors(qqp.a[:n]).astype(np.float32), emb.vectors(qqp.b[:n]).astype(np.float32)
        vecs = list(zip(u, v))
    models: Counter[str] = Counter()
    times = []
    for a, b, uv in zip(qqp.a[:n], qqp.b[:n], vecs):  # distinct texts: no profile-cache help
        t0 = time.perf_counter()
        d = pol.decide(a, b, 0.9, entry_id="e", request_key="r", stored_answer="x", vectors=uv)
        times.append((time.perf_counter() - t0) * 1000.0)
        models[d.model] += 1
    t = np.asarray(times)
    print(f"verifier decision per candidate over {n} qqp_val pairs (model {dict(models)}): "
          f"median {np.median(t):.3f} ms, p90 {np.percentile(t, 90):.3f} ms, p99 {np.percentile(t, 99):.3f} ms")
    if use_vectors:
        # The engine's extra storage read for the "vectors" model: one stored L1 vector
        # per verified candidate (embedded Chroma, in memory; embeddings supplied).
        from mlc_integrations.engine import MLCEngine
        from mlc_integrations.request import CacheRequest

        eng = MLCEngine(image_encoder=None)
        try:
            ids = [eng.update(CacheRequest(text=b, text_embedding=vb.tolist(), scope="lat"), "x")
                   for b, (_u, vb) in zip(qqp.b[:200], vecs[:200])]
            reads = []
            for eid in ids:
                t0 = time.perf_counter()
                eng.entries.vectors("l1", [str(eid)])
                reads.append((time.perf_counter() - t0) * 1000.0)
        finally:
            eng.close()
        r = np.asarray(reads)
        print(f"stored-vector read per candidate (engine, embedded Chroma, {len(r)} entries): "
              f"median {np.median(r):.3f} ms, p90 {np.percentile(r, 90):.3f} ms")
