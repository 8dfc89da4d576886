"""Package a fully fine-tuned judge (:mod:`.judge_full`) as the file the library reads.

    python -m evaluation.training.judge_pack pack --name judge-ft1 [--write]   # --write: assets/judge.npz

The file holds what differs from the installed all-MiniLM-L6-v2: every transformer
layer's weight difference in int8 with one float16 scale per output row, the biases' and
norms' differences in float16, the linear head, and the calibration table built on the
validation split (held-out domains) *with the packed weights*: for each tolerated share
of wrong reuse, the lowest threshold whose validation answer-changing reuse stays at or
under it, and the share of validation rewordings it reuses. Also a few probe pairs from
the validation split (rewordings and near-misses, each at least one logit from the
threshold) for the int8 file's self-check at export. Printed: file size, how far the
packed judge's validation scores are from the checkpoint's and how many decisions moved.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from mlc_integrations.verify.text.judge import JUDGE_FORMAT, JUDGE_FORMAT_VERSION, merged_state, read_judge
from ..sources.judge_data import natural_split
from .judge_full import reuse_at
from .judge_train import JUDGE_CACHE, git_commit
from .verifier.data import log_progress

ASSET = Path(__file__).resolve().parents[2] / "mlc_integrations" / "assets" / "judge.npz"
CALIBRATION_LEVELS = (0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2)
DEFAULT_MAX_WRONG = 0.01


def pack_arrays(state: dict[str, Any], base: dict[str, Any], levels: int = 127
                ) -> tuple[dict[str, np.ndarray], list[str]]:
    """Row-scaled integer differences of 2-D weights in [-levels, levels] (int8 storage;
    fewer levels compress further), float16 differences of the rest."""
    arrays: dict[str, np.ndarray] = {}
    tuned = []
    for key, v in state.items():
        if not key.startswith("bert.encoder."):
            continue  # the pooler is unused (mean pooling); the embeddings were frozen
        name = key[len("bert."):]
        d = (v.double() - base[name].double()).numpy()
        tuned.append(name)
        if d.ndim == 2:
            s = np.abs(d).max(1) / float(levels)
            s[s == 0] = 1.0
            s = s.astype(np.float16).astype(np.float64)
            arrays[f"q:{name}"] = np.clip(np.round(d / s[:, None]), -levels, levels).astype(np.int8)
            arrays[f"s:{name}"] = s.astype(np.float16)
        else:
            arrays[f"d:{name}"] = d.astype(np.float16)
    arrays["head_w"] = state["head.weight"].numpy().reshape(-1).astype(np.float32)
    arrays["head_b"] = state["head.bias"].numpy().reshape(-1).astype(np.float32)
    return arrays, tuned


def score_state(model_dir: str, bert_state: dict[str, Any], head_w: np.ndarray, head_b: float, a: Sequence[str],
                b: Sequence[str], max_tokens: int) -> np.ndarray:
    import torch
    from transformers import AutoModel

    from mlc_integrations.embed.text_onnx import load_tokenizer
    from .judge_train import batch_tensors

    m = AutoModel.from_pretrained(model_dir, attn_implementation="eager")
    m.load_state_dict(bert_state)
    m.eval()
    tok = load_tokenizer(Path(model_dir))
    tok.enable_truncation(max_tokens, strategy="longest_first")
    tok.no_padding()
    encs = tok.encode_batch(list(zip(a, b)))
    order = np.argsort([len(e.ids) for e in encs], kind="stable")
    out = np.zeros(len(encs))
    with torch.no_grad():
        for s in range(0, len(order), 128):
            idx = order[s:s + 128]
            ids, mask, types = batch_tensors(torch, [encs[i] for i in idx])
            h = m(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
            mm = mask.unsqueeze(-1).to(h.dtype)
            pooled = ((h * mm).sum(1) / mm.sum(1).clamp(min=1e-9)).numpy().astype(np.float64)
            out[idx] = 1.0 / (1.0 + np.exp(-(pooled @ head_w.astype(np.float64) + head_b)))
    return out


def calibration(y: np.ndarray, s: np.ndarray) -> list[dict[str, float]]:
    rows = []
    for lvl in CALIBRATION_LEVELS:
        reuse, t = reuse_at(y, s, lvl)
        wrong = float((s[~y] >= t).mean())
        rows.append({"max_wrong_reuse": lvl, "threshold": round(t, 6), "validation_rewordings_reused": round(reuse, 4),
                     "validation_wrong_reuse": round(wrong, 4)})
    return rows


def probes(val: Any, s: np.ndarray, t: float, n: int = 16, seed: int = 32) -> list[list[str]]:
    """``n`` accepted and ``n`` refused validation pairs, each at least one logit from ``t``."""
    rng = np.random.default_rng(seed)
    logit = np.log(np.clip(s, 1e-9, 1 - 1e-9) / np.clip(1 - s, 1e-9, 1))
    lt = math.log(t / (1 - t)) if 0 < t < 1 else 0.0
    out = []
    for side in (logit >= lt + 1.0, logit <= lt - 1.0):
        idx = np.flatnonzero(side)
        for i in rng.choice(idx, size=min(n, len(idx)), replace=False):
            out.append([val.a[int(i)], val.b[int(i)]])
    return out


def cmd_pack(args: argparse.Namespace) -> None:
    import torch
    from transformers import AutoModel

    from mlc_integrations.embed.models import resolve_text_model

    d = JUDGE_CACHE / args.name
    man = json.loads((d / "manifest.json").read_text())
    state = torch.load(d / "best.pt", map_location="cpu")
    model_dir = str(resolve_text_model(None))
    base = AutoModel.from_pretrained(model_dir, attn_implementation="eager").state_dict()
    arrays, tuned = pack_arrays(state, base, args.levels)
    max_tokens = int(man["config"]["max_tokens"])
    meta = {"format": JUDGE_FORMAT, "version": JUDGE_FORMAT_VERSION, "kind": "full", "name": args.name,
            "base_model": "all-MiniLM-L6-v2", "max_tokens": max_tokens, "tuned": tuned,
            "trained_at_commit": man.get("commit", ""), "packed_at_commit": git_commit(),
            "recipe": man.get("recipe"), "snapshot_lines": man["snapshot_lines"], "kept": man.get("kept"),
            "serving": args.serving, "delta_levels": args.levels}
    judge = {"meta": meta, **{k: (v if v.dtype == np.int8 else v.astype(np.float32)) for k, v in arrays.items()}}
    merged = merged_state(base, judge)
    _tr, val, _m = natural_split(man["snapshot_lines"])
    y = np.asarray(val.y) >= 0.5
    ref = np.load(d / "val_scores.npy")
    # --rescore: calibrate on the packed weights' validation scores (a validation pass: ~1 min
    # on a quiet 2-core machine, ten under load); else on the checkpoint's, and the packed,
    # served file's validation decisions are measured by evaluation.studies.judge_full_eval
    s = (score_state(model_dir, merged, arrays["head_w"], float(arrays["head_b"][0]), val.a, val.b, max_tokens)
         if args.rescore else ref)
    cal = calibration(y, s)
    t = [r for r in cal if r["max_wrong_reuse"] == DEFAULT_MAX_WRONG][0]["threshold"]
    moved = int(((ref >= t) != (s >= t)).sum())
    meta.update({"calibration": cal, "threshold": t, "default_max_wrong_reuse": DEFAULT_MAX_WRONG,
                 "calibration_scores": "packed weights" if args.rescore else "checkpoint (fp32, before packing)",
                 "calibration_set": f"natural validation split: {int(y.sum())} rewordings, {int((~y).sum())} "
                                    "answer-changing pairs (whole domains held out per writer)",
                 "probes": probes(val, s, t),
                 "packing": ({"max_abs_score_diff_vs_checkpoint": float(np.abs(ref - s).max()),
                              "validation_decisions_moved_at_threshold": moved} if args.rescore else
                             {"not_rescored": "served decisions: python -m evaluation.studies.judge_full_eval report"})})
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    out = Path(args.out) if args.out else d / "judge.npz"
    np.savez_compressed(out, **arrays)
    if args.write:
        np.savez_compressed(ASSET, **arrays)
    print(json.dumps({"file": str(out), "kb": round(out.stat().st_size / 1024), "levels": args.levels,
                      "threshold_at_1pct": t,
                      "packing": meta["packing"], "calibration": cal}, indent=1))
    read_judge(out)  # it reads back
    log_progress(f"packed {out}" + (f" and {ASSET}" if args.write else ""))


def cmd_calibrate(args: argparse.Namespace) -> None:
    """Calibration table of any judge file (e.g. the earlier ``lora`` one) on the validation
    split of a snapshot, each pair scored alone by the served backend; written into the file."""
    from mlc_integrations.verify.text.judge import PairJudge
    from .verifier.data import DEFAULT_CACHE_DIR, EmbeddingCache

    snap = json.loads(Path(args.snapshot).read_text())["snapshot_lines"]
    _tr, val, _m = natural_split(snap)
    y = np.asarray(val.y) >= 0.5
    cos = EmbeddingCache(None, DEFAULT_CACHE_DIR).cosines(val.a, val.b)
    j = PairJudge(args.judge)
    s = j.probabilities(list(zip(val.a, val.b)), cos)
    cal = calibration(y, s)
    t = [r for r in cal if r["max_wrong_reuse"] == DEFAULT_MAX_WRONG][0]["threshold"]
    with np.load(args.judge, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(bytes(arrays["meta"]).decode("utf-8"))
    meta.update({"calibration": cal, "threshold": t, "default_max_wrong_reuse": DEFAULT_MAX_WRONG,
                 "calibration_scores": f"this file, backend {j.backend}, each pair alone",
                 "calibration_set": f"natural validation split of snapshot {snap}: {int(y.sum())} rewordings, "
                                    f"{int((~y).sum())} answer-changing pairs (whole domains held out per writer)",
                 "snapshot_lines": snap})
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    np.savez_compressed(args.out or args.judge, **arrays)
    print(json.dumps({"threshold_at_1pct": t, "calibration": cal}, indent=1))


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m evaluation.training.judge_pack", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--name", required=True)
    p.add_argument("--out", default="")
    p.add_argument("--serving", default="onnx-int8", choices=("onnx-int8", "onnx-fp32"),
                   help="what backend='auto' serves (decided by benchmarks/judge_latency.py)")
    p.add_argument("--levels", type=int, default=127,
                   help="integer levels of the weight differences: 127 (8 bits), 7 (4 bits) ...")
    p.add_argument("--rescore", action="store_true", help="calibrate on the packed weights' scores")
    p.add_argument("--write", action="store_true")
    p.set_defaults(func=cmd_pack)
    c = sub.add_parser("calibrate")
    c.add_argument("--judge", required=True)
    c.add_argument("--snapshot", required=True, help="a manifest.json with snapshot_lines")
    c.add_argument("--out", default="", help="default: rewrite --judge")
    c.set_defaults(func=cmd_calibrate)
    args = ap.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
