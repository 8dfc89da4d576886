"""The verifier at its operating points, on data it never trained on.

    python -m evaluation.contrast.report --out docs/results   # tables + PR plot

What the engine does with a stored request ``a`` and a new request ``b`` (the pair's
two texts; each pair judged by its own label, as if ``a`` were alone in its scope):
L0.5 serves it when the exact texts match (NFC, outer whitespace trimmed), L1 when the
MiniLM cosine reaches the retrieval threshold and the verifier's probability reaches
``min_precision``. Held-out sets:

* the contrast suite's *test* split (template families and lexicon word pairs never
  seen in training; ``eval/data/contrast_suite.jsonl``);
* the fresh pairs (``eval/data/contrast_fresh.jsonl``), written by hand after the edit
  analysis was frozen, by someone who had not seen it or the suite;
* qqp_val's held-out side, split by question (no question string on both sides),
  natural class balance.

The knob table shows what each ``min_precision`` trades on each set; the default is
chosen on the training side (``train_verifier train`` prints it), never here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from mlc_integrations.engine import DEFAULT_L1_THRESHOLD
from mlc_integrations.keys import exact_text
from mlc_integrations.verify import DEFAULT_MIN_PRECISION, Verifier
from .natural import PARAPHRASE_KINDS
from .suite import SUITE_PATH, load
from ..training.verifier.data import EmbeddingCache, eval_parser, log_progress, qqp_split
from ..training.verifier.metrics import operating_point, pr_curve

FRESH_PATH = SUITE_PATH.with_name("contrast_fresh.jsonl")
KNOB = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.97, 0.99)


def reused(a: Sequence[str], b: Sequence[str], cos: np.ndarray, p: np.ndarray, min_precision: float,
           floor: float = DEFAULT_L1_THRESHOLD) -> np.ndarray:
    """The engine's decision for each (stored a, new b) pair."""
    exact = np.asarray([exact_text(x) == exact_text(z) for x, z in zip(a, b)])
    return exact | ((cos >= floor) & (p >= min_precision))


def _share(mask: np.ndarray, sel: np.ndarray) -> dict[str, Any]:
    n = int(sel.sum())
    k = int((mask & sel).sum())
    return {"reused": k, "of": n, "rate": k / n if n else float("nan")}


def _cell(d: dict[str, Any]) -> str:
    return f"{d['reused']}/{d['of']} ({d['rate']:.1%})"


class HeldOut:
    """One held-out pair set with its cosines and the verifier's probabilities."""

    def __init__(self, name: str, a: list[str], b: list[str], y: np.ndarray, kinds: Optional[np.ndarray],
                 emb: EmbeddingCache, verifier: Verifier) -> None:
        self.name, self.a, self.b, self.y, self.kinds = name, a, b, y, kinds
        self.cos = emb.cosines(a, b)
        self.p = verifier.probabilities(list(zip(a, b)), self.cos)

    def at(self, t: float) -> np.ndarray:
        return reused(self.a, self.b, self.cos, self.p, t)

    def suite_row(self, t: float) -> dict[str, Any]:
        used = self.at(t)
        return {"answer_changing": _share(used, self.y == 0), "same_answer": _share(used, self.y == 1)}

    def qqp_row(self, t: float) -> dict[str, Any]:
        used = self.at(t)
        tp, fp = int((used & (self.y == 1)).sum()), int((used & (self.y == 0)).sum())
        return {"precision": tp / (tp + fp) if tp + fp else float("nan"), "recall": tp / max(int(self.y.sum()), 1),
                "accepted": tp + fp}


def _suite(path: Path, split: Optional[str], name: str, emb: EmbeddingCache, ver: Verifier) -> Optional[HeldOut]:
    if not path.exists():
        return None
    rows = [r for r in load(path) if split is None or r["split"] == split]
    return HeldOut(name, [r["a"] for r in rows], [r["b"] for r in rows],
                   np.asarray([int(r["same_answer"]) for r in rows]), np.asarray([r["kind"] for r in rows]), emb, ver)


def report(args: Any) -> dict[str, Any]:
    ver = Verifier.load(args.verifier) if args.verifier else Verifier.default()
    emb = EmbeddingCache(None, Path(args.cache_dir))
    suites = [s for s in (_suite(Path(args.suite), "test", "contrast suite, test split", emb, ver),
                          _suite(FRESH_PATH, None, "fresh pairs (written after the rules were frozen)", emb, ver)) if s]
    _train, q = qqp_split(Path(args.data_dir))
    qqp = HeldOut("qqp_val held-out (split by question)", q.a, q.b, q.y, None, emb, ver)
    log_progress(f"scored {sum(len(s.a) for s in suites)} suite pairs and {len(qqp.a)} qqp pairs")
    out: dict[str, Any] = {"verifier": ver.source, "default_min_precision": DEFAULT_MIN_PRECISION,
                           "retrieval_threshold": DEFAULT_L1_THRESHOLD, "knob": [], "per_kind": {}}
    for t in sorted(set(KNOB) | {DEFAULT_MIN_PRECISION}):
        row: dict[str, Any] = {"min_precision": t, "qqp": qqp.qqp_row(t)}
        for s in suites:
            row[s.name] = s.suite_row(t)
        out["knob"].append(row)
    for s in suites:
        used = s.at(DEFAULT_MIN_PRECISION)
        assert s.kinds is not None
        out["per_kind"][s.name] = {k: _share(used, s.kinds == k) for k in sorted(set(s.kinds.tolist()))}
        out.setdefault("wrong_reuses", {})[s.name] = [
            {"a": s.a[i], "b": s.b[i], "kind": str(s.kinds[i]), "cosine": round(float(s.cos[i]), 3),
             "p": round(float(s.p[i]), 3)} for i in np.nonzero(used & (s.y == 0))[0]]
    # Precision-recall on held-out qqp: raw cosine vs the verifier (pairs under the
    # retrieval threshold are refused by the engine, so they rank last).
    reach = qqp.cos >= DEFAULT_L1_THRESHOLD
    curves = {"raw cosine": qqp.cos, "verifier (cosine >= 0.80)": np.where(reach, qqp.p, -1.0)}
    out["qqp_recall_at_precision"] = {
        name: {str(pr): operating_point(sc, qqp.y, pr)["recall"] for pr in (0.90, 0.93, 0.95)}
        for name, sc in curves.items()}
    out["qqp_pairs"] = {"pairs": len(qqp.a), "duplicates": int(qqp.y.sum())}
    if args.out:
        _plot(curves, qqp, Path(args.out) / "contrast_qqp_pr.png")
    return out


def _plot(curves: dict[str, np.ndarray], qqp: HeldOut, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for name, sc in curves.items():
        _thr, prec, rec = pr_curve(sc, qqp.y)
        ax.plot(rec, prec, label=name)
    d = qqp.qqp_row(DEFAULT_MIN_PRECISION)
    ax.scatter([d["recall"]], [d["precision"]], color="black", zorder=3,
               label=f"defaults (min_precision {DEFAULT_MIN_PRECISION})")
    ax.axhline(0.93, color="grey", lw=0.8, ls="--")
    ax.set(xlabel="recall (duplicates reused)", ylabel="precision (natural class balance)", ylim=(0.3, 1.01),
           title=f"qqp_val held-out by question: {len(qqp.a)} pairs")
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def to_markdown(r: dict[str, Any]) -> str:
    names = [k for k in r["knob"][0] if k not in ("min_precision", "qqp")]
    lines = [f"# The verifier on held-out data (`{Path(r['verifier']).name}`)\n",
             f"`python -m evaluation.contrast.report --out docs/results`. Reuse = exact text (L0.5) or "
             f"cosine >= {r['retrieval_threshold']} and P(correct) >= min_precision (L1); each pair judged alone. "
             f"Default min_precision: **{r['default_min_precision']}** (chosen on the training side).\n",
             "## What the knob trades\n",
             "| min_precision | " + " | ".join(f"{n}: answer-changing reused | same-answer reused" for n in names)
             + f" | qqp held-out ({r['qqp_pairs']['pairs']} pairs): precision / recall |",
             "|---|" + "---|---|" * len(names) + "---|"]
    for row in r["knob"]:
        mark = "**" if row["min_precision"] == r["default_min_precision"] else ""
        cells = [f"{_cell(row[n]['answer_changing'])} | {_cell(row[n]['same_answer'])}" for n in names]
        q = row["qqp"]
        lines.append(f"| {mark}{row['min_precision']}{mark} | " + " | ".join(cells)
                     + f" | {q['precision']:.3f} / {q['recall']:.3f} |")
    lines += ["", "## qqp held-out: best recall at a precision (natural balance)\n",
              "| scorer | P >= 0.90 | P >= 0.93 | P >= 0.95 |", "|---|---|---|---|"]
    for name, d in r["qqp_recall_at_precision"].items():
        lines.append(f"| {name} | " + " | ".join(f"{d[k]:.3f}" for k in ("0.9", "0.93", "0.95")) + " |")
    lines += ["", "![qqp PR](contrast_qqp_pr.png)", ""]
    for n, kinds in r["per_kind"].items():
        lines += [f"## {n}: per kind at the defaults\n", "| kind | same answer | reused |", "|---|---|---|"]
        for k, d in sorted(kinds.items(), key=lambda kv: (kv[0] in PARAPHRASE_KINDS, kv[0])):
            lines.append(f"| {k} | {k in PARAPHRASE_KINDS} | {_cell(d)} |")
        lines.append("")
        wrong = r["wrong_reuses"][n]
        if wrong:
            lines.append(f"Answer-changing pairs reused ({len(wrong)}):\n")
            lines += [f"- {w['kind']}: {w['a']!r} -> {w['b']!r} (cosine {w['cosine']}, p {w['p']})" for w in wrong]
            lines.append("")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = eval_parser("contrast_report", __doc__)
    ap.add_argument("--suite", default=str(SUITE_PATH))
    ap.add_argument("--verifier", default=None, help="verifier JSON (default: the shipped one)")
    ap.add_argument("--out", default=None, help="write contrast_report.md/.json and the PR plot here")
    args = ap.parse_args(argv)
    r = report(args)
    md = to_markdown(r)
    print(md)
    if args.out:
        out = Path(args.out)
        (out / "contrast_report.md").write_text(md + "\n", encoding="utf-8")
        (out / "contrast_report.json").write_text(json.dumps(r, indent=1, default=float) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
