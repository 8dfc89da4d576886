"""Report sections of a scene sweep (:mod:`.scene_experiments`): the oracle-reusable
set, the Experiment 2 table with speedups at 300 ms and 1 s, the targets, hits per
request kind (where raw-threshold L2 reuses the answers an edit changed), the
measured-latency check and the L2 model's figures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

from ..harness.experiments import Experiment
from ..harness.runner import RunResult
from ..harness.baselines import TINY_CLIP_CONFIG

TARGET_ACCURACY = 0.99
TARGET_SERVED = 0.70


def _f(v: Optional[float], spec: str = ".3f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return format(v, spec)


def _tiers(r: RunResult) -> str:
    return ", ".join(f"{t}: {n}" + (f" ({r.tier_wrong[t]})" if r.tier_wrong.get(t) else "")
                     for t, n in sorted(r.tier_hits.items())) or "–"


def experiment2_table(exp: Experiment) -> list[str]:
    sc = exp.extra["scenes"]
    edit = bool(sc["changed_answer_kinds"])
    head = ("| configuration | hit rate | accuracy | false-hit rate | hits by tier (wrong) | oracle-reusable served "
            "| right by chance |" + (" changed answers reused |" if edit else "") + " speedup 300 ms | speedup 1 s |")
    rows = [head, "|---|---:|---:|---:|---|---:|---:|" + ("---:|" if edit else "") + "---:|---:|"]
    for r in exp.results:
        s = sc["scores"][r.label]
        sp = sc["speedup_at_ms"].get(r.label, {})
        rows.append(f"| {r.label} | {_f(r.hit_rate)} | {_f(r.accuracy)} | {_f(r.false_hit_rate)} | {_tiers(r)} | "
                    f"{s['served_reusable']} ({_f(s['served_fraction'], '.1%')}) | {s['right_by_chance']} |"
                    + (f" {s['changed_answer_reused']} of {s['changed_answer_requests']} |" if edit else "")
                    + f" {_f(sp.get('300'), '.2f')}x | {_f(sp.get('1000'), '.2f')}x |")
    return rows


def targets(exp: Experiment) -> list[str]:
    sc = exp.extra["scenes"]
    edit = bool(sc["changed_answer_kinds"])
    rows = ["| configuration | accuracy (target >= 0.99) | oracle-reusable served (target >= 70 %, scene stream) |"
            + (" changed answers reused (target 0) |" if edit else ""),
            "|---|---|---|" + ("---|" if edit else "")]
    for r in exp.results:
        if r.config not in (TINY_CLIP_CONFIG, "MLC as shipped"):
            continue
        s = sc["scores"][r.label]
        ok_acc = "met" if r.accuracy >= TARGET_ACCURACY else "NOT met"
        frac = s["served_fraction"]
        ok_served = "met" if frac is not None and frac >= TARGET_SERVED else "NOT met"
        row = f"| {r.label} | {_f(r.accuracy)} ({ok_acc}) | {_f(frac, '.1%')} ({ok_served}) |"
        if edit:
            row += f" {s['changed_answer_reused']} ({'met' if s['changed_answer_reused'] == 0 else 'NOT met'}) |"
        rows.append(row)
    return rows


def kinds_matrix(exp: Experiment) -> list[str]:
    """Hits (wrong) per request kind for the defaults and the L2 / all-tier series."""
    wl = exp.workloads[0]
    cols = [r for r in exp.results if r.config in ("MLC as shipped", TINY_CLIP_CONFIG, "exact-only")
            or r.config.startswith(("L2 only", "MLC all tiers"))]
    kinds = list(wl.kinds())
    rows = ["| request kind | requests | oracle-reusable | " + " | ".join(r.label for r in cols) + " |",
            "|---|---:|---:|" + "---:|" * len(cols)]
    for k in kinds:
        n = sum(1 for it in wl.items if it.kind == k)
        reusable = sum(1 for it in wl.items if it.kind == k and it.meta.get("reusable"))
        cells = []
        for r in cols:
            v = r.by_kind.get(k, {"hits": 0, "wrong": 0})
            cells.append(f"{v['hits']}" + (f" (**{v['wrong']}**)" if v["wrong"] else ""))
        rows.append(f"| {k} | {n} | {reusable} | " + " | ".join(cells) + " |")
    return rows


def families_matrix(exp: Experiment) -> list[str]:
    """Wrong hits per question family, same columns as :func:`kinds_matrix`."""
    wl = exp.workloads[0]
    sc = exp.extra["scenes"]
    cols = [r for r in exp.results if r.config in ("MLC as shipped", TINY_CLIP_CONFIG, "exact-only")
            or r.config.startswith(("L2 only", "MLC all tiers"))]
    fams = list(dict.fromkeys(str(it.meta.get("family")) for it in wl.items))
    rows = ["| question family | requests | oracle-reusable | " + " | ".join(r.label for r in cols) + " |",
            "|---|---:|---:|" + "---:|" * len(cols)]
    for f in fams:
        n = sum(1 for it in wl.items if str(it.meta.get("family")) == f)
        reusable = sum(1 for it in wl.items if str(it.meta.get("family")) == f and it.meta.get("reusable"))
        cells = [str(sc["scores"][r.label].get("wrong_by_family", {}).get(f, 0)) for r in cols]
        rows.append(f"| {f} | {n} | {reusable} | " + " | ".join(cells) + " |")
    return rows


def measured_table(exp: Experiment) -> list[str]:
    m = exp.extra["scenes"]["measured"]
    if not m:
        return ["Not run (quick sweep)."]
    rows = ["| configuration | oracle latency | total s | hits | wrong | speedup measured | composed from the sweep run |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for x in m:
        rows.append(f"| {x['label']} | {x['latency_ms']:g} ms | {x['wall_s']:.1f} | {x['hits']} | {x['wrong_hits']} | "
                    f"{_f(x['speedup'], '.2f')}x | {_f(x.get('composed_speedup'), '.2f')}x |")
    return rows


def model_lines(exp: Experiment) -> list[str]:
    rep: Optional[dict[str, Any]] = exp.extra["scenes"].get("clip_training")
    if not rep:
        return ["No training report found beside the checkpoint."]
    out = [f"`{rep['model']}`: {rep['parameters']:,} parameters, checkpoint {rep['checkpoint_bytes'] / 1e6:.2f} MB (fp16), "
           f"trained in {rep['train_seconds']:.0f} s on CPU ({rep['steps']} steps, {rep['train_scenes']} train-split "
           f"scenes, {rep['threads']} thread; `{rep['command']}`)."]
    ev = rep.get("test_split")
    if ev:
        out += ["", f"Image-image cosine on {ev['scenes']} test-split scenes (share at or above the L2 image threshold "
                f"{ev['threshold']:g}):", "", "| pair | median | p05 | p95 | share >= threshold |", "|---|---:|---:|---:|---:|"]
        key = f"share_at_or_above_{ev['threshold']:g}"
        for name, v in ev.items():
            if isinstance(v, dict):
                out.append(f"| {name} | {v['median']:.3f} | {v['p05']:.3f} | {v['p95']:.3f} | {v[key]:.1%} |")
    return out


def plot_scenes(exp: Experiment, out: Path) -> Optional[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sc = exp.extra["scenes"]
    edit = bool(sc["changed_answer_kinds"])
    wl = exp.workloads[0].name
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    series = [s for s in dict.fromkeys(r.config for r in exp.results) if s.startswith(("L1", "L2", "MLC all"))]
    for k, s in enumerate(series):
        rs = sorted((r for r in exp.results if r.config == s), key=lambda r: r.params["tau"])
        taus = [r.params["tau"] for r in rs]
        axes[0].plot(taus, [sc["scores"][r.label]["served_fraction"] or 0 for r in rs], marker="os^Dv"[k % 5], label=s)
        bad = [sc["scores"][r.label]["changed_answer_reused"] if edit else r.wrong_hits for r in rs]
        axes[1].plot(taus, bad, marker="os^Dv"[k % 5], label=s)
    for r in exp.results:
        if r.config in (TINY_CLIP_CONFIG, "MLC as shipped", "exact-only", "GPTCache t=0.8"):
            v = sc["scores"][r.label]["served_fraction"] or 0
            axes[0].axhline(v, ls="--", lw=1, color={TINY_CLIP_CONFIG: "C3", "MLC as shipped": "C7"}.get(r.config, "gray"))
            axes[0].text(0.01, v, f" {r.config}", va="bottom", fontsize=7, transform=axes[0].get_yaxis_transform())
            bad = sc["scores"][r.label]["changed_answer_reused"] if edit else r.wrong_hits
            axes[1].axhline(bad, ls="--", lw=1, color={TINY_CLIP_CONFIG: "C3", "MLC as shipped": "C7"}.get(r.config, "gray"))
            axes[1].text(0.01, bad, f" {r.config}", va="bottom", fontsize=7, transform=axes[1].get_yaxis_transform())
    axes[0].set_title(f"{wl}: oracle-reusable requests served from the cache")
    axes[0].set_ylabel("served / oracle-reusable")
    axes[1].set_title(f"{wl}: " + ("reuses of an answer the edit changed" if edit else "wrong answers from the cache"))
    axes[1].set_ylabel("requests")
    for ax in axes:
        ax.set_xlabel("threshold tau (cosine)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    p = out / f"scenes_{wl}.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def scene_sections(exp: Experiment, out: Path, plots: list[Path]) -> list[str]:
    """Markdown of a scene sweep; appends its plot to ``plots``."""
    sc = exp.extra["scenes"]
    o = sc["oracle"]
    n = o["requests"]
    lines = ["## Scenes: Experiment 2", "",
             f"L2 runs on `{sc['clip_model']}` (passed as `clip_model`; opt-in) in every MLC row except "
             "\"MLCEngine() as shipped\", which is `MultimodalSemanticCache()` with no options but in-memory storage.", "",
             f"**Oracle-reusable**: {o['reusable']} of {n} requests ({o['reusable'] / n:.1%}) -- an earlier request had the "
             "same meaning (same question program; paraphrases and argument swaps count), showed the same scene (any "
             "encoding or camera, before or after an edit) and had the same true answer. Counting earlier requests about "
             f"*any* scene with the same meaning and answer: {o['reusable_any_scene']} ({o['reusable_any_scene'] / n:.1%}). "
             "\"oracle-reusable served\" = hits on oracle-reusable requests whose answer was right / oracle-reusable "
             "requests; \"right by chance\" = right hits on requests no earlier request could vouch for (e.g. a stored "
             "\"yes\" reused for another yes/no question)." + (
                 f" \"changed answers reused\" = hits on the requests whose true answer the edit changed "
                 f"({', '.join(sc['changed_answer_kinds'])}): each is a wrong answer." if sc["changed_answer_kinds"] else ""),
             "",
             f"Speedups are against no cache with the oracle at 300 ms and 1 s per call: the measured wall time of each "
             f"run (oracle at {exp.extra['latency_ms']:g} ms) with each backend call's latency replaced by 300 ms or 1 s; "
             "the last table checks that composition against runs with the oracle really sleeping.", "",
             "### Experiment 2 table", ""] + experiment2_table(exp)
    lines += ["", "### Targets at defaults", ""] + targets(exp)
    lines += ["", "### Hits per request kind (wrong hits in bold)", ""] + kinds_matrix(exp)
    lines += ["", "### Wrong hits per question family", ""] + families_matrix(exp)
    lines += ["", "### Check: speedups measured with the oracle really sleeping", ""] + measured_table(exp)
    lines += ["", "### The L2 model", ""] + model_lines(exp) + [""]
    p = plot_scenes(exp, out)
    if p is not None:
        plots.append(p)
    return lines
