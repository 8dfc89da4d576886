"""What one judged candidate costs, per backend, as ratios to E in the same run.

    python benchmarks/judge_latency.py [--n 300] [--judge mlc_integrations/assets/judge.npz]

E: one sentence through all-MiniLM-L6-v2 in fp32 on torch (sentence-transformers), the
budgets' unit (as ``benchmarks/latency.py``). A judged candidate: the pair tokenized, the
cross-encoder run alone (batch 1, as the engine judges), the head -- through the judge's
ONNX int8 file, its fp32 file, and the policy's ``decide`` on the serving backend (what a
candidate costs the engine: the judge plus the bookkeeping). Pairs: the first natural
training pairs of writer w1 (stored, new), a new pair each time (the judge memoizes
nothing). Backends alternate pair by pair, so that load from other processes falls on all.
Budget: p90 <= 3 ms per judged candidate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--judge", default="")
    args = ap.parse_args()

    from evaluation.sources.judge_data import read_natural
    from mlc_integrations.embed.models import TextEmbedder
    from mlc_integrations.verify import Verifier
    from mlc_integrations.verify.policy import VerificationPolicy
    from mlc_integrations.verify.text.judge import DEFAULT_JUDGE_PATH, PairJudge

    path = Path(args.judge) if args.judge else DEFAULT_JUDGE_PATH
    rows = read_natural({"w1": args.n})
    pairs = [(r["a"], r["b"]) for r in rows][: args.n]
    ref = TextEmbedder(None, backend="torch")
    ref.embed(["warm up the reference encoder"])
    judges = {"onnx-int8": PairJudge(path, backend="onnx-int8"), "onnx-fp32": PairJudge(path, backend="onnx-fp32")}
    for j in judges.values():
        j.warmup()
    if judges["onnx-int8"].kind != "full":
        from mlc_integrations.verify.text.signals import text_features  # noqa: F401  (lexicon loaded before timing)
        Verifier.default().probability("warm up", "warm up now", 0.9)
    policy = VerificationPolicy(Verifier.default(), judge=PairJudge(path))
    policy.warmup()
    times: dict[str, list[float]] = {"E": [], **{f"judge {k}": [] for k in judges},
                                     f"policy.decide (judge, {policy.judge.backend})": []}
    for i, (a, b) in enumerate(pairs):
        t0 = time.perf_counter()
        ref._ensure().encode([f"{b} ({i})"])  # the model itself, no memo
        times["E"].append((time.perf_counter() - t0) * 1000.0)
        for k, j in judges.items():
            t0 = time.perf_counter()
            j.probability(a, b, 0.9)  # the cosine is read by the lora kind's features only
            times[f"judge {k}"].append((time.perf_counter() - t0) * 1000.0)
        t0 = time.perf_counter()
        policy.decide(b, a, 0.9)
        times[f"policy.decide (judge, {policy.judge.backend})"].append((time.perf_counter() - t0) * 1000.0)
    e = statistics.median(times["E"])
    out = {"pairs": len(pairs), "judge": str(path), "threads": judges["onnx-int8"]._threads,
           "backends": {k: j.backend for k, j in judges.items()}, "E_median_ms": round(e, 3), "rows": {}}
    print(f"{'operation':40} {'median ms':>10} {'p90 ms':>8} {'p99 ms':>8} {'median/E':>9} {'p90/E':>7}")
    for k, xs in times.items():
        r = {"median_ms": round(statistics.median(xs), 3), "p90_ms": round(pct(xs, 90), 3),
             "p99_ms": round(pct(xs, 99), 3), "median_over_E": round(statistics.median(xs) / e, 3),
             "p90_over_E": round(pct(xs, 90) / e, 3)}
        out["rows"][k] = r
        print(f"{k:40} {r['median_ms']:>10.3f} {r['p90_ms']:>8.3f} {r['p99_ms']:>8.3f} {r['median_over_E']:>9.3f} "
              f"{r['p90_over_E']:>7.3f}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
