"""The ``mlc`` command line: demo, stats, clear (evaluation commands live in ``mlc_integrations.eval``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence


def _cmd_stats(args: argparse.Namespace) -> int:
    from .engine import MLCEngine

    eng = MLCEngine(persist_directory=args.dir, clip_model=None)
    st = eng.stats()
    print(json.dumps({"directory": args.dir, "entries": st["entries"], "config": st["config"]}, indent=2))
    return 0


def _cmd_clear(args: argparse.Namespace) -> int:
    from .engine import MLCEngine

    eng = MLCEngine(persist_directory=args.dir, clip_model=None)
    before = eng.count()
    eng.clear(scope=args.scope, namespace=args.namespace)
    print(f"cleared {before - eng.count()} entries from {args.dir}")
    return 0


def _cmd_quickstart(args: argparse.Namespace) -> int:
    from .demo import run_quickstart

    return run_quickstart(persist_directory=args.dir)


def _cmd_train_clip(args: argparse.Namespace) -> int:
    from .eval.train_clip import train

    report = train(args.out, steps=args.steps, seed=args.seed, threads=args.threads)
    print(json.dumps(report, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mlc", description="Multi-level cache for multimodal LLMs")
    sub = p.add_subparsers(dest="command", required=True)

    q = sub.add_parser("quickstart", help="store and look up text and image requests; print each hit's tier and scores")
    q.add_argument("--dir", default=None, help="persist directory (default: in memory)")
    q.set_defaults(func=_cmd_quickstart)

    d = sub.add_parser("demo", help="the main job (for now the quickstart)")
    d.add_argument("--dir", default=None, help="persist directory (default: in memory)")
    d.set_defaults(func=_cmd_quickstart)

    t = sub.add_parser("train-clip", help="train the offline L2 model mlc-easyvqa-tiny on easy-vqa's train split (CPU, minutes)")
    t.add_argument("--out", default=None, help="output directory (default: the packaged mlc-easyvqa-tiny asset)")
    t.add_argument("--steps", type=int, default=500)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest on a busy shared 2-core machine)")
    t.set_defaults(func=_cmd_train_clip)

    s = sub.add_parser("stats", help="entries and configuration of a persisted cache")
    s.add_argument("--dir", default=".mlc_cache")
    s.set_defaults(func=_cmd_stats)

    c = sub.add_parser("clear", help="delete entries of a persisted cache (all, or one scope/namespace)")
    c.add_argument("--dir", default=".mlc_cache")
    c.add_argument("--scope", default=None)
    c.add_argument("--namespace", default=None)
    c.set_defaults(func=_cmd_clear)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
