"""The ``mlc`` command line.

* ``mlc demo``: the main job -- a VQA stream and a camera stream through
  ``set_llm_cache(MultimodalSemanticCache(...))`` on embedded Chroma with the offline
  models, scored against ground truth; writes a report with plots.
* ``mlc sweep --workload NAME [--quick]``: the threshold sweep per tier.
* ``mlc bench``: no cache vs exact-only vs GPTCache vs MLC, oracle and real local LLM.
* ``mlc train-clip``: rebuild the offline L2 model ``mlc-easyvqa-tiny``.
* ``mlc quickstart``: a few stored and probed requests, each decision explained (seconds).
* ``mlc serve --dir D``: a Chroma server for a cache directory (several processes share it).
* ``mlc stats``, ``mlc scopes``, ``mlc clear``: inspect or clear a persisted cache
  directory (read through :mod:`mlc_integrations.ops.inspection`, no model loaded).

The evaluation commands import :mod:`evaluation` (the ``eval`` extra) lazily,
inside each command function: the library never imports it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Optional, Sequence



def _open_cache(args: argparse.Namespace) -> Any:
    """The cache ``--dir`` names, or the server ``--host/--port`` names."""
    from .inspection import CacheDirectory

    return CacheDirectory(args.dir, host=args.host, port=args.port)


def _cmd_stats(args: argparse.Namespace) -> int:
    from ..store.entries import IMAGE_ROW_TIERS
    from .inspection import KNOWN_NAMESPACES, bytes_human, size_on_disk

    with _open_cache(args) as cd:
        prefixes = [cd.prefix(args.prefix)] if args.prefix else sorted(cd.prefixes)
        caches = [cd.summary(p) for p in prefixes]
    size = size_on_disk(cd.path) if cd.path is not None else None
    if args.json:
        print(json.dumps({"directory": str(cd.path) if cd.path else None, "server": cd.where if cd.host else None,
                          "bytes_on_disk": size, "caches": [c.to_dict() for c in caches]}, indent=2))
        return 0
    print(f"cache directory {cd.path}: {bytes_human(size)} on disk" if size is not None else f"cache at {cd.where}")
    for c in caches:
        print(f"\nprefix {c.prefix!r}: {c.entries} entries ({c.expired} expired, not served)")
        print("  rows per tier: " + ", ".join(f"{t} {n}" for t, n in c.tiers.items())
              + f"  ({', '.join(IMAGE_ROW_TIERS)}: one row per image)")
        t = c.traffic
        if t.get("lookups"):
            per_tier = ", ".join(f"{tier} {o.get('hit', 0)}" for tier, o in sorted(t["tiers"].items()))
            print(f"  traffic ({t['engines']} engine(s)): {t['lookups']} lookups, {t['hits']} hits "
                  f"({100 * t['hit_rate']:.1f} %; per tier: {per_tier}), {t['misses']} misses, "
                  f"{t['bypassed']} bypassed")
            if t["refusals"]:
                print("  refusals by reason: " + ", ".join(f"{k} {n}" for k, n in sorted(t["refusals"].items())))
            if t["errors"]:
                print("  errors: " + ", ".join(f"{k} {n}" for k, n in sorted(t["errors"].items())))
        else:
            print("  traffic: none recorded yet (engines write their counters when they close and every 1,000 lookups)")
        for title, counts in (("scope", c.per_scope()), ("namespace", c.per_namespace())):
            print(f"  entries per {title} (stored as a digest):")
            for digest, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
                known = KNOWN_NAMESPACES.get(digest) if title == "namespace" else None
                print(f"    {digest}  {n}" + (f"  (namespace {known!r})" if known else ""))
    print("\nscopes and namespaces are stored as SHA-256 digests, not as text; "
          "`mlc scopes` lists each pair with its dates")
    return 0


def _cmd_scopes(args: argparse.Namespace) -> int:
    from .inspection import when

    with _open_cache(args) as cd:
        prefixes = [cd.prefix(args.prefix)] if args.prefix else sorted(cd.prefixes)
        caches = [cd.summary(p) for p in prefixes]
    if args.json:
        print(json.dumps({"directory": str(cd.path) if cd.path else None, "caches": [
            {"prefix": c.prefix, "scopes": c.to_dict()["scopes"]} for c in caches]}, indent=2))
        return 0
    for c in caches:
        print(f"prefix {c.prefix!r} in {cd.where}: {len(c.scopes)} scope/namespace pairs, {c.entries} entries")
        print(f"  {'scope digest':32}  {'namespace digest':32}  {'entries':>7}  {'expired':>7}  {'w/ image':>8}  "
              f"{'oldest':19}  newest")
        for s in c.scopes:
            label = f"  model {s.model!r}" if s.model else ""
            label += f"  namespace {s.ns_label!r}" if s.ns_label else ""
            print(f"  {s.scope:32}  {s.ns:32}  {s.entries:7d}  {s.expired:7d}  {s.with_images:8d}  "
                  f"{when(s.oldest):19}  {when(s.newest):19}{label}")
    return 0


def _cmd_clear(args: argparse.Namespace) -> int:
    from .inspection import digest_of

    with _open_cache(args) as cd:
        prefix = cd.prefix(args.prefix)
        scopes: Optional[list[str]] = None
        if args.model is not None:
            scopes = cd.scopes_of_model(prefix, args.model)
        elif args.scope is not None:
            scopes = [digest_of(args.scope)]
        elif args.scope_digest:
            scopes = [cd.resolve_digest(prefix, "scope", args.scope_digest)]
        ns = digest_of(args.namespace) if args.namespace is not None else (
            cd.resolve_digest(prefix, "ns", args.namespace_digest) if args.namespace_digest else None)
        what = " and ".join(w for w in (
            f"model {args.model!r}" if args.model is not None else
            f"scope {scopes[0]}" if scopes else "", f"namespace {ns}" if ns else "") if w) or "every scope"
        n = cd.matching(prefix, scopes, ns)
        if n == 0:
            print(f"nothing to clear: no entries of {what} in {cd.where} (prefix {prefix!r})")
            return 0
        if not args.yes:
            if not sys.stdin.isatty():
                return _error(args, f"would delete {n} entries of {what}; not asking without a terminal: pass --yes")
            answer = input(f"delete {n} entries of {what} from {cd.where} (prefix {prefix!r})? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                print("aborted: nothing deleted")
                return 1
        removed = cd.clear(prefix, scopes, ns)
    print(f"cleared {removed} entries of {what} from {cd.where} (prefix {prefix!r})")
    return 0


def _error(args: argparse.Namespace, message: str, code: int = 2) -> int:
    print(f"mlc {args.command}: error: {message}", file=sys.stderr)
    return code


def _cmd_quickstart(args: argparse.Namespace) -> int:
    from .quickstart import run_quickstart

    return run_quickstart(persist_directory=args.dir)


def _cmd_serve(args: argparse.Namespace) -> int:
    """A Chroma server for one cache directory, so several processes (web workers) share it."""
    import signal
    import time
    from pathlib import Path

    from ..store.dirlock import DirectoryLock, mark_served
    from .server import ChromaServer, port_in_use

    if port_in_use(args.host, args.port):  # else a server already there would answer our heartbeat
        return _error(args, f"port {args.port} on {args.host} is in use (another `mlc serve` or Chroma server?); "
                            "choose another with --port", code=1)
    path = Path(args.dir)
    path.mkdir(parents=True, exist_ok=True)
    lock = DirectoryLock.acquire(str(path))  # no embedded engine may write it meanwhile
    server = ChromaServer(path, host=args.host, port=args.port)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append("SIGTERM"))
    marker = None
    try:
        server.start()
        marker = mark_served(str(path), server.host, server.port)
        print(f"serving cache directory {path} at {server.url} (Ctrl-C to stop)", flush=True)
        print(f"  every process: MultimodalSemanticCache(chroma_host={server.host!r}, chroma_port={server.port}) "
              f"or MLCEngine(chroma_host={server.host!r}, chroma_port={server.port})", flush=True)
        while not stop and server.running:
            time.sleep(0.2)
        if not server.running:
            return _error(args, f"the Chroma server stopped:\n{server.log_tail()}", code=1)
    except KeyboardInterrupt:
        pass
    finally:
        if marker is not None:
            marker.unlink(missing_ok=True)
        server.close()
        lock.release()
    print("stopped", flush=True)
    return 0


def _cache_dir_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", default=".mlc_cache",
                   help="embedded cache directory (default: .mlc_cache, the LangChain cache's default); "
                        "it must exist")
    p.add_argument("--host", default=None, help="read the cache through the Chroma server at this host instead "
                   "(e.g. the one `mlc serve` runs for a directory); --dir is then ignored")
    p.add_argument("--port", type=int, default=8000, help="the server's port (with --host; default 8000)")
    p.add_argument("--prefix", default=None, help="collection prefix (default: every cache in the directory; "
                   "clear needs one when there are several)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mlc", description="Multi-level cache for multimodal LLMs")
    sub = p.add_subparsers(dest="command", required=True)

    q = sub.add_parser("quickstart", help="store and look up text and image requests; print each hit's tier and scores")
    q.add_argument("--dir", default=None, help="persist directory (default: in memory)")
    q.set_defaults(func=_cmd_quickstart)

    sv = sub.add_parser("serve", help="run a Chroma server for a cache directory: several processes (web "
                        "workers) share one cache through it")
    sv.add_argument("--dir", default=".mlc_cache", help="cache directory (created if missing; default .mlc_cache)")
    sv.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=8000)
    sv.set_defaults(func=_cmd_serve)

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
    who.add_argument("--model", default=None, help="every scope of this model, as `mlc scopes` names it (the model "
                     "field of LangChain's llm_string or of a LlamaIndex LLM, e.g. gpt-4o)")
    ns = c.add_mutually_exclusive_group()
    ns.add_argument("--namespace", default=None, help="the namespace (tenant) string")
    ns.add_argument("--namespace-digest", default=None, help="a namespace digest as `mlc scopes` shows it")
    c.add_argument("--yes", action="store_true", help="do not ask (required when stdin is not a terminal)")
    c.set_defaults(func=_cmd_clear)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from ..store.dirlock import DirectoryInUseError
    from ..errors import StorageError
    from .inspection import CacheDirectoryError

    try:
        return int(args.func(args) or 0)
    except CacheDirectoryError as exc:  # a mistyped --dir, not a cache, an unknown digest
        return _error(args, str(exc))
    except DirectoryInUseError as exc:
        return _error(args, str(exc), code=1)
    except StorageError as exc:
        if args.command in ("stats", "scopes", "clear"):
            where = f"at {args.host}:{args.port}" if args.host else f"in {args.dir!r}"
            return _error(args, f"cannot read the cache {where}: {exc}")
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
