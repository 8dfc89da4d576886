"""The ``mlc`` command line.

* ``mlc demo``: the main job -- a VQA stream and a camera stream through
  ``set_llm_cache(MultimodalSemanticCache(...))`` on embedded Chroma with the offline
  models, scored against ground truth; writes a report with plots.
* ``mlc sweep --workload NAME [--quick]``: the threshold sweep per tier.
* ``mlc bench``: no cache vs exact-only vs GPTCache vs MLC, oracle and real local LLM.
* ``mlc train-clip``: rebuild the offline L2 model ``mlc-easyvqa-tiny``.
* ``mlc quickstart``: a few stored and probed requests, each decision explained (seconds).
* ``mlc stats``, ``mlc scopes``, ``mlc clear``: inspect or clear a persisted cache
  directory (read through :mod:`mlc_integrations.inspection`, no model loaded).

The evaluation commands import :mod:`mlc_integrations.eval` (the ``eval`` extra) lazily,
inside each command function: the library never imports it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

# The workloads of mlc_integrations.eval.workloads (kept here so --help needs no eval extra).
WORKLOAD_NAMES = ("vqa", "camera", "photos", "qqp", "contextual", "scenes", "scenes-edit", "video", "photo-classes")


def _cmd_stats(args: argparse.Namespace) -> int:
    from .entries import IMAGE_ROW_TIERS
    from .inspection import KNOWN_NAMESPACES, CacheDirectory, bytes_human, size_on_disk

    with CacheDirectory(args.dir) as cd:
        prefixes = [cd.prefix(args.prefix)] if args.prefix else sorted(cd.prefixes)
        caches = [cd.summary(p) for p in prefixes]
    size = size_on_disk(cd.path)
    if args.json:
        print(json.dumps({"directory": str(cd.path), "bytes_on_disk": size,
                          "caches": [c.to_dict() for c in caches]}, indent=2))
        return 0
    print(f"cache directory {cd.path}: {bytes_human(size)} on disk")
    for c in caches:
        print(f"\nprefix {c.prefix!r}: {c.entries} entries ({c.expired} expired, not served)")
        print("  rows per tier: " + ", ".join(f"{t} {n}" for t, n in c.tiers.items())
              + f"  ({', '.join(IMAGE_ROW_TIERS)}: one row per image)")
        for title, counts in (("scope", c.per_scope()), ("namespace", c.per_namespace())):
            print(f"  entries per {title} (stored as a digest):")
            for digest, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
                known = KNOWN_NAMESPACES.get(digest) if title == "namespace" else None
                print(f"    {digest}  {n}" + (f"  (namespace {known!r})" if known else ""))
    print("\nscopes and namespaces are stored as SHA-256 digests, not as text; "
          "`mlc scopes` lists each pair with its dates")
    return 0


def _cmd_scopes(args: argparse.Namespace) -> int:
    from .inspection import CacheDirectory, when

    with CacheDirectory(args.dir) as cd:
        prefixes = [cd.prefix(args.prefix)] if args.prefix else sorted(cd.prefixes)
        caches = [cd.summary(p) for p in prefixes]
    if args.json:
        print(json.dumps({"directory": str(cd.path), "caches": [
            {"prefix": c.prefix, "scopes": c.to_dict()["scopes"]} for c in caches]}, indent=2))
        return 0
    for c in caches:
        print(f"prefix {c.prefix!r} in {cd.path}: {len(c.scopes)} scope/namespace pairs, {c.entries} entries")
        print(f"  {'scope digest':32}  {'namespace digest':32}  {'entries':>7}  {'expired':>7}  {'w/ image':>8}  "
              f"{'oldest':19}  newest")
        for s in c.scopes:
            label = f"  scope {s.scope_label!r}" if s.scope_label else ""
            label += f"  namespace {s.ns_label!r}" if s.ns_label else ""
            print(f"  {s.scope:32}  {s.ns:32}  {s.entries:7d}  {s.expired:7d}  {s.with_images:8d}  "
                  f"{when(s.oldest):19}  {when(s.newest):19}{label}")
    return 0


def _cmd_clear(args: argparse.Namespace) -> int:
    from .inspection import CacheDirectory, digest_of

    with CacheDirectory(args.dir) as cd:
        prefix = cd.prefix(args.prefix)
        scope = digest_of(args.scope) if args.scope is not None else (
            cd.resolve_digest(prefix, "scope", args.scope_digest) if args.scope_digest else None)
        ns = digest_of(args.namespace) if args.namespace is not None else (
            cd.resolve_digest(prefix, "ns", args.namespace_digest) if args.namespace_digest else None)
        what = " and ".join(f"{k} {v}" for k, v in (("scope", scope), ("namespace", ns)) if v) or "every scope"
        n = cd.matching(prefix, scope, ns)
        if n == 0:
            print(f"nothing to clear: no entries of {what} in {cd.path} (prefix {prefix!r})")
            return 0
        if not args.yes:
            if not sys.stdin.isatty():
                return _error(args, f"would delete {n} entries of {what}; not asking without a terminal: pass --yes")
            answer = input(f"delete {n} entries of {what} from {cd.path} (prefix {prefix!r})? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                print("aborted: nothing deleted")
                return 1
        removed = cd.clear(prefix, scope, ns)
    print(f"cleared {removed} entries of {what} from {cd.path} (prefix {prefix!r})")
    return 0


def _error(args: argparse.Namespace, message: str, code: int = 2) -> int:
    print(f"mlc {args.command}: error: {message}", file=sys.stderr)
    return code


def _cmd_quickstart(args: argparse.Namespace) -> int:
    from .demo import run_quickstart

    return run_quickstart(persist_directory=args.dir)


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
    from .eval.report import ORACLE_NOTE

    for r in exp.results:  # type: ignore[attr-defined]
        tiers = " ".join(f"{t}={n}" for t, n in sorted(r.tier_hits.items())) or "-"
        sp = f"{r.speedup:.2f}x" if r.speedup else "-"
        print(f"  {r.workload:<10} {r.label[:34]:<34} hit={r.hit_rate:5.3f} acc={r.accuracy:5.3f} "
              f"wrong={r.wrong_hits:<3} tiers[{tiers}] total={r.wall_s:6.1f}s speedup={sp}")
    print(f"\n{ORACLE_NOTE}")
    print(f"report: {md}")


def _cmd_demo(args: argparse.Namespace) -> int:
    _eval_setup(args)
    from .eval.experiments import demo
    from .eval.report import write_report

    print("MLC demo: VQA stream + camera stream through set_llm_cache(MultimodalSemanticCache(...)),")
    print(f"embedded Chroma, offline models (text: all-MiniLM-L6-v2, L2: mlc-easyvqa-tiny), "
          f"backend: ground-truth oracle sleeping {args.latency_ms:g} ms per call (not a real model).\n")
    exp = demo(latency_ms=args.latency_ms, seed=args.seed, persist_directory=args.dir)
    md = write_report(exp, args.out, "demo")
    for wl in exp.workloads:
        base = next(r for r in exp.results if r.workload == wl.name and r.config == "no cache")
        mlc = next(r for r in exp.results if r.workload == wl.name and r.config == "MLC defaults")
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
    from .eval.experiments import sweep
    from .eval.report import write_report

    exp = sweep(args.workload, quick=args.quick, taus=_parse_taus(args.taus), latency_ms=args.latency_ms,
                split=args.split, seed=args.seed, gptcache=True if args.gptcache else None)
    md = write_report(exp, args.out)
    print(f"sweep {args.workload} ({'quick' if args.quick else 'full'}) finished in {exp.seconds:.0f} s")
    _print_results(exp, md)
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    _eval_setup(args)
    from .eval.experiments import bench
    from .eval.report import write_report

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
    from .eval.encoder_study import write_study

    md = write_study(args.out, seed=args.seed)
    print(open(md).read())
    print(f"report: {md}")
    return 0


def _cmd_train_clip(args: argparse.Namespace) -> int:
    from .eval.train_clip import train

    report = train(args.out, steps=args.steps, seed=args.seed, threads=args.threads)
    print(json.dumps(report, indent=2))
    return 0


def _cache_dir_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", default=".mlc_cache",
                   help="embedded cache directory (default: .mlc_cache, the LangChain cache's default); "
                        "it must exist")
    p.add_argument("--prefix", default=None, help="collection prefix (default: every cache in the directory; "
                   "clear needs one when there are several)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mlc", description="Multi-level cache for multimodal LLMs")
    sub = p.add_subparsers(dest="command", required=True)

    q = sub.add_parser("quickstart", help="store and look up text and image requests; print each hit's tier and scores")
    q.add_argument("--dir", default=None, help="persist directory (default: in memory)")
    q.set_defaults(func=_cmd_quickstart)

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

    s = sub.add_parser("stats", help="what a persisted cache holds: entries per scope and namespace, rows per tier, "
                       "size on disk")
    _cache_dir_args(s)
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=_cmd_stats)

    sc = sub.add_parser("scopes", help="scope/namespace pairs of a persisted cache: entries, oldest and newest")
    _cache_dir_args(sc)
    sc.add_argument("--json", action="store_true", help="machine-readable output")
    sc.set_defaults(func=_cmd_scopes)

    c = sub.add_parser("clear", help="delete entries of a persisted cache (all, or one scope and/or namespace); "
                       "asks first unless --yes")
    _cache_dir_args(c)
    who = c.add_mutually_exclusive_group()
    who.add_argument("--scope", default=None, help="the scope as the adapter built it (e.g. LangChain's llm_string)")
    who.add_argument("--scope-digest", default=None, help="a scope digest as `mlc scopes` shows it (or a unique prefix)")
    ns = c.add_mutually_exclusive_group()
    ns.add_argument("--namespace", default=None, help="the namespace (tenant) string")
    ns.add_argument("--namespace-digest", default=None, help="a namespace digest as `mlc scopes` shows it")
    c.add_argument("--yes", action="store_true", help="do not ask (required when stdin is not a terminal)")
    c.set_defaults(func=_cmd_clear)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from .dirlock import DirectoryInUseError
    from .errors import StorageError
    from .inspection import CacheDirectoryError

    try:
        return int(args.func(args) or 0)
    except CacheDirectoryError as exc:  # a mistyped --dir, not a cache, an unknown digest
        return _error(args, str(exc))
    except DirectoryInUseError as exc:
        return _error(args, str(exc), code=1)
    except StorageError as exc:
        if args.command in ("stats", "scopes", "clear"):
            return _error(args, f"cannot read the cache in {args.dir!r}: {exc}")
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
