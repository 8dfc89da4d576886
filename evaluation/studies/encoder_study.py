"""Which encoder should embed L2's prompt side: the CLIP text tower of
``mlc-easyvqa-tiny`` (``l2_prompt_encoder="clip"``) or the L1 sentence model
(``"text"``, all-MiniLM-L6-v2)?

Measured on easy-vqa's *test* split two ways:

1. question pairs about one image, labelled "same answer" or not: how well the cosine
   of each encoder separates them (ROC AUC; best recall at precision >= 0.95 / 0.99);
2. the VQA stream with only L2 on, per threshold, through the LangChain cache.
"""

from __future__ import annotations

import itertools
import random
from typing import Any, Optional, Sequence

import numpy as np

from ..sources.easyvqa import COLORS, SHAPES, load_split, questions_for, true_answer


def equivalent(a: str, b: str) -> bool:
    """Two questions are equivalent when they have the same answer for every picture
    easy-vqa can draw (a paraphrase); otherwise reusing one's answer for the other is
    right only by coincidence of this picture."""
    return all(true_answer(a, c, s) == true_answer(b, c, s) for c in COLORS for s in SHAPES)


def question_pairs(n_images: int = 150, seed: int = 0) -> list[tuple[str, str, int]]:
    """(q1, q2, equivalent) for question pairs about one test image."""
    rng = random.Random(seed)
    images = list(load_split("test"))
    rng.shuffle(images)
    out: list[tuple[str, str, int]] = []
    for im in images[:n_images]:
        groups = questions_for(im.color, im.shape)
        qs = sorted({q for g in groups.values() for q in g})
        qs = rng.sample(qs, min(14, len(qs)))
        for a, b in itertools.combinations(qs, 2):
            out.append((a, b, int(equivalent(a, b))))
    return out


def _best_recall(y: np.ndarray, s: np.ndarray, precision: float) -> tuple[Optional[float], Optional[float]]:
    """Highest recall (and its threshold) with precision >= ``precision``."""
    order = np.argsort(-s)
    ys, ss = y[order], s[order]
    tp = np.cumsum(ys)
    k = np.arange(1, len(ys) + 1)
    prec = tp / k
    rec = tp / max(1, ys.sum())
    best: tuple[Optional[float], Optional[float]] = (None, None)
    for i in range(len(ys)):
        if prec[i] >= precision and (i + 1 == len(ys) or ss[i] != ss[i + 1]):
            if best[0] is None or rec[i] > best[0]:
                best = (float(rec[i]), float(ss[i]))
    return best


def pair_metrics(pairs: Sequence[tuple[str, str, int]]) -> dict[str, Any]:
    from sklearn.metrics import roc_auc_score

    from mlc_integrations.embed.models import ClipEmbedder, ClipSpec, TextEmbedder

    texts = sorted({t for a, b, _ in pairs for t in (a, b)})
    idx = {t: i for i, t in enumerate(texts)}
    encoders = {
        "text (all-MiniLM-L6-v2, L1's model)": TextEmbedder.shared(None).embed(texts),
        "clip (mlc-easyvqa-tiny text tower)": ClipEmbedder.shared(ClipSpec.parse("mlc-easyvqa-tiny")).embed_texts(texts),
    }
    y = np.array([p[2] for p in pairs])
    out: dict[str, Any] = {"pairs": len(pairs), "same_answer_pairs": int(y.sum())}
    for name, vecs in encoders.items():
        s = np.array([float(vecs[idx[a]] @ vecs[idx[b]]) for a, b, _ in pairs])
        r95, t95 = _best_recall(y, s, 0.95)
        r99, t99 = _best_recall(y, s, 0.99)
        out[name] = {
            "roc_auc": float(roc_auc_score(y, s)),
            "recall_at_precision_0.95": r95, "threshold_0.95": t95,
            "recall_at_precision_0.99": r99, "threshold_0.99": t99,
            "mean_cos_same_answer": float(s[y == 1].mean()), "mean_cos_different_answer": float(s[y == 0].mean()),
        }
    return out


def stream_comparison(taus: Sequence[float] = (0.8, 0.9, 0.95, 0.99), n_sessions: int = 30, seed: int = 0) -> list[Any]:
    """L2-only runs of the VQA stream with each prompt encoder (oracle backend, 0 ms)."""
    from ..harness.backends import GroundTruthOracle
    from ..harness.baselines import mlc_cache
    from ..harness.runner import run_workload
    from ..harness.experiments import _raw
    from ..harness.workloads import vqa_stream

    wl = vqa_stream("test", n_sessions=n_sessions, seed=seed)
    oracle = GroundTruthOracle(latency_s=0.0)
    results = []
    for enc in ("text", "clip"):
        for t in taus:
            opts = {"enable_exact": False, "enable_l1": False, "l2_threshold": t, "l2_prompt_encoder": enc, **_raw()}
            results.append(run_workload(wl, mlc_cache(**opts), oracle, config=f"L2 only, prompt={enc}",
                                        label=f"L2 only prompt={enc} tau={t:g}", params={"tau": t, "encoder": enc}))
    return results


def write_study(out_dir: str, *, seed: int = 0) -> str:
    """Run both measurements; write ``l2_prompt_encoder.md`` + ``.json``; return the .md path."""
    import json
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pm = pair_metrics(question_pairs(seed=seed))
    runs = stream_comparison(seed=seed)
    lines = ["# L2 prompt encoder: CLIP text tower vs L1 sentence model (easy-vqa test split)", "",
             f"Question pairs about one image: {pm['pairs']} pairs, {pm['same_answer_pairs']} equivalent "
             "(same answer for every picture: paraphrases); the rest differ (other attribute, negation, other kind).", "",
             "| encoder | ROC AUC | best recall at precision >= 0.95 (tau) | at >= 0.99 (tau) | mean cos equivalent / not |",
             "|---|---:|---:|---:|---:|"]
    for name, m in pm.items():
        if not isinstance(m, dict):
            continue
        f = (lambda v: "–" if v is None else f"{v:.3f}")
        lines.append(f"| {name} | {m['roc_auc']:.3f} | {f(m['recall_at_precision_0.95'])} ({f(m['threshold_0.95'])}) | "
                     f"{f(m['recall_at_precision_0.99'])} ({f(m['threshold_0.99'])}) | "
                     f"{m['mean_cos_same_answer']:.3f} / {m['mean_cos_different_answer']:.3f} |")
    lines += ["", "VQA stream, only L2 on, raw thresholds (image and prompt both >= tau; LangChain cache, oracle backend):", "",
              "| prompt encoder | tau | hit rate | accuracy | wrong hits |", "|---|---:|---:|---:|---:|"]
    for r in runs:
        lines.append(f"| {r.params['encoder']} | {r.params['tau']:g} | {r.hit_rate:.3f} | {r.accuracy:.3f} | {r.wrong_hits} |")
    md = out / "l2_prompt_encoder.md"
    md.write_text("\n".join(lines) + "\n")
    (out / "l2_prompt_encoder.json").write_text(json.dumps(
        {"pairs": pm, "stream": [r.summary() for r in runs]}, indent=2, default=str) + "\n")
    return str(md)
