"""The evaluation command line, run from a checkout (not part of the wheel):
``python -m evaluation <command>`` or ``./dev mlc <command>``.

* ``demo``: the main job -- a VQA stream and a camera stream through
  ``set_llm_cache(MultimodalSemanticCache(...))`` on embedded Chroma with the offline
  models, scored against ground truth; writes a report with plots.
* ``sweep --workload NAME [--quick]``: the threshold sweep per tier.
* ``bench``: no cache vs exact-only vs GPTCache vs MLC, oracle and real local LLM.
* ``encoder-study``: the L2 prompt side, CLIP text tower vs the L1 sentence model.
* ``train-clip``: rebuild the offline L2 model ``mlc-easyvqa-tiny``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from .harness.workloads import WORKLOADS

WORKLOAD_NAMES = tuple(WORKLOADS)

def _eval_setup(args: argparse.Namespace) -> None:
    """Quiet logs, and torch threads for the measurement (1 by default: on a shared
    2-core machine, 2 threads stalled single-request embeddings several-fold)."""
    import logging
    import os

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # Sweeps build raw-threshold engines on purpose; the engine's advice against that is noise here.
    logging.getLogger("mlc_integrations.engine").addFilter(lambda rec: "verifier is off" not in rec.getMessage())
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    torch.set_num_threads(max(1, int(getattr(args, "threads", 1) or 1)))


def _print_results(exp: object, md: object) -> None:
    from .harness.report import ORACLE_NOTE

    for r in exp.results:  # type: ignore[attr-defined]
        tiers = " ".join(f"{t}={n}" for t, n in sorted(r.tier_hits.items())) or "-"
        sp = f"{r.speedup:.2f}x" if r.speedup else "-"
        print(f"  {r.workload:<10} {r.label[:34]:<34} hit={r.hit_rate:5.3f} acc={r.accuracy:5.3f} "
              f"wrong={r.wrong_hits:<3} tiers[{tiers}] total={r.wall_s:6.1f}s speedup={sp}")
    print(f"\n{ORACLE_NOTE}")
    print(f"report: {md}")


def _cmd_demo(args: argparse.Namespace) -> int:
    _eval_setup(args)
    from .harness.experiments import demo
    from .harness.report import write_report

    from mlc_integrations.embed.image_towers import DEFAULT_IMAGE_ENCODER

    print("MLC demo: VQA, camera and real-video streams through set_llm_cache(MultimodalSemanticCache()) as shipped")
    print(f"(embedded Chroma, offline models: text all-MiniLM-L6-v2, L2 {DEFAULT_IMAGE_ENCODER} + local change "
          f"verifier); backend: ground-truth oracle sleeping {args.latency_ms:g} ms per call (not a real model).\n")
    exp = demo(latency_ms=args.latency_ms, seed=args.seed, persist_directory=args.dir)
    md = write_report(exp, args.out, "demo")
    for wl in exp.workloads:
        base = next(r for r in exp.results if r.workload == wl.name and r.config == "no cache")
        mlc = next(r for r in exp.results if r.workload == wl.name and r.config == "MLC as shipped")
        tiers = ", ".join(f"{t}: {n}" + (f" ({mlc.tier_wrong[t]} wrong)" if mlc.tier_wrong.get(t) else "")
                          for t, n in sorted(mlc.tier_hits.items())) or "none"
        print(f"{wl.name}: {mlc.n} requests | hits {mlc.hits} ({mlc.hit_rate:.1%}) by tier: {tiers}")
        print(f"  accuracy vs ground truth {mlc.accuracy:.1%} (no cache: {base.accuracy:.1%}); "
              f"wrong hits {mlc.wrong_hits}")
        print(f"  time: no cache {base.wall_s:.1f} s, with MLC {mlc.wall_s:.1f} s -> saved {base.wall_s - mlc.wall_s:.1f} s "
              f"({mlc.speedup or 0:.2f}x); median lookup {mlc.lookup_p50_ms or 0:.1f} ms")
    print(f"\nfinished in {exp.seconds:.0f} s")
    _print_results(exp, md)
    return 0


def _parse_taus(text: Optional[str]) -> Optional[list[float]]:
    if not text:
        return None
    return [float(x) for x in text.split(",") if x.strip()]


def _cmd_sweep(args: argparse.Namespace) -> int:
    _eval_setup(args)
    from .harness.experiments import sweep
    from .harness.report import write_report

    exp = sweep(args.workload, quick=args.quick, taus=_parse_taus(args.taus), latency_ms=args.latency_ms,
                split=args.split, seed=args.seed, gptcache=True if args.gptcache else None)
    md = write_report(exp, args.out)
    print(f"sweep {args.workload} ({'quick' if args.quick else 'full'}) finished in {exp.seconds:.0f} s")
    _print_results(exp, md)
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    _eval_setup(args)
    from .harness.experiments import bench
    from .harness.report import write_report

    exp = bench(tuple(args.workloads.split(",")), quick=not args.full, latency_ms=args.latency_ms, seed=args.seed,
                real_llm=not args.no_llm, llm_items=args.llm_items)
    md = write_report(exp, args.out, "bench")
    print(f"bench finished in {exp.seconds:.0f} s")
    for n in exp.notes:
        print(f"note: {n}")
    _print_results(exp, md)
    return 0


def _cmd_encoder_study(args: argparse.Namespace) -> int:
    _eval_setup(args)
    from .studies.encoder_study import write_study

    md = write_study(args.out, seed=args.seed)
    print(open(md).read())
    print(f"report: {md}")
    return 0


def _cmd_train_clip(args: argparse.Namespace) -> int:
    from .training.train_clip import train

    report = train(args.out, steps=args.steps, seed=args.seed, threads=args.threads)
    print(json.dumps(report, indent=2))
    return 0


EVAL_COMMANDS = ("demo", "sweep", "bench", "encoder-study", "train-clip")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evaluation", description="MLC evaluation: demo, sweeps, benchmarks")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="the main job: VQA + camera streams through the LangChain cache, scored and timed")
    d.add_argument("--dir", default=None, help="embedded Chroma directory (default: a temporary one, removed after)")
    d.add_argument("--out", default="mlc_report", help="report directory (default: mlc_report)")
    d.add_argument("--latency-ms", type=float, default=300.0, help="oracle backend latency per call")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--threads", type=int, default=1)
    d.set_defaults(func=_cmd_demo)

    w = sub.add_parser("sweep", help="threshold sweep per tier: hit rate, accuracy, overhead, speedup")
    w.add_argument("--workload", required=True, choices=WORKLOAD_NAMES)
    w.add_argument("--quick", action="store_true", help="small stream and 5 thresholds (about a minute)")
    w.add_argument("--taus", default=None, help="comma-separated thresholds (default: 0.5..0.99)")
    w.add_argument("--latency-ms", type=float, default=20.0, help="oracle backend latency per call")
    w.add_argument("--split", default="test", choices=("test", "train"), help="easy-vqa split (tune on train)")
    w.add_argument("--gptcache", action="store_true", help="also sweep real GPTCache at its default threshold (slow)")
    w.add_argument("--out", default="mlc_report")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--threads", type=int, default=1)
    w.set_defaults(func=_cmd_sweep)

    b = sub.add_parser("bench", help="side by side: no cache, exact-only, GPTCache, MLC; oracle and real local LLM")
    b.add_argument("--workloads", default="vqa,camera,qqp,contextual")
    b.add_argument("--full", action="store_true", help="full-size workloads (default: the quick sizes)")
    b.add_argument("--latency-ms", type=float, default=500.0, help="oracle backend latency per call")
    b.add_argument("--no-llm", action="store_true", help="skip the real local LLM (Gemma 3 270M)")
    b.add_argument("--llm-items", type=int, default=20, help="requests sent to the real LLM per configuration")
    b.add_argument("--out", default="mlc_report")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--threads", type=int, default=1)
    b.set_defaults(func=_cmd_bench)

    e = sub.add_parser("encoder-study", help="L2 prompt side: CLIP text tower vs the L1 sentence model (easy-vqa test)")
    e.add_argument("--out", default="mlc_report")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--threads", type=int, default=1)
    e.set_defaults(func=_cmd_encoder_study)

    t = sub.add_parser("train-clip", help="train the offline L2 model mlc-easyvqa-tiny on easy-vqa's train split (CPU, minutes)")
    t.add_argument("--out", default=None, help="output directory (default: the packaged mlc-easyvqa-tiny asset)")
    t.add_argument("--steps", type=int, default=500)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest on a busy shared 2-core machine)")
    t.set_defaults(func=_cmd_train_clip)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
