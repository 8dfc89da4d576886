"""What the image judge may cost in one demo stream: the stream with the judge as shipped,
side by side with the same stream where every verdict is replayed from a recording (a judge
that costs nothing and decides the same).

Each round runs the stream without a cache, then through ``MultimodalSemanticCache()`` as
the demo does (embedded Chroma in a temporary directory, the 300 ms oracle); rounds
alternate the real judge and the replayed one, so that the machine's drift falls on both.
The replayed judge spends the lookup's comparison budget as the recorded one did, so every
lookup takes the same path; a round whose hits differ from the recording is reported.
Efficiency is the demo's: speedup x (1 - hit rate). The last line is the judge's budget on
this machine: the mean in-stream cost per judged pair at which the stream would keep 0.90
of what its hit rate allows, against what the judge costs now.

    python benchmarks/judge_budget.py camera [--rounds 4] [--bar 0.9]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time
from typing import Any


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("stream", choices=("vqa", "camera", "camera-video"))
    p.add_argument("--rounds", type=int, default=4, help="real and replayed alternately (an even number)")
    p.add_argument("--bar", type=float, default=0.9)
    args = p.parse_args()

    import torch

    import mlc_integrations.verify.image_change.verifier as ic
    from evaluation.harness.experiments import backend_for, warm_models
    from evaluation.harness.runner import run_workload
    from evaluation.harness.workloads import build
    from mlc_integrations.embed.image_towers import DEFAULT_IMAGE_ENCODER
    from mlc_integrations.langchain import MultimodalSemanticCache

    torch.set_num_threads(1)
    real = ic.judge
    recorded: dict[str, tuple[Any, bool]] = {}
    state = {"replay": False, "ms": 0.0, "calls": 0, "unrecorded": 0}

    def pair_key(stored: Any, new: Any) -> str:
        h = hashlib.sha1()
        for d in (stored, new):
            h.update(d.grey.tobytes())
            h.update(d.chroma.tobytes())
        return h.hexdigest()

    def judge(stored: Any, new: Any, rule: Any, budget: Any = None) -> Any:
        key = pair_key(stored, new)
        if state["replay"] and key in recorded:
            verdict, spent = recorded[key]
            if spent and budget is not None:
                budget.spend()
            return verdict
        if state["replay"]:
            state["unrecorded"] += 1
        used = budget.used if budget is not None else 0
        t0 = time.perf_counter()
        verdict = real(stored, new, rule, budget)
        state["ms"] += (time.perf_counter() - t0) * 1000.0
        state["calls"] += 1
        recorded[key] = (verdict, budget is not None and budget.used > used)
        return verdict

    ic.judge = judge  # the tier calls the verifier, which looks the judge up in its module
    wl = build(args.stream, quick=args.stream == "camera-video", seed=0)
    if args.stream == "vqa":
        wl.items = wl.items[:200]  # as the demo
    _key, backend = backend_for(wl, 300.0)
    warm_models(image_encoders=[DEFAULT_IMAGE_ENCODER])
    root = tempfile.mkdtemp(prefix="mlc-judge-budget-")
    eff: dict[bool, list[float]] = {False: [], True: []}
    walls: dict[bool, list[float]] = {False: [], True: []}
    base_walls: list[float] = []
    hits_of: dict[bool, set[int]] = {False: set(), True: set()}
    real_ms: list[float] = []
    h = 0.0
    for rnd in range(max(2, args.rounds)):
        replay = rnd % 2 == 1
        state.update(replay=replay, ms=0.0, calls=0, unrecorded=0)
        cache = MultimodalSemanticCache(persist_directory=os.path.join(root, f"round{rnd}"))
        base = run_workload(wl, None, backend, config="no cache")
        res = run_workload(wl, cache, backend, config="MLC")
        cache.close()
        h = res.hits / res.n
        e = base.wall_s / res.wall_s * (1.0 - h)
        eff[replay].append(e)
        walls[replay].append(res.wall_s)
        base_walls.append(base.wall_s)
        hits_of[replay].add(res.hits)
        if not replay:
            real_ms.append(state["ms"] / max(1, state["calls"]))
        print(f"round {rnd}: {'replayed judge' if replay else 'judge as shipped'}: hits {res.hits}/{res.n}, "
              f"no cache {base.wall_s:.2f} s, with MLC {res.wall_s:.2f} s, efficiency {e:.3f}"
              + (f", judge {state['calls']} pairs, {state['ms'] / max(1, state['calls']):.2f} ms each" if not replay else "")
              + (f", {state['unrecorded']} pairs not in the recording" if replay and state["unrecorded"] else ""),
              flush=True)
    if hits_of[False] != hits_of[True]:
        print(f"hits differ between the two judges ({sorted(hits_of[False])} vs {sorted(hits_of[True])}): "
              "the replay did not take the same path")
    med = statistics.median
    allowed = med(base_walls) * (1.0 - h) / args.bar  # the wall time at which efficiency = bar
    calls = len(recorded)
    per_pair = (allowed - med(walls[True])) * 1000.0 / max(1, calls)
    print(f"{args.stream}: efficiency with the judge as shipped {med(eff[False]):.3f}, with a judge that costs nothing "
          f"{med(eff[True]):.3f} (medians of {len(eff[False])} and {len(eff[True])} rounds)")
    print(f"judge budget at efficiency {args.bar:g}: {per_pair:.2f} ms per judged pair in-stream "
          f"({calls} distinct pairs); the judge as shipped costs {med(real_ms):.2f} ms per pair here"
          + ("" if per_pair > 0 else " -- the rest of the lookup alone exceeds the bar"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
