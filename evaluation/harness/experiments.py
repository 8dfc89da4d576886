"""The experiments behind ``mlc sweep``, ``mlc bench`` and ``mlc demo``.

Every number comes from running a workload through LangChain's cache path against a
backend (see :mod:`.runner`); nothing is projected.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from .backends import GroundTruthOracle
from .baselines import GPTCacheLangChain, configurations, mlc_cache
from .runner import RunResult, attach_speedups, run_workload
from .workloads import Workload, build
from .baselines import SWEEP_IMAGE_ENCODER, TINY_CLIP_CONFIG

log = logging.getLogger(__name__)

FULL_TAUS = (0.5, 0.7, 0.8, 0.85, 0.9, 0.95, 0.97, 0.99)
QUICK_TAUS = (0.5, 0.8, 0.95, 0.99)

def _engine_has_verifier() -> bool:
    import inspect

    from mlc_integrations.engine import MLCEngine

    return "verifier" in inspect.signature(MLCEngine.__init__).parameters


def _raw() -> dict[str, Any]:
    """Raw cosine thresholds only (as the write-up and other semantic caches decide)."""
    return {"verifier": "off"} if _engine_has_verifier() else {}


# Tier series of a sweep: engine options for threshold tau. "raw" series decide by the
# cosine threshold alone; "+ verifier" lets the engine's verifier (issue 7) decide
# among candidates retrieved at tau.
SERIES: dict[str, Callable[[float], dict[str, Any]]] = {
    "L0.5 only": lambda t: {"enable_l1": False, "enable_l2": False},
    "L1 only (raw)": lambda t: {"enable_exact": False, "enable_l2": False, "l1_threshold": t, **_raw()},
    "L2 only (raw)": lambda t: {"enable_exact": False, "enable_l1": False, "l2_threshold": t, **_raw()},
    "MLC all tiers (raw)": lambda t: {"l1_threshold": t, "l2_threshold": t, **_raw()},
    "MLC all tiers + verifier": lambda t: {"l1_threshold": t, "l2_threshold": t},
}


def environment() -> dict[str, Any]:
    """Where the numbers were measured (timings on a shared machine vary with its load)."""
    try:
        load = os.getloadavg()
    except OSError:  # pragma: no cover - not on every platform
        load = (float("nan"),) * 3
    import torch

    return {
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_avg_1_5_15": [round(x, 2) for x in load],
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }


def warm_models(clip_model: str = "mlc-easyvqa-tiny", image_encoders: Sequence[str] = ()) -> None:
    """Load the embedding models before any timing (loading is not lookup overhead)."""
    from mlc_integrations.embed.image_towers import resolve_image_encoder
    from mlc_integrations.embed.models import ClipEmbedder, ClipSpec, TextEmbedder

    TextEmbedder.shared(None).embed(["warm up"])
    ClipEmbedder.shared(ClipSpec.parse(clip_model)).load()
    for name in image_encoders:
        resolve_image_encoder(name).load()


def backend_for(wl: Workload, latency_ms: float) -> tuple[str, Any]:
    """The backend a workload is judged against: the real ImageNet classifier for the
    picture-classification streams (``video``, ``photo-classes``), else the oracle."""
    if wl.meta.get("backend") == "classifier":
        from .backends import ImageNetClassifierChat

        return "classifier", ImageNetClassifierChat(model=str(wl.meta["classifier"]))
    return "oracle", GroundTruthOracle(latency_s=latency_ms / 1000.0)


@dataclass
class Experiment:
    """Results of one command, ready for the report."""

    kind: str  # "sweep" | "bench" | "demo"
    workloads: list[Workload]
    results: list[RunResult] = field(default_factory=list)
    taus: Sequence[float] = ()
    backend_labels: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=environment)
    started: float = field(default_factory=time.time)
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def _bar(total: int, desc: str, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    # disable=None: no bar when stderr is not a terminal (logs, CI, tests).
    return tqdm(total=total, desc=desc, unit="req", leave=False, disable=None, mininterval=0.5)


def _phase(message: str, enabled: bool, bar: Any = None, desc: str = "") -> None:
    """A progress line on stderr (the bar shows only on a terminal; these lines show in
    logs too), and the bar's label for the phase."""
    if not enabled:
        return
    from tqdm import tqdm

    if bar is not None and desc:
        bar.set_description(desc)
    tqdm.write(message, file=sys.stderr)


def sweep(
    workload_name: str,
    *,
    quick: bool = False,
    taus: Optional[Sequence[float]] = None,
    latency_ms: float = 20.0,
    split: str = "test",
    seed: int = 0,
    gptcache: Optional[bool] = None,
    image_encoder: Optional[str] = None,
    progress: bool = True,
) -> Experiment:
    """Per tier and threshold: hit rate, accuracy, false-hit rate, lookup overhead and
    end-to-end time against the workload's backend (:func:`backend_for`), plus the
    no-cache and exact-only baselines and, with ``gptcache``, real GPTCache at its
    default threshold. L2 runs on ``image_encoder`` (default: the engine's default
    image encoder on the classifier streams, ``mlc-easyvqa-tiny`` on easy-vqa ones).
    The procedural scenes (Experiment 2) have their own sweep (scene_experiments.py)."""
    if workload_name in ("scenes", "scenes-edit"):
        from ..scenes.experiments import scene_sweep

        return scene_sweep(workload_name, quick=quick, taus=taus, latency_ms=latency_ms, split=split, seed=seed,
                           gptcache=gptcache, progress=progress)
    from mlc_integrations.embed.image_towers import DEFAULT_IMAGE_ENCODER

    t0 = time.perf_counter()
    wl = build(workload_name, quick=quick, seed=seed, split=split)
    taus = tuple(taus or (QUICK_TAUS if quick else FULL_TAUS))
    key, backend = backend_for(wl, latency_ms)
    exp = Experiment("sweep", [wl], taus=taus, backend_labels={key: backend.label})
    classifier_stream = key == "classifier"
    if image_encoder is None and classifier_stream:
        image_encoder = DEFAULT_IMAGE_ENCODER
    enc_opts: dict[str, Any] = {"image_encoder": image_encoder} if image_encoder else {}
    warm_models(image_encoders=[image_encoder] if image_encoder else [])
    if classifier_stream and wl.items and wl.items[0].image:
        backend.classify([_picture(wl.items[0].image)])  # load the classifier before any timing
    # One fixed question per stream: L1 (same pixels, similar text) adds nothing to L0.5 there.
    series = [s for s in SERIES if (wl.multimodal or not s.startswith("L2"))
              and (_engine_has_verifier() or "verifier" not in s)
              and not (classifier_stream and s.startswith("L1"))]
    enc_label = f", L2 on {image_encoder or SWEEP_IMAGE_ENCODER}"
    plan: list[tuple[str, str, dict[str, Any], Callable[[], Any]]] = [
        ("no cache", "no cache", {}, lambda: None),
        ("exact-only", "LangChain InMemoryCache (exact)", {}, configurations()["exact-only"][1]),
        (TINY_CLIP_CONFIG, f"MLC engine defaults{enc_label}", dict(enc_opts), lambda: mlc_cache(**enc_opts)),
    ]
    for s in series:
        for t in ([None] if s == "L0.5 only" else taus):
            opts = {**SERIES[s](t if t is not None else 0.0), **({} if s == "L0.5 only" else enc_opts)}
            plan.append((s, s if t is None else f"{s} tau={t:g}", {"tau": t, **opts},
                         lambda opts=opts: mlc_cache(**opts)))
    use_gpt = False if gptcache is None else gptcache
    if use_gpt:
        plan.append(("GPTCache t=0.8", "GPTCache (real) default similarity_threshold=0.8 = cosine 0.6", {"tau": 0.6},
                     lambda: GPTCacheLangChain(0.8)))
    else:
        exp.notes.append("Real GPTCache is compared in `mlc bench` (add --gptcache here to sweep it too: its "
                         "whole-prompt embedding makes every lookup slow on this CPU).")
    bar = _bar(len(plan) * len(wl.items), f"sweep {wl.name}", progress)
    for config, label, params, factory in plan:
        r = run_workload(wl, factory(), backend, config=config, label=label, params=params, progress=bar)
        exp.results.append(r)
    if bar is not None:
        bar.close()
    attach_speedups(exp.results)
    exp.seconds = time.perf_counter() - t0
    exp.extra.update(workload=wl.name, quick=quick, latency_ms=None if classifier_stream else latency_ms,
                     split=split, seed=seed, image_encoder=image_encoder)
    return exp


def _picture(data: bytes) -> Any:
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as f:
        return f.convert("RGB")


def bench(
    workload_names: Sequence[str] = ("vqa", "camera", "qqp", "contextual"),
    *,
    quick: bool = True,
    latency_ms: float = 500.0,
    seed: int = 0,
    real_llm: bool = True,
    llm_items: int = 20,
    progress: bool = True,
) -> Experiment:
    """Side by side on each workload: no cache, exact-only (InMemoryCache), real GPTCache
    (t=0.8 and t=0.9), MLC defaults -- against the oracle, and on the text workload
    against the real local LLM when it can run here."""
    t0 = time.perf_counter()
    wls = [build(n, quick=quick, seed=seed) for n in workload_names]
    oracle = GroundTruthOracle(latency_s=latency_ms / 1000.0)
    exp = Experiment("bench", wls, backend_labels={"oracle": oracle.label})
    warm_models()
    configs = configurations()
    total = sum(len(w.items) for w in wls) * len(configs)
    bar = _bar(total, "bench (oracle)", progress)
    for wl in wls:
        for name, (label, factory) in configs.items():
            exp.results.append(run_workload(wl, factory(), oracle, config=name, label=label, progress=bar))
    if bar is not None:
        bar.close()
    if real_llm:
        _bench_real_llm(exp, seed=seed, items=llm_items, progress=progress)
    attach_speedups(exp.results)
    exp.seconds = time.perf_counter() - t0
    exp.extra.update(quick=quick, latency_ms=latency_ms, seed=seed)
    return exp


def _bench_real_llm(exp: Experiment, *, seed: int, items: int, progress: bool) -> None:
    from .backends import LocalGemmaChat

    try:
        t = time.perf_counter()
        llm = LocalGemmaChat(max_new_tokens=24).load()
        load_s = time.perf_counter() - t
    except Exception as exc:  # report why, never invent a number
        exp.notes.append(f"Real local LLM not run: {type(exc).__name__}: {exc}")
        return
    exp.backend_labels["llm"] = llm.label
    exp.extra["llm_load_seconds"] = round(load_s, 1)
    from .workloads import qqp_stream

    wl = qqp_stream(n_pairs=max(1, items // 2), seed=seed)
    wl.name = "qqp-llm"
    wl.description += " (the real LLM answers every miss)"
    exp.workloads.append(wl)
    # Each real-LLM call takes seconds here: one GPTCache setting (t=0.9, cosine 0.8) suffices.
    configs = {k: v for k, v in configurations().items() if k != "GPTCache t=0.8"}
    bar = _bar(len(wl.items) * len(configs), "bench (real LLM)", progress)
    for name, (label, factory) in configs.items():
        exp.results.append(run_workload(wl, factory(), llm, config=name, label=label, progress=bar))
    if bar is not None:
        bar.close()


def demo(
    *,
    latency_ms: float = 300.0,
    seed: int = 0,
    persist_directory: Optional[str] = None,
    video: bool = True,
    progress: bool = True,
) -> Experiment:
    """The main job: the cache exactly as shipped (``MultimodalSemanticCache()`` with
    only its directory chosen: embedded Chroma, offline models, L2 on the default image
    encoder with its local change verifier) on a VQA stream, a camera stream of
    synthetic scenes and, with ``video``, real camera video with a checked annotation
    (vtest.avi, tree.avi), next to the same streams without a cache."""
    import tempfile

    from mlc_integrations.embed.image_towers import DEFAULT_IMAGE_ENCODER
    from mlc_integrations.langchain import MultimodalSemanticCache

    t0 = time.perf_counter()
    _phase("demo: building the streams (easy-vqa VQA, camera" + (", real video)" if video else ")"), progress)
    wls = [build("vqa", quick=False, seed=seed), build("camera", quick=False, seed=seed)]
    wls[0].items = wls[0].items[:200]
    if video:
        wls.append(build("camera-video", quick=True, seed=seed))
    oracle = GroundTruthOracle(latency_s=latency_ms / 1000.0)
    exp = Experiment("demo", wls, backend_labels={"oracle": oracle.label})
    _phase(f"demo: loading the models (all-MiniLM-L6-v2, {DEFAULT_IMAGE_ENCODER})", progress)
    warm_models(image_encoders=[DEFAULT_IMAGE_ENCODER])
    own = persist_directory is None
    directory = persist_directory or tempfile.mkdtemp(prefix="mlc-demo-")
    total = 2 * sum(len(w.items) for w in wls)
    bar = _bar(total, "demo", progress)
    steps = 2 * len(wls)
    for i, wl in enumerate(wls):
        key, backend = backend_for(wl, latency_ms)
        exp.backend_labels[key] = backend.label
        # What a user gets: MultimodalSemanticCache() as shipped, only its directory chosen.
        cache = MultimodalSemanticCache(persist_directory=os.path.join(directory, wl.name))
        label = f"MultimodalSemanticCache() as shipped (embedded Chroma, L2 on {DEFAULT_IMAGE_ENCODER})"
        n, calls = len(wl.items), (f"the {latency_ms:g} ms oracle" if key == "oracle" else f"the {key}")
        _phase(f"demo [{2 * i + 1}/{steps}]: {wl.name}, {n} requests without a cache (every one calls {calls})",
               progress, bar, f"{wl.name} no cache")
        exp.results.append(run_workload(wl, None, backend, config="no cache", label="no cache", progress=bar))
        _phase(f"demo [{2 * i + 2}/{steps}]: {wl.name}, {n} requests through MultimodalSemanticCache", progress, bar,
               f"{wl.name} MLC")
        exp.results.append(run_workload(wl, cache, backend, config="MLC as shipped", label=label, progress=bar))
        cache.close()
    if bar is not None:
        bar.close()
    if own:
        import shutil

        shutil.rmtree(directory, ignore_errors=True)
    attach_speedups(exp.results)
    exp.seconds = time.perf_counter() - t0
    exp.extra.update(latency_ms=latency_ms, seed=seed)
    return exp
