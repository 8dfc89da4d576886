"""Precision-recall measurements of the verifier's scores and the cells of the tables
the commands print: PR curves, operating points at a precision, natural and
class-balanced bases, per-signal evaluation, the retrieval floor sweep."""

from __future__ import annotations

from typing import Any, Iterable, Optional

import numpy as np

from mlc_integrations.verify import SIGNAL_NAMES
from .data import SEED
from .fit import out_of_fold


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


def pr_row_full(name: str, score: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """AP and recall at precision 0.95 / 0.98, natural (unweighted) and class-balanced."""
    from sklearn.metrics import average_precision_score

    bw = balanced_weights(y)
    return {"scorer": name, "ap": average_precision(score, y),
            "ap_bal": float(average_precision_score(y, score, sample_weight=bw)),
            "nat95": operating_point(score, y, 0.95), "nat98": operating_point(score, y, 0.98),
            "bal95": operating_point(score, y, 0.95, bw), "bal98": operating_point(score, y, 0.98, bw)}


def evaluate_signals(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> list[dict[str, Any]]:
    """Cross-validated PR rows on qqp_val: cosine, each signal alone, cosine + each, all.

    A signal alone ranks pairs by its own value: any monotone model of one feature
    gives the same PR curve, so only its direction is fitted (on each training fold).
    Cosine + one signal is a cross-validated logistic regression.
    """
    from sklearn.model_selection import StratifiedKFold

    x = x[:, :len(SIGNAL_NAMES)]  # the signals (the edit features follow them in a training row)
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


def at_threshold(p: np.ndarray, y: np.ndarray, w: np.ndarray, t: float) -> dict[str, float]:
    acc = p >= t
    tp = float((w * y * acc).sum())
    fp = float((w * (1 - y) * acc).sum())
    return {"precision": tp / (tp + fp) if tp + fp else float("nan"), "recall": tp / float((w * y).sum())}


def floor_sweep(p: np.ndarray, y: np.ndarray, cos: np.ndarray, floors: Iterable[float]) -> list[dict[str, Any]]:
    """What the retrieval threshold costs: recall over all qqp duplicates when only
    pairs with cosine >= floor reach the verifier, accepting p >= 0.95 / 0.90."""
    out = []
    bw = balanced_weights(y)
    for f in floors:
        reach = cos >= f
        row: dict[str, Any] = {"floor": f, "reach": float(y[reach].sum() / y.sum())}
        for t in (0.90, 0.95):
            row[f"t{t}"] = at_threshold(np.where(reach, p, -1.0), y, np.ones(len(y)), t)
            row[f"t{t}_bal"] = at_threshold(np.where(reach, p, -1.0), y, bw, t)
        out.append(row)
    return out


def fmt_recall_at(op: dict[str, float]) -> str:
    return "—" if not np.isfinite(op["threshold"]) else f"{op['recall']:.3f} (τ={op['threshold']:.3f})"


def fmt_recall(op: dict[str, float]) -> str:
    return "—" if not np.isfinite(op["threshold"]) else f"{op['recall']:.3f}"
