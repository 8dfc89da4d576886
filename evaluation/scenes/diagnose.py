"""Why a cache configuration misses the scene targets: every wrong hit and every
oracle-reusable request it did not serve, with the tier, the scores, the stored
question it matched (or the candidate it refused, and why).

    python -m evaluation.scenes.diagnose --workload scenes --out docs/results/scenes_diagnosis_scenes.md

Runs the stream once through LangChain's cache path against the ground-truth oracle
(no latency: only decisions matter here), reading the adapter's ``last_lookup`` after
each request. ``--config`` picks ``defaults`` (``mlc-scenes-tiny`` on L2, the sweep's
"MLC defaults, L2 on a tiny CLIP") or ``shipped`` (``MultimodalSemanticCache()``, L2 on the default image
encoder). ``--l2-image-threshold`` overrides the L2 image threshold of ``defaults``
(everything else stays the default): choose it on ``--split train``, then check it once
on the test split.
"""

from __future__ import annotations

import argparse
import logging
from collections import Counter
from pathlib import Path
from typing import Any, Optional

from langchain_core.globals import set_llm_cache

from ..harness.backends import GroundTruthOracle
from ..harness.baselines import mlc_cache
from ..harness.experiments import warm_models
from ..harness.runner import reset_model_memos, to_messages
from .experiments import _shipped, scenes_clip
from ..harness.workloads import Workload, build

log = logging.getLogger(__name__)


def _scores(d: Optional[dict[str, float]]) -> str:
    return ", ".join(f"{k} {v:.3f}" for k, v in (d or {}).items()) or "–"


def diagnose(workload: Workload, cache: Any) -> list[dict[str, Any]]:
    """One row per request: outcome (``hit``/``wrong``/``miss``), reusable flag, kind,
    family, tier and scores of the hit or of the refused candidate, matched text."""
    oracle = GroundTruthOracle(latency_s=0.0)
    produced: dict[str, set[str]] = {}
    rows: list[dict[str, Any]] = []
    reset_model_memos()
    set_llm_cache(cache)
    try:
        for it in workload.items:
            oracle.expect(it.truth)
            calls = oracle.calls
            out = oracle.invoke(to_messages(it))
            answer = str(out.content)
            rec = cache.last_lookup
            hit = oracle.calls == calls
            row: dict[str, Any] = {"text": it.text, "truth": it.truth, "kind": it.kind,
                                   "family": it.meta.get("family"), "reusable": bool(it.meta.get("reusable")),
                                   "state": it.meta.get("state")}
            if hit:
                row.update(outcome="hit" if it.truth in produced.get(answer, ()) else "wrong", answer=answer,
                           tier=rec.hit.tier, scores=_scores(rec.hit.scores), matched=rec.hit.matched_text)
            else:
                produced.setdefault(answer, set()).add(it.truth)
                ref = rec.refused if rec is not None else None
                why = f"refused ({ref.reason})" if ref else (rec.reason if rec is not None else "")
                row.update(outcome="miss", reason=why,
                           tier=ref.tier if ref else None, scores=_scores(ref.scores if ref else None),
                           matched=ref.matched_text if ref else None,
                           refused=f"{ref.reason}: {ref.detail}" if ref else None)
            rows.append(row)
    finally:
        set_llm_cache(None)
    return rows


def markdown(workload: Workload, config: str, rows: list[dict[str, Any]], command: str = "") -> str:
    wrong = [r for r in rows if r["outcome"] == "wrong"]
    missed = [r for r in rows if r["reusable"] and r["outcome"] == "miss"]
    served = sum(1 for r in rows if r["reusable"] and r["outcome"] == "hit")
    n_reusable = sum(1 for r in rows if r["reusable"])
    n = len(rows)
    changed = [r for r in rows if r["kind"].endswith("answer changed")]
    changed_line = (f" Requests whose answer an edit changed: {len(changed)}, reused "
                    f"{sum(r['outcome'] != 'miss' for r in changed)}." if changed else "")
    lines = [f"# Scenes diagnosis: {workload.name}, {config}", "",
             f"{workload.description}. {n} requests; accuracy {(n - len(wrong)) / n:.3f} ({len(wrong)} wrong hits); "
             f"oracle-reusable served {served} of {n_reusable} ({served / max(1, n_reusable):.1%})." + changed_line, "",
             f"Reproduce: `python -m evaluation.scenes.diagnose --workload {workload.name} {command}`", "",
             "## Wrong hits", "",
             "| kind | family | request | truth | reused answer | tier | scores | stored question |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['kind']} | {r['family']} | {r['text']} | {r['truth']} | {r['answer']} | {r['tier']} | {r['scores']} "
              f"| {r['matched']} |" for r in wrong]
    lines += ["", "## Oracle-reusable requests not served", "",
              "By kind: " + ", ".join(f"{k} {v}" for k, v in Counter(r["kind"] for r in missed).most_common()) + ".", "",
              "By family: " + ", ".join(f"{k} {v}" for k, v in Counter(r["family"] for r in missed).most_common()) + ".",
              "", "By reason: " + ", ".join(f"{k} {v}" for k, v in Counter(str(r["reason"]) for r in missed).most_common())
              + ".", "",
              "| kind | family | request | refused candidate tier | scores | refused because | candidate's question |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['kind']} | {r['family']} | {r['text']} | {r['tier'] or '–'} | {r['scores']} | {r['refused'] or r['reason']} "
              f"| {r['matched'] or '–'} |" for r in missed]
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="scenes", choices=("scenes", "scenes-edit"))
    ap.add_argument("--config", default="defaults", choices=("defaults", "shipped"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--split", default="test", choices=("test", "train"))
    ap.add_argument("--l2-image-threshold", type=float, default=None, help="with --config defaults only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="Markdown file (default: stdout)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.l2_image_threshold is not None and args.config != "defaults":
        ap.error("--l2-image-threshold applies to --config defaults")
    wl = build(args.workload, quick=args.quick, seed=args.seed, split=args.split)
    clip = scenes_clip()
    warm_models(clip)
    over = {} if args.l2_image_threshold is None else {"l2_image_threshold": args.l2_image_threshold}
    cache = mlc_cache(**over, image_encoder=clip) if args.config == "defaults" else _shipped()
    argv_text = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
                         if k in ("config", "split", "l2_image_threshold", "seed") and v not in (None, 0, "test"))
    config = args.config + (f", l2_image_threshold={args.l2_image_threshold:g}" if over else "")
    md = markdown(wl, config, diagnose(wl, cache), argv_text + (" --quick" if args.quick else ""))
    if args.out:
        Path(args.out).write_text(md)
    else:
        print(md)  # a command-line tool's output (eval code, not library code)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
