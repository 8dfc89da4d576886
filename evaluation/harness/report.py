"""Markdown report, JSON results and PNG plots of an :class:`~.experiments.Experiment`."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Optional

from .experiments import Experiment
from .runner import RunResult
from .baselines import TINY_CLIP_CONFIG

ORACLE_NOTE = ("Backend 'oracle' is a ground-truth oracle that sleeps a fixed latency and is NOT a real model: "
               "its times show what the cache saves and costs, not what any model would take.")


def _fmt(v: Optional[float], spec: str = ".3f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return format(v, spec)


def _has_oracle(exp: Experiment) -> bool:
    return "oracle" in exp.backend_labels


def _backend_key(r: RunResult, exp: Experiment) -> str:
    for k, label in exp.backend_labels.items():
        if label == r.backend:
            return k
    return r.backend


def results_table(exp: Experiment, results: list[RunResult]) -> list[str]:
    rows = ["| configuration | backend | requests | hit rate | accuracy | false-hit rate | hits by tier (wrong) "
            "| lookup p50 ms | total s | speedup |",
            "|---|---|---:|---:|---:|---:|---|---:|---:|---:|"]
    for r in results:
        tiers = ", ".join(f"{t}: {n}" + (f" ({r.tier_wrong[t]})" if r.tier_wrong.get(t) else "")
                          for t, n in sorted(r.tier_hits.items())) or "–"
        rows.append(f"| {r.label} | {_backend_key(r, exp)} | {r.n} | {_fmt(r.hit_rate)} | {_fmt(r.accuracy)} | "
                    f"{_fmt(r.false_hit_rate)} | {tiers} | {_fmt(r.lookup_p50_ms, '.1f')} | {r.wall_s:.1f} | "
                    f"{_fmt(r.speedup, '.2f')}x |")
    return rows


def kinds_table(r: RunResult) -> list[str]:
    rows = [f"Per request kind, {r.label} on `{r.workload}`:", "",
            "| request kind | requests | hits | wrong hits |", "|---|---:|---:|---:|"]
    for k, v in sorted(r.by_kind.items()):
        rows.append(f"| {k} | {v['n']} | {v['hits']} | {v['wrong']} |")
    return rows


def best_at_accuracy(results: list[RunResult], series: str, min_accuracy: float = 0.99) -> Optional[RunResult]:
    """The run of ``series`` with the highest hit rate whose accuracy is >= ``min_accuracy``."""
    ok = [r for r in results if r.config == series and r.accuracy >= min_accuracy]
    return max(ok, key=lambda r: (r.hit_rate, r.params.get("tau") or 0)) if ok else None


def plot_sweep(exp: Experiment, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wl = exp.workloads[0].name
    paths = []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    series = sorted({r.config for r in exp.results if r.params.get("tau") is not None and r.config.startswith(("L1", "L2", "MLC all"))})
    styles = [("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."), ("v", "-")]
    for k, s in enumerate(series):
        rs = sorted((r for r in exp.results if r.config == s), key=lambda r: r.params["tau"])
        taus = [r.params["tau"] for r in rs]
        m, ls = styles[k % len(styles)]
        axes[0].plot(taus, [r.hit_rate for r in rs], marker=m, ls=ls, label=s, alpha=0.85)
        axes[1].plot(taus, [r.accuracy for r in rs], marker=m, ls=ls, label=s, alpha=0.85)
    for r in exp.results:
        if r.config in ("L0.5 only", "exact-only"):
            axes[0].axhline(r.hit_rate, ls="--", lw=1, color="gray" if r.config == "exact-only" else "black")
            axes[0].text(0.5, r.hit_rate, f" {r.config}", va="bottom", fontsize=8)
    axes[0].set_title(f"{wl}: hit rate vs threshold")
    axes[1].set_title(f"{wl}: accuracy vs threshold (no cache = 1.0)")
    for ax in axes:
        ax.set_xlabel("threshold tau (cosine)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("hit rate")
    axes[1].set_ylabel("accuracy")
    fig.tight_layout()
    p = out / f"sweep_{wl}.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    return paths


def plot_speedups(exp: Experiment, out: Path, name: str) -> Optional[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rs = [r for r in exp.results if r.speedup is not None]
    if not rs:
        return None
    groups = sorted({(r.workload, _backend_key(r, exp)) for r in rs}, key=lambda g: [w.name for w in exp.workloads].index(g[0]) if g[0] in [w.name for w in exp.workloads] else 0)
    configs = list(dict.fromkeys(r.config for r in rs if not r.params.get("tau") or r.config.startswith("GPT")))
    if exp.kind == "sweep":
        configs = [c for c in configs if c in ("no cache", "exact-only", TINY_CLIP_CONFIG, "L0.5 only") or c.startswith("GPT")]
        extra = [r for r in rs if r.config.startswith("MLC all tiers")]
        best = max(extra, key=lambda r: r.speedup or 0, default=None)
    else:
        best = None
    fig, ax = plt.subplots(figsize=(min(16, max(6, 0.8 * len(groups) * max(1, len(configs)))), 4.6))
    width = 0.8 / max(1, len(configs) + (1 if best else 0))
    for j, c in enumerate(configs):
        vals, accs = [], []
        for g in groups:
            r = next((r for r in rs if (r.workload, _backend_key(r, exp)) == g and r.config == c), None)
            vals.append((r.speedup or 0.0) if r else 0.0)
            accs.append(r.accuracy if r else None)
        xs = [i + j * width for i in range(len(groups))]
        ax.bar(xs, vals, width, label=c)
        for x, v, a in zip(xs, vals, accs):  # a speedup means little without its accuracy
            if a is not None:
                ax.text(x, v, f"acc\n{a:.2f}", ha="center", va="bottom", fontsize=6)
    if best is not None:
        ax.bar([len(configs) * width], [best.speedup], width, label=f"{best.label}")
    ax.set_xticks([i + width * (len(configs) - 1) / 2 for i in range(len(groups))])
    ax.set_xticklabels([f"{w}\n({b})" for w, b in groups], fontsize=8)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_ylabel("speedup vs no cache (measured wall time)")
    ax.set_title("Measured speedup vs no cache" + ("\n(oracle = sleeping stand-in, not a model)" if _has_oracle(exp) else ""),
                 fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    p = out / f"speedup_{name}.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def write_report(exp: Experiment, out_dir: str | Path, name: Optional[str] = None) -> Path:
    """Write ``<name>.md``, ``<name>.json`` and PNG plots into ``out_dir``; return the .md path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = name or (f"sweep_{exp.workloads[0].name}" if exp.kind == "sweep" else exp.kind)
    plots: list[Path] = []
    if exp.kind == "sweep":
        plots += plot_sweep(exp, out)
    sp = plot_speedups(exp, out, name)
    if sp:
        plots.append(sp)
    lines = [f"# MLC evaluation: {exp.kind}" + (f" `{exp.workloads[0].name}`" if exp.kind == "sweep" else ""), ""]
    lines.append(f"Generated {time.strftime('%Y-%m-%d %H:%M:%S')} in {exp.seconds:.0f} s. "
                 f"Environment: {json.dumps(exp.env)}.")
    lines.append("")
    if _has_oracle(exp):
        lines.append(f"> {ORACLE_NOTE}")
        lines.append("")
    lines.append("Backends: " + "; ".join(f"**{k}** = {v}" for k, v in exp.backend_labels.items()) + ".")
    lines.append("")
    lines.append("Workloads: " + "; ".join(f"**{w.name}** = {w.description} ({len(w.items)} requests: "
                                           + ", ".join(f"{k} {v}" for k, v in w.kinds().items()) + ")"
                                           for w in exp.workloads) + ".")
    lines.append("")
    lines.append("Definitions: hit rate = requests answered from the cache / requests; accuracy = responses equal to "
                 "the request's own ground truth / requests; false-hit rate = wrong hits / hits; lookup p50 = median "
                 "time inside the cache's `lookup`; total = measured wall time of the whole stream; speedup = no-cache "
                 "total / this total, same workload and backend.")
    lines.append("")
    for note in exp.notes:
        lines.append(f"Note: {note}")
        lines.append("")
    if exp.kind == "sweep":
        lines += ["## Results", ""] + results_table(exp, exp.results) + [""]
        lines += ["## Highest hit rate at accuracy >= 0.99", "", "| series | tau | hit rate | accuracy |", "|---|---:|---:|---:|"]
        for s in dict.fromkeys(r.config for r in exp.results if r.params.get("tau") is not None or r.config == "L0.5 only"):
            b = best_at_accuracy(exp.results, s)
            lines.append(f"| {s} | {_fmt(b.params.get('tau') if b else None, 'g')} | {_fmt(b.hit_rate if b else None)} | "
                         f"{_fmt(b.accuracy if b else None)} |" if b else f"| {s} | none reaches 0.99 | – | – |")
        lines.append("")
        d = next((r for r in exp.results if r.config == TINY_CLIP_CONFIG), None)
        if d:
            lines += kinds_table(d) + [""]
        if exp.extra.get("scenes"):  # scene sweeps: oracle-reusable set, Experiment 2 table, targets
            from ..scenes.report import scene_sections

            lines += scene_sections(exp, out, plots)
    else:
        for wl in exp.workloads:
            rs = [r for r in exp.results if r.workload == wl.name]
            lines += [f"## {wl.name}", "", wl.description, ""] + results_table(exp, rs) + [""]
            d = next((r for r in rs if r.config in (TINY_CLIP_CONFIG, "MLC as shipped")), None)  # bench / demo
            if d:
                lines += kinds_table(d) + [""]
    if plots:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    md = out / f"{name}.md"
    md.write_text("\n".join(lines) + "\n", encoding="utf-8")
    data = {
        "kind": exp.kind,
        "env": exp.env,
        "seconds": exp.seconds,
        "backends": exp.backend_labels,
        "oracle_note": ORACLE_NOTE if _has_oracle(exp) else None,
        "notes": exp.notes,
        "extra": exp.extra,
        "workloads": [{"name": w.name, "description": w.description, "requests": len(w.items), "kinds": w.kinds(),
                       "meta": w.meta} for w in exp.workloads],
        "results": [r.summary() for r in exp.results],
        "plots": [p.name for p in plots],
    }
    (out / f"{name}.json").write_text(json.dumps(data, indent=2, default=_json_default) + "\n", encoding="utf-8")
    return md


def _json_default(o: Any) -> Any:
    if isinstance(o, float) and math.isnan(o):
        return None
    return str(o)
