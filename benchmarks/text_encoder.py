"""L1's text encoder, backends side by side: sentence-transformers (torch fp32) vs ONNX
Runtime fp32 vs ONNX Runtime int8 (:mod:`mlc_integrations.embed.text_onnx`).

    ./dev python benchmarks/text_encoder.py                       # all sections
    ./dev python benchmarks/text_encoder.py --section latency     # single-sentence latency, 1 and 2 threads
    ./dev python benchmarks/text_encoder.py --section first-use   # fresh processes: export, load, first vector
    ./dev python benchmarks/text_encoder.py --section agreement   # int8/fp32 vs torch on the evaluation sets
    ./dev python benchmarks/text_encoder.py --section sweep       # int8 variants (which nodes stay fp32)
    ./dev python benchmarks/text_encoder.py --quick               # smaller counts

Latency: the three backends run interleaved (round-robin per sentence, rotating who goes
first), so machine load hits all of them alike and the ratios stay comparable.
Agreement: cosine of each text's vector to torch's over qqp_val questions, the GPTCache
paraphrases and the easy-VQA questions; the change of the pair cosine (L1's similarity)
over qqp_val pairs; and the decisions L1 makes with the shipped verifier (cosine >=
DEFAULT_L1_THRESHOLD and P(correct) >= its default precision) under each backend.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from mlc_integrations.embed import text_onnx  # noqa: E402
from mlc_integrations.embed.models import TextEmbedder, resolve_text_model  # noqa: E402

MODEL = Path(resolve_text_model(None))


def shared_data() -> Path:
    from evaluation.harness.workloads import shared_data_dir

    return shared_data_dir()


def qqp_pairs(n: int) -> list[tuple[str, str, int]]:
    with open(shared_data() / "qqp_val.csv", newline="", encoding="utf-8") as fh:
        rows = [(r["question1"], r["question2"], int(r["is_duplicate"])) for r in csv.DictReader(fh)]
    return rows[:n]


def eval_texts(n_qqp: int) -> dict[str, list[str]]:
    import easy_vqa

    qqp = sorted({t for a, b, _ in qqp_pairs(n_qqp) for t in (a, b)})
    gp = json.loads((shared_data() / "gptcache_paraphrase_pairs.json").read_text())
    gpt = sorted({t for p in gp for t in (p["origin"], p["similar"])})
    vqa = sorted(set(easy_vqa.get_train_questions()[0]) | set(easy_vqa.get_test_questions()[0]))
    return {"qqp_val questions": qqp, "gptcache paraphrases": gpt, "easy-vqa questions": vqa}


def pct(x: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(x), q))


# --------------------------------------------------------------------------- latency
def latency(n: int) -> None:
    import torch

    texts = [b for _, b, _ in qqp_pairs(n + 2000)[2000:]]  # unseen by any memo
    torch_model = TextEmbedder(None, backend="torch")._ensure()
    onnx32 = {t: text_onnx.OnnxTextEncoder.open(MODEL, quantize=False, threads=t) for t in (1, 2)}
    int8 = {t: text_onnx.OnnxTextEncoder.open(MODEL, threads=t) for t in (1, 2)}
    print(f"## Single-sentence latency, ms ({len(texts)} qqp_val questions, interleaved)\n")
    print("| threads | backend | median | p90 | median vs torch |\n|---|---|---|---|---|")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        fns: dict[str, Callable[[str], object]] = {
            "torch fp32 (sentence-transformers)": lambda s: torch_model.encode([s]),
            "ONNX fp32": lambda s: onnx32[threads].encode([s]),
            f"ONNX {int8[threads].precision} (fp32 <= {text_onnx.SHORT_TOKENS} tokens)": lambda s: int8[threads].encode([s]),
        }
        names = list(fns)
        for s in texts[:10]:  # warm-up
            for k in names:
                fns[k](s)
        ms: dict[str, list[float]] = {k: [] for k in names}
        for i, s in enumerate(texts):
            for k in names[i % 3:] + names[:i % 3]:
                t0 = time.perf_counter()
                fns[k](s)
                ms[k].append((time.perf_counter() - t0) * 1e3)
        base = np.median(ms[names[0]])
        for k in names:
            print(f"| {threads} | {k} | {np.median(ms[k]):.2f} | {pct(ms[k], 90):.2f} | {np.median(ms[k]) / base:.3f} |")
    print()


# --------------------------------------------------------------------------- first use
_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from mlc_integrations.embed.models import TextEmbedder
emb = TextEmbedder(None, backend=sys.argv[1])
t1 = time.perf_counter()
emb.embed(["what color is the shape?"])
t2 = time.perf_counter()
emb.embed(["is there a red circle?"])
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_and_first_s": t2 - t1, "second_ms": (t3 - t2) * 1e3,
                  "backend": emb.backend}))
"""


def _child(backend: str, cache: str) -> dict[str, float]:
    env = dict(os.environ, **{text_onnx.ENV_CACHE_DIR: cache})
    out = subprocess.run([sys.executable, "-c", _CHILD, backend], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def first_use() -> None:
    print("## First use in a fresh process, s (import mlc_integrations.embed.models; load; first vector)\n")
    print("| backend | cache | import | load + first vector | next vector, ms | export (meta.json) |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as cache:
        rows = [("torch", "-"), ("onnx-int8", "empty (exports)"), ("onnx-int8", "warm"), ("onnx-fp32", "warm")]
        for backend, state in rows:
            r = _child(backend, cache)
            export = ""
            if state.startswith("empty"):
                metas = [json.loads(p.read_text()) for p in Path(cache).glob("text-onnx/*/meta.json")]
                export = ", ".join(f"{m['export_seconds']:.1f} s (int8 {'kept' if m['int8'] else 'rejected'})"
                                   for m in metas)
            print(f"| {r['backend']} | {state} | {r['import_s']:.2f} | {r['load_and_first_s']:.2f} | "
                  f"{r['second_ms']:.1f} | {export} |")
        sizes = {p.name: p.stat().st_size / 1e6 for p in Path(cache).glob("text-onnx/*/*.onnx")}
        print("\ncached files: " + ", ".join(f"{k} {v:.1f} MB" for k, v in sorted(sizes.items())) + "\n")


# --------------------------------------------------------------------------- agreement
def agreement(n_qqp: int) -> None:
    from mlc_integrations.engine import DEFAULT_L1_THRESHOLD
    from mlc_integrations.verify import DEFAULT_MIN_PRECISION, Verifier

    sets = eval_texts(n_qqp)
    every = sorted({t for ts in sets.values() for t in ts})
    torch_emb = TextEmbedder(None, backend="torch")._ensure()
    t0 = time.perf_counter()
    ref = dict(zip(every, torch_emb.encode(every)))
    encs = {"ONNX fp32": text_onnx.OnnxTextEncoder.open(MODEL, quantize=False),
            "ONNX int8": text_onnx.OnnxTextEncoder.open(MODEL)}
    vecs = {k: dict(zip(every, e.encode(every))) for k, e in encs.items()}
    print(f"## Agreement with torch fp32 ({len(every)} distinct texts, embedded in "
          f"{time.perf_counter() - t0:.0f} s; int8 file precision: {encs['ONNX int8'].precision})\n")
    print("| backend | texts | n | min cosine | p1 | median |\n|---|---|---|---|---|---|")
    for k, got in vecs.items():
        for name, ts in list(sets.items()) + [("all", every)]:
            cos = np.array([float(ref[t] @ got[t]) for t in ts])
            print(f"| {k} | {name} | {len(ts)} | {cos.min():.4f} | {pct(cos, 1):.4f} | {np.median(cos):.4f} |")
    worst = sorted(every, key=lambda t: float(ref[t] @ vecs["ONNX int8"][t]))[:5]
    print("\nlowest int8 cosines: " + "; ".join(f"{t[:40]!r} {float(ref[t] @ vecs['ONNX int8'][t]):.4f}" for t in worst))

    pairs = qqp_pairs(n_qqp)
    verifier = Verifier.default()
    texts = [(a, b) for a, b, _ in pairs]
    y = np.array([d for _, _, d in pairs], dtype=bool)

    def decisions(table: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        cos = np.array([float(np.clip(table[a] @ table[b], -1, 1)) for a, b in texts])
        p = verifier.probabilities(texts, cos, "full")
        return cos, (cos >= DEFAULT_L1_THRESHOLD) & (p >= DEFAULT_MIN_PRECISION)

    base_cos, base_hit = decisions(ref)
    print(f"\n## qqp_val pairs ({len(pairs)}): pair cosine change and L1 decisions "
          f"(cosine >= {DEFAULT_L1_THRESHOLD}, verifier P >= {DEFAULT_MIN_PRECISION})\n")
    print("| backend | max abs change | p99 | median | decisions flipped | hits | precision of hits | recall |")
    print("|---|---|---|---|---|---|---|---|")
    for k, got in [("torch fp32", ref)] + list(vecs.items()):
        cos, hit = decisions(got)
        d = np.abs(cos - base_cos)
        prec = float(y[hit].mean()) if hit.any() else float("nan")
        print(f"| {k} | {d.max():.4f} | {pct(d, 99):.4f} | {np.median(d):.4f} | {int((hit != base_hit).sum())} | "
              f"{int(hit.sum())} | {prec:.4f} | {float(hit[y].mean()):.4f} |")
    print()


# --------------------------------------------------------------------------- sweep
# Short prompts of the kind a chat cache sees (written for this benchmark): the evaluation
# sets hold few texts of <= SHORT_TOKENS tokens.
SHORT_PROMPTS = ["hello", "hi", "thanks", "yes", "no", "help", "what?", "why", "ok", "good morning",
                 "describe the picture.", "translate this", "summarize", "weather today", "who are you?",
                 "tell me a joke", "continue", "again", "stop", "thank you so much", "I see", "cool", "sure", "go on"]


def sweep(n_qqp: int) -> None:
    """Which nodes to leave fp32: int8 variants of the cached fp32 file against torch, per
    text length (texts of <= SHORT_TOKENS tokens are served by fp32 whatever is chosen)."""
    sets = eval_texts(n_qqp)
    texts = sorted({t for ts in sets.values() for t in ts} | set(SHORT_PROMPTS))
    entry = text_onnx.build(MODEL)
    fp32_file = entry / "fp32.onnx"
    tok = text_onnx.load_tokenizer(MODEL)
    ntok = np.array([len(tok.encode(t).ids) for t in texts])
    ref = TextEmbedder(None, backend="torch")._ensure().encode(texts)
    layers = int(json.loads((MODEL / "config.json").read_text())["num_hidden_layers"])
    ffn_out = [f"/transformer/encoder/layer.{i}/output/dense/MatMul" for i in range(layers)]
    chosen = json.loads((entry / "meta.json").read_text())["int8_fp32_nodes"]
    variants = {
        "fp32 (reference for latency)": None,
        "per-tensor weights, all int8": ([], False),
        "per-channel, all int8": ([], True),
        "per-channel, fp32: layer-0 attention + FFN out of layers 0-2": (["Attention_0"] + ffn_out[:3], True),
        "per-channel, fp32: layer 0 + every FFN out (shipped)": (chosen, True),
    }
    cos: dict[str, np.ndarray] = {}
    ms: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as work:
        encs = {}
        for name, spec in variants.items():
            f = fp32_file
            if spec is not None:
                f = Path(work) / f"v{len(encs)}.onnx"
                text_onnx.quantize(fp32_file, f, spec[0], per_channel=spec[1])
            encs[name] = text_onnx.OnnxTextEncoder.from_files(MODEL, f, threads=1)
        names = list(encs)
        cos = {k: np.zeros(len(texts)) for k in names}
        ms = {k: np.zeros(len(texts)) for k in names}
        for i, t in enumerate(texts):  # interleaved, one text per call as served
            for k in names[i % len(names):] + names[:i % len(names)]:
                t0 = time.perf_counter()
                v = encs[k].encode([t])[0]
                ms[k][i] = (time.perf_counter() - t0) * 1e3
                cos[k][i] = float(v @ ref[i])
    short = ntok <= text_onnx.SHORT_TOKENS
    print(f"## int8 variants vs torch ({len(texts)} texts: the evaluation sets + {len(SHORT_PROMPTS)} short prompts; "
          f"{int(short.sum())} of <= {text_onnx.SHORT_TOKENS} tokens)\n")
    print(f"| variant | > {text_onnx.SHORT_TOKENS} tokens: min cosine | p1 | median | texts < 0.99 | "
          f"<= {text_onnx.SHORT_TOKENS} tokens: min cosine | latency vs fp32 (median of per-text ratios) |")
    print("|---|---|---|---|---|---|---|")
    for k in names:
        c, cs = cos[k][~short], cos[k][short]
        print(f"| {k} | {c.min():.4f} | {pct(c, 1):.4f} | {np.median(c):.4f} | {int((c < 0.99).sum())} | "
              f"{cs.min():.4f} | {np.median(ms[k] / ms[names[0]]):.3f} |")
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--section", choices=["all", "latency", "first-use", "agreement", "sweep"], default="all",
                    help="sweep (the int8 variants; not part of all)")
    ap.add_argument("--quick", action="store_true", help="fewer sentences and pairs")
    ap.add_argument("--pairs", type=int, default=None, help="qqp_val pairs for agreement (default 12129, quick 1000)")
    args = ap.parse_args()
    n_pairs = args.pairs or (1000 if args.quick else 12129)
    print(f"machine: {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}\n")
    if args.section in ("all", "first-use"):
        first_use()
    if args.section in ("all", "latency"):
        latency(100 if args.quick else 400)
    if args.section in ("all", "agreement"):
        agreement(n_pairs)
    if args.section == "sweep":
        sweep(2000 if not args.quick else 500)


if __name__ == "__main__":
    main()
