"""Is the L1 text pre-screen safe, and how many misses does it settle?

The engine runs the sentence model (all-MiniLM-L6-v2) on a new text only when some stored
text of the same L1 partition has a *static* vector (:mod:`mlc_integrations.embed.static_text`)
within ``DEFAULT_L1_PRESCREEN`` of the new one's. This measures, per data set:

* **loss** (pairs): of the pairs whose MiniLM cosine clears the L1 retrieval floor
  (``DEFAULT_L1_THRESHOLD``), the share whose static cosine is below the pre-screen
  threshold — candidates L1 would have examined and the pre-screen hides;
* **stream loss** and **settled** (streams, requests in order, each partition its own
  store, exact repeats left to L0.5): the share of new requests that had an L1 candidate
  and were screened out, and the share screened out at all (no transformer on the
  caller's path).

The threshold is chosen on *training* data only (the LLM-written pairs
``evaluation/data/text_pairs/train``, the contrast suite's train split and easy-vqa's
train split): the highest value on a 0.01 grid whose training loss is at most
:data:`TRAIN_MAX_LOSS`; the SIF weight parameter ``a`` of the table is chosen with it (the
grid value that settles most random training pairs at its threshold). Evaluation sets:
qqp_val (``../shared/data/qqp_val.csv``), easy-vqa's test split, the contrast suite's test
split, the scenes question streams (``scenes``, ``scenes-edit``, test split).

    python -m evaluation.studies.text_prescreen [--out docs/results] [--quick]
"""

from __future__ import annotations

import argparse
import csv
import glob
import hashlib
import json
import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from mlc_integrations.embed import static_text
from mlc_integrations.embed.models import TextEmbedder, resolve_text_model
from mlc_integrations.embed.text_onnx import cache_root, load_tokenizer
from mlc_integrations.tiers import DEFAULT_L1_PRESCREEN, DEFAULT_L1_THRESHOLD

from ..paths import EVAL_DATA, shared_data_dir

log = logging.getLogger(__name__)

TRAIN_MAX_LOSS = 0.002  # training pairs over the floor a candidate threshold may screen out
MAX_LOSS = 0.01  # what the evaluation sets must stay under
GRID = np.round(np.arange(0.20, 0.90, 0.01), 2)
SIF_GRID = (1e-3, 1e-4, 3e-5, 1e-5)
Pair = tuple[str, str]
Stream = list[tuple[str, str]]  # (partition, text) in arrival order


# ---------------------------------------------------------------------------- data
def _llm_train_pairs() -> list[Pair]:
    rows = []
    for f in sorted(glob.glob(str(EVAL_DATA / "text_pairs" / "train" / "*.jsonl"))):
        rows += [(r["a"], r["b"]) for r in map(json.loads, open(f, encoding="utf-8"))]
    return rows


def _contrast_pairs(split: str) -> list[Pair]:
    rows = [json.loads(line) for line in open(EVAL_DATA / "contrast_suite.jsonl", encoding="utf-8")]
    return [(r["a"], r["b"]) for r in rows if r["split"] == split]


def _easyvqa_pairs(split: str, max_images: Optional[int]) -> list[Pair]:
    """Every pair of distinct questions asked about one image (one L1 partition)."""
    from ..sources.easyvqa import load_split

    out: list[Pair] = []
    for im in load_split(split)[:max_images]:
        qs = sorted({q for q, _a in im.qa})
        out += [(a, b) for i, a in enumerate(qs) for b in qs[i + 1:]]
    return out


def _qqp_rows() -> list[tuple[str, str]]:
    path = shared_data_dir() / "qqp_val.csv"
    with open(path, newline="", encoding="utf-8") as fh:
        return [(r["question1"], r["question2"]) for r in csv.DictReader(fh)]


def _item_partition(item: Any, keyer: Any) -> str:
    """The L1 partition of a workload item: its context and its picture's pixels."""
    pixels = keyer.decode(item.data_url()).digest if item.image is not None else ""
    return hashlib.sha256(json.dumps([list(item.context), pixels]).encode()).hexdigest()[:16]


def _workload_stream(name: str, quick: bool) -> Stream:
    from mlc_integrations.images import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_MAX_IMAGE_PIXELS
    from mlc_integrations.keys import Keyer

    from ..harness import workloads

    keyer = Keyer(max_image_pixels=DEFAULT_MAX_IMAGE_PIXELS, max_image_bytes=DEFAULT_MAX_IMAGE_BYTES,
                  max_prompt_chars=1 << 20)
    return [(_item_partition(it, keyer), it.text) for it in workloads.build(name, quick=quick, split="test").items]


def _stream_pairs(stream: Stream) -> list[Pair]:
    by_part: dict[str, list[str]] = {}
    for part, text in stream:
        by_part.setdefault(part, [])
        if text not in by_part[part]:
            by_part[part].append(text)
    return [(a, b) for texts in by_part.values() for i, a in enumerate(texts) for b in texts[i + 1:]]


def datasets(quick: bool = False) -> dict[str, dict[str, Any]]:
    """``{name: {"split", "pairs", "stream"}}``; ``stream`` is None where the data has none."""
    n_img = 40 if quick else None
    qqp = _qqp_rows()[: 500 if quick else None]
    vqa = _workload_stream("vqa", quick)
    scenes = _workload_stream("scenes", quick)
    edits = _workload_stream("scenes-edit", quick)
    return {
        "llm_pairs_train": {"split": "train", "pairs": _llm_train_pairs()[: 600 if quick else None], "stream": None},
        "contrast_train": {"split": "train", "pairs": _contrast_pairs("train"), "stream": None},
        "easyvqa_train": {"split": "train", "pairs": _easyvqa_pairs("train", 40 if quick else 600), "stream": None},
        "qqp_val": {"split": "eval", "pairs": qqp, "stream": [("qqp", t) for pair in qqp for t in pair]},
        "easyvqa_test": {"split": "eval", "pairs": _easyvqa_pairs("test", n_img), "stream": vqa},
        "contrast_test": {"split": "eval", "pairs": _contrast_pairs("test"), "stream": None},
        "scenes": {"split": "eval", "pairs": _stream_pairs(scenes), "stream": scenes},
        "scenes_edit": {"split": "eval", "pairs": _stream_pairs(edits), "stream": edits},
    }


# ---------------------------------------------------------------------------- vectors
def minilm_vectors(texts: Sequence[str]) -> np.ndarray:
    """The serving sentence model's vectors (memoized on disk by the texts' digest)."""
    emb = TextEmbedder.shared(None)
    digest = hashlib.sha256(("\0".join(texts) + emb.name).encode()).hexdigest()[:16]
    memo = cache_root() / "evaluation" / f"text-prescreen-minilm-{digest}.npy"
    if memo.exists():
        return np.load(memo)
    out = emb.embed(list(texts))
    memo.parent.mkdir(parents=True, exist_ok=True)
    np.save(memo, out)
    return out


class StaticVariants:
    """Static vectors of the texts for each SIF ``a`` from one distilled token table."""

    def __init__(self, texts: Sequence[str]) -> None:
        model = resolve_text_model(None)
        raw, vocab, self.how = static_text.token_vectors(model)
        self.vocab = vocab
        self.table = static_text.reduce(raw).astype(np.float16)
        tok = load_tokenizer(model)
        self.ids = [np.asarray(e.ids, dtype=np.int64) for e in tok.encode_batch(list(texts), add_special_tokens=False)]
        self.tokenizer = tok

    def vectors(self, a: float) -> np.ndarray:
        emb = static_text.StaticTextEmbedder(self.tokenizer, self.table, static_text.sif_weights(self.vocab, a), "eval")
        out = np.zeros((len(self.ids), emb.dim), dtype=np.float32)
        w = emb._weights
        tab = emb._vectors
        for i, ids in enumerate(self.ids):
            if len(ids):
                v = w[ids] @ tab[ids].astype(np.float32)
                n = float(np.linalg.norm(v))
                if n > 0:
                    out[i] = v / n
        return out


# ---------------------------------------------------------------------------- measures
def pair_cosines(pairs: Sequence[Pair], index: dict[str, int], m: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = np.array([index[x] for x, _ in pairs], dtype=np.int64)
    b = np.array([index[y] for _, y in pairs], dtype=np.int64)
    return (m[a] * m[b]).sum(1), (s[a] * s[b]).sum(1)


def pair_loss(mc: np.ndarray, sc: np.ndarray, tau: float, floor: float = DEFAULT_L1_THRESHOLD) -> tuple[int, int]:
    """(pairs over the floor, of which screened out at ``tau``)."""
    over = mc >= floor
    return int(over.sum()), int((over & (sc < tau)).sum())


def stream_outcomes(stream: Stream, index: dict[str, int], m: np.ndarray, s: np.ndarray,
                    floor: float = DEFAULT_L1_THRESHOLD) -> dict[str, np.ndarray]:
    """Per new request (exact repeats in their partition skipped): the best MiniLM and the
    best static cosine to the texts stored before it in its partition (-1: none stored)."""
    best_m, best_s, sizes = [], [], []
    stored: dict[str, list[int]] = {}
    for part, text in stream:
        have = stored.setdefault(part, [])
        i = index[text]
        if i in have:
            continue  # an exact repeat: L0.5 answers it
        if have:
            best_m.append(float((m[have] @ m[i]).max()))
            best_s.append(float((s[have] @ s[i]).max()))
        else:
            best_m.append(-1.0)
            best_s.append(-1.0)
        sizes.append(len(have))
        have.append(i)
    return {"m": np.array(best_m), "s": np.array(best_s), "stored": np.array(sizes)}


def stream_outcomes_one_partition(texts: Sequence[str], index: dict[str, int], m: np.ndarray,
                                  s: np.ndarray, block: int = 1024) -> dict[str, np.ndarray]:
    """:func:`stream_outcomes` for a stream in one partition, blockwise (qqp_val: 24k texts)."""
    order: list[int] = []
    seen: set[int] = set()
    for t in texts:
        i = index[t]
        if i not in seen:
            seen.add(i)
            order.append(i)
    idx = np.array(order)
    M, S = m[idx], s[idx]
    best_m = np.full(len(idx), -1.0)
    best_s = np.full(len(idx), -1.0)
    for start in range(0, len(idx), block):
        rows = slice(start, min(start + block, len(idx)))
        gm, gs = M[rows] @ M[: rows.stop].T, S[rows] @ S[: rows.stop].T
        n_rows = rows.stop - start
        mask = np.arange(rows.stop)[None, :] >= (start + np.arange(n_rows))[:, None]  # only earlier texts
        gm[mask], gs[mask] = -1.0, -1.0
        best_m[rows], best_s[rows] = gm.max(1), gs.max(1)
    return {"m": best_m, "s": best_s, "stored": np.arange(len(idx))}


def stream_summary(out: dict[str, np.ndarray], tau: float, floor: float = DEFAULT_L1_THRESHOLD) -> dict[str, Any]:
    cand = out["m"] >= floor
    passed = out["s"] >= tau
    n = len(cand)
    return {"new_requests": n, "with_l1_candidate": int(cand.sum()), "lost": int((cand & ~passed).sum()),
            "settled": int((~passed).sum()), "settled_share": round(float((~passed).mean()), 4) if n else None}


def choose(train: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[float, int, int]:
    """The highest grid threshold whose pooled training loss is <= TRAIN_MAX_LOSS."""
    best = (float(GRID[0]), 0, 0)
    for tau in GRID:
        over = lost = 0
        for mc, sc in train.values():
            o, l_ = pair_loss(mc, sc, float(tau))
            over, lost = over + o, lost + l_
        if over and lost / over <= TRAIN_MAX_LOSS:
            best = (float(tau), over, lost)
    return best


def measure(quick: bool = False, seed: int = 0) -> dict[str, Any]:
    t0 = time.perf_counter()
    sets = datasets(quick)
    texts = sorted({t for d in sets.values() for pair in d["pairs"] for t in pair}
                   | {t for d in sets.values() if d["stream"] for _p, t in d["stream"]})
    index = {t: i for i, t in enumerate(texts)}
    log.info("%d distinct texts; embedding with MiniLM", len(texts))
    m = minilm_vectors(texts)
    variants = StaticVariants(texts)
    rng = np.random.default_rng(seed)
    train_texts = np.array(sorted({index[t] for d in sets.values() if d["split"] == "train"
                                   for pair in d["pairs"] for t in pair}))
    ra, rb = rng.choice(train_texts, 20000), rng.choice(train_texts, 20000)
    sif_rows = []
    best: Optional[dict[str, Any]] = None
    for a in SIF_GRID:
        s = variants.vectors(a)
        train = {n: pair_cosines(d["pairs"], index, m, s) for n, d in sets.items() if d["split"] == "train"}
        tau, over, lost = choose(train)
        settles = float(((s[ra] * s[rb]).sum(1) < tau).mean())
        row = {"sif_a": a, "threshold": tau, "train_pairs_over_floor": over, "train_lost": lost,
               "random_train_pairs_settled": round(settles, 4)}
        sif_rows.append(row)
        if best is None or settles > best["random_train_pairs_settled"]:
            best = dict(row, vectors=s)
    assert best is not None
    s = best.pop("vectors")
    tau = best["threshold"]
    shipped = static_text.SIF_A == best["sif_a"] and DEFAULT_L1_PRESCREEN == tau
    per_set: dict[str, Any] = {}
    for name, d in sets.items():
        mc, sc = pair_cosines(d["pairs"], index, m, s)
        over, lost = pair_loss(mc, sc, tau)
        row: dict[str, Any] = {"split": d["split"], "pairs": len(d["pairs"]), "pairs_over_floor": over,
                               "lost": lost, "loss": round(lost / over, 5) if over else None,
                               "min_static_cos_over_floor": round(float(sc[mc >= DEFAULT_L1_THRESHOLD].min()), 4) if over else None}
        if d["stream"]:
            parts = {p for p, _t in d["stream"]}
            out = (stream_outcomes_one_partition([t for _p, t in d["stream"]], index, m, s) if len(parts) == 1
                   else stream_outcomes(d["stream"], index, m, s))
            row["stream"] = stream_summary(out, tau)
            row["partitions"] = len(parts)
            if len(parts) == 1:  # how the settled share falls as one partition fills
                row["settled_by_store_size"] = {
                    f"<{hi}": round(float((out["s"][(out["stored"] >= lo) & (out["stored"] < hi)] < tau).mean()), 4)
                    for lo, hi in ((0, 10), (10, 100), (100, 1000), (1000, 10000), (10000, 10 ** 9))
                    if ((out["stored"] >= lo) & (out["stored"] < hi)).any()}
        per_set[name] = row
    return {
        "floor": DEFAULT_L1_THRESHOLD, "threshold": tau, "sif_a": best["sif_a"], "sif_grid": sif_rows,
        "train_max_loss": TRAIN_MAX_LOSS, "shipped_matches": shipped,
        "shipped": {"DEFAULT_L1_PRESCREEN": DEFAULT_L1_PRESCREEN, "SIF_A": static_text.SIF_A,
                    "RECIPE": static_text.RECIPE, "DIM": static_text.DIM},
        "static_distilled_with": variants.how, "texts": len(texts), "quick": quick, "sets": per_set,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=True).stdout.strip()
    except Exception:
        return "unknown"


def markdown(res: dict[str, Any], command: str) -> str:
    lines = [
        "# L1 text pre-screen: hits lost and misses settled",
        "",
        f"Command: `{command}` (commit {_commit()}; {res['texts']} distinct texts; {res['seconds']} s).",
        f"Static table: recipe {res['shipped']['RECIPE']}, {res['shipped']['DIM']}-d PCA of every MiniLM vocabulary "
        f"token's vector ({res['static_distilled_with']}), SIF weights a = {res['sif_a']}.",
        f"L1 retrieval floor (MiniLM cosine): {res['floor']}. Pre-screen threshold chosen on the training sets: "
        f"**{res['threshold']}** (highest on a 0.01 grid with training loss <= {res['train_max_loss']:.1%}). "
        f"Shipped defaults (DEFAULT_L1_PRESCREEN, SIF_A) {'match' if res['shipped_matches'] else 'DO NOT match'} "
        f"this choice: {res['shipped']}.",
        "",
        "## Choice of the SIF weight parameter (training sets only)",
        "",
        "| SIF a | threshold | training pairs over floor | lost | random training pairs settled |",
        "|---|---|---|---|---|",
    ]
    for r in res["sif_grid"]:
        lines.append(f"| {r['sif_a']:g} | {r['threshold']} | {r['train_pairs_over_floor']} | {r['train_lost']} | "
                     f"{r['random_train_pairs_settled']:.1%} |")
    lines += ["", "## Per data set at the chosen threshold", "",
              "Loss: pairs whose MiniLM cosine clears the floor but whose static cosine is below the threshold "
              "(L1 candidates the pre-screen hides). Stream: requests in order, one store per L1 partition, exact "
              "repeats left to L0.5; *settled* = new requests screened out (no transformer on the caller's path); "
              "*stream lost* = screened out although an earlier text in the partition cleared the floor.", "",
              "| data set | split | pairs | over floor | lost | loss | min static cos over floor | stream requests | "
              "with L1 candidate | stream lost | settled |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in res["sets"].items():
        st = r.get("stream") or {}
        loss = "-" if r["loss"] is None else f"{r['loss']:.2%}"
        lines.append(f"| {name} | {r['split']} | {r['pairs']} | {r['pairs_over_floor']} | {r['lost']} | {loss} | "
                     f"{r['min_static_cos_over_floor']} | {st.get('new_requests', '-')} | "
                     f"{st.get('with_l1_candidate', '-')} | {st.get('lost', '-')} | "
                     f"{'-' if not st else format(st['settled_share'], '.1%')} |")
    one = {n: r["settled_by_store_size"] for n, r in res["sets"].items() if "settled_by_store_size" in r}
    if one:
        lines += ["", "## One partition filling up (qqp_val as one stream)", "",
                  "Share of new requests settled by how many texts the partition already held:", ""]
        for n, by in one.items():
            lines.append(f"- {n}: " + ", ".join(f"{k} stored: {v:.1%}" for k, v in by.items()))
    return "\n".join(lines) + "\n"


def main(argv: Optional[Iterable[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write text_prescreen.json/.md into this directory")
    ap.add_argument("--quick", action="store_true", help="small slices (a smoke run, not the figures)")
    args = ap.parse_args(list(argv) if argv is not None else None)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    res = measure(quick=args.quick)
    command = "python -m evaluation.studies.text_prescreen" + (" --quick" if args.quick else "") + (
        f" --out {args.out}" if args.out else "")
    md = markdown(res, command)
    print(md)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "text_prescreen.json").write_text(json.dumps(res, indent=2))
        (out / "text_prescreen.md").write_text(md)


if __name__ == "__main__":
    main()
