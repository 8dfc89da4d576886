"""What the L1 text pre-screen costs and saves on a new question, side by side in one run.

    ./dev python benchmarks/text_prescreen_cost.py [--stored 1000] [--n 200]

As ratios to E, one fp32 MiniLM encode of a new text in the same run (the serving backend):

* the static vector of a new text (tokenize + weighted mean);
* a new question's lookup (L0.5 + L1; the verifier where a candidate comes) with the
  pre-screen on and off, alternating question by question (``--n`` questions, half each), on
  two stores, each on a fresh engine (the pre-screen adapts: where it rarely settles a text it
  runs on a sample only, ``tiers.SCREEN_*``):
  ``one partition``: ``--stored`` Quora questions under one scope (a chat app with one model:
  every stored text is a potential neighbour, so few new questions are settled) and
  ``small partitions``: the same questions each under its own scope, one stored entry per
  scope (a picture's questions, a tenant's: most new questions are settled).

New questions are Quora questions not stored (qqp_val, ``../shared/data``; the LLM-written
training pairs when it is absent). Every text is new to the process (no memo hit).
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

REPO = Path(__file__).resolve().parents[1]


def questions(n: int) -> list[str]:
    path = Path(os.environ.get("MLC_SHARED_DATA") or REPO.parent / "shared" / "data") / "qqp_val.csv"
    out: list[str] = []
    if path.exists():
        with open(path, newline="", encoding="utf-8") as fh:
            for r in csv.DictReader(fh):
                out += [r["question1"], r["question2"]]
    else:
        for f in sorted(glob.glob(str(REPO / "evaluation" / "data" / "text_pairs" / "train" / "*.jsonl"))):
            for r in map(json.loads, open(f, encoding="utf-8")):
                out += [r["a"], r["b"]]
    return list(dict.fromkeys(out))[:n]


def ms(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


def run(stored: int, n: int) -> dict[str, Any]:
    from mlc_integrations import CacheRequest, MLCEngine
    from mlc_integrations.tiers import DEFAULT_L1_PRESCREEN

    texts = questions(stored + 4 * n + 50)
    store_texts, fresh = texts[:stored], texts[stored:]
    eng = MLCEngine(durable=True, image_encoder=None)
    eng.warmup()
    emb, static = eng.encoders.text_embedder, eng.encoders.static_embedder
    e_ms = statistics.median(ms(lambda t=t: emb.embed([t])) for t in fresh[:n])  # E: new texts, one at a time
    s_ms = statistics.median(ms(lambda t=t: static.embed([t])) for t in fresh[n:2 * n])
    out: dict[str, Any] = {"E_ms": round(e_ms, 3), "static_vector_ms": round(s_ms, 4),
                           "static_vector_over_E": round(s_ms / e_ms, 4), "stores": {}}
    eng.close()
    for k, layout in enumerate(("one partition", "small partitions")):
        eng = MLCEngine(durable=True, image_encoder=None)  # each layout on a fresh engine (the screen adapts per engine)
        for i, t in enumerate(store_texts):
            eng.update(CacheRequest(text=t, scope="s" if layout == "one partition" else f"s{i}"), f"a{i}")
        times: dict[str, list[float]] = {"on": [], "off": []}
        settled = 0
        for i, t in enumerate(fresh[(2 + k) * n:(3 + k) * n]):  # new to this process in each layout
            mode = "on" if i % 2 == 0 else "off"
            eng.text_tier.prescreen_threshold = DEFAULT_L1_PRESCREEN if mode == "on" else None
            scope = "s" if layout == "one partition" else f"s{i % stored}"
            before = eng.stats()["l1_prescreened"]
            times[mode].append(ms(lambda: eng.lookup_explained(CacheRequest(text=t, scope=scope))))
            settled += eng.stats()["l1_prescreened"] - before
        row = {m: round(statistics.median(v), 3) for m, v in times.items()}
        row.update({f"{m}_over_E": round(row[m] / e_ms, 3) for m in ("on", "off")})
        row["settled_share_of_on"] = round(settled / max(1, len(times["on"])), 3)
        out["stores"][layout] = row
        eng.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stored", type=int, default=1000)
    ap.add_argument("--n", type=int, default=400)
    args = ap.parse_args()
    load = os.getloadavg()
    res = run(args.stored, args.n)
    print(f"# L1 pre-screen cost (load average {load}; {args.stored} stored questions; E and the static vector over {args.n} texts, each lookup figure the median of {args.n // 2})\n")
    print(f"E (one fp32 MiniLM encode of a new text): {res['E_ms']} ms; static vector of a new text: "
          f"{res['static_vector_ms']} ms = {res['static_vector_over_E']}E\n")
    print("| store | new-question lookup, pre-screen on | off | on / E | off / E | settled (on) |")
    print("|---|---|---|---|---|---|")
    for layout, r in res["stores"].items():
        print(f"| {layout} | {r['on']} ms | {r['off']} ms | {r['on_over_E']}E | {r['off_over_E']}E | "
              f"{r['settled_share_of_on']:.0%} |")
    print("\n" + json.dumps(res))


if __name__ == "__main__":
    main()
