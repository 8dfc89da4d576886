"""Where one demo stream's lookups spend their time, by phase, hits and misses apart.

Runs one of the demo's streams (``vqa``, ``camera``, ``camera-video``) through
``MultimodalSemanticCache()`` as shipped (embedded Chroma in a temporary directory, the
300 ms oracle), timing the phases inside every lookup: the adapter's parse of the prompt (``request``) and
restore of the stored generations, the engine's keying and tiers, L2's fingerprint
neighbours and candidates, the image judge, the store's reads. Times are wall
clock inside the lookup, whichever thread spent them (the write-behind writer's work shows
up where it ran beside a lookup). ``--pause`` waits that long after building the cache, as
the demo's later streams find the process warm. ``--profile`` runs the lookups under
cProfile instead (which inflates Python-heavy code: read its shares, not its times) and
prints the functions by cumulative time (``--sort tottime``: by their own time).

    python benchmarks/demo_stream_phases.py camera-video [--pause 3] [--profile [--sort tottime] [--rows 40]]
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import functools
import os
import pstats
import tempfile
import time
from typing import Any, Callable


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("stream", choices=("vqa", "camera", "camera-video"))
    p.add_argument("--pause", type=float, default=0.0)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--sort", default="cumulative", help="with --profile: pstats sort key (cumulative, tottime, ...)")
    p.add_argument("--rows", type=int, default=40, help="with --profile: functions printed")
    args = p.parse_args()

    import torch

    import mlc_integrations.embed.encoders as enc
    import mlc_integrations.engine as eng
    import mlc_integrations.langchain.cache as lc
    import mlc_integrations.store.entries as ent
    import mlc_integrations.tiers.exact as exact
    import mlc_integrations.tiers.multimodal as mm
    import mlc_integrations.tiers.text as text
    import mlc_integrations.verify.image_change.verifier as ic
    from evaluation.harness.experiments import backend_for, warm_models
    from evaluation.harness.runner import run_workload
    from evaluation.harness.workloads import build
    from mlc_integrations.embed.image_towers import DEFAULT_IMAGE_ENCODER

    torch.set_num_threads(1)
    spent: dict[str, float] = collections.defaultdict(float)
    calls: collections.Counter[str] = collections.Counter()

    def timed(owner: Any, name: str) -> None:
        f: Callable[..., Any] = getattr(owner, name)

        @functools.wraps(f)
        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                label = f"{getattr(owner, '__name__', owner)}.{name}"
                spent[label] += (time.perf_counter() - t0) * 1000.0
                calls[label] += 1

        setattr(owner, name, wrapper)

    for owner, name in [(exact.ExactTier, "lookup"), (text.TextSemanticTier, "lookup"), (mm.MultimodalTier, "_examine"),
                        (mm.MultimodalTier, "_fingerprint_neighbours"), (mm.MultimodalTier, "_fingerprint_candidates"),
                        (mm.MultimodalTier, "_encoder_stage"), (mm.MultimodalTier, "_image_check"), (ic, "judge"),
                        (ic, "prescreen"), (ent.EntryStore, "fetch"), (ent.EntryStore, "nearest"),
                        (ent.EntryStore, "vectors"), (ent.EntryStore, "image_descriptors"),
                        (enc.TierEncoders, "image_descriptors"), (enc.TierEncoders, "fingerprints"),
                        (enc.TierEncoders, "image_vecs"), (enc.TierEncoders, "prompt_vec"),
                        (lc.MultimodalSemanticCache, "request"), (lc, "generations_from_payload"),
                        (eng.MLCEngine, "key"), (eng.MLCEngine, "_lookup")]:
        timed(owner, name)

    wl = build(args.stream, quick=args.stream == "camera-video", seed=0)
    if args.stream == "vqa":
        wl.items = wl.items[:200]  # as the demo
    _key, backend = backend_for(wl, 300.0)
    warm_models(image_encoders=[DEFAULT_IMAGE_ENCODER])
    cache = lc.MultimodalSemanticCache(persist_directory=os.path.join(tempfile.mkdtemp(prefix="mlc-phases-"), wl.name))
    time.sleep(args.pause)
    totals: dict[tuple[str, str], float] = collections.defaultdict(float)
    kinds: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    lookup = lc.MultimodalSemanticCache.lookup

    profile = cProfile.Profile() if args.profile else None
    previous = ""

    def per_lookup(self: Any, *a: Any, **k: Any) -> Any:
        nonlocal previous
        spent.clear()
        calls.clear()
        t0 = time.perf_counter()
        if profile is not None:
            profile.enable()
        try:
            out = lookup(self, *a, **k)
        finally:
            if profile is not None:
                profile.disable()
        kind = "hit" if out is not None else "miss"
        ms_all = (time.perf_counter() - t0) * 1000.0
        # The first hit after a miss follows the model call (the CPU idled through it): apart too.
        groups = [kind] + (["1st hit after a miss"] if kind == "hit" and previous == "miss" else [])
        previous = kind
        for group in groups:
            kinds[group] += 1
            totals[(group, "lookup (all of it)")] += ms_all
            for what, ms in spent.items():
                totals[(group, what)] += ms
                counts[(group, what)] += calls[what]
        return out

    lc.MultimodalSemanticCache.lookup = per_lookup  # type: ignore[method-assign]
    res = run_workload(wl, cache, backend, config="phases")
    print(f"{args.stream}: {res.hits}/{res.n} hits, {res.wrong_hits} wrong, wall {res.wall_s:.1f} s, "
          f"load {os.getloadavg()[0]:.2f}")
    if profile is not None:
        pstats.Stats(profile).sort_stats(args.sort).print_stats(args.rows)
        return 0
    for kind in ("hit", "1st hit after a miss", "miss"):
        rows = sorted(((w, ms) for (k, w), ms in totals.items() if k == kind), key=lambda r: -r[1])
        for what, ms in rows:
            n = max(1, kinds[kind])
            per = f"  ({counts[(kind, what)] / n:.2f} calls)" if counts[(kind, what)] else ""
            print(f"  {kind:4s} {what:48s} {ms / n:7.2f} ms per lookup{per}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
