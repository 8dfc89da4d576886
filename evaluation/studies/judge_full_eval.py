"""The fully fine-tuned judge against the shipped trees, on validation and held-out sets.

    python -m evaluation.studies.judge_full_eval report [--judge mlc_integrations/assets/judge.npz] \\
        --out docs/results/judge_full_eval

Every pair judged alone, as the engine judges a candidate (stored = ``a``, new = ``b``);
*reused* = the L1 cosine reaches the retrieval floor **and** the scorer reaches its
threshold. Scorers: the shipped trees at their operating point (floor 0.80, P >= the
policy's ``min_precision`` 0.80: what the engine decides without the judge), the judge at
``max_wrong_reuse`` = 0.01 through its calibration table (validation split only) behind
today's floor 0.80, and the same judge behind a floor of 0.50 (what a recall-oriented
retrieval floor would let it see). Sets: the natural validation split (the judge's
calibration set: not a test), the blind natural sets b1-b4 (b3, b4 by writers who never
saw the spec), the contrast suite's test split, the fresh contrast set and qqp_val's
held-out 30 % (when the shared data is present). Also: the int8 file's decisions against
the fp32 file's on the validation split (both outcomes), and the trade curve on the
blind sets (PNG + table) with the trees' and the judge's operating points marked.
Test sets choose nothing here.
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from ..sources.judge_data import BLIND_SETS, Pairs, blind_pairs, fresh, natural_split, qqp_pairs, suite
from ..training.judge_train import git_commit
from ..training.verifier.data import DEFAULT_CACHE_DIR, DEFAULT_DATA_DIR, EmbeddingCache, log_progress
from .judge_eval import qqp_curve, rates

TREES_FLOOR = 0.80  # DEFAULT_L1_THRESHOLD
CURVE_T = tuple(np.round(np.r_[0.02, np.arange(0.05, 0.95, 0.05), np.arange(0.95, 0.999, 0.01), 0.995, 0.998,
                               0.999], 4))


def _fmt(x: Optional[float], pct: bool = True) -> str:
    if x is None:
        return "—"
    return f"{100 * x:.1f} %" if pct else f"{x:.3f}"


def sets(snapshot: dict[str, int], data_dir: Path) -> dict[str, Pairs]:
    _tr, val, _m = natural_split(snapshot)
    out = {"validation (natural, held-out domains; calibration set)": val}
    for b in BLIND_SETS:
        out[f"blind {b}"] = blind_pairs((b,))
    out["blind b1-b4"] = blind_pairs(BLIND_SETS)
    out["contrast suite test"] = suite("test")
    out["fresh contrast"] = fresh()
    if (data_dir / "qqp_val.csv").exists():
        out["qqp held out"] = qqp_pairs(data_dir, True)
    return out


def cached_tree_scores(trees: Any, p: Pairs, cos: np.ndarray, cache_dir: Path) -> np.ndarray:
    """The shipped trees' probabilities, kept on disk by a digest of the verifier file and rows."""
    import hashlib

    from mlc_integrations.verify import DEFAULT_VERIFIER_PATH

    h = hashlib.sha256(Path(DEFAULT_VERIFIER_PATH).read_bytes())
    for a, b, c in zip(p.a, p.b, cos):
        h.update(f"{a}\0{b}\0{c:.6f}\n".encode())
    path = cache_dir / "judge" / f"trees-{h.hexdigest()[:16]}.npy"
    if path.exists():
        return np.load(path)
    s = trees.probabilities(list(zip(p.a, p.b)), cos, "full")
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, s)
    return s


def curve(p: Pairs, cos: np.ndarray, s: np.ndarray, floor: float, ts: Sequence[float]) -> list[dict[str, Any]]:
    return [dict(rates(p, cos, s, floor, float(t)), threshold=float(t)) for t in ts]


def cmd_report(args: argparse.Namespace) -> None:
    from mlc_integrations.verify import Verifier
    from mlc_integrations.verify.policy import DEFAULT_MIN_PRECISION
    from mlc_integrations.verify.text.judge import PairJudge

    judge = PairJudge(args.judge)
    if args.prepare_only:  # the cosines and the trees' scores, cached for the report
        snap = json.loads(Path(args.snapshot).read_text())["snapshot_lines"]
        data = sets(snap, Path(args.data_dir))
        emb = EmbeddingCache(None, Path(args.cache_dir))
        trees = Verifier.default()
        for k, p in data.items():
            cached_tree_scores(trees, p, emb.cosines(p.a, p.b), Path(args.cache_dir))
            log_progress(f"prepared {k}")
        return
    knob_t = judge.threshold_for(args.max_wrong_reuse) if judge.calibration else judge.threshold
    snapshot = judge.meta.get("snapshot_lines") or json.loads(Path(args.snapshot).read_text())["snapshot_lines"]
    data = sets(snapshot, Path(args.data_dir))
    emb = EmbeddingCache(None, Path(args.cache_dir))
    cos = {k: emb.cosines(p.a, p.b) for k, p in data.items()}
    trees = Verifier.default()
    tree_t = trees.models["full"].threshold_for_precision(DEFAULT_MIN_PRECISION)
    t0 = time.perf_counter()
    tree_s = {k: cached_tree_scores(trees, p, cos[k], Path(args.cache_dir)) for k, p in data.items()}
    log_progress(f"trees scored in {time.perf_counter() - t0:.0f}s")
    t0 = time.perf_counter()
    judge_s = {k: judge.probabilities(list(zip(p.a, p.b)), cos[k]) for k, p in data.items() if k != "blind b1-b4"}
    judge_s["blind b1-b4"] = np.concatenate([judge_s[f"blind {b}"] for b in BLIND_SETS])
    log_progress(f"judge scored in {time.perf_counter() - t0:.0f}s ({judge.backend})")
    scorers = [(f"trees `full` (shipped), floor {TREES_FLOOR:.2f}, P ≥ {tree_t:.2f}", TREES_FLOOR, tree_t, tree_s),
               (f"judge, floor {TREES_FLOOR:.2f}, max_wrong_reuse {args.max_wrong_reuse} (P ≥ {knob_t:.3f})",
                TREES_FLOOR, knob_t, judge_s),
               (f"judge, floor {args.low_floor:.2f}, max_wrong_reuse {args.max_wrong_reuse} (P ≥ {knob_t:.3f})",
                args.low_floor, knob_t, judge_s)]
    res: dict[str, Any] = {"commit": git_commit(), "command": args.command_line, "machine": platform.machine(),
                           "judge": {"file": args.judge, "kb": round(Path(args.judge).stat().st_size / 1024),
                                     "backend": judge.backend, "name": judge.meta.get("name"),
                                     "calibration": judge.calibration}, "rows": {}}
    md = io.StringIO()
    md.write("# The fully fine-tuned judge against the shipped trees\n\n")
    md.write(f"Command: `{args.command_line}` at commit `{res['commit']}` ({platform.machine()}; judge backend "
             f"`{judge.backend}`). Each pair judged alone (stored = `a`, new = `b`); *reused* = cosine ≥ floor "
             "**and** score ≥ threshold. The judge's threshold comes from its calibration table (validation "
             "split); the blind and held-out sets chose nothing.\n\n")
    md.write("| scorer | set | rewordings / same-answer reused | answer-changing reused | precision |\n"
             "|---|---|---|---|---|\n")
    for name, f, t, sc in scorers:
        res["rows"][name] = {}
        for k, p in data.items():
            r = rates(p, cos[k], sc[k], f, t)
            extra = ""
            if k == "qqp held out":
                r.update(qqp_curve(p, cos[k], sc[k], f))
                extra = (f" (best precision at recall ≥ 0.40: {_fmt(r['best_precision_at_recall_0.40'], False)}; "
                         f"best recall at precision ≥ 0.90: {_fmt(r['best_recall_at_precision_0.90'], False)})")
            res["rows"][name][k] = r
            md.write(f"| {name} | {k} | {r['same_reused']}/{r['same']} ({_fmt(r['same_rate'])}) | "
                     f"{r['diff_reused']}/{r['diff']} ({_fmt(r['diff_rate'])}) | {_fmt(r['precision'], False)}{extra} |\n")

    # int8 vs fp32: decisions on the validation split, both outcomes
    val_key = next(iter(data))
    vp = data[val_key]
    if args.int8_check:
        pairs = list(zip(vp.a, vp.b))
        j32 = judge if judge.backend == "onnx-fp32" else PairJudge(args.judge, backend="onnx-fp32")
        j8 = judge if judge.backend == "onnx-int8" else PairJudge(args.judge, backend="onnx-int8")
        s32 = judge_s[val_key] if j32 is judge else j32.probabilities(pairs, cos[val_key])
        s8 = judge_s[val_key] if j8 is judge else j8.probabilities(pairs, cos[val_key])
        a32, a8 = s32 >= knob_t, s8 >= knob_t
        res["int8_vs_fp32_validation"] = {
            "backend_int8": j8.backend, "pairs": len(vp), "fp32_accepted": int(a32.sum()),
            "accepted_by_fp32_refused_by_int8": int((a32 & ~a8).sum()),
            "refused_by_fp32_accepted_by_int8": int((~a32 & a8).sum()),
            "max_abs_diff": float(np.abs(s32 - s8).max()), "median_abs_diff": float(np.median(np.abs(s32 - s8)))}
        r = res["int8_vs_fp32_validation"]
        md.write(f"\n## int8 against fp32 (validation split, {len(vp)} pairs, threshold {knob_t:.3f})\n\n"
                 f"fp32 accepts {r['fp32_accepted']}; int8 refuses {r['accepted_by_fp32_refused_by_int8']} of them "
                 f"and accepts {r['refused_by_fp32_accepted_by_int8']} that fp32 refuses; score difference "
                 f"median {r['median_abs_diff']:.4f}, max {r['max_abs_diff']:.4f} (int8 backend: `{r['backend_int8']}`).\n")

    # trade curve on the blind sets
    bk = "blind b1-b4"
    bp = data[bk]
    jc = {f: curve(bp, cos[bk], judge_s[bk], f, CURVE_T) for f in (TREES_FLOOR, args.low_floor)}
    tc = curve(bp, cos[bk], tree_s[bk], TREES_FLOOR, CURVE_T)
    tree_pt = rates(bp, cos[bk], tree_s[bk], TREES_FLOOR, tree_t)
    judge_pt = {f: rates(bp, cos[bk], judge_s[bk], f, knob_t) for f in (TREES_FLOOR, args.low_floor)}
    res["blind_curve"] = {"judge": {str(f): c for f, c in jc.items()}, "trees": tc, "trees_point": tree_pt,
                          "judge_point": {str(f): v for f, v in judge_pt.items()}}
    md.write(f"\n## Trade curve on the blind sets b1-b4 ({bp.y.count(1.0)} rewordings, "
             f"{len(bp) - bp.y.count(1.0)} answer-changing)\n\n![trade curve]({Path(args.out).name}.png)\n\n")
    md.write(f"| threshold | judge, floor {TREES_FLOOR:.2f}: rewordings / answer-changing reused | judge, floor "
             f"{args.low_floor:.2f} | trees, floor {TREES_FLOOR:.2f} |\n|---|---|---|---|\n")
    for i, t in enumerate(CURVE_T):
        a, b, c = jc[TREES_FLOOR][i], jc[args.low_floor][i], tc[i]
        md.write(f"| {t:.3f} | {_fmt(a['same_rate'])} / {_fmt(a['diff_rate'])} | {_fmt(b['same_rate'])} / "
                 f"{_fmt(b['diff_rate'])} | {_fmt(c['same_rate'])} / {_fmt(c['diff_rate'])} |\n")
    md.write(f"\nMarked: the trees at their operating point (P ≥ {tree_t:.2f}): {_fmt(tree_pt['same_rate'])} / "
             f"{_fmt(tree_pt['diff_rate'])}; the judge at max_wrong_reuse {args.max_wrong_reuse} (P ≥ {knob_t:.3f}): "
             + "; ".join(f"floor {f:.2f} {_fmt(v['same_rate'])} / {_fmt(v['diff_rate'])}" for f, v in judge_pt.items())
             + ".\n")
    md.write("\n## Calibration table shipped with the judge (validation split)\n\n| max_wrong_reuse | threshold | "
             "validation rewordings reused | validation wrong reuse |\n|---|---|---|---|\n")
    for r in judge.calibration:
        md.write(f"| {r['max_wrong_reuse']} | {r['threshold']:.4f} | {_fmt(r['validation_rewordings_reused'])} | "
                 f"{_fmt(r['validation_wrong_reuse'])} |\n")
    _plot(jc, tc, tree_pt, judge_pt, Path(args.out).with_suffix(".png"), args.low_floor)
    Path(args.out).with_suffix(".md").write_text(md.getvalue())
    Path(args.out).with_suffix(".json").write_text(json.dumps(res, indent=1))
    print(md.getvalue())


def _plot(jc: dict[float, list[dict[str, Any]]], tc: list[dict[str, Any]], tree_pt: dict[str, Any],
          judge_pt: dict[float, dict[str, Any]], path: Path, low_floor: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for f, c in jc.items():
        ax.plot([100 * r["diff_rate"] for r in c], [100 * r["same_rate"] for r in c], "-o", ms=3,
                label=f"judge, retrieval floor {f:.2f}")
    ax.plot([100 * r["diff_rate"] for r in tc], [100 * r["same_rate"] for r in tc], "-s", ms=3, color="grey",
            label="trees (shipped before)")
    ax.plot([100 * tree_pt["diff_rate"]], [100 * tree_pt["same_rate"]], "k*", ms=14, label="trees' operating point")
    for f, v in judge_pt.items():
        ax.plot([100 * v["diff_rate"]], [100 * v["same_rate"]], "r^" if f != low_floor else "rv", ms=10,
                label=f"judge at max_wrong_reuse=0.01, floor {f:.2f}")
    ax.axvline(1.0, color="r", lw=0.5, ls=":")
    ax.set_xlim(0, 15)
    ax.set_ylim(0, 100)
    ax.set_xlabel("answer-changing near-misses reused (%)")
    ax.set_ylabel("rewordings reused (%)")
    ax.set_title("Blind natural pairs b1-b4 (never trained or chosen on)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Optional[Sequence[str]] = None) -> None:
    from mlc_integrations.verify.text.judge import DEFAULT_JUDGE_PATH

    ap = argparse.ArgumentParser(prog="python -m evaluation.studies.judge_full_eval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("report")
    r.add_argument("--judge", default=str(DEFAULT_JUDGE_PATH))
    r.add_argument("--max-wrong-reuse", type=float, default=0.01)
    r.add_argument("--snapshot", default="", help="a manifest.json with snapshot_lines (for a judge without one)")
    r.add_argument("--low-floor", type=float, default=0.50)
    r.add_argument("--prepare-only", action="store_true", help="cache cosines and tree scores, then stop")
    r.add_argument("--no-int8-check", dest="int8_check", action="store_false")
    r.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    r.add_argument("--cache-dir", default=str(DEFAULT_CACHE_DIR))
    r.add_argument("--out", default="docs/results/judge_full_eval")
    r.set_defaults(func=cmd_report)
    args = ap.parse_args(argv)
    args.command_line = "python -m evaluation.studies.judge_full_eval " + " ".join(argv if argv is not None
                                                                                  else sys.argv[1:])
    args.func(args)


if __name__ == "__main__":
    main()
