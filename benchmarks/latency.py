"""What a cache costs on the caller's path, side by side in one run, on the same requests.

    ./dev python benchmarks/latency.py                  # everything (~6-10 min on 2 cores)
    ./dev python benchmarks/latency.py --quick          # 50 requests per operation, no demo stream
    ./dev python benchmarks/latency.py --procs 2        # also: 2 processes at once, p99/median per operation
    ./dev python benchmarks/latency.py --json out.json  # also write every figure

Every cache is called through LangChain's cache interface (``lookup(prompt, llm_string)``,
``update(prompt, llm_string, generations)``) with the prompt string LangChain builds for a
chat model (``dumps(messages)``), as ``set_llm_cache`` makes a chat model call them:

* floor: a chat model with no cache and a backend that answers at once (LangChain's own
  cost per call, which every row below comes on top of);
* MLC: ``MultimodalSemanticCache()`` with its defaults (embedded persistent Chroma, here in a
  temporary directory; write-behind,
  the sentence model on its default backend, L2 on EfficientNet-Lite0 with the pre-screen):
  L0.5 hit (the same prompt again), L1 hit (a reworded question), text miss (lookup +
  update, what the adapter puts on the caller's path for a new question), miss with a new
  picture and no near stored one (lookup + update), L2 hit (the same question on a
  JPEG re-encode of a stored picture). The background writer is drained (untimed) after
  each miss, as a backend call longer than its work would let it;
* LangChain ``InMemoryCache``: lookup hit, lookup miss, update;
* GPTCache: the installed ``gptcache`` package (sqlite + faiss, ``SearchDistanceEvaluation``)
  with the same MiniLM (same backend) as its embedding function, mounted as
  ``langchain_community`` mounts it (``evaluation.harness.baselines.GPTCacheLangChain``):
  update, lookup on the reworded questions, lookup on new questions; at similarity_threshold
  0.8 (its default; on whole-prompt strings it also "hits" new questions) and 0.99 (where
  new questions miss: GPTCache's miss path).

Each operation is checked: a row holds only the requests whose outcome was its label
(a "new" question that hit is left out of the miss row and counted; the counts are printed).
Single-query encodes run on one thread (torch and ONNX Runtime), as the library and
``mlc eval`` do. The demo row runs ``mlc demo``'s VQA stream (easy-vqa, 200 requests,
300 ms oracle) with and without the cache, with the eval code's own speedup.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

LLM_STRING = "fake-list-chat-model|latency-bench"
Samples = dict[str, list[float]]


# ----------------------------------------------------------------------------- requests
def picture(i: int) -> Image.Image:
    """A 224x224 picture of random 8x8 blocks: no two are near each other."""
    rng = np.random.default_rng(i)
    return Image.fromarray(rng.integers(0, 256, size=(28, 28, 3), dtype=np.uint8)).resize((224, 224), Image.NEAREST)


def data_url(im: Image.Image, fmt: str = "PNG", **kw: Any) -> str:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(buf.getvalue()).decode()


def messages(text: str, image_url: Optional[str] = None) -> list[Any]:
    from langchain_core.messages import HumanMessage

    if image_url is None:
        return [HumanMessage(content=text)]
    return [HumanMessage(content=[{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": image_url}}])]


def prompt(text: str, image_url: Optional[str] = None) -> str:
    from langchain_core.load import dumps

    return dumps(messages(text, image_url))


def paraphrase_pairs() -> list[dict[str, str]]:
    """GPTCache's own benchmark pairs (``gptcache_paraphrase_pairs.json``, shared data)."""
    from evaluation.training.verifier.data import DEFAULT_DATA_DIR

    return json.loads((Path(os.environ.get("MLC_DATA_DIR", DEFAULT_DATA_DIR)) / "gptcache_paraphrase_pairs.json").read_text())


class Requests:
    """The prompt strings every cache is given (built once, outside any timing): the
    ``origin`` of pair i is asked and stored, its ``similar`` is the reworded question,
    the ``origin`` of pair n + i a new one; pictures are random-block images."""

    def __init__(self, n: int) -> None:
        pairs = paraphrase_pairs()
        if 2 * n > len(pairs):
            raise SystemExit(f"--n is at most {len(pairs) // 2} (two disjoint sets of {len(pairs)} pairs)")
        self.asked = [prompt(p["origin"]) for p in pairs[:n]]
        self.reworded = [prompt(p["similar"]) for p in pairs[:n]]
        self.new = [prompt(p["origin"]) for p in pairs[n:2 * n]]
        self.new_picture = [prompt(f"What is in picture {i}?", data_url(picture(100_000 + i))) for i in range(n)]
        self.recoded = [prompt(f"What is in picture {i}?", data_url(picture(100_000 + i), "JPEG", quality=90))
                        for i in range(n)]


def generations(i: int) -> list[Any]:
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration

    return [ChatGeneration(message=AIMessage(content=f"answer {i}"))]


def ms(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t) * 1000.0, out


# ----------------------------------------------------------------------------- sections
def floor(n: int) -> Samples:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    model = FakeListChatModel(responses=["answer"], cache=False)
    msgs = [messages(f"What color is shape number {i} in the image?") for i in range(n)]
    for m in msgs[:5]:
        model.invoke(m)
    return {"floor: chat model call, no cache": [ms(lambda m=m: model.invoke(m))[0] for m in msgs]}


def mlc(n: int) -> tuple[Samples, dict[str, Any]]:
    from mlc_integrations.langchain import MultimodalSemanticCache

    req = Requests(n)
    store = tempfile.TemporaryDirectory(prefix="mlc-latency-")
    cache = MultimodalSemanticCache(persist_directory=store.name)  # the default store, not in the cwd
    eng = cache.engine
    eng.warmup()  # model loading is the warm start's business (docs/operations.md), not a lookup's
    # a first request of each kind outside the timing (lazy imports, first Chroma collection)
    for p in (prompt("warm up question?"), prompt("warm up picture?", data_url(picture(7)))):
        cache.lookup(p, LLM_STRING)
        cache.update(p, LLM_STRING, generations(-1))
    eng.flush()
    out: Samples = {k: [] for k in ("MLC text miss (lookup + update)", "MLC L1 hit", "MLC reworded question, not reused", "MLC L0.5 hit",
                                    "MLC miss, new picture (lookup + update)", "MLC L2 hit")}
    wrong: dict[str, int] = {k: 0 for k in out if "L1" not in k and "reworded" not in k}

    def tier() -> Optional[str]:
        rec = cache.last_lookup
        return rec.hit.tier if rec is not None and rec.hit is not None else None

    def miss_then_update(key: str, p: str, i: int) -> None:
        t, hit = ms(lambda: cache.lookup(p, LLM_STRING))
        if hit is not None:  # a "new" question near an earlier one (the pairs repeat topics): not a miss
            wrong[key] += 1
            return
        t2, _ = ms(lambda: cache.update(p, LLM_STRING, generations(i)))
        out[key].append(t + t2)
        eng.flush()  # untimed: the writer's work overlaps the backend call in real use

    def hit(key: str, p: str, want: str) -> None:
        t, got = ms(lambda: cache.lookup(p, LLM_STRING))
        if got is None or tier() != want:
            wrong[key] += 1
        else:
            out[key].append(t)

    for i in range(n):
        miss_then_update("MLC text miss (lookup + update)", req.asked[i], i)
    for i in range(n):  # a reworded question the verifier refuses is a miss: timed in its own row
        t, got = ms(lambda: cache.lookup(req.reworded[i], LLM_STRING))
        out["MLC L1 hit" if tier() == "L1" else "MLC reworded question, not reused"].append(t)
    for i in range(n):
        hit("MLC L0.5 hit", req.asked[i], "L0.5")
    prescreened_before = eng.stats()["l2_prescreened"]
    for i in range(n):
        miss_then_update("MLC miss, new picture (lookup + update)", req.new_picture[i], i)
    prescreened = eng.stats()["l2_prescreened"] - prescreened_before
    for i in range(n):
        hit("MLC L2 hit", req.recoded[i], "L2")
    info = {"text_backend": eng.text_embedder.backend, "image_encoder": eng.encoders.image_model,
            "not as labelled": wrong, "l2_prescreened": prescreened}
    eng.close()
    store.cleanup()
    return out, info


def in_memory(n: int) -> tuple[Samples, dict[str, Any]]:
    from langchain_core.caches import InMemoryCache

    req, cache = Requests(n), InMemoryCache()
    out: Samples = {"InMemoryCache update": [], "InMemoryCache lookup hit": [], "InMemoryCache lookup miss": []}
    wrong = {k: 0 for k in out}
    for i in range(n):
        out["InMemoryCache update"].append(ms(lambda: cache.update(req.asked[i], LLM_STRING, generations(i)))[0])
    for i in range(n):
        t, got = ms(lambda: cache.lookup(req.asked[i], LLM_STRING))
        out["InMemoryCache lookup hit"].append(t)
        wrong["InMemoryCache lookup hit"] += got is None
    for i in range(n):
        t, got = ms(lambda: cache.lookup(req.reworded[i], LLM_STRING))
        out["InMemoryCache lookup miss"].append(t)
        wrong["InMemoryCache lookup miss"] += got is not None
    return out, {"not as labelled": wrong}


def gptcache(n: int) -> tuple[Samples, dict[str, Any]]:
    from evaluation.harness.baselines import GPTCacheLangChain
    from evaluation.harness.runner import reset_model_memos

    req = Requests(n)
    out: Samples = {}
    hits: dict[str, int] = {}
    labels = []
    # 0.8 is GPTCache's default; on whole-prompt strings it answers new questions too (a false
    # hit), so its misses are measured on a second instance at 0.99 (cosine 0.98), same data.
    for t in (0.8, 0.99):
        reset_model_memos()  # each instance pays its own embeddings (the model memoizes by text)
        cache = GPTCacheLangChain(similarity_threshold=t)
        labels.append(cache.label)
        cache.update(prompt("warm up question?"), LLM_STRING, generations(-1))
        cache.lookup(prompt("warm up question?"), LLM_STRING)
        ops = [(f"GPTCache t={t:g} update", None), (f"GPTCache t={t:g} lookup, reworded question", req.reworded),
               (f"GPTCache t={t:g} lookup, new question", req.new)]
        out[ops[0][0]] = [ms(lambda i=i: cache.update(req.asked[i], LLM_STRING, generations(i)))[0] for i in range(n)]
        for key, prompts in ops[1:]:
            out[key], hits[key] = [], 0
            for p in prompts:
                took, got = ms(lambda p=p: cache.lookup(p, LLM_STRING))
                out[key].append(took)
                hits[key] += got is not None
        cache.clear()
    return out, {"label": "; ".join(labels), "hits": hits}


def demo_stream() -> dict[str, Any]:
    """``mlc demo``'s VQA stream (the first 200 easy-vqa requests, 300 ms oracle), no cache
    and MultimodalSemanticCache() as shipped, run by the eval code; achieved speedup vs 1 / (1 - hit rate)."""
    from evaluation.harness.experiments import GroundTruthOracle, warm_models
    from evaluation.harness.runner import attach_speedups, run_workload
    from evaluation.harness.workloads import build
    from mlc_integrations.langchain import MultimodalSemanticCache

    wl = build("vqa", quick=False, seed=0)
    wl.items = wl.items[:200]
    warm_models()
    oracle = GroundTruthOracle(latency_s=0.3)
    with tempfile.TemporaryDirectory(prefix="mlc-latency-demo-") as d:
        cache = MultimodalSemanticCache(persist_directory=os.path.join(d, "vqa"))  # as shipped, like the demo
        results = [run_workload(wl, None, oracle, config="no cache"),
                   run_workload(wl, cache, oracle, config="MLC as shipped")]
    attach_speedups(results)
    base, mine = results
    ideal = 1.0 / (1.0 - mine.hit_rate) if mine.hit_rate < 1 else float("inf")
    # where the time went: a request's wall time by outcome, and the cache's own calls
    by = {o: [t for t, x in zip(mine.request_ms, mine.outcomes) if (x == "miss") == (o == "miss")] for o in ("hit", "miss")}
    return {"requests": mine.n, "hit_rate": mine.hit_rate, "wrong_hits": mine.wrong_hits,
            "hit_request_ms_median": pct(by["hit"], 50), "miss_request_ms_median": pct(by["miss"], 50),
            "lookup_ms_median": pct(mine.lookup_ms, 50), "update_ms_median": pct(mine.update_ms, 50),
            "no_cache_s": base.wall_s, "cache_s": mine.wall_s, "speedup": mine.speedup,
            "ideal": ideal, "fraction_of_ideal": (mine.speedup or 0.0) / ideal}


# ----------------------------------------------------------------------------- report
def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(xs, p)) if xs else float("nan")


def summary(samples: Samples) -> dict[str, dict[str, float]]:
    return {k: {"n": len(v), "median": pct(v, 50), "p90": pct(v, 90), "p99": pct(v, 99)} for k, v in samples.items()}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def one_thread() -> None:
    """One intra-op thread for single-query encodes (ONNX Runtime's default in the library;
    torch's here, as `mlc eval` sets it): two stalled single requests several-fold on a
    shared 2-core machine (docs/text_encoder.md)."""
    import torch

    torch.set_num_threads(1)


def concurrent(procs: int, n: int) -> dict[str, Any]:
    """``procs`` processes run the MLC section at the same moment (each waits for the others
    to have loaded their models); per process and operation: p99 / median."""
    with tempfile.TemporaryDirectory(prefix="mlc-latency-procs-") as d:
        go = Path(d) / "go"
        children = [subprocess.Popen([sys.executable, __file__, "--worker", str(k), "--n", str(n), "--sync", d],
                                     stdout=subprocess.PIPE, text=True) for k in range(procs)]
        while not all((Path(d) / f"ready-{k}").exists() for k in range(procs)):
            if any(c.poll() not in (None, 0) for c in children):
                raise RuntimeError("a worker process failed")
            time.sleep(0.2)
        load_at_go = load()
        go.touch()
        rows = [json.loads(c.communicate()[0].strip().splitlines()[-1]) for c in children]
    return {"load_at_start": load_at_go, "load_at_end": load(), "per_process": rows}


def worker(k: int, n: int, sync: str) -> None:
    one_thread()
    from mlc_integrations.langchain import MultimodalSemanticCache

    warm = MultimodalSemanticCache(persist_directory=None)
    warm.engine.warmup()  # the shared models load before the start signal
    warm.engine.close()
    (Path(sync) / f"ready-{k}").touch()
    while not (Path(sync) / "go").exists():
        time.sleep(0.05)
    samples, info = mlc(n)
    print(json.dumps({"process": k, "ops": summary(samples), "not as labelled": info["not as labelled"]}), flush=True)


def print_table(rows: dict[str, dict[str, float]]) -> None:
    print(f"{'operation':45} {'n':>4} {'median ms':>10} {'p90 ms':>9} {'p99 ms':>9}")
    for k, r in rows.items():
        print(f"{k:45} {r['n']:>4} {r['median']:>10.3f} {r['p90']:>9.3f} {r['p99']:>9.3f}")


def reference_encode(n: int) -> dict[str, list[float]]:
    """E: the budgets' unit -- one sentence through all-MiniLM-L6-v2 in fp32 on torch
    (sentence-transformers), timed in this run beside everything else."""
    from mlc_integrations.embed.models import TextEmbedder

    model = TextEmbedder(None, backend="torch")
    model.embed(["warm up the reference encoder"])
    times = []
    for i in range(n):
        text = f"What is the reference sentence number {i} about?"
        t0 = time.perf_counter()
        model._ensure().encode([text])  # the model itself, no memo
        times.append((time.perf_counter() - t0) * 1000.0)
    return {"E: one fp32 MiniLM encode (torch, sentence-transformers)": times}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=None, help="requests per operation (default 200, --quick 50)")
    ap.add_argument("--quick", action="store_true", help="50 requests per operation, no demo stream")
    ap.add_argument("--no-demo", action="store_true", help="skip the demo VQA stream (~2 min)")
    ap.add_argument("--procs", type=int, default=0, help="also run the MLC section in this many processes at once")
    ap.add_argument("--json", default=None, help="also write every figure to this JSON file")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--sync", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    n = args.n or (50 if args.quick else 200)
    if args.worker is not None:
        worker(args.worker, n, str(args.sync))
        return
    import logging

    logging.basicConfig(level=logging.WARNING)
    one_thread()
    report: dict[str, Any] = {"load_at_start": load(), "n": n, "cpus": os.cpu_count()}
    print(f"load average at start: {report['load_at_start']}  ({os.cpu_count()} CPUs, {n} requests per operation)",
          flush=True)
    samples = floor(n)
    samples.update(reference_encode(n))
    m, report["mlc"] = mlc(n)
    samples.update(m)
    im, report["in_memory"] = in_memory(n)
    samples.update(im)
    g, report["gptcache"] = gptcache(n)
    samples.update(g)
    report["ops"] = rows = summary(samples)
    report["load_after_ops"] = load()
    print()
    print_table(rows)
    print(f"\nMLC: text backend {report['mlc']['text_backend']}, image encoder {report['mlc']['image_encoder']}; "
          f"new-picture lookups that ran no image encoder: {report['mlc']['l2_prescreened']}/{n}; "
          f"timed operations whose outcome differed from their label: {report['mlc']['not as labelled']}")
    print(f"InMemoryCache outcomes differing from label: {report['in_memory']['not as labelled']}")
    print(f"{report['gptcache']['label']}: hits {report['gptcache']['hits']}")
    text_miss = rows["MLC text miss (lookup + update)"]["median"]
    pic_miss = rows["MLC miss, new picture (lookup + update)"]["median"]
    gpt = rows["GPTCache t=0.99 lookup, new question"]["median"]
    e = rows["E: one fp32 MiniLM encode (torch, sentence-transformers)"]["median"]
    budgets = {"MLC L0.5 hit": 0.02, "MLC L1 hit": 0.6, "MLC text miss (lookup + update)": 0.5}
    report["over_E"] = {op: rows[op]["median"] / e for op in budgets if op in rows}
    print(f"\nratios to E = {e:.2f} ms (one fp32 MiniLM encode, this run): " + "; ".join(
        f"{op} {r:.3f}E (budget {budgets[op]}E)" for op, r in report["over_E"].items()))
    ratios = report["ratios"] = {
        "mlc_text_miss_over_gptcache_lookup": text_miss / gpt,
        "mlc_picture_miss_over_gptcache_lookup": pic_miss / gpt,
        "mlc_text_miss_on_1s_backend": text_miss / 1000.0,
        "mlc_picture_miss_on_1s_backend": pic_miss / 1000.0,
    }
    print(f"\nMLC miss (lookup + update) / GPTCache lookup miss (t=0.99, new question), medians: text {ratios['mlc_text_miss_over_gptcache_lookup']:.3f}, "
          f"new picture {ratios['mlc_picture_miss_over_gptcache_lookup']:.3f} (target <= 0.1)")
    print(f"Overhead of a miss on a 1 s backend call: text {ratios['mlc_text_miss_on_1s_backend']:.2%}, "
          f"new picture {ratios['mlc_picture_miss_on_1s_backend']:.2%} (target <= 2 %)")
    print(f"load average after the operations: {report['load_after_ops']}", flush=True)
    if args.procs:
        report["concurrent"] = c = concurrent(args.procs, n)
        print(f"\n{args.procs} processes at once (load at start {c['load_at_start']}, at end {c['load_at_end']}); "
              "p99 / median per operation (target <= 3x):")
        for row in c["per_process"]:
            print(f"  process {row['process']}: " + ", ".join(
                f"{k.replace('MLC ', '')} {r['median']:.2f} ms, p99 {r['p99']:.2f} ms = {r['p99'] / r['median']:.2f}x"
                for k, r in row["ops"].items()))
    if not (args.quick or args.no_demo):
        report["demo"] = d = demo_stream()
        print(f"\nDemo VQA stream ({d['requests']} requests, 300 ms oracle): hit rate {d['hit_rate']:.3f} "
              f"({d['wrong_hits']} wrong), {d['no_cache_s']:.1f} s -> {d['cache_s']:.1f} s = {d['speedup']:.2f}x; "
              f"ideal 1/(1-hit rate) = {d['ideal']:.2f}x; achieved {d['fraction_of_ideal']:.1%} of ideal (target >= 90 %)")
        print(f"  medians: a hit {d['hit_request_ms_median']:.1f} ms, a miss {d['miss_request_ms_median']:.1f} ms "
              f"(300 ms of it the oracle); the cache's lookup {d['lookup_ms_median']:.1f} ms, update {d['update_ms_median']:.1f} ms")
    report["load_at_end"] = load()
    print(f"\nload average at end: {report['load_at_end']}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
