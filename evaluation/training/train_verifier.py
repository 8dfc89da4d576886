"""Train the reuse verifier and print the evidence behind it.

    python -m evaluation.training.train_verifier train      # retrain assets/verifier.json, PR tables
    python -m evaluation.training.train_verifier vqa        # easy-vqa test split: refusals, VQA stream
    python -m evaluation.training.train_verifier simulate   # error-bounded mode over a long stream
    python -m evaluation.training.train_verifier latency    # added latency per candidate
    python -m evaluation.training.train_verifier signals    # each signal's PR table (no model written)
    python -m evaluation.training.train_verifier compare    # shipped recipe vs embedding-interaction variants

Training data (read in place, never copied into the repo):

* ``../shared/data/qqp_val.csv`` -- Quora question pairs, duplicate or not;
* easy-vqa's *train* questions -- every pair of questions about the same image,
  labelled "reuse correct" when their ground-truth answers are equal.

Gradient-boosted trees (scikit-learn, monotone where the direction is known) on the
signals of :mod:`mlc_integrations.verify`, isotonic calibration on out-of-fold
scores, exported as plain JSON that the library evaluates with numpy only.
scikit-learn is needed here, never at run time. The features are the library's own
(:func:`~mlc_integrations.verify.signals_from_profiles`,
:func:`~mlc_integrations.verify.pair_features`): training and serving compute them
with one function.

This module is the command line and the training recipe; its pieces are in
:mod:`evaluation.training.verifier` (``data``, ``fit``, ``metrics``, ``vqa``, ``online``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from mlc_integrations.verify import (
    DEFAULT_VERIFIER_PATH,
    SIGNAL_NAMES,
    TEXT_FEATURE_NAMES,
    VERIFIER_FORMAT,
    VERIFIER_FORMAT_VERSION,
    Verifier,
    pair_features,
)
from .verifier.data import QQP_TEST_FRACTION, EmbeddingCache, build_training_set, eval_parser, log_progress
from .verifier.fit import (
    GBDT_PARAMS,
    HEAD_C,
    MONOTONE,
    export_gbdt,
    export_head,
    export_logistic,
    fit_head,
    fit_raw,
    head_oof,
    head_score,
    infold_idf_out_of_fold,
    isotonic,
    out_of_fold,
    pca_out_of_fold,
    raw_score,
    stacked_out_of_fold,
)
from .verifier.metrics import (
    at_threshold,
    balanced_weights,
    evaluate_signals,
    floor_sweep,
    fmt_recall,
    fmt_recall_at,
    pr_row,
    pr_row_full,
)
from .verifier.online import cmd_latency, cmd_simulate
from .verifier.vqa import cmd_vqa

PRECISIONS = (0.50, 0.60, 0.70, 0.75, 0.80, 0.85, 0.90, 0.925, 0.95, 0.96, 0.97, 0.98, 0.99)

VARIANTS = {
    # texts, cosine and both embeddings: the signals, the edit features and the embedding head's score
    "vectors": ("gbdt+head", list(TEXT_FEATURE_NAMES) + ["embedding_head"]),
    "full": ("gbdt", list(TEXT_FEATURE_NAMES)),
    "lexical": ("gbdt", [s for s in TEXT_FEATURE_NAMES if s != "cosine"]),
    "cosine": ("logistic", ["cosine"]),
}


def train(args: argparse.Namespace) -> dict[str, Any]:
    pairs, cos, x, word_weights = build_training_set(args)
    y, w, src, groups = pairs.y, pairs.w, pairs.source, pairs.groups()
    strata = np.char.add(src.astype(str), y.astype(str))
    out: dict[str, Any] = {"format": VERIFIER_FORMAT, "version": VERIFIER_FORMAT_VERSION,
                           "text_model": args.text_model or "all-MiniLM-L6-v2", "word_weights": word_weights,
                           "models": {}}
    report: dict[str, Any] = {"pairs": pairs, "cos": cos, "x": x, "oof": {}}
    qqp_bw = np.ones(len(y))
    qqp_bw[src == "qqp"] = balanced_weights(y[src == "qqp"])  # class ratio of all of qqp_val
    f = None
    for name, (kind, feats) in VARIANTS.items():
        if kind == "gbdt+head" and args.no_embedding_head:
            continue
        t0 = time.perf_counter()
        if kind == "gbdt+head":
            emb = EmbeddingCache(args.text_model, Path(args.cache_dir))
            u, v = emb.vectors(pairs.a), emb.vectors(pairs.b)
            f = pair_features(u, v)
            oof, _h = stacked_out_of_fold(x, f, y, w, strata, feats, groups=groups)
            xs = x
        else:
            xs = x[:, [TEXT_FEATURE_NAMES.index(c) for c in feats]]
            oof = out_of_fold(kind, xs, y, w, strata, feats, groups=groups)
        cx, cy = isotonic(oof, y, w)
        p_oof = np.interp(oof, cx, cy)
        report["oof"][name] = p_oof
        report.setdefault("oof_raw", {})[name] = oof
        ops = []
        for prec in PRECISIONS:
            measured = {}
            for s in ("qqp", "easyvqa", "suite"):
                m = (src == s) & (cos >= args.retrieval_floor)
                measured[s] = at_threshold(p_oof[m], y[m], w[m], prec)
            # the suite: share of ALL its answer-changing / same-answer pairs reused (unreachable = refused)
            s_m = src == "suite"
            used = (p_oof >= prec) & (cos >= args.retrieval_floor)
            measured["suite_wrong_reused"] = float((used & s_m & (y == 0)).sum() / max(int((s_m & (y == 0)).sum()), 1))
            measured["suite_same_reused"] = float((used & s_m & (y == 1)).sum() / max(int((s_m & (y == 1)).sum()), 1))
            q = (src == "qqp") & (cos >= args.retrieval_floor)
            measured["qqp_balanced"] = at_threshold(p_oof[q], y[q], qqp_bw[q], prec)
            ops.append({"precision": prec, "threshold": prec, "measured_cv": measured})
        if kind == "gbdt+head":
            # Trees learn from the head's out-of-fold scores; new pairs are scored by the
            # head fit on every row.
            assert f is not None
            head = fit_head(f, y, w)
            final = fit_raw("gbdt", np.c_[x, head_oof(f, y, w, strata, groups=groups)], y, w, feats)
            spec = export_gbdt(final, feats)
            spec["embedding_head"] = export_head(head, u.shape[1])
        else:
            final = fit_raw(kind, xs, y, w, feats)
            spec = export_gbdt(final, feats) if kind == "gbdt" else export_logistic(final, feats)
        spec["calibration"] = {"x": cx.tolist(), "y": cy.tolist()}
        spec["operating_points"] = ops
        out["models"][name] = spec
        # Round trip: the numpy evaluator must reproduce scikit-learn's scores.
        check = Verifier({"format": VERIFIER_FORMAT, "version": VERIFIER_FORMAT_VERSION, "models": {"full": spec}})
        m = check.models["full"]
        if kind == "gbdt+head":
            h_sk = head_score(head, f)
            xs = np.c_[x, h_sk]
            diff = max(float(np.max(np.abs(m.head.raw(u, v) - h_sk))),  # type: ignore[union-attr]
                       float(np.max(np.abs(m.scorer.raw(xs) - raw_score(final, xs)))))
        else:
            diff = float(np.max(np.abs(m.scorer.raw(xs) - raw_score(final, xs))))
        report[f"{name}_roundtrip_max_abs_diff"] = diff
        if diff > 1e-6:
            raise AssertionError(f"exported {name} model disagrees with scikit-learn by {diff}")
        log_progress(f"model {name}: {len(feats)} signals, 5-fold CV + final fit in {time.perf_counter() - t0:.0f}s")
    out["training"] = {
        "command": "python -m evaluation.training.train_verifier train",
        "data": {"qqp_val.csv sha256[:16]": _sha(Path(args.data_dir) / "qqp_val.csv"),
                 "qqp_split": f"{1 - QQP_TEST_FRACTION:.0%} of qqp_val by question (the rest is held out)",
                 "easy_vqa": "train split questions, same-image pairs",
                 "contrast_suite": "train split (template families and natural pairs of the train side)"},
        "easyvqa_weight": args.easyvqa_weight,
        "suite_weight": args.suite_weight,
        "retrieval_floor_for_measured_cv": args.retrieval_floor,
        "gbdt_params": GBDT_PARAMS,
        "monotone": MONOTONE,
        "sklearn": _sklearn_version(),
        "trained_at": time.strftime("%Y-%m-%d"),
    }
    return {"verifier": out, "report": report}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _sklearn_version() -> str:
    import sklearn

    return str(sklearn.__version__)


def cmd_train(args: argparse.Namespace) -> None:
    res = train(args)
    rep = res["report"]
    pairs, cos, x = rep["pairs"], rep["cos"], rep["x"]
    q = pairs.source == "qqp"
    yq = pairs.y[q]
    print("## qqp_val: recall at fixed precision, 5-fold cross-validation\n")
    print(f"qqp_val's training side ({int(q.sum())} pairs split by question; the other {QQP_TEST_FRACTION:.0%} is held "
          f"out for `contrast_eval report`). Recall is over its {int(yq.sum())} duplicates; `—` = precision never "
          "reached. *natural* = qqp_val as is; *balanced* = both classes weighted equally.\n")
    print("| scorer | avg precision | recall @ P=0.90 natural | @ P=0.95 natural | @ P=0.95 balanced | @ P=0.98 balanced |")
    print("|---|---|---|---|---|---|")
    rows = [] if args.skip_signal_table else evaluate_signals(x[q], yq, pairs.w[q])
    rows.append(pr_row("verifier `full` (signals + edit features; isotonic)", rep["oof"]["full"][q], yq))
    main = "full"  # the default model; "vectors" is opt-in (embedding_head=True)
    if "vectors" in rep["oof"]:
        rows.append(pr_row("verifier `vectors` (+ embedding head, nested; isotonic)",
                           rep["oof"]["vectors"][q], yq))
    for r in rows:
        print(f"| {r['scorer']} | {r['ap']:.3f} | {fmt_recall_at(r['nat90'])} | {fmt_recall_at(r['nat95'])} | {fmt_recall_at(r['bal95'])} | {fmt_recall_at(r['bal98'])} |")
    print("\n## qqp_val: the shipped models, 5-fold CV, natural (unweighted) and class-balanced\n")
    print("| scorer | AP natural | AP balanced | R@P=0.95 natural | R@P=0.98 natural | R@P=0.95 balanced | R@P=0.98 balanced |")
    print("|---|---|---|---|---|---|---|")
    full_rows = [pr_row_full("raw cosine (no training)", cos[q], yq)]
    for name in [n for n in ("full", "vectors") if n in rep["oof"]]:
        full_rows.append(pr_row_full(f"`{name}`, raw out-of-fold score", rep["oof_raw"][name][q], yq))
        full_rows.append(pr_row_full(f"`{name}`, isotonic (shipped)", rep["oof"][name][q], yq))
    for r in full_rows:
        print(f"| {r['scorer']} | {r['ap']:.3f} | {r['ap_bal']:.3f} | {fmt_recall(r['nat95'])} | {fmt_recall(r['nat98'])} | "
              f"{fmt_recall(r['bal95'])} | {fmt_recall(r['bal98'])} |")
    print(f"\n## Retrieval floor (qqp_val, verifier `{main}` out-of-fold)\n")
    print("| cosine floor | duplicates reachable | accept p>=0.95: precision / recall | balanced | accept p>=0.90 | balanced |")
    print("|---|---|---|---|---|---|")
    for r in floor_sweep(rep["oof"][main][q], yq, cos[q], (0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)):
        cells = [f"{r[k]['precision']:.3f} / {r[k]['recall']:.3f}" for k in ("t0.95", "t0.95_bal", "t0.9", "t0.9_bal")]
        print(f"| {r['floor']:.2f} | {r['reach']:.3f} | " + " | ".join(cells) + " |")
    print(f"\n## Shipped model `{main}`: measured (CV) at its thresholds, candidates with cosine >= "
          f"{args.retrieval_floor}\n")
    print("| min_precision = threshold | qqp precision / recall | qqp balanced | easy-vqa train | suite train "
          "| suite: answer-changing reused | suite: same-answer reused |")
    print("|---|---|---|---|---|---|---|")
    for op in res["verifier"]["models"][main]["operating_points"]:
        m = op["measured_cv"]
        cells = [f"{m[k]['precision']:.3f} / {m[k]['recall']:.3f}" for k in ("qqp", "qqp_balanced", "easyvqa", "suite")]
        cells += [f"{m['suite_wrong_reused']:.1%}", f"{m['suite_same_reused']:.1%}"]
        print(f"| {op['precision']} | " + " | ".join(cells) + " |")
    print()
    for k, v in rep.items():
        if k.endswith("roundtrip_max_abs_diff"):
            print(f"- {k}: {v:.1e}")
    if not args.dry_run:
        path = Path(args.output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(res["verifier"], separators=(",", ":")) + "\n", encoding="utf-8")
        log_progress(f"wrote {path} ({path.stat().st_size // 1024} KiB)")


def cmd_signals(args: argparse.Namespace) -> None:
    """The per-signal PR table alone (no model written)."""
    pairs, _cos, x, _ww = build_training_set(args)
    q = pairs.source == "qqp"
    print("## qqp_val: each signal alone, with the cosine, and all together (5-fold CV)\n")
    print(f"Recall over the {int(pairs.y[q].sum())} duplicates of qqp_val's training side; `—` = precision never "
          "reached; *natural* = qqp_val as is, *balanced* = classes weighted equally.\n")
    print("| scorer | avg precision | recall @ P=0.90 natural | @ P=0.95 natural | @ P=0.95 balanced | @ P=0.98 balanced |")
    print("|---|---|---|---|---|---|")
    for r in evaluate_signals(x[q], pairs.y[q], pairs.w[q]):
        print(f"| {r['scorer']} | {r['ap']:.3f} | {fmt_recall_at(r['nat90'])} | {fmt_recall_at(r['nat95'])} | {fmt_recall_at(r['bal95'])} | {fmt_recall_at(r['bal98'])} |")


def cmd_compare(args: argparse.Namespace) -> None:
    """Cross-validated comparison of the shipped recipe with embedding-interaction variants."""
    pairs, cos, x, _ww = build_training_set(args)
    y, w, src = pairs.y, pairs.w, pairs.source
    strata = np.char.add(src.astype(str), y.astype(str))
    emb = EmbeddingCache(args.text_model, Path(args.cache_dir))
    f = pair_features(emb.vectors(pairs.a), emb.vectors(pairs.b))
    q = src == "qqp"
    rows: list[dict[str, Any]] = [pr_row_full("raw cosine (no training)", cos[q], y[q])]

    def add(name: str, raw: np.ndarray) -> None:
        cx, cy = isotonic(raw, y, w)
        rows.append(pr_row_full(f"{name}, raw score", raw[q], y[q]))
        rows.append(pr_row_full(f"{name}, isotonic", np.interp(raw, cx, cy)[q], y[q]))
        log_progress(f"{name}: AP {rows[-2]['ap']:.3f}, bal95 {fmt_recall(rows[-1]['bal95'])}")

    feats = list(TEXT_FEATURE_NAMES)
    t0 = time.perf_counter()
    add("shipped recipe (signals + edit features, trees)", out_of_fold("gbdt", x, y, w, strata, feats))
    log_progress(f"  {time.perf_counter() - t0:.0f}s")
    if "idf" in args.variants:
        add("shipped recipe, IDF fit in-fold", infold_idf_out_of_fold(pairs, cos, y, w, strata))
    for c in args.head_c:
        if "head" in args.variants:
            t0 = time.perf_counter()
            h = head_oof(f, y, w, strata, 5, "logistic", c)
            rows.append(pr_row_full(f"head alone: logistic on [|u-v|, u*v], C={c}", h[q], y[q]))
            log_progress(f"head C={c}: AP {rows[-1]['ap']:.3f} in {time.perf_counter() - t0:.0f}s")
        if "stack" in args.variants:
            raw, h = stacked_out_of_fold(x, f, y, w, strata, feats + ["embedding_head"], c=c)
            add(f"signals + edit features + head (C={c}), trees, nested", raw)
    if "mlp" in args.variants:
        h = head_oof(f, y, w, strata, 5, "mlp", 1e-2)
        rows.append(pr_row_full("head alone: MLP(64) on [|u-v|, u*v]", h[q], y[q]))
        log_progress(f"mlp head: AP {rows[-1]['ap']:.3f}")
    if "pca" in args.variants:
        add("signals + edit features + PCA(16) of [|u-v|, u*v], trees", pca_out_of_fold(x, f, y, w, strata, feats + [f"pc{i}" for i in range(16)]))
    print("## qqp_val training side, 5-fold CV (with easy-vqa and suite train rows in training; qqp rows scored)\n")
    print("| scorer | AP natural | AP balanced | R@P=0.95 natural | R@P=0.98 natural | R@P=0.95 balanced | R@P=0.98 balanced |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['scorer']} | {r['ap']:.3f} | {r['ap_bal']:.3f} | {fmt_recall(r['nat95'])} | {fmt_recall(r['nat98'])} | "
              f"{fmt_recall(r['bal95'])} | {fmt_recall(r['bal98'])} |")


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = eval_parser("train_verifier", __doc__)
    ap.add_argument("--text-model", default=None, help="sentence-transformers model (default all-MiniLM-L6-v2)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="retrain the verifier and print PR tables")
    t.add_argument("--output", default=str(DEFAULT_VERIFIER_PATH))
    t.add_argument("--easyvqa-weight", type=float, default=1.0, help="easy-vqa total weight relative to qqp")
    t.add_argument("--suite-weight", type=float, default=1.0, help="contrast suite total weight relative to qqp")
    t.add_argument("--retrieval-floor", type=float, default=0.80)
    t.add_argument("--dry-run", action="store_true", help="print the evidence, do not write the model")
    t.add_argument("--skip-signal-table", action="store_true", help="skip the per-signal CV table (slow)")
    t.add_argument("--no-embedding-head", action="store_true",
                   help="leave out the 'vectors' model (texts + both embeddings)")
    t.set_defaults(fn=cmd_train)
    sg = sub.add_parser("signals", help="per-signal precision-recall table on qqp_val (no model written)")
    sg.add_argument("--easyvqa-weight", type=float, default=1.0)
    sg.add_argument("--suite-weight", type=float, default=1.0)
    sg.set_defaults(fn=cmd_signals)
    c = sub.add_parser("compare", help="CV comparison: shipped recipe vs embedding-interaction variants")
    c.add_argument("--easyvqa-weight", type=float, default=1.0)
    c.add_argument("--suite-weight", type=float, default=1.0)
    c.add_argument("--variants", nargs="+", default=["head", "stack"],
                   choices=["idf", "head", "stack", "mlp", "pca"])
    c.add_argument("--head-c", type=float, nargs="+", default=[HEAD_C])
    c.set_defaults(fn=cmd_compare)
    v = sub.add_parser("vqa", help="easy-vqa test split: refusals by pair kind, changed numbers, VQA stream")
    v.add_argument("--verifier", default=None, help="verifier JSON (default: the shipped one)")
    v.add_argument("--images", type=int, default=150)
    v.add_argument("--questions-per-image", type=int, default=8)
    v.add_argument("--number-pairs", type=int, default=300)
    v.set_defaults(fn=cmd_vqa)
    s = sub.add_parser("simulate", help="error-bounded mode over a long candidate stream")
    s.add_argument("--verifier", default=None)
    s.add_argument("--deltas", type=float, nargs="+", default=[0.01, 0.05])
    s.add_argument("--steps", type=int, default=40_000)
    s.add_argument("--explore-rate", type=float, default=0.05)
    s.set_defaults(fn=cmd_simulate)
    la = sub.add_parser("latency", help="added latency per candidate")
    la.add_argument("--verifier", default=None)
    la.add_argument("-n", type=int, default=2000)
    la.add_argument("--vectors", action="store_true", help="time the opt-in 'vectors' model (default: 'full', the default model)")
    la.set_defaults(fn=cmd_latency)
    args = ap.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
