"""Experiment 1 with real encoders: an image cache in front of an image classifier.

Backend: a real ImageNet classifier (EfficientNet-Lite2, :class:`.backends.ImageNetClassifierChat`)
answering "what is in this picture?". Cache: the MLC engine through LangChain's cache
path with its exact tier (pixel digest) and L2 keyed by EfficientNet-Lite0 / Lite1 /
Lite2 embeddings at threshold tau (raw cosine, no verifier: the encoder is what is
compared). Streams: the real camera video and the real pictures with near-duplicates
(:mod:`.workloads` ``video`` and ``photo-classes``); a reuse is right when it equals
the classifier's answer for the new picture.

Reported, all measured: hit rate, accuracy, end-to-end speedup over no cache, lookup
time, and each encoder's own cost per picture. The break-even curve puts the measured
per-request overhead ``o`` (median lookup + miss rate x median update, timed inside the
cache) and hit rate ``h`` of each encoder into
``speedup(B) = B / (o + (1 - h) B)`` for a backend taking ``B`` per call, and checks it
against runs with the classifier slowed down by a sleep::

    python -m evaluation.studies.experiment1 --out docs/results
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from mlc_integrations.embed.image_towers import EFFICIENTNET_LITE, resolve_image_encoder
from ..harness.backends import ImageNetClassifierChat
from ..harness.baselines import mlc_cache
from ..harness.runner import RunResult, run_workload
from ..harness.workloads import Workload
from mlc_integrations import TierOptions

log = logging.getLogger(__name__)

ENCODERS = ("efficientnet-lite0", "efficientnet-lite1", "efficientnet-lite2")
TAUS = (0.80, 0.90, 0.95)
STREAM_SIZES: dict[str, dict[str, Any]] = {"video": {"stride": 6}, "photo-classes": {"variants_per_photo": 1}}
QUICK_SIZES: dict[str, dict[str, Any]] = {"video": {"stride": 8, "max_frames": 40}, "photo-classes": {"variants_per_photo": 1}}


def _stream(name: str, quick: bool, seed: int) -> Workload:
    from ..harness.workloads import WORKLOADS

    return WORKLOADS[name](seed=seed, **(QUICK_SIZES if quick else STREAM_SIZES)[name])


def _picture(data: bytes) -> Any:
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as f:
        return f.convert("RGB")


def per_picture_ms(fn: Any, pictures: Sequence[Any], repeats: int = 2) -> float:
    """Median ms of ``fn([picture])`` over the pictures (model already loaded)."""
    fn([pictures[0]])
    times = []
    for _ in range(repeats):
        for p in pictures:
            t0 = time.perf_counter()
            fn([p])
            times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


def _cache(encoder: Optional[str], tau: Optional[float]) -> Any:
    if encoder is None:  # the exact tier alone: same question, same pixels
        return mlc_cache(image_encoder=None, tiers=TierOptions(l1=False), verifier="off")
    return mlc_cache(image_encoder=encoder, l2_image_threshold=tau, tiers=TierOptions(l1=False), verifier="off")


def run(streams: Sequence[str] = ("video", "photo-classes"), *, encoders: Sequence[str] = ENCODERS,
        taus: Sequence[float] = TAUS, quick: bool = False, seed: int = 0,
        slow_backend_ms: Sequence[float] = (100.0, 300.0)) -> dict[str, Any]:
    backend = ImageNetClassifierChat(model="efficientnet-lite2")
    from ..harness.experiments import environment

    out: dict[str, Any] = {"streams": [], "runs": [], "cost_ms": {}, "checks": [], "quick": quick, "seed": seed,
                           "env": environment()}
    for enc in encoders:
        resolve_image_encoder(enc).load()
    for name in streams:
        wl = _stream(name, quick, seed)
        out["streams"].append({"name": wl.name, "description": wl.description, "requests": len(wl.items),
                               "kinds": wl.kinds()})
        sample = [_picture(it.image) for it in wl.items[:: max(1, len(wl.items) // 8)][:8] if it.image]
        cost = {enc: per_picture_ms(lambda ps, e=resolve_image_encoder(enc): e.embed_images(
            ps, [f"cost:{time.time_ns()}"]), sample) for enc in encoders}
        cost["classifier (efficientnet-lite2)"] = per_picture_ms(backend.classify, sample)
        out["cost_ms"][wl.name] = cost
        results: list[RunResult] = [run_workload(wl, None, backend, config="no cache")]
        results.append(run_workload(wl, _cache(None, None), backend, config="pixel digest (exact tier)"))
        for enc in encoders:
            default = EFFICIENTNET_LITE[enc].default_image_threshold
            for t in sorted(set(taus) | {default}):
                results.append(run_workload(wl, _cache(enc, t), backend, config=enc,
                                            label=f"{enc} tau={t:g}", params={"tau": t, "default": t == default}))
        base = results[0].wall_s
        for r in results:
            r.speedup = base / r.wall_s if r.wall_s else None
            out["runs"].append(dict(r.summary(), stream=wl.name))
        if name == "video" and slow_backend_ms:
            out["checks"] += _slow_backend_checks(wl, encoders[0], slow_backend_ms)
    return out


def _slow_backend_checks(wl: Workload, encoder: str, extra_ms: Sequence[float]) -> list[dict[str, Any]]:
    """Measured speedups with the classifier slowed by a sleep: the break-even curve's check."""
    rows = []
    tau = EFFICIENTNET_LITE[encoder].default_image_threshold
    for ms in extra_ms:
        slow = ImageNetClassifierChat(model="efficientnet-lite2", extra_latency_s=ms / 1000.0)
        n = run_workload(wl, None, slow, config="no cache")
        c = run_workload(wl, _cache(encoder, tau), slow, config=encoder)
        rows.append({"encoder": encoder, "tau": tau, "extra_ms": ms, "backend_ms": 1000.0 * n.wall_s / n.n,
                     "speedup": n.wall_s / c.wall_s, "hit_rate": c.hit_rate, "accuracy": c.accuracy})
    return rows


def overhead(data: dict[str, Any], stream: str, encoder: str, tau: float) -> tuple[float, float, float]:
    """(per-request overhead ms, hit rate, backend ms per call) of one run. Overhead is
    measured inside the cache (median lookup, plus the miss rate times the median update:
    what every request pays, and what a miss adds after the backend answered); the
    backend's time per call is the no-cache run's wall time per request."""
    runs = [r for r in data["runs"] if r["stream"] == stream]
    base = next(r for r in runs if r["config"] == "no cache")
    r = next(r for r in runs if r["config"] == encoder and abs(r["params"]["tau"] - tau) < 1e-9)
    b = 1000.0 * base["wall_s"] / base["n"]
    o = (r["lookup_p50_ms"] or 0.0) + (1.0 - r["hit_rate"]) * (r["update_p50_ms"] or 0.0)
    return o, r["hit_rate"], b


def break_even_ms(data: dict[str, Any], stream: str, encoder: str) -> float:
    """Backend latency below which the cache costs more than it saves (speedup < 1)."""
    o, h, _ = overhead(data, stream, encoder, EFFICIENTNET_LITE[encoder].default_image_threshold)
    return o / h if h > 0 else float("inf")


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    streams = [s["name"] for s in data["streams"]]
    fig, axes = plt.subplots(len(streams), 2, figsize=(10, 3.6 * len(streams)), squeeze=False)
    for row, st in zip(axes, streams):
        runs = [r for r in data["runs"] if r["stream"] == st]
        for enc in dict.fromkeys(r["config"] for r in runs if r["config"] in EFFICIENTNET_LITE):
            rs = sorted((r for r in runs if r["config"] == enc), key=lambda r: r["params"]["tau"])
            ts = [r["params"]["tau"] for r in rs]
            row[0].plot(ts, [r["hit_rate"] for r in rs], marker="o", label=enc)
            row[1].plot(ts, [r["accuracy"] for r in rs], marker="o", label=enc)
        exact = next(r for r in runs if r["config"].startswith("pixel digest"))
        row[0].axhline(exact["hit_rate"], color="gray", ls="--", lw=1, label="pixel digest (exact)")
        row[0].set_title(f"{st}: hit rate vs tau")
        row[1].set_title(f"{st}: accuracy vs tau (classifier's own answer = 1.0)")
        for ax in row:
            ax.set_xlabel("L2 image threshold tau (cosine)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    p = out / "experiment1_sweep.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)

    fig, ax = plt.subplots(figsize=(7, 4.4))
    B = np.logspace(0, 3.5, 200)
    stream = "video" if "video" in streams else streams[0]
    for enc in ENCODERS:
        if not any(r["config"] == enc and r["stream"] == stream for r in data["runs"]):
            continue
        o, h, b = overhead(data, stream, enc, EFFICIENTNET_LITE[enc].default_image_threshold)
        ax.plot(B, B / (o + (1 - h) * B), label=f"{enc}: overhead {o:.0f} ms/request, hit rate {h:.2f}")
        measured = next(r for r in data["runs"] if r["stream"] == stream and r["config"] == enc
                        and r["params"].get("default"))
        ax.scatter([b], [measured["speedup"]], marker="x", color="black", zorder=3)
    for c in data["checks"]:
        ax.scatter([c["backend_ms"]], [c["speedup"]], marker="s", facecolors="none", edgecolors="tab:red", zorder=3)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("backend latency per call B (ms)")
    ax.set_ylabel("speedup over no cache")
    ax.set_title(f"Break-even on the {stream} stream: B / (o + (1 - h) B) from measured o, h\n"
                 "x = measured with the real Lite2 classifier; squares = measured with the classifier + sleep",
                 fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = out / "experiment1_breakeven.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    return paths


def markdown(data: dict[str, Any], command: str, pngs: Sequence[Path]) -> str:
    from ..harness.experiments import environment

    L = ["# Experiment 1 with real encoders: an embedding-keyed cache in front of an image classifier", "",
         f"Generated {data.get('generated') or time.strftime('%Y-%m-%d %H:%M')} by `{command}`. "
         f"Environment: {json.dumps(data.get('env') or environment())}.", "",
         "Backend: EfficientNet-Lite2 ImageNet classifier (real model, CPU, 1 torch thread), answering each picture's "
         "top-1 class. Cache: MLC engine via LangChain's cache path, exact tier (pixel digest) + L2 keyed by the "
         "encoder at tau (raw cosine, verifier off, L1 off). Accuracy: responses equal to the classifier's own answer "
         "for that picture / requests. Speedup: measured wall time without cache / with it.", ""]
    for s in data["streams"]:
        L.append(f"- **{s['name']}**: {s['description']} ({s['requests']} requests: "
                 + ", ".join(f"{k} {v}" for k, v in s["kinds"].items()) + ")")
    for s in data["streams"]:
        st = s["name"]
        cost = data["cost_ms"][st]
        L += ["", f"## {st}", "", "Own cost per picture (median ms, 1 thread, pictures of this stream): "
              + ", ".join(f"{k} {v:.1f}" for k, v in cost.items()) + ".", "",
              "| cache | tau | hit rate | accuracy | wrong hits | lookup p50 ms | total s | speedup |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in (r for r in data["runs"] if r["stream"] == st):
            tau = r["params"].get("tau")
            mark = " (default)" if r["params"].get("default") else ""
            p50 = r["lookup_p50_ms"]
            L.append(f"| {r['config']} | {'' if tau is None else f'{tau:g}'}{mark} | {r['hit_rate']:.3f} | "
                     f"{r['accuracy']:.3f} | {r['wrong_hits']} | {'–' if p50 is None else f'{p50:.1f}'} | "
                     f"{r['wall_s']:.1f} | {r['speedup']:.2f}x |")
    if data["checks"]:
        L += ["", "## Break-even", "", "Measured with the classifier slowed by a sleep (video stream):", "",
              "| encoder | tau | backend ms / call | hit rate | accuracy | measured speedup | curve |",
              "|---|---:|---:|---:|---:|---:|---:|"]
        for c in data["checks"]:
            o, h, _ = overhead(data, "video", c["encoder"], c["tau"])
            B = c["backend_ms"]
            L.append(f"| {c['encoder']} | {c['tau']:g} | {B:.0f} | {c['hit_rate']:.3f} | {c['accuracy']:.3f} | "
                     f"{c['speedup']:.2f}x | {B / (o + (1 - h) * B):.2f}x |")
        L += ["", "Break-even backend latency B* = o / h (speedup 1 below it) at each encoder's default tau: "
              + "; ".join(f"{enc} {break_even_ms(data, 'video', enc):.0f} ms" for enc in ENCODERS
                          if any(r["config"] == enc and r["stream"] == "video" for r in data["runs"])) + "."]
    L += [""] + [f"![{p.stem}]({p.name})" for p in pngs] + [""]
    return "\n".join(L)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evaluation.studies.experiment1", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="mlc_report")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--streams", default="video,photo-classes")
    p.add_argument("--taus", default=",".join(f"{t:g}" for t in TAUS))
    p.add_argument("--slow-backend-ms", default="100,300", help="sleeps added to the classifier for the check runs")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--replot", default=None, help="rewrite the report and plots from a saved experiment1.json")
    args = p.parse_args(argv)
    import torch

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("mlc_integrations.engine").addFilter(lambda rec: "verifier is off" not in rec.getMessage())
    torch.set_num_threads(args.threads)
    if args.replot:
        data = json.loads(Path(args.replot).read_text(encoding="utf-8"))
    else:
        data = run(args.streams.split(","), taus=[float(t) for t in args.taus.split(",")], quick=args.quick,
                   seed=args.seed, slow_backend_ms=[float(x) for x in args.slow_backend_ms.split(",") if x])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pngs = plots(data, out)
    if args.replot:
        cmd = data.get("command", f"python -m evaluation.studies.experiment1 --out {args.out}")
    else:
        import sys

        cmd = "python -m evaluation.studies.experiment1 " + " ".join(argv if argv is not None else sys.argv[1:])
        data["command"] = cmd.strip()
        data["generated"] = time.strftime("%Y-%m-%d %H:%M")
        (out / "experiment1.json").write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
    md = out / "experiment1.md"
    md.write_text(markdown(data, cmd.strip(), pngs) + "\n", encoding="utf-8")
    print(md.read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
