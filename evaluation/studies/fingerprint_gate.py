"""Which gate in front of the image-change judge: the global image embedding or the pixel fingerprint?

L2 can find a near copy of a stored picture two ways: the image tower's global embedding
(cosine >= the calibrated ``global_tau``) or the 16 x 16 pixel fingerprint
(``mlc_integrations.images.fingerprint``, cosine >= the L2 pre-screen threshold, 0.5),
which costs no tower run. Either way the local image-change judge decides. This study
measures, on labelled pairs, how often each gate followed by the shipped judge reuses
each population -- benign copies and drift (should), content edits and different
pictures (should not) -- and how often the fingerprint gate admits a pair the global
gate had refused (and the judge then accepts).

Pairs: the train side of ``evaluation.training.image_pairs`` (cal and val) and its
held-out check v2 (already used to report the shipped rule; no gate or threshold here is
chosen on it: 0.5 is the pre-screen threshold measured in
``evaluation.studies.prescreen``)::

    python -m evaluation.studies.fingerprint_gate --out docs/results

writes ``fingerprint_gate.json`` / ``fingerprint_gate.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from mlc_integrations.images import fingerprint
from mlc_integrations.tiers import DEFAULT_L2_PRESCREEN
from mlc_integrations.verify.image_change import DEFAULT_RULE_PATH, ImageChangeRule

from ..training.image_pairs import bars, calibration_pairs, heldout_pairs, load_sources, measure_staged, split_sources

log = logging.getLogger(__name__)


def _fp_cosines(pairs: Sequence[Any]) -> list[float]:
    memo: dict[int, np.ndarray] = {}
    out = []
    for p in pairs:
        a = memo.setdefault(id(p.stored), fingerprint(p.stored))
        out.append(float(a @ fingerprint(p.new)))
    return out


GATES = ("global gate + judge", "fingerprint gate + judge", "admitted only by the fingerprint", "judge alone")


def gate_table(rows: Sequence[dict[str, Any]], rule: ImageChangeRule, tau: float, fp_floor: float) -> dict[str, Any]:
    """Pairs reused per population (``bars``' populations) under each gate, the judge after it.
    Each gate is expressed as the rows' ``cosine`` column and a threshold, so ``bars``
    counts it with the judge exactly as it counts the shipped configuration."""
    def gated(passes: Any) -> list[dict[str, Any]]:
        return [dict(r, cosine=1.0 if ok else -1.0) for r, ok in zip(rows, passes)]

    fp_ok = [r["fp"] >= fp_floor for r in rows]
    glob_ok = [r["cosine"] >= tau for r in rows]
    variants = {GATES[0]: (list(rows), tau), GATES[1]: (gated(fp_ok), 0.0),
                GATES[2]: (gated([f and not g for f, g in zip(fp_ok, glob_ok)]), 0.0),
                GATES[3]: (gated([True] * len(rows)), 0.0)}
    counted = {name: bars(rule, rs, t) for name, (rs, t) in variants.items()}
    out: dict[str, Any] = {}
    for pop, v in counted[GATES[0]].items():
        if isinstance(v, dict) and "n" in v:
            out[pop] = {"n": v["n"], **{g: counted[g][pop]["reused"] for g in GATES}}
    ben = [r["fp"] for r in rows if r["label"] == "benign"]
    out["benign pairs with fingerprint cosine"] = {"min": round(min(ben), 4), "p1": round(float(np.percentile(ben, 1)), 4),
                                                   "below the floor": sum(f < fp_floor for f in ben), "n": len(ben)}
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evaluation.studies.fingerprint_gate", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="mlc_report")
    p.add_argument("--rows", default=None, help="reuse measured rows (JSON written by an earlier run)")
    args = p.parse_args(argv)
    import torch

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rule = ImageChangeRule.load()
    tau = float(json.loads(DEFAULT_RULE_PATH.read_text())["global_tau"])
    floor = float(DEFAULT_L2_PRESCREEN)
    if args.rows:
        sets = json.loads(Path(args.rows).read_text())
    else:
        pics, group = load_sources()
        train, held = split_sources(group)
        sets = {}
        for name, pairs in (("train side (cal + val)", calibration_pairs(pics, group, train)),
                            ("held-out v2", heldout_pairs(pics, held, 2))):
            t0 = time.perf_counter()
            rows = measure_staged(pairs)
            for r, f in zip(rows, _fp_cosines(pairs)):
                r["fp"] = round(f, 5)
            sets[name] = rows
            log.info("%s: %d pairs in %.0f s", name, len(rows), time.perf_counter() - t0)
        (out / "fingerprint_gate_rows.json").write_text(json.dumps(sets) + "\n", encoding="utf-8")
    res: dict[str, Any] = {"rule": rule.source, "global_tau": tau, "fingerprint_floor": floor,
                           "sets": {name: gate_table(rows, rule, tau, floor) for name, rows in sets.items()}}
    (out / "fingerprint_gate.json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    lines = [f"# {__doc__.splitlines()[0]}", "", f"Judge: the shipped rule; global gate: Lite0 cosine >= {tau}; "
             f"fingerprint gate: cosine >= {floor}. Command: `python -m evaluation.studies.fingerprint_gate --out docs/results`.", ""]
    for name, tab in res["sets"].items():
        lines += [f"## {name}", "", "| population | n | " + " | ".join(GATES) + " |", "|---|---:|" + "---:|" * len(GATES)]
        for pop, v in tab.items():
            if "n" in v and pop != "benign pairs with fingerprint cosine":
                lines.append(f"| {pop} | {v['n']} | " + " | ".join(str(v[g]) for g in GATES) + " |")
        lines += ["", f"Benign pairs' fingerprint cosine: {tab['benign pairs with fingerprint cosine']}", ""]
    (out / "fingerprint_gate.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
