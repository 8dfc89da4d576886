"""Fitting the verifier's models (scikit-learn, here only): gradient-boosted trees,
logistic regressions, the embedding head and its stacking, out-of-fold scores,
isotonic calibration, and the export to the plain JSON the library evaluates."""

from __future__ import annotations

import time
from typing import Any, Optional, Sequence

import numpy as np

from mlc_integrations.verify import SIGNAL_NAMES, WordWeights
from .data import SEED, PairSet, log_progress, signal_matrix

# Monotone constraints where the direction is a matter of meaning, not of data: a
# negation, number, unit, date or attribute mismatch can only lower the probability,
# a higher cosine only raise it. Other signals are left free (constraining them cost
# 0.05 average precision on qqp_val: their effect depends on the others).
MONOTONE = {
    "cosine": 1, "embedding_head": 1, "negation_mismatch": -1, "number_mismatch": -1, "number_diff": -1,
    "unit_mismatch": -1, "date_mismatch": -1, "attribute_mismatch": -1,
}
# Edits whose direction is a matter of meaning: their presence can only lower the
# probability that the stored answer is right -- a swapped argument, an antonym, a
# changed number, a changed constraint on the answer (time, place, audience, format).
# The rest are left free. (Leaving the constraints free was tried: on the training
# side's cross-validation it lowered Quora and easy-vqa recall at the same precision.)
MONOTONE.update({n: -1 for n in (
    "edit_protected_changed", "edit_protected_case_space", "edit_structure_changed", "edit_swap_directional",
    "edit_sub_antonym", "edit_sub_cohyponym", "edit_sub_entity", "edit_number_changed", "edit_number_added",
    "edit_negation", "edit_quantifier", "edit_modal", "edit_wh", "edit_preposition", "edit_pronoun", "edit_tense",
    "edit_degree", "edit_constraint_time", "edit_constraint_place", "edit_constraint_person",
    "edit_constraint_format", "edit_constraint_modifier", "edit_constraint_entity")})
GBDT_PARAMS = dict(max_iter=120, learning_rate=0.1, max_depth=4, min_samples_leaf=40, l2_regularization=1.0)


def folds_of(strata: np.ndarray, groups: Optional[np.ndarray] = None, folds: int = 5,
             seed: int = SEED) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stratified k-fold splits; with ``groups``, no group on both sides of a split (Quora
    pairs sharing a question, suite pairs of one template family)."""
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold

    idx = np.zeros((len(strata), 1))
    if groups is None:
        return list(StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed).split(idx, strata))
    return list(StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=seed).split(idx, strata, groups))


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
                features: Sequence[str], folds: int = 5, groups: Optional[np.ndarray] = None) -> np.ndarray:
    """Raw scores of every row from a model that never saw it (stratified k-fold)."""
    out = np.zeros(len(y))
    for tr, te in folds_of(strata, groups, folds):
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


# The classic sentence-pair classification head: with u, v the normalized embeddings
# of the two texts, a logistic regression on [|u - v|, u * v] (u * v sums to the
# cosine: the head is a learned, per-dimension weighted cosine). Its score becomes one
# more input of the trees, stacked without leakage: the trees are trained on the
# head's out-of-fold scores, the head that scores new pairs on all training rows.
HEAD_C = 0.002


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
             kind: str = "logistic", c: float = HEAD_C, seed: int = SEED,
             groups: Optional[np.ndarray] = None) -> np.ndarray:
    """Out-of-fold head scores of every row."""
    out = np.zeros(len(y))
    for tr, te in folds_of(strata, groups, folds, seed):
        out[te] = head_score(fit_head(f[tr], y[tr], w[tr], kind, c), f[te])
    return out


def stacked_out_of_fold(x: np.ndarray, f: np.ndarray, y: np.ndarray, w: np.ndarray, strata: np.ndarray,
                        features: Sequence[str], folds: int = 5, inner_folds: int = 5, kind: str = "logistic",
                        c: float = HEAD_C, groups: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
    """(trees' raw scores, head scores) of every row, both from models that never saw it.

    Per outer fold: the head's scores of the training rows come from an inner k-fold
    on those rows only (what the trees learn from), the test rows' from a head fit on
    all training rows (what scores new pairs at run time).
    """
    out = np.zeros(len(y))
    head = np.zeros(len(y))
    for k, (tr, te) in enumerate(folds_of(strata, groups, folds)):
        t0 = time.perf_counter()
        h_tr = head_oof(f[tr], y[tr], w[tr], strata[tr], inner_folds, kind, c, seed=SEED + 1,
                        groups=None if groups is None else groups[tr])
        h_te = head_score(fit_head(f[tr], y[tr], w[tr], kind, c), f[te])
        head[te] = h_te
        g = fit_raw("gbdt", np.c_[x[tr], h_tr], y[tr], w[tr], features)
        out[te] = raw_score(g, np.c_[x[te], h_te])
        log_progress(f"stacked fold {k + 1}/{folds} in {time.perf_counter() - t0:.0f}s")
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
