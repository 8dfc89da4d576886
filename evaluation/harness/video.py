"""The real camera stream: frames of ``../shared/data/video`` through LangChain's cache
path, answered by a real ImageNet classifier (EfficientNet-Lite2), L2 keyed by an image
encoder (EfficientNet-Lite0 by default); hit rate, accuracy and measured speedup per
threshold against no cache, exact-only and the pixel-digest tier::

    python -m evaluation.harness.video --out docs/results [--quick] [--gptcache]

writes ``sweep_video.md``, ``sweep_video.json`` and the plots (the same report as
``mlc sweep``; this is :func:`evaluation.harness.experiments.sweep` on ``"video"``).
"""

from __future__ import annotations

import argparse
import logging
from typing import Optional, Sequence


def print_table(exp: object) -> None:
    print(f"{'configuration':<44} {'hit rate':>8} {'accuracy':>8} {'wrong':>5} {'lookup p50':>10} "
          f"{'total s':>8} {'speedup':>8}")
    for r in exp.results:  # type: ignore[attr-defined]
        p50 = f"{r.lookup_p50_ms:.1f} ms" if r.lookup_p50_ms is not None else "-"
        sp = f"{r.speedup:.2f}x" if r.speedup else "-"
        print(f"{r.label[:44]:<44} {r.hit_rate:8.3f} {r.accuracy:8.3f} {r.wrong_hits:5d} {p50:>10} "
              f"{r.wall_s:8.1f} {sp:>8}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evaluation.harness.video", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="mlc_report")
    p.add_argument("--quick", action="store_true", help="every 8th frame, at most 40 per video, 4 thresholds")
    p.add_argument("--taus", default=None, help="comma-separated thresholds (default: the sweep's)")
    p.add_argument("--image-encoder", default=None, help="L2 image encoder (default: the engine default)")
    p.add_argument("--gptcache", action="store_true", help="also run real GPTCache at its default threshold")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    import os

    import torch

    from .experiments import sweep
    from .report import write_report

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("mlc_integrations.engine").addFilter(lambda rec: "verifier is off" not in rec.getMessage())
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.set_num_threads(args.threads)
    taus = [float(x) for x in args.taus.split(",")] if args.taus else None
    exp = sweep("video", quick=args.quick, taus=taus, gptcache=args.gptcache or None,
                image_encoder=args.image_encoder)
    md = write_report(exp, args.out, "sweep_video")
    print(f"{exp.workloads[0].description}; backend: {exp.backend_labels}")
    print_table(exp)
    print(f"report: {md}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
