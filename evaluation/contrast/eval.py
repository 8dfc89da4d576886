"""The experiment behind the shipped verifier's recipe: the trees retrained with and
without the edit features, on which data, and the edit analysis's cost. (What the
shipped verifier does on held-out data: :mod:`.contrast_report`.)

    python -m evaluation.contrast.eval experiment   # retrain with edit features (~10 min)
    python -m evaluation.contrast.eval latency      # edit analysis cost per pair

"Reused" = the L1 decision for the stored request ``a`` and the new request ``b``:
the MiniLM cosine reaches the retrieval threshold (0.80) and the verifier's
probability reaches the threshold. The experiment trains on
Quora (a split of qqp_val by question: no question string on both sides), easy-vqa
train pairs and the suite's train split, and reports the suite's test split and the
held-out Quora pairs (natural class balance, each pair judged by its own label).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from mlc_integrations.verify.text.edits import EDIT_FEATURE_NAMES, EditAnalyser, analyse
from mlc_integrations.engine import DEFAULT_L1_THRESHOLD
from mlc_integrations.verify import DEFAULT_MIN_PRECISION, SIGNAL_NAMES, Verifier, WordWeights
from ..training.verifier.data import (
    EmbeddingCache,
    PairSet,
    concat,
    easyvqa_pairs,
    eval_parser,
    load_qqp,
    log_progress,
    split_qqp_by_question,
    text_feature_matrix,
)
from ..training.verifier.fit import fit_raw, isotonic, out_of_fold
from ..training.verifier.metrics import operating_point
from .natural import PARAPHRASE_KINDS
from .suite import SUITE_PATH, load

THRESHOLDS = (0.80, 0.85, 0.90, 0.95)


def _suite_arrays(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    return ([r["a"] for r in rows], [r["b"] for r in rows], np.asarray([r["same_answer"] for r in rows], dtype=int),
            np.asarray([r["kind"] for r in rows]))


def _rate(mask: np.ndarray, sel: np.ndarray) -> str:
    n = int(sel.sum())
    return f"{int((mask & sel).sum())}/{n} ({(mask & sel).sum() / max(n, 1):.1%})"


# ----------------------------------------------------------------------------- experiment
def _suite_pairset(rows: Sequence[dict[str, Any]]) -> PairSet:
    a, b, y, _ = _suite_arrays(rows)
    return PairSet(a, b, y, np.ones(len(a)), np.asarray(["suite"] * len(a)))


def _fit_oof(x: np.ndarray, y: np.ndarray, w: np.ndarray, strata: np.ndarray,
             features: Sequence[str]) -> tuple[Any, np.ndarray]:
    """Trees on all rows and 5-fold out-of-fold raw scores of every row (the shipped recipe's pieces)."""
    return fit_raw("gbdt", x, y, w, features), out_of_fold("gbdt", x, y, w, strata, features)


def _qqp_point(p: np.ndarray, cos: np.ndarray, y: np.ndarray, t: float) -> tuple[float, float]:
    acc = (p >= t) & (cos >= DEFAULT_L1_THRESHOLD)
    tp, fp = int((acc & (y == 1)).sum()), int((acc & (y == 0)).sum())
    return (tp / (tp + fp) if tp + fp else float("nan")), tp / max(int(y.sum()), 1)


def _fmt(pr: tuple[float, float]) -> str:
    return f"{pr[0]:.3f} / {pr[1]:.3f}"


def _tuned_threshold(p: np.ndarray, cos: np.ndarray, y: np.ndarray, src: np.ndarray, max_wrong: float,
                     min_qqp_precision: float) -> Optional[float]:
    """Lowest threshold at which the training rows' out-of-fold scores keep the suite's
    answer-changing reuse <= ``max_wrong`` and Quora precision >= ``min_qqp_precision``."""
    reach = cos >= DEFAULT_L1_THRESHOLD
    s, q = src == "suite", src == "qqp"
    for t in np.round(np.arange(0.50, 1.0, 0.01), 2):
        acc = reach & (p >= t)
        wrong = (acc & s & (y == 0)).sum() / max(int((s & (y == 0)).sum()), 1)
        prec, _ = _qqp_point(np.where(q, p, -1.0), cos, y, t)
        if wrong <= max_wrong and prec >= min_qqp_precision:
            return float(t)
    return None


def _features(train: PairSet, q_te: PairSet, s_te: PairSet, cache: Path) -> dict[str, np.ndarray]:
    """Cosines, the 24 signals (IDF from the training texts) and the edit features of
    the three pair sets, cached on disk (keyed by the texts, the feature code and the lexicon)."""
    from mlc_integrations import verify

    from mlc_integrations.verify.text import tokens as edit_text
    from mlc_integrations.verify.text import edits
    from mlc_integrations.verify.text import lexicon
    code = [Path(m.__file__).read_bytes().hex() for m in (edits, edit_text, lexicon, verify)]  # type: ignore[arg-type]
    code.append(hashlib.sha256(lexicon.DEFAULT_LEXICON_PATH.read_bytes()).hexdigest())
    key = hashlib.sha256(json.dumps([train.a, train.b, q_te.a, s_te.a, s_te.b, code]).encode()).hexdigest()[:16]
    path = cache / f"contrast-features-{key}.npz"
    if path.exists():
        return dict(np.load(path))
    emb = EmbeddingCache(None, cache)
    out: dict[str, np.ndarray] = {}
    df, n_docs = WordWeights.fit(sorted(set(train.a) | set(train.b)))
    ww = WordWeights(df, n_docs)
    t0 = time.perf_counter()
    for name, ps in (("tr", train), ("qte", q_te), ("ste", s_te)):
        out[f"cos_{name}"] = emb.cosines(ps.a, ps.b)
        rows = text_feature_matrix(ps, out[f"cos_{name}"], ww)
        out[f"x_{name}"], out[f"e_{name}"] = rows[:, :len(SIGNAL_NAMES)], rows[:, len(SIGNAL_NAMES):]
    log_progress(f"signals + edit features in {time.perf_counter() - t0:.0f}s")
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(path, **out)
    return out


def cmd_experiment(args: argparse.Namespace) -> None:
    from sklearn.metrics import average_precision_score

    qqp = load_qqp(Path(args.data_dir))
    held = split_qqp_by_question(qqp, args.qqp_test_fraction)
    sub = lambda s, m: PairSet([s.a[i] for i in np.nonzero(m)[0]], [s.b[i] for i in np.nonzero(m)[0]],  # noqa: E731
                                  s.y[m], s.w[m], s.source[m])
    q_tr, q_te = sub(qqp, ~held), sub(qqp, held)
    overlap = (set(q_tr.a) | set(q_tr.b)) & (set(q_te.a) | set(q_te.b))
    assert not overlap, f"{len(overlap)} questions on both sides of the qqp split"
    vqa = easyvqa_pairs("train")
    vqa.w = vqa.w * (len(q_tr) * args.easyvqa_weight / vqa.w.sum())
    rows = load(Path(args.suite))
    test_rows = [r for r in rows if r["split"] == "test"]
    s_tr, s_te = _suite_pairset([r for r in rows if r["split"] == "train"]), _suite_pairset(test_rows)
    s_tr.w = s_tr.w * (len(q_tr) * args.suite_weight / s_tr.w.sum())
    train = concat(q_tr, vqa, s_tr)
    print(f"## Experiment: train = qqp_val {len(q_tr)} pairs (split by question) + easy-vqa train {len(vqa)} rows + "
          f"suite train {len(s_tr)} (total weight {args.suite_weight} x qqp); held out: qqp {len(q_te)} pairs "
          f"({int(q_te.y.sum())} duplicates, no question shared with train), suite test {len(s_te)}\n")
    f = _features(train, q_te, s_te, Path(args.cache_dir))
    cos_tr, cos_qte, cos_ste = f["cos_tr"], f["cos_qte"], f["cos_ste"]
    strata = np.char.add(train.source.astype(str), train.y.astype(str))
    ys, kinds = s_te.y, np.asarray([r["kind"] for r in test_rows])
    reach = (cos_ste >= DEFAULT_L1_THRESHOLD)
    print(f"Suite test pairs the retrieval threshold lets through at all: answer-changing "
          f"{_rate(reach, ys == 0)}, same-answer {_rate(reach, ys == 1)} (the ceiling of reuse).\n")
    results: dict[str, dict[str, Any]] = {}
    if "shipped" in args.variants:
        shipped = Verifier.default()
        results["shipped default `full` (trained on all of qqp_val: qqp in-sample)"] = {
            "pq": shipped.probabilities(list(zip(q_te.a, q_te.b)), cos_qte),
            "ps": shipped.probabilities(list(zip(s_te.a, s_te.b)), cos_ste)}
    if "qqp_only" in args.variants:
        # Quora rows only, no suite or easy-vqa: the shipped recipe under the question split by itself
        q_rows = train.source == "qqp"
        model, oof = _fit_oof(f["x_tr"][q_rows], train.y[q_rows], train.w[q_rows], strata[q_rows], list(SIGNAL_NAMES))
        cx, cy = isotonic(oof, train.y[q_rows], train.w[q_rows])
        results["24 signals, retrained on the qqp training rows only"] = {
            "pq": np.interp(model.decision_function(f["x_qte"]), cx, cy),
            "ps": np.interp(model.decision_function(f["x_ste"]), cx, cy), "raw_q": model.decision_function(f["x_qte"])}
    sets = [("24 signals", list(SIGNAL_NAMES), f["x_tr"], f["x_qte"], f["x_ste"]),
            (f"24 signals + {len(EDIT_FEATURE_NAMES)} edit features", list(SIGNAL_NAMES) + list(EDIT_FEATURE_NAMES),
             np.c_[f["x_tr"], f["e_tr"]], np.c_[f["x_qte"], f["e_qte"]], np.c_[f["x_ste"], f["e_ste"]])]
    sets = [st for st, v in zip(sets, ("signals", "edits")) if v in args.variants]
    for name, feats, xtr, xq, xs in sets:
        t0 = time.perf_counter()
        model, oof = _fit_oof(xtr, train.y, train.w, strata, feats)
        rq, rs = model.decision_function(xq), model.decision_function(xs)
        log_progress(f"{name}: fit in {time.perf_counter() - t0:.0f}s")
        for cal in ("all", "qqp"):
            m = np.ones(len(oof), bool) if cal == "all" else train.source == "qqp"
            cx, cy = isotonic(oof[m], train.y[m], train.w[m])
            results[f"{name}, retrained, isotonic on {cal} training rows"] = {
                "pq": np.interp(rq, cx, cy), "ps": np.interp(rs, cx, cy), "raw_q": rq,
                "tuned": _tuned_threshold(np.interp(oof, cx, cy), cos_tr, train.y, train.source, 0.01, 0.93)}
    print("| model | threshold | suite test: answer-changing reused | suite test: same-answer reused | "
          "qqp held-out: precision / recall (natural) |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        tuned = r.get("tuned")
        ts = sorted(set(THRESHOLDS) | ({tuned} if tuned is not None else set()))
        for t in ts:
            used = (r["ps"] >= t) & reach
            tag = f"**{t:.2f}** (tuned on train)" if t == tuned else f"{t}"
            print(f"| {name} | {tag} | {_rate(used, ys == 0)} | {_rate(used, ys == 1)} | "
                  f"{_fmt(_qqp_point(r['pq'], cos_qte, q_te.y, t))} |")
    print("\n### Held-out qqp: ranking quality and recall at precision 0.93 (natural; pairs under the retrieval "
          "threshold count as refused)\n")
    print("| scorer | average precision | best recall at precision >= 0.93 |")
    print("|---|---|---|")
    scorers = [("raw cosine", cos_qte)] + [(n, r.get("raw_q", r["pq"])) for n, r in results.items()
                                           if "isotonic on qqp" not in n]
    for name, sc in scorers:
        sc = np.where(cos_qte >= DEFAULT_L1_THRESHOLD, sc, -1e9)
        op = operating_point(sc, q_te.y, 0.93)
        print(f"| {name} | {average_precision_score(q_te.y, sc):.3f} | {op['recall']:.3f} |")
    name = next(n for n in reversed(list(results)) if "isotonic on all" in n or "only" in n)
    ps = results[name]["ps"]
    used = (ps >= DEFAULT_MIN_PRECISION) & reach
    print(f"\n### Suite test per kind, `{name}` at threshold {DEFAULT_MIN_PRECISION}\n")
    print("| kind | same answer | pairs | retrievable (cos >= 0.80) | reused |")
    print("|---|---|---|---|---|")
    for k in sorted(set(kinds), key=lambda k: (k in PARAPHRASE_KINDS, k)):
        m = kinds == k
        print(f"| {k} | {k in PARAPHRASE_KINDS} | {int(m.sum())} | {int(reach[m].sum())} | "
              f"{int(used[m].sum())} ({used[m].mean():.0%}) |")
    if args.show:
        for i in np.nonzero(used & (ys == 0))[0]:
            print(f"- reused wrongly ({kinds[i]}): {s_te.a[i]!r} -> {s_te.b[i]!r} p {ps[i]:.3f} "
                  f"[{analyse(stored=s_te.a[i], new=s_te.b[i]).explain()}]")
        for i in np.nonzero(reach & ~used & (ys == 1))[0]:
            print(f"- paraphrase refused ({kinds[i]}): {s_te.a[i]!r} -> {s_te.b[i]!r} p {ps[i]:.3f} "
                  f"[{analyse(stored=s_te.a[i], new=s_te.b[i]).explain()}]")


def cmd_latency(args: argparse.Namespace) -> None:
    import re

    from mlc_integrations.verify.text.lexicon import Lexicon

    t0 = time.perf_counter()
    lex = Lexicon.load()
    print(f"lexicon load (from the package): {time.perf_counter() - t0:.2f} s")
    rows = load(Path(args.suite))
    qqp = load_qqp(Path(args.data_dir))
    words = [w for t in qqp.a[:args.n] for w in re.findall(r"[a-z]+", t.lower())]
    word_pairs = list(zip(words[::2], words[1::2]))[:args.n]
    for label in ("first call", "cached"):
        t0 = time.perf_counter()
        for x, z in word_pairs:
            lex.relation(x, z)
        print(f"lexicon relation, {label} ({len(word_pairs)} word pairs from qqp_val questions): "
              f"{(time.perf_counter() - t0) / len(word_pairs) * 1e6:.1f} µs per pair")
    pairs = [(r["a"], r["b"]) for r in rows] + list(zip(qqp.a[:args.n], qqp.b[:args.n]))
    for a, b in pairs[:50]:
        analyse(stored=a, new=b)
    timed = EditAnalyser(lex)  # its own pair memo: the warm-up's pairs are not served from memory
    times: dict[str, list[float]] = defaultdict(list)
    for label, sel in (("suite", pairs[:len(rows)]), ("qqp_val", pairs[len(rows):])):
        for a, b in sel:  # each pair once: the lexicon's word cache warms as in a running cache
            t0 = time.perf_counter()
            timed.analyse(stored=a, new=b)
            times[label].append((time.perf_counter() - t0) * 1000)
    for label, ts in times.items():
        print(f"edit analysis per pair, {label} ({len(ts)} pairs): median {statistics.median(ts):.3f} ms, "
              f"p90 {np.percentile(ts, 90):.3f} ms, p99 {np.percentile(ts, 99):.3f} ms")


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = eval_parser("contrast_eval", __doc__)
    ap.add_argument("--suite", default=str(SUITE_PATH))
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("experiment", help="retrain the trees with the edit features appended")
    e.add_argument("--qqp-test-fraction", type=float, default=0.3)
    e.add_argument("--easyvqa-weight", type=float, default=1.0)
    e.add_argument("--suite-weight", type=float, default=1.0, help="suite train total weight relative to qqp")
    e.add_argument("--variants", nargs="+", default=["shipped", "qqp_only", "signals", "edits"],
                   choices=["shipped", "qqp_only", "signals", "edits"])
    e.add_argument("--show", action="store_true")
    e.set_defaults(fn=cmd_experiment)
    la = sub.add_parser("latency", help="edit analysis cost per pair")
    la.add_argument("-n", type=int, default=2000)
    la.set_defaults(fn=cmd_latency)
    args = ap.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
