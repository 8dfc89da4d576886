"""``mlc sweep --workload scenes`` / ``scenes-edit``: the write-up's Experiment 2 on the
procedural scenes.

Like :func:`.experiments.sweep` (same series, same runner, same baselines), with what
these streams need on top:

* L2 runs on the scenes' own tiny CLIP (``mlc-scenes-tiny``, passed explicitly), and
  ``MLCEngine()`` exactly as shipped (L2 on the default image encoder) runs beside it;
* real GPTCache at its default threshold (0.8) runs in full sweeps by default (one
  setting: it embeds the whole serialized prompt, ~130 kB of base64 picture per
  request, which costs it 0.5-2 s per lookup on this CPU -- and it hits on nearly
  every request whatever the threshold);
* every run is also scored against the stream's oracle-reusable set (the hits an ideal
  cache could serve, :mod:`.scene_workloads`) and, on the edit stream, counts the
  reuses of an answer whose ground truth the edit changed;
* speedups at 300 ms and 1 s: every configuration runs once against the oracle at
  ``latency_ms``; its time at latency L is that measured wall time plus L minus
  ``latency_ms`` per backend call (the cache's own costs are the measured ones). Full
  sweeps also run no cache and MLC defaults with the oracle really sleeping 300 ms and
  report those measured speedups beside the composed ones (a check of the
  composition; sleeping through every configuration at 300 ms and 1 s took most of a
  full sweep's time and tells nothing the check does not).

Every run pays its own model costs (the runner forgets memoized embeddings between
runs), so the composed speedups of the threshold series are as honest as the
defaults'. A full sweep takes about 10-20 minutes per stream on the shared 2-core
machine (the report records the measured time and the load).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Sequence

from mlc_integrations.embed.image_towers import DEFAULT_IMAGE_ENCODER
from ..harness.backends import GroundTruthOracle
from ..harness.baselines import GPTCacheLangChain, configurations, gptcache_cosine, mlc_cache
from ..harness.experiments import SERIES, Experiment, _bar, _engine_has_verifier, warm_models
from ..harness.runner import RunResult, attach_speedups, run_workload
from .workloads import changed_answer_kinds
from ..training.train_scenes_clip import MODEL_DIR, MODEL_NAME
from ..harness.workloads import Workload, build
from ..harness.baselines import TINY_CLIP_CONFIG

log = logging.getLogger(__name__)

SCENE_WORKLOADS = ("scenes", "scenes-edit")
SCENE_TAUS = (0.5, 0.8, 0.9, 0.95, 0.99)
QUICK_SCENE_TAUS = (0.9,)
SPEEDUP_AT_MS = (300.0, 1000.0)
MEASURED_AT_MS = (300.0,)
MEASURED_CONFIGS = ("no cache", TINY_CLIP_CONFIG)
GPTCACHE_THRESHOLDS = (0.8,)


def scenes_clip() -> str:
    """The directory of ``mlc-scenes-tiny`` (an explicit opt-in: never an engine default)."""
    if not (MODEL_DIR / "open_clip_model.safetensors").exists():
        raise FileNotFoundError(f"{MODEL_DIR} is missing: train it with `python -m evaluation.training.train_scenes_clip`")
    return str(MODEL_DIR)


def _shipped() -> Any:
    """``MultimodalSemanticCache()`` with no options but in-memory storage: L2 on the
    engine's default image encoder, at its calibrated threshold."""
    from mlc_integrations.langchain import MultimodalSemanticCache

    return MultimodalSemanticCache(persist_directory=None)


def _plan(wl: Workload, taus: Sequence[float], clip: str, gptcache: bool) -> list[tuple[str, str, dict[str, Any], Callable[[], Any]]]:
    plan: list[tuple[str, str, dict[str, Any], Callable[[], Any]]] = [
        ("no cache", "no cache", {}, lambda: None),
        ("exact-only", "LangChain InMemoryCache (exact)", {}, configurations(())["exact-only"][1]),
    ]
    if gptcache:
        for t in GPTCACHE_THRESHOLDS:
            plan.append((f"GPTCache t={t:g}", f"GPTCache (real) similarity_threshold={t:g} = cosine {gptcache_cosine(t):.1f}",
                         {"tau": None}, lambda t=t: GPTCacheLangChain(t)))
    plan += [
        ("MLC as shipped", f"MLCEngine() as shipped (L2 on {DEFAULT_IMAGE_ENCODER})", {}, _shipped),
        (TINY_CLIP_CONFIG, f"MLC engine defaults, L2 on {MODEL_NAME}", {}, lambda: mlc_cache(image_encoder=clip)),
    ]
    for s in SERIES:
        if "verifier" in s and not _engine_has_verifier():
            continue
        for t in ([None] if s == "L0.5 only" else taus):
            opts = {"image_encoder": clip, **SERIES[s](t if t is not None else 0.0)}  # a series' enable_l2 wins
            plan.append((s, s if t is None else f"{s} tau={t:g}", {"tau": t, **{k: v for k, v in opts.items() if k != "image_encoder"}},
                         lambda opts=opts: mlc_cache(**opts)))
    return plan


def score(wl: Workload, r: RunResult) -> dict[str, Any]:
    """A run against the stream's oracle: hits served on oracle-reusable requests, hits
    that were right only by chance (same answer string, not a reusable request), and
    reuses of an answer an edit changed."""
    reusable = [bool(it.meta.get("reusable")) for it in wl.items]
    served = sum(1 for o, ok in zip(r.outcomes, reusable) if ok and o == "hit")
    chance = sum(1 for o, ok in zip(r.outcomes, reusable) if not ok and o == "hit")
    changed = changed_answer_kinds(wl)
    wrong_by_family: dict[str, int] = {}
    for o, it in zip(r.outcomes, wl.items):
        if o == "wrong":
            fam = str(it.meta.get("family"))
            wrong_by_family[fam] = wrong_by_family.get(fam, 0) + 1
    return {
        "oracle_reusable": sum(reusable),
        "served_reusable": served,
        "served_fraction": served / sum(reusable) if sum(reusable) else None,
        "right_by_chance": chance,
        "changed_answer_requests": sum(r.by_kind.get(k, {}).get("n", 0) for k in changed),
        "changed_answer_reused": sum(r.by_kind.get(k, {}).get("wrong", 0) for k in changed),
        "wrong_by_family": wrong_by_family,
    }


def composed_speedups(results: Sequence[RunResult], run_latency_ms: float,
                      at_ms: Sequence[float] = SPEEDUP_AT_MS) -> dict[str, dict[str, float]]:
    """Speedup vs no cache at each latency in ``at_ms``: measured wall time, with each
    backend call's ``run_latency_ms`` replaced by L (see the module docstring)."""
    base = next(r for r in results if r.config == "no cache")
    out: dict[str, dict[str, float]] = {}
    for r in results:
        row = {}
        for L in at_ms:
            extra = (L - run_latency_ms) / 1000.0
            t_base, t = base.wall_s + base.backend_calls * extra, r.wall_s + r.backend_calls * extra
            row[f"{L:g}"] = t_base / t if t > 0 else float("nan")
        out[r.label] = row
    return out


def scene_sweep(
    workload_name: str,
    *,
    quick: bool = False,
    taus: Optional[Sequence[float]] = None,
    latency_ms: float = 20.0,
    split: str = "test",
    seed: int = 0,
    gptcache: Optional[bool] = None,
    progress: bool = True,
    measure_at_ms: Optional[Sequence[float]] = None,
) -> Experiment:
    """Experiment 2 on a scene stream (see the module docstring). ``gptcache`` None: on
    in full sweeps, off in quick ones. ``measure_at_ms`` None: :data:`MEASURED_AT_MS`
    in full sweeps, none in quick ones."""
    if workload_name not in SCENE_WORKLOADS:
        raise ValueError(f"not a scene workload: {workload_name!r}")
    t0 = time.perf_counter()
    wl = build(workload_name, quick=quick, seed=seed, split=split)
    taus = tuple(taus or (QUICK_SCENE_TAUS if quick else SCENE_TAUS))
    use_gpt = (not quick) if gptcache is None else gptcache
    measure = tuple(() if quick else MEASURED_AT_MS) if measure_at_ms is None else tuple(measure_at_ms)
    clip = scenes_clip()
    oracle = GroundTruthOracle(latency_s=latency_ms / 1000.0)
    exp = Experiment("sweep", [wl], taus=taus, backend_labels={"oracle": oracle.label})
    warm_models(clip, image_encoders=[DEFAULT_IMAGE_ENCODER])
    plan = _plan(wl, taus, clip, use_gpt)
    if not use_gpt:
        exp.notes.append("GPTCache not run (quick sweep; pass --gptcache to include it).")
    bar = _bar(len(plan) * len(wl.items), f"sweep {wl.name}", progress)
    for config, label, params, factory in plan:
        exp.results.append(run_workload(wl, factory(), oracle, config=config, label=label, params=params, progress=bar))
    if bar is not None:
        bar.close()
    attach_speedups(exp.results)
    composed = composed_speedups(exp.results, latency_ms)
    measured = _measure(wl, plan, measure, progress) if measure else []
    for m in measured:
        m["composed_speedup"] = composed.get(m["label"], {}).get(f"{m['latency_ms']:g}")
    oracle_counts = dict(wl.meta.get("oracle", {}))  # type: ignore[arg-type]
    exp.extra.update(workload=wl.name, quick=quick, latency_ms=latency_ms, split=split, seed=seed, scenes={
        "clip_model": MODEL_NAME,
        "oracle": oracle_counts,
        "changed_answer_kinds": changed_answer_kinds(wl),
        "scores": {r.label: score(wl, r) for r in exp.results},
        "speedup_at_ms": composed,
        "measured": measured,
        "clip_training": _training_report(),
    })
    exp.seconds = time.perf_counter() - t0
    return exp


def _measure(wl: Workload, plan: Sequence[tuple[str, str, dict[str, Any], Callable[[], Any]]],
             latencies_ms: Sequence[float], progress: bool) -> list[dict[str, Any]]:
    """The headline configurations with the oracle really sleeping each latency."""
    rows: list[dict[str, Any]] = []
    chosen = [p for p in plan if p[0] in MEASURED_CONFIGS]
    bar = _bar(len(chosen) * len(latencies_ms) * len(wl.items), f"measured {wl.name}", progress)
    for L in latencies_ms:
        oracle = GroundTruthOracle(latency_s=L / 1000.0)
        runs = [run_workload(wl, factory(), oracle, config=c, label=label, params=params, progress=bar)
                for c, label, params, factory in chosen]
        attach_speedups(runs)
        rows += [{"label": r.label, "config": r.config, "latency_ms": L, "wall_s": round(r.wall_s, 2), "hits": r.hits,
                  "wrong_hits": r.wrong_hits, "speedup": r.speedup} for r in runs]
    if bar is not None:
        bar.close()
    return rows


def _training_report() -> Optional[dict[str, Any]]:
    import json

    path = MODEL_DIR / "training_report.json"
    return json.loads(path.read_text()) if path.exists() else None
