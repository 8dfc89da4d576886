"""Train the reuse verifier and print the evidence behind it.

    python -m mlc_integrations.eval.train_verifier train      # retrain assets/verifier.json, PR tables
    python -m mlc_integrations.eval.train_verifier vqa        # easy-vqa test split: refusals, VQA stream
    python -m mlc_integrations.eval.train_verifier simulate   # error-bounded mode over a long stream
    python -m mlc_integrations.eval.train_verifier latency    # added latency per candidate

Training data (read in place, never copied into the repo):

* ``../shared/data/qqp_val.csv`` -- Quora question pairs, duplicate or not;
* easy-vqa's *train* questions -- every pair of questions about the same image,
  labelled "reuse correct" when their ground-truth answers are equal.

Gradient-boosted trees (scikit-learn, monotone where the direction is known) on the
signals of :mod:`mlc_integrations.verify`, isotonic calibration on out-of-fold
scores, exported as plain JSON that the library evaluates with numpy only.
scikit-learn is needed here, never at run time.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from ..verify import (
    DEFAULT_VERIFIER_PATH,
    SIGNAL_NAMES,
    VERIFIER_FORMAT,
    VERIFIER_FORMAT_VERSION,
    Verifier,
    WordWeights,
    profile,
    signals_from_profiles,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data"
DEFAULT_CACHE_DIR = Path(os.environ.get("MLC_EVAL_CACHE", Path.home() / ".cache" / "mlc_integrations"))
SEED = 7

# Monotone constraints where the direction is a matter of meaning, not of data: a
# negation, number, unit, date or attribute mismatch can only lower the probability,
# a higher cosine only raise it. Other signals are left free (constraining them cost
# 0.05 average precision on qqp_val: their effect depends on the others).
MONOTONE = {
    "cosine": 1, "embedding_head": 1, "negation_mismatch": -1, "number_mismatch": -1, "number_diff": -1,
    "unit_mismatch": -1, "date_mismatch": -1, "attribute_mismatch": -1,
}
GBDT_PARAMS = dict(max_iter=120, learning_rate=0.1, max_depth=4, min_samples_leaf=40, l2_regularization=1.0)
PRECISIONS = (0.80, 0.85, 0.90, 0.925, 0.95, 0.96, 0.97, 0.98, 0.99)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- data
@dataclass
class PairSet:
    """Pairs (a, b) with labels, sample weights and the data set each came from."""

    a: list[str]
    b: list[str]
    y: np.ndarray
    w: np.ndarray
    source: np.ndarray  # "qqp" / "easyvqa"

    def __len__(self) -> int:
        return len(self.a)


def load_qqp(data_dir: Path) -> PairSet:
    path = data_dir / "qqp_val.csv"
    a, b, y = [], [], []
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if not row["question1"].strip() or not row["question2"].strip():
                continue
            a.append(row["question1"])
            b.append(row["question2"])
            y.append(int(row["is_duplicate"]))
    n = len(a)
    return PairSet(a, b, np.asarray(y), np.ones(n), np.asarray(["qqp"] * n))


def easyvqa_pairs(split: str) -> PairSet:
    """Every pair of questions about one image; label = same ground-truth answer.

    easy-vqa asks the same 107 template questions about thousands of images, so
    pairs are aggregated by question pair: every question pair weighs the same
    (how often easy-vqa happens to ask two questions together says nothing about a
    cache's traffic), split into a "same" and a "different" row by the fraction of
    images on which their answers agreed.
    """
    import easy_vqa

    qs, ans, ids = getattr(easy_vqa, f"get_{split}_questions")()
    by_img: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for q, a, i in zip(qs, ans, ids):
        by_img[int(i)].append((q, a))
    counts: Counter[tuple[str, str, int]] = Counter()
    for qa in by_img.values():
        for i in range(len(qa)):
            for j in range(i + 1, len(qa)):
                (q1, a1), (q2, a2) = qa[i], qa[j]
                if q1 == q2:
                    continue
                x, z = sorted((q1, q2))
                counts[(x, z, int(a1 == a2))] += 1
    totals: Counter[tuple[str, str]] = Counter()
    for (x, z, _), n in counts.items():
        totals[(x, z)] += n
    keys = sorted(counts)
    return PairSet(
        [k[0] for k in keys], [k[1] for k in keys], np.asarray([k[2] for k in keys]),
        np.asarray([counts[k] / totals[(k[0], k[1])] for k in keys], dtype=np.float64),
        np.asarray(["easyvqa"] * len(keys)),
    )


def concat(*sets: PairSet) -> PairSet:
    return PairSet(
        [x for s in sets for x in s.a], [x for s in sets for x in s.b],
        np.concatenate([s.y for s in sets]), np.concatenate([s.w for s in sets]),
        np.concatenate([s.source for s in sets]),
    )


class EmbeddingCache:
    """Text embeddings of the verifier's text model, cached on disk between runs."""

    def __init__(self, model: Optional[str], cache_dir: Path) -> None:
        from ..models import TextEmbedder

        self.embedder = TextEmbedder.shared(model)
        self.embedder.dim  # loads it: the file name depends on the backend that serves
        # torch keeps the tag of the files written before there were other backends
        key = self.embedder.name if self.embedder.backend == "torch" else f"{self.embedder.name}|{self.embedder.backend}"
        tag = hashlib.sha256(key.encode()).hexdigest()[:12]
        self.path = cache_dir / f"text-embeddings-{tag}.npz"
        self.vecs: dict[str, np.ndarray] = {}
        if self.path.exists():
            data = np.load(self.path, allow_pickle=False)
            self.vecs = dict(zip(data["texts"].tolist(), data["vecs"]))

    def cosines(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        todo = sorted({t for t in list(a) + list(b) if t not in self.vecs})
        if todo:
            _log(f"embedding {len(todo)} texts with {self.embedder.name} (cached in {self.path})")
            vecs = self.embedder._ensure().encode(todo)  # bypasses the embedder's LRU memo
            self.vecs.update(zip(todo, np.asarray(vecs, dtype=np.float32)))
            self.path.parent.mkdir(parents=True, exist_ok=True)
            texts = sorted(self.vecs)
            np.savez(self.path, texts=np.asarray(texts), vecs=np.stack([self.vecs[t] for t in texts]))
        va = np.stack([self.vecs[t] for t in a])
        vb = np.stack([self.vecs[t] for t in b])
        return np.clip((va * vb).sum(axis=1), -1.0, 1.0)

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        """Normalized embeddings of ``texts`` (embedding the ones not cached yet)."""
        todo = [t for t in texts if t not in self.vecs]
        if todo:
            self.cosines(todo, todo)
        return np.stack([self.vecs[t] for t in texts]).astype(np.float64)


def signal_matrix(pairs: PairSet, cosines: np.ndarray, weights: Optional[WordWeights] = None) -> np.ndarray:
    profiles: dict[str, Any] = {}

    def prof(t: str) -> Any:
        p = profiles.get(t)
        if p is None:
            p = profiles[t] = profile(t)
        return p

    return np.stack([signals_from_profiles(prof(x), prof(z), float(c), weights)
                     for x, z, c in zip(pairs.a, pairs.b, cosines)])


# ----------------------------------------------------------------------------- models
def _gbdt(features: Sequence[str]) -> Any:
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(
        monotonic_cst=[MONOTONE.get(f, 0) for f in features], random_state=SEED, early_stopping=False,
        **GBDT_PARAMS,
    )


def _logistic() -> Any:
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=1.0, max_iter=1000)


def fit_raw(kind: str, x: np.ndarray, y: np.ndarray, w: np.ndarray, features: Sequence[str]) -> Any:
    model = _gbdt(features) if kind == "gbdt" else _logistic()
    if kind == "logistic":
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        model = make_pipeline(StandardScaler(), model)
        model.fit(x, y, logisticregression__sample_weight=w)
    else:
        model.fit(x, y, sample_weight=w)
    return model


def raw_score(model: Any, x: np.ndarray) -> np.ndarray:
    return np.asarray(model.decision_function(x), dtype=np.float64)


def out_of_fold(kind: str, x: np.ndarray, y: np.ndarray, w: np.ndarray, strata: np.ndarray,
                features: Sequence[str], folds: int = 5) -> np.ndarray:
    """Raw scores of every row from a model that never saw it (stratified k-fold)."""
    from sklearn.model_selection import StratifiedKFold

    out = np.zeros(len(y))
    skf = StratifiedKFold(n_splits=folds, shuffle=True, random_state=SEED)
    for tr, te in skf.split(x, strata):
        out[te] = raw_score(fit_raw(kind, x[tr], y[tr], w[tr], features), x[te])
    return out


def isotonic(raw: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.isotonic import IsotonicRegression

    ir = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0)
    ir.fit(raw, y, sample_weight=w)
    return np.asarray(ir.X_thresholds_, dtype=np.float64), np.asarray(ir.y_thresholds_, dtype=np.float64)


def export_gbdt(model: Any, features: Sequence[str]) -> dict[str, Any]:
    """HistGradientBoostingClassifier -> plain arrays (leaf values include the learning rate)."""
    trees = []
    for (pred,) in model._predictors:  # binary classification: one predictor per iteration
        nodes = pred.nodes
        leaf = nodes["is_leaf"].astype(bool)
        if nodes["is_categorical"].any():
            raise ValueError("categorical splits are not exported")
        depth = int(nodes["depth"].max())
        trees.append({
            "feature": [int(f) if not lf else -1 for f, lf in zip(nodes["feature_idx"], leaf)],
            "threshold": [float(t) for t in nodes["num_threshold"]],
            "left": [int(c) if not lf else -1 for c, lf in zip(nodes["left"], leaf)],
            "right": [int(c) if not lf else -1 for c, lf in zip(nodes["right"], leaf)],
            "value": [float(v) if lf else 0.0 for v, lf in zip(nodes["value"], leaf)],
            "depth": depth,
        })
    baseline = float(np.ravel(model._baseline_prediction)[0])
    return {"kind": "gbdt", "features": list(features), "baseline": baseline, "trees": trees}


def export_head(model: Any, dim: int) -> dict[str, Any]:
    """The embedding head (scaler + logistic regression on [|u-v|, u*v]) as plain arrays."""
    scaler, lr = model.steps[0][1], model.steps[-1][1]
    return {"kind": "logistic", "input": "absdiff_product", "dim": int(dim),
            "coef": [float(c) for c in lr.coef_[0]], "intercept": float(lr.intercept_[0]),
            "mean": [float(m) for m in scaler.mean_], "scale": [float(s) for s in scaler.scale_]}


def export_logistic(model: Any, features: Sequence[str]) -> dict[str, Any]:
    scaler, lr = model.steps[0][1], model.steps[-1][1]
    return {"kind": "logistic", "features": list(features), "coef": [float(c) for c in lr.coef_[0]],
            "intercept": float(lr.intercept_[0]), "mean": [float(m) for m in scaler.mean_],
            "scale": [float(s) for s in scaler.scale_]}


# ----------------------------------------------------------------------------- metrics
def pr_curve(score: np.ndarray, y: np.ndarray, w: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(thresholds, precision, recall) accepting score >= threshold, thresholds descending."""
    w = np.ones(len(y)) if w is None else w
    order = np.argsort(-score, kind="stable")
    s, yy, ww = score[order], y[order], w[order]
    tp = np.cumsum(ww * yy)
    fp = np.cumsum(ww * (1 - yy))
    last = np.r_[np.diff(s) != 0, True]  # only cut between distinct scores
    tp, fp, s = tp[last], fp[last], s[last]
    pos = float((w * y).sum())
    return s, tp / np.maximum(tp + fp, 1e-12), tp / max(pos, 1e-12)


def operating_point(score: np.ndarray, y: np.ndarray, precision: float, w: Optional[np.ndarray] = None) -> dict[str, float]:
    """Largest recall whose accepted set still has ``precision`` (threshold = its lowest score)."""
    thr, prec, rec = pr_curve(score, y, w)
    ok = np.nonzero(prec >= precision)[0]
    if not ok.size:
        return {"precision": precision, "threshold": float("inf"), "recall": 0.0, "achieved": float("nan")}
    i = ok[np.argmax(rec[ok])]
    return {"precision": precision, "threshold": float(thr[i]), "recall": float(rec[i]), "achieved": float(prec[i])}


def average_precision(score: np.ndarray, y: np.ndarray) -> float:
    from sklearn.metrics import average_precision_score

    return float(average_precision_score(y, score))


# ----------------------------------------------------------------------------- training
def build_training_set(args: argparse.Namespace) -> tuple[PairSet, np.ndarray, np.ndarray, dict[str, Any]]:
    qqp = load_qqp(Path(args.data_dir))
    vqa = easyvqa_pairs("train")
    # Scale easy-vqa so that both data sets weigh the same in total.
    vqa.w = vqa.w * (len(qqp) * args.easyvqa_weight / vqa.w.sum())
    pairs = concat(qqp, vqa)
    emb = EmbeddingCache(args.text_model, Path(args.cache_dir))
    cos = emb.cosines(pairs.a, pairs.b)
    t0 = time.perf_counter()
    df, n_docs = WordWeights.fit(sorted(set(pairs.a) | set(pairs.b)))
    x = signal_matrix(pairs, cos, WordWeights(df, n_docs))
    _log(f"signals for {len(pairs)} pairs in {time.perf_counter() - t0:.1f}s")
    return pairs, cos, x, {"df": df, "n_docs": n_docs}


def balanced_weights(y: np.ndarray) -> np.ndarray:
    """Weights that make both classes count the same (precision at 50 % prevalence).

    The issue's raw-cosine figures (precision 0.78 at τ=0.80, 0.95 at τ≈0.98) are on
    this basis; qqp_val itself has 37 % duplicates.
    """
    pos = float(y.sum())
    return np.where(y == 1, 1.0, pos / max(float((1 - y).sum()), 1.0))


def pr_row(name: str, score: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    bw = balanced_weights(y)
    return {"scorer": name, "ap": average_precision(score, y),
            "nat90": operating_point(score, y, 0.90), "nat95": operating_point(score, y, 0.95),
            "bal95": operating_point(score, y, 0.95, bw), "bal98": operating_point(score, y, 0.98, bw)}


def evaluate_signals(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> list[dict[str, Any]]:
    """Cross-validated PR rows on qqp_val: cosine, each signal alone, cosine + each, all.

    A signal alone ranks pairs by its own value: any monotone model of one feature
    gives the same PR curve, so only its direction is fitted (on each training fold).
    Cosine + one signal is a cross-validated logistic regression.
    """
    from sklearn.model_selection import StratifiedKFold

    rows = [pr_row("raw cosine (no training)", x[:, 0], y)]
    for i, name in enumerate(SIGNAL_NAMES[1:], start=1):
        score = np.zeros(len(y))
        for tr, te in StratifiedKFold(n_splits=5, shuffle=True, random_state=SEED).split(x, y):
            sign = 1.0 if np.corrcoef(x[tr, i], y[tr])[0, 1] >= 0 else -1.0
            score[te] = sign * x[te, i]
        rows.append(pr_row(f"{name} alone", score, y))
    for i, name in enumerate(SIGNAL_NAMES[1:], start=1):
        rows.append(pr_row(f"cosine + {name} (logistic)",
                           out_of_fold("logistic", x[:, [0, i]], y, w, y, ["cosine", name]), y))
    rows.append(pr_row("all signals, logistic regression (qqp only)", out_of_fold("logistic", x, y, w, y, SIGNAL_NAMES), y))
    rows.append(pr_row("all signals, gradient boosting (qqp only)", out_of_fold("gbdt", x, y, w, y, SIGNAL_NAMES), y))
    return rows


def _at_threshold(p: np.ndarray, y: np.ndarray, w: np.ndarray, t: float) -> dict[str, float]:
    acc = p >= t
    tp = float((w * y * acc).sum())
    fp = float((w * (1 - y) * acc).sum())
    return {"precision": tp / (tp + fp) if tp + fp else float("nan"), "recall": tp / float((w * y).sum())}


VARIANTS = {
    # texts, cosine and both embeddings: the signals plus the embedding head's score
    "vectors": ("gbdt+head", list(SIGNAL_NAMES) + ["embedding_head"]),
    "full": ("gbdt", list(SIGNAL_NAMES)),
    "lexical": ("gbdt", [s for s in SIGNAL_NAMES if s != "cosine"]),
    "cosine": ("logistic", ["cosine"]),
}


def train(args: argparse.Namespace) -> dict[str, Any]:
    pairs, cos, x, word_weights = build_training_set(args)
    y, w, src = pairs.y, pairs.w, pairs.source
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
            oof, _h = stacked_out_of_fold(x, f, y, w, strata, feats)
            xs = x
        else:
            xs = x[:, [SIGNAL_NAMES.index(c) for c in feats]]
            oof = out_of_fold(kind, xs, y, w, strata, feats)
        cx, cy = isotonic(oof, y, w)
        p_oof = np.interp(oof, cx, cy)
        report["oof"][name] = p_oof
        report.setdefault("oof_raw", {})[name] = oof
        ops = []
        for prec in PRECISIONS:
            measured = {}
            for s in ("qqp", "easyvqa"):
                m = (src == s) & (cos >= args.retrieval_floor)
                measured[s] = _at_threshold(p_oof[m], y[m], w[m], prec)
            q = (src == "qqp") & (cos >= args.retrieval_floor)
            measured["qqp_balanced"] = _at_threshold(p_oof[q], y[q], qqp_bw[q], prec)
            ops.append({"precision": prec, "threshold": prec, "measured_cv": measured})
        if kind == "gbdt+head":
            # Trees learn from the head's out-of-fold scores; new pairs are scored by the
            # head fit on every row.
            assert f is not None
            head = fit_head(f, y, w)
            final = fit_raw("gbdt", np.c_[x, head_oof(f, y, w, strata)], y, w, feats)
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
        _log(f"model {name}: {len(feats)} signals, 5-fold CV + final fit in {time.perf_counter() - t0:.0f}s")
    out["training"] = {
        "command": "python -m mlc_integrations.eval.train_verifier train",
        "data": {"qqp_val.csv sha256[:16]": _sha(Path(args.data_dir) / "qqp_val.csv"),
                 "easy_vqa": "train split questions, same-image pairs"},
        "easyvqa_weight": args.easyvqa_weight,
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


def floor_sweep(p: np.ndarray, y: np.ndarray, cos: np.ndarray, floors: Iterable[float]) -> list[dict[str, Any]]:
    """What the retrieval threshold costs: recall over all qqp duplicates when only
    pairs with cosine >= floor reach the verifier, accepting p >= 0.95 / 0.90."""
    out = []
    bw = balanced_weights(y)
    for f in floors:
        reach = cos >= f
        row: dict[str, Any] = {"floor": f, "reach": float(y[reach].sum() / y.sum())}
        for t in (0.90, 0.95):
            row[f"t{t}"] = _at_threshold(np.where(reach, p, -1.0), y, np.ones(len(y)), t)
            row[f"t{t}_bal"] = _at_threshold(np.where(reach, p, -1.0), y, bw, t)
        out.append(row)
    return out


def _op(op: dict[str, float]) -> str:
    return "—" if not np.isfinite(op["threshold"]) else f"{op['recall']:.3f} (τ={op['threshold']:.3f})"


def cmd_train(args: argparse.Namespace) -> None:
    res = train(args)
    rep = res["report"]
    pairs, cos, x = rep["pairs"], rep["cos"], rep["x"]
    q = pairs.source == "qqp"
    yq = pairs.y[q]
    print("## qqp_val: recall at fixed precision, 5-fold cross-validation\n")
    print("Recall is over all 4,522 duplicates; `—` = precision never reached. *natural* = qqp_val as is "
          "(37 % duplicates); *balanced* = both classes weighted equally (the basis of the issue's figures).\n")
    print("| scorer | avg precision | recall @ P=0.90 natural | @ P=0.95 natural | @ P=0.95 balanced | @ P=0.98 balanced |")
    print("|---|---|---|---|---|---|")
    rows = [] if args.skip_signal_table else evaluate_signals(x[q], yq, pairs.w[q])
    rows.append(pr_row("verifier `full` (24 signals; qqp + easy-vqa train, isotonic)", rep["oof"]["full"][q], yq))
    main = "vectors" if "vectors" in rep["oof"] else "full"
    if main == "vectors":
        rows.append(pr_row("**verifier `vectors`** (24 signals + embedding head, nested; isotonic)",
                           rep["oof"]["vectors"][q], yq))
    for r in rows:
        print(f"| {r['scorer']} | {r['ap']:.3f} | {_op(r['nat90'])} | {_op(r['nat95'])} | {_op(r['bal95'])} | {_op(r['bal98'])} |")
    print("\n## qqp_val: the shipped models, 5-fold CV, natural (unweighted) and class-balanced\n")
    print("| scorer | AP natural | AP balanced | R@P=0.95 natural | R@P=0.98 natural | R@P=0.95 balanced | R@P=0.98 balanced |")
    print("|---|---|---|---|---|---|---|")
    full_rows = [pr_row_full("raw cosine (no training)", cos[q], yq)]
    for name in [n for n in ("full", "vectors") if n in rep["oof"]]:
        full_rows.append(pr_row_full(f"`{name}`, raw out-of-fold score", rep["oof_raw"][name][q], yq))
        full_rows.append(pr_row_full(f"`{name}`, isotonic (shipped)", rep["oof"][name][q], yq))
    for r in full_rows:
        print(f"| {r['scorer']} | {r['ap']:.3f} | {r['ap_bal']:.3f} | {_rec(r['nat95'])} | {_rec(r['nat98'])} | "
              f"{_rec(r['bal95'])} | {_rec(r['bal98'])} |")
    print(f"\n## Retrieval floor (qqp_val, verifier `{main}` out-of-fold)\n")
    print("| cosine floor | duplicates reachable | accept p>=0.95: precision / recall | balanced | accept p>=0.90 | balanced |")
    print("|---|---|---|---|---|---|")
    for r in floor_sweep(rep["oof"][main][q], yq, cos[q], (0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)):
        cells = [f"{r[k]['precision']:.3f} / {r[k]['recall']:.3f}" for k in ("t0.95", "t0.95_bal", "t0.9", "t0.9_bal")]
        print(f"| {r['floor']:.2f} | {r['reach']:.3f} | " + " | ".join(cells) + " |")
    print(f"\n## Shipped model `{main}`: measured (CV) at its thresholds, candidates with cosine >= "
          f"{args.retrieval_floor}\n")
    print("| min_precision = threshold | qqp precision / recall | qqp balanced | easy-vqa train |")
    print("|---|---|---|---|")
    for op in res["verifier"]["models"][main]["operating_points"]:
        m = op["measured_cv"]
        cells = [f"{m[k]['precision']:.3f} / {m[k]['recall']:.3f}" for k in ("qqp", "qqp_balanced", "easyvqa")]
        print(f"| {op['precision']} | " + " | ".join(cells) + " |")
    print()
    for k, v in rep.items():
        if k.endswith("roundtrip_max_abs_diff"):
            print(f"- {k}: {v:.1e}")
    if not args.dry_run:
        path = Path(args.output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(res["verifier"], separators=(",", ":")) + "\n", encoding="utf-8")
        _log(f"wrote {path} ({path.stat().st_size // 1024} KiB)")


def cmd_signals(args: argparse.Namespace) -> None:
    """The per-signal PR table alone (no model written)."""
    pairs, _cos, x, _ww = build_training_set(args)
    q = pairs.source == "qqp"
    print("## qqp_val: each signal alone, with the cosine, and all together (5-fold CV)\n")
    print("Recall over all 4,522 duplicates; `—` = precision never reached; *natural* = qqp_val as is "
          "(37 % duplicates), *balanced* = classes weighted equally.\n")
    print("| scorer | avg precision | recall @ P=0.90 natural | @ P=0.95 natural | @ P=0.95 balanced | @ P=0.98 balanced |")
    print("|---|---|---|---|---|---|")
    for r in evaluate_signals(x[q], pairs.y[q], pairs.w[q]):
        print(f"| {r['scorer']} | {r['ap']:.3f} | {_op(r['nat90'])} | {_op(r['nat95'])} | {_op(r['bal95'])} | {_op(r['bal98'])} |")


# ----------------------------------------------------------------------------- embedding head
# The classic sentence-pair classification head: with u, v the normalized embeddings
# of the two texts, a logistic regression on [|u - v|, u * v] (u * v sums to the
# cosine: the head is a learned, per-dimension weighted cosine). Its score becomes one
# more input of the trees, stacked without leakage: the trees are trained on the
# head's out-of-fold scores, the head that scores new pairs on all training rows.
HEAD_C = 0.002


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """[|u - v|, u * v] of rows of normalized embeddings (symmetric in u, v)."""
    return np.hstack([np.abs(u - v), u * v])


def fit_head(f: np.ndarray, y: np.ndarray, w: np.ndarray, kind: str = "logistic", c: float = HEAD_C) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if kind == "mlp":
        from sklearn.neural_network import MLPClassifier

        model = make_pipeline(StandardScaler(), MLPClassifier(hidden_layer_sizes=(64,), alpha=c, max_iter=60,
                                                              early_stopping=False, random_state=SEED))
        model.fit(f, y, mlpclassifier__sample_weight=w)
        return model
    model = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=3000))
    model.fit(f, y, logisticregression__sample_weight=w)
    return model


def head_score(model: Any, f: np.ndarray) -> np.ndarray:
    if hasattr(model, "decision_function"):
        return np.asarray(model.decision_function(f), dtype=np.float64)
    p = np.clip(model.predict_proba(f)[:, 1], 1e-9, 1 - 1e-9)
    return np.log(p / (1 - p))


def head_oof(f: np.ndarray, y: np.ndarray, w: np.ndarray, strata: np.ndarray, folds: int = 5,
             kind: str = "logistic", c: float = HEAD_C, seed: int = SEED) -> np.ndarray:
    """Out-of-fold head scores of every row."""
    from sklearn.model_selection import StratifiedKFold

    out = np.zeros(len(y))
    for tr, te in StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed).split(f, strata):
        out[te] = head_score(fit_head(f[tr], y[tr], w[tr], kind, c), f[te])
    return out


def stacked_out_of_fold(x: np.ndarray, f: np.ndarray, y: np.ndarray, w: np.ndarray, strata: np.ndarray,
                        features: Sequence[str], folds: int = 5, inner_folds: int = 5, kind: str = "logistic",
                        c: float = HEAD_C) -> tuple[np.ndarray, np.ndarray]:
    """(trees' raw scores, head scores) of every row, both from models that never saw it.

    Per outer fold: the head's scores of the training rows come from an inner k-fold
    on those rows only (what the trees learn from), the test rows' from a head fit on
    all training rows (what scores new pairs at run time).
    """
    from sklearn.model_selection import StratifiedKFold

    out = np.zeros(len(y))
    head = np.zeros(len(y))
    for k, (tr, te) in enumerate(StratifiedKFold(n_splits=folds, shuffle=True, random_state=SEED).split(x, strata)):
        t0 = time.perf_counter()
        h_tr = head_oof(f[tr], y[tr], w[tr], strata[tr], inner_folds, kind, c, seed=SEED + 1)
        h_te = head_score(fit_head(f[tr], y[tr], w[tr], kind, c), f[te])
        head[te] = h_te
        g = fit_raw("gbdt", np.c_[x[tr], h_tr], y[tr], w[tr], features)
        out[te] = raw_score(g, np.c_[x[te], h_te])
        _log(f"stacked fold {k + 1}/{folds} in {time.perf_counter() - t0:.0f}s")
    return out, head


def pca_out_of_fold(x: np.ndarray, f: np.ndarray, y: np.ndarray, w: np.ndarray, strata: np.ndarray,
                    features: Sequence[str], k: int = 16, folds: int = 5) -> np.ndarray:
    """Trees on the signals plus the first ``k`` principal components of the pair
    features, the PCA fit on each training fold."""
    from sklearn.decomposition import PCA
    from sklearn.model_selection import StratifiedKFold

    out = np.zeros(len(y))
    for tr, te in StratifiedKFold(n_splits=folds, shuffle=True, random_state=SEED).split(x, strata):
        pca = PCA(n_components=k, random_state=SEED).fit(f[tr])
        g = fit_raw("gbdt", np.c_[x[tr], pca.transform(f[tr])], y[tr], w[tr], features)
        out[te] = raw_score(g, np.c_[x[te], pca.transform(f[te])])
    return out


def infold_idf_out_of_fold(pairs: PairSet, cos: np.ndarray, y: np.ndarray, w: np.ndarray, strata: np.ndarray,
                           folds: int = 5) -> np.ndarray:
    """The shipped recipe with the word weights (IDF) fit on each training fold's texts only."""
    from sklearn.model_selection import StratifiedKFold

    out = np.zeros(len(y))
    for tr, te in StratifiedKFold(n_splits=folds, shuffle=True, random_state=SEED).split(cos, strata):
        df, n = WordWeights.fit(sorted({pairs.a[i] for i in tr} | {pairs.b[i] for i in tr}))
        ww = WordWeights(df, n)
        sub = lambda idx: PairSet([pairs.a[i] for i in idx], [pairs.b[i] for i in idx], y[idx], w[idx],  # noqa: E731
                                  pairs.source[idx])
        xtr, xte = signal_matrix(sub(tr), cos[tr], ww), signal_matrix(sub(te), cos[te], ww)
        out[te] = raw_score(fit_raw("gbdt", xtr, y[tr], w[tr], SIGNAL_NAMES), xte)
    return out


def pr_row_full(name: str, score: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """AP and recall at precision 0.95 / 0.98, natural (unweighted) and class-balanced."""
    from sklearn.metrics import average_precision_score

    bw = balanced_weights(y)
    return {"scorer": name, "ap": average_precision(score, y),
            "ap_bal": float(average_precision_score(y, score, sample_weight=bw)),
            "nat95": operating_point(score, y, 0.95), "nat98": operating_point(score, y, 0.98),
            "bal95": operating_point(score, y, 0.95, bw), "bal98": operating_point(score, y, 0.98, bw)}


def _rec(op: dict[str, float]) -> str:
    return "—" if not np.isfinite(op["threshold"]) else f"{op['recall']:.3f}"


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
        _log(f"{name}: AP {rows[-2]['ap']:.3f}, bal95 {_rec(rows[-1]['bal95'])}")

    feats = list(SIGNAL_NAMES)
    t0 = time.perf_counter()
    add("shipped recipe (24 signals, trees)", out_of_fold("gbdt", x, y, w, strata, feats))
    _log(f"  {time.perf_counter() - t0:.0f}s")
    if "idf" in args.variants:
        add("shipped recipe, IDF fit in-fold", infold_idf_out_of_fold(pairs, cos, y, w, strata))
    for c in args.head_c:
        if "head" in args.variants:
            t0 = time.perf_counter()
            h = head_oof(f, y, w, strata, 5, "logistic", c)
            rows.append(pr_row_full(f"head alone: logistic on [|u-v|, u*v], C={c}", h[q], y[q]))
            _log(f"head C={c}: AP {rows[-1]['ap']:.3f} in {time.perf_counter() - t0:.0f}s")
        if "stack" in args.variants:
            raw, h = stacked_out_of_fold(x, f, y, w, strata, feats + ["embedding_head"], c=c)
            add(f"24 signals + head (C={c}), trees, nested", raw)
    if "mlp" in args.variants:
        h = head_oof(f, y, w, strata, 5, "mlp", 1e-2)
        rows.append(pr_row_full("head alone: MLP(64) on [|u-v|, u*v]", h[q], y[q]))
        _log(f"mlp head: AP {rows[-1]['ap']:.3f}")
    if "pca" in args.variants:
        add("24 signals + PCA(16) of [|u-v|, u*v], trees", pca_out_of_fold(x, f, y, w, strata, feats + [f"pc{i}" for i in range(16)]))
    print("## qqp_val, 5-fold CV (qqp_val + easy-vqa train in training, qqp_val rows scored)\n")
    print("| scorer | AP natural | AP balanced | R@P=0.95 natural | R@P=0.98 natural | R@P=0.95 balanced | R@P=0.98 balanced |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['scorer']} | {r['ap']:.3f} | {r['ap_bal']:.3f} | {_rec(r['nat95'])} | {_rec(r['nat98'])} | "
              f"{_rec(r['bal95'])} | {_rec(r['bal98'])} |")


# ----------------------------------------------------------------------------- easy-vqa evidence
_NEG_RE = re.compile(r"\b(not|no)\b")
_COLORS = ("red", "green", "blue", "black", "gray", "teal", "brown", "yellow")
_SHAPES = ("circle", "rectangle", "triangle")


def vqa_question_kind(q: str) -> tuple[str, str, bool]:
    """(asks, attribute word, negated) of an easy-vqa template question."""
    low = q.lower()
    neg = bool(_NEG_RE.search(low))
    attr = next((w for w in _COLORS + _SHAPES if re.search(rf"\b{w}\b", low)), "")
    if low.startswith("what"):
        asks = "what-color" if "color" in low else "what-shape"
    else:
        asks = "has-color" if attr in _COLORS else "has-shape"
    return asks, attr, neg


def vqa_pair_category(stored: str, new: str) -> str:
    ka, kb = vqa_question_kind(stored), vqa_question_kind(new)
    if ka == kb:
        return "paraphrase"
    if ka[0] == kb[0] and ka[1] == kb[1]:
        return "negation"
    if ka[0] == kb[0] and ka[2] == kb[2]:
        return "changed colour/shape word"
    if ka[0] == kb[0]:
        return "changed word and negation"
    return "different question"


def _engine_verdicts(verifier: Verifier, pairs: Sequence[tuple[str, str]], cos: np.ndarray,
                     retrieval: float, precision: float, emb: Optional["EmbeddingCache"] = None) -> np.ndarray:
    """True where the engine at these settings would reuse (retrieved and accepted):
    with the "vectors" model when the verifier has one (the engine hands it both
    embeddings of an L1 candidate), else "full"."""
    if "vectors" in verifier.models and emb is not None:
        uv = (emb.vectors([a for a, _ in pairs]), emb.vectors([b for _, b in pairs]))
        p = verifier.probabilities(list(pairs), cos, "vectors", uv)
    else:
        p = verifier.probabilities(list(pairs), cos)
    return (cos >= retrieval) & (p >= verifier.models["full"].threshold_for_precision(precision))


def number_variants(texts: Iterable[str], limit: int) -> list[tuple[str, str]]:
    """(question, the same question with one number changed) for questions with numbers."""
    out = []
    for t in texts:
        m = re.search(r"\b\d+\b", t)
        if not m:
            continue
        n = int(m.group(0))
        changed = t[:m.start()] + str(n + 1 if n < 10 else n * 2) + t[m.end():]
        out.append((t, changed))
        if len(out) >= limit:
            break
    return out


def cmd_vqa(args: argparse.Namespace) -> None:
    import easy_vqa

    from ..engine import DEFAULT_L1_THRESHOLD
    from ..verify import DEFAULT_MIN_PRECISION

    verifier = Verifier.load(args.verifier) if args.verifier else Verifier.default()
    emb = EmbeddingCache(args.text_model, Path(args.cache_dir))
    qs, _ans, ids = easy_vqa.get_test_questions()
    by_img: dict[int, list[str]] = defaultdict(list)
    for q, i in zip(qs, ids):
        by_img[int(i)].append(q)
    seen: set[tuple[str, str]] = set()
    pairs: list[tuple[str, str]] = []
    for questions in by_img.values():  # ordered pairs (stored, new) asked about one test image
        for a in questions:
            for b in questions:
                if a != b and (a, b) not in seen:
                    seen.add((a, b))
                    pairs.append((a, b))
    cos = emb.cosines([a for a, _ in pairs], [b for _, b in pairs])
    cats = np.asarray([vqa_pair_category(a, b) for a, b in pairs])
    settings = [("raw cosine, old default (τ=0.95, no verifier)", None, 0.95)]
    settings.append((f"verifier, engine defaults (retrieval τ={DEFAULT_L1_THRESHOLD}, "
                     f"precision {DEFAULT_MIN_PRECISION})", DEFAULT_MIN_PRECISION, DEFAULT_L1_THRESHOLD))
    print("## easy-vqa test split: distinct question pairs asked about the same image\n")
    print("| pair kind | pairs | " + " | ".join(f"reused: {n}" for n, _, _ in settings) + " |")
    print("|---|---|" + "---|" * len(settings))
    verdicts = {}
    for name, prec, ret in settings:
        verdicts[name] = (cos >= ret) if prec is None else _engine_verdicts(verifier, pairs, cos, ret, prec, emb)
    for cat in ("paraphrase", "negation", "changed colour/shape word", "changed word and negation", "different question"):
        m = cats == cat
        cells = [f"{int(verdicts[n][m].sum())} ({verdicts[n][m].mean():.1%})" for n, _, _ in settings]
        print(f"| {cat} | {int(m.sum())} | " + " | ".join(cells) + " |")
    nums = number_variants(load_qqp(Path(args.data_dir)).a, args.number_pairs)
    ncos = emb.cosines([a for a, _ in nums], [b for _, b in nums])
    print(f"\n## Changed numbers: {len(nums)} qqp_val questions with one number changed\n")
    print("| setting | reused |")
    print("|---|---|")
    for name, prec, ret in settings:
        v = (ncos >= ret) if prec is None else _engine_verdicts(verifier, nums, ncos, ret, prec, emb)
        print(f"| {name} | {int(v.sum())} of {len(nums)} (cosine median {np.median(ncos):.3f}) |")
    print("\n## VQA stream through MLCEngine (L1 on the image pixels), oracle backend\n")
    print("| setting | lookups | hit rate | hits wrong | answer accuracy |")
    print("|---|---|---|---|---|")
    for name, kw in (("raw cosine, old default (τ=0.95, no verifier)", {"verifier": "off", "l1_threshold": 0.95}),
                     ("verifier at engine defaults", {"verifier": args.verifier} if args.verifier else {})):
        r = vqa_stream(kw, args.images, args.questions_per_image)
        print(f"| {name} | {r['lookups']} | {r['hit_rate']:.3f} | {r['wrong_hits']} of {r['hits']} | {r['accuracy']:.3f} |")


def vqa_stream(engine_kw: dict[str, Any], n_images: int, per_image: int) -> dict[str, Any]:
    """Each easy-vqa test image asked ``per_image`` of its template questions (paraphrases,
    negations, other colours and shapes) in random order; a miss calls an oracle that
    answers with the ground truth and stores it. A hit is right if its answer equals
    the new question's ground truth."""
    import random as _random

    from ..engine import MLCEngine
    from ..request import CacheRequest
    from .easyvqa import load_split, questions_for

    rng = _random.Random(SEED)
    images = list(load_split("test"))
    rng.shuffle(images)
    eng = MLCEngine(enable_l2=False, **engine_kw)
    hits = wrong = correct = lookups = 0
    try:
        for img in images[:n_images]:
            pool = sorted({q for qs in questions_for(img.color, img.shape).values() for q in qs})
            for q in rng.sample(pool, min(per_image, len(pool))):
                req = CacheRequest(text=q, images=[img.path], scope="vqa")
                truth = img.answer(q)
                lookups += 1
                hit = eng.lookup(req)
                if hit is None:
                    eng.update(req, truth)
                    correct += 1
                    continue
                hits += 1
                if hit.payload == truth:
                    correct += 1
                else:
                    wrong += 1
    finally:
        eng.close()
    return {"lookups": lookups, "hits": hits, "wrong_hits": wrong, "hit_rate": hits / max(lookups, 1),
            "accuracy": correct / max(lookups, 1)}


# ----------------------------------------------------------------------------- error-bounded simulation
def simulate_stream(verifier: Verifier, pairs: Sequence[tuple[str, str]], cos: np.ndarray, labels: np.ndarray,
                    delta: float, steps: int, explore_rate: float, seed: int = SEED,
                    window: int = 2000) -> list[dict[str, float]]:
    """Error-bounded policy over a long stream of candidates with known correctness.

    Each step draws a (new, stored) pair uniformly from the pool (so stored questions
    recur, as popular entries do); a hit is scored against its label; a miss
    (refused or explored) is followed by the application's update, whose fresh answer
    equals the stored one exactly when reuse would have been right.
    """
    from ..verify import VerificationPolicy

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

    from ..engine import DEFAULT_L1_THRESHOLD

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
    from ..verify import VerificationPolicy

    verifier = Verifier.load(args.verifier) if args.verifier else Verifier.default()
    qqp = load_qqp(Path(args.data_dir))
    n = min(args.n, len(qqp))
    pol = VerificationPolicy(verifier)
    vecs: list[Any] = [None] * n
    if verifier.head_dim() is not None and not args.no_vectors:
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
    if verifier.head_dim() is not None and not args.no_vectors:
        # The engine's extra storage read for the "vectors" model: one stored L1 vector
        # per verified candidate (embedded Chroma, in memory; embeddings supplied).
        from ..engine import MLCEngine
        from ..request import CacheRequest

        eng = MLCEngine(enable_l2=False)
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


# ----------------------------------------------------------------------------- main
def eval_parser(module: str, doc: Optional[str]) -> argparse.ArgumentParser:
    """The command line shared by the verifier's evaluation scripts: data and cache folders."""
    ap = argparse.ArgumentParser(prog=f"python -m mlc_integrations.eval.{module}", description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    ap.add_argument("--cache-dir", default=str(DEFAULT_CACHE_DIR), help="embedding cache (never in the repo)")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = eval_parser("train_verifier", __doc__)
    ap.add_argument("--text-model", default=None, help="sentence-transformers model (default all-MiniLM-L6-v2)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="retrain the verifier and print PR tables")
    t.add_argument("--output", default=str(DEFAULT_VERIFIER_PATH))
    t.add_argument("--easyvqa-weight", type=float, default=1.0, help="easy-vqa total weight relative to qqp")
    t.add_argument("--retrieval-floor", type=float, default=0.80)
    t.add_argument("--dry-run", action="store_true", help="print the evidence, do not write the model")
    t.add_argument("--skip-signal-table", action="store_true", help="skip the per-signal CV table (slow)")
    t.add_argument("--no-embedding-head", action="store_true",
                   help="leave out the 'vectors' model (texts + both embeddings)")
    t.set_defaults(fn=cmd_train)
    sg = sub.add_parser("signals", help="per-signal precision-recall table on qqp_val (no model written)")
    sg.add_argument("--easyvqa-weight", type=float, default=1.0)
    sg.set_defaults(fn=cmd_signals)
    c = sub.add_parser("compare", help="CV comparison: shipped recipe vs embedding-interaction variants")
    c.add_argument("--easyvqa-weight", type=float, default=1.0)
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
    la.add_argument("--no-vectors", action="store_true", help="time the 'full' model (no embeddings given)")
    la.set_defaults(fn=cmd_latency)
    args = ap.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
