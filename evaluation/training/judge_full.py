"""Train the L1 judge by full fine-tuning: all-MiniLM-L6-v2 as a cross-encoder.

    nice -n 10 python -m evaluation.training.judge_full train --name judge-ft1 --budget-minutes 58 \\
        > ~/.cache/mlc_integrations/judge/judge-ft1.log 2>&1 &
    python -m evaluation.training.judge_full train --name judge-ft1 --snapshot MANIFEST.json   # same data again

Recipe (also written to ``manifest.json``):

- input ``[CLS] stored [SEP] new [SEP]`` (at most ``--max-tokens`` 64, dynamic padding in
  batches of similar length), mean-pooled last states -> dropout -> one linear unit;
- every transformer layer trained (the word/position embeddings stay the installed base
  model's, so a shipped judge needs only the six layers and the head);
- both orders of every pair: each epoch reads every pair once in an order drawn per
  epoch and per pair, so that the judge does not learn which side was written first;
- the natural pairs (``evaluation/data/text_pairs/train``, snapshot by line counts, split
  per writer by whole held-out domains, :mod:`evaluation.sources.judge_data`) are mostly
  hard negatives already (another entity, number, negation ... on the same surface); plus
  the contrast suite's train split, scene-question pairs (train templates), easy-vqa train
  question pairs (soft labels), a qqp_val train sample and GPTCache paraphrases;
- AdamW, linear warm-up then linear decay over a step count sized from the measured
  seconds per step so that training ends within ``--budget-minutes``; validation (the
  held-out domains) after every epoch; the checkpoint kept is the one with the most
  validation rewordings reused at <= 1 % answer-changing reused (ties: higher AUC).

Writes ``~/.cache/mlc_integrations/judge/<name>/``: ``best.pt`` (trainable state),
``val_scores.npy`` (validation scores of the kept checkpoint) and ``manifest.json``.
Packaging for the library: ``python -m evaluation.training.judge_pack``.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from ..sources.judge_data import (Pairs, _sample, easyvqa_soft_pairs, gptcache_pairs, natural_split, qqp_pairs,
                                  scene_pairs, snapshot_counts, suite)
from .judge_train import JUDGE_CACHE, batch_tensors, git_commit
from .verifier.data import DEFAULT_DATA_DIR, log_progress


def build_model(model_dir: str, dropout: float) -> Any:
    import torch
    from transformers import AutoModel

    base = AutoModel.from_pretrained(model_dir, attn_implementation="eager")
    for p in base.embeddings.parameters():
        p.requires_grad_(False)

    class CrossEncoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = base
            self.drop = torch.nn.Dropout(dropout)
            self.head = torch.nn.Linear(base.config.hidden_size, 1)

        def forward(self, ids: Any, mask: Any, types: Any) -> Any:
            h = self.bert(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
            m = mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return self.head(self.drop(pooled)).squeeze(-1)

    return CrossEncoder()


def trainable_state(model: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if not k.startswith("bert.embeddings.")}


def score(model: Any, tok: Any, a: Sequence[str], b: Sequence[str], batch: int = 128) -> np.ndarray:
    """P(same answer) of (a stored, b new) pairs, batched by length."""
    import torch

    encs = tok.encode_batch(list(zip(a, b)))
    order = np.argsort([len(e.ids) for e in encs], kind="stable")
    out = np.zeros(len(encs))
    model.eval()
    with torch.no_grad():
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            logit = model(*batch_tensors(torch, [encs[i] for i in idx]))
            out[idx] = torch.sigmoid(logit).numpy()
    return out


def reuse_at(y: np.ndarray, s: np.ndarray, max_wrong: float) -> tuple[float, float]:
    """(share of rewordings reused, threshold) at the lowest threshold whose answer-changing
    reuse is <= ``max_wrong``."""
    pos, neg = s[y], np.sort(s[~y])[::-1]
    k = int(math.floor(max_wrong * len(neg)))  # negatives allowed above the threshold
    t = float(neg[k]) + 1e-9 if k < len(neg) else 0.0
    return float((pos >= t).mean()), t


def auc(y: np.ndarray, s: np.ndarray) -> float:
    r = np.argsort(np.argsort(s)) + 1.0
    n1, n0 = int(y.sum()), int((~y).sum())
    return float((r[y].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def training_mix(counts: dict[str, int], data_dir: Path, seed: int, n_qqp: int, n_scenes: int, n_easyvqa: int,
                 n_gptcache: int) -> tuple[Pairs, Pairs, dict[str, Any]]:
    nat_tr, nat_va, manifest = natural_split(counts)
    rng = random.Random(seed)
    parts = {"natural": nat_tr, "suite": suite("train"), "scenes": _sample(scene_pairs(), n_scenes, rng),
             "easyvqa": _sample(easyvqa_soft_pairs(), n_easyvqa, rng),
             "qqp": _sample(qqp_pairs(data_dir), n_qqp, rng) if (data_dir / "qqp_val.csv").exists() else Pairs(),
             "gptcache": _sample(gptcache_pairs(), n_gptcache, rng)}
    train = Pairs()
    for p in parts.values():
        train.extend(p)
    manifest["train_sources"] = {k: len(v) for k, v in parts.items()}
    return train, nat_va, manifest


def cmd_train(args: argparse.Namespace) -> None:
    import torch
    from mlc_integrations.embed.models import resolve_text_model
    from mlc_integrations.embed.text_onnx import load_tokenizer

    t_start = time.perf_counter()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    out_dir = JUDGE_CACHE / args.name
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = (json.loads(Path(args.snapshot).read_text())["snapshot_lines"] if args.snapshot else snapshot_counts())
    train, val, manifest = training_mix(counts, Path(args.data_dir), args.seed, args.qqp, args.scenes, args.easyvqa,
                                        args.gptcache)
    log_progress(f"snapshot {counts}; training pairs {len(train)} {manifest['train_sources']}; validation {len(val)}")
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1))  # the snapshot, before any result

    model_dir = str(resolve_text_model(None))
    tok = load_tokenizer(Path(model_dir))
    tok.enable_truncation(args.max_tokens, strategy="longest_first")
    tok.no_padding()
    model = build_model(model_dir, args.dropout)
    if args.init:  # continue from an earlier run's kept checkpoint (same recipe, more steps)
        missing, unexpected = model.load_state_dict(torch.load(args.init, map_location="cpu"), strict=False)
        assert not unexpected and all(k.startswith("bert.embeddings.") for k in missing), (missing, unexpected)
        log_progress(f"initialised from {args.init}")
    fwd = tok.encode_batch(list(zip(train.a, train.b)))
    rev = tok.encode_batch(list(zip(train.b, train.a)))
    y, w = train.arrays()
    n = len(train)
    va_y = np.asarray(val.y) >= 0.5

    enc_params = [p for nm, p in model.named_parameters() if p.requires_grad and nm.startswith("bert.")]
    opt = torch.optim.AdamW([{"params": enc_params, "lr": args.lr},
                             {"params": list(model.head.parameters()), "lr": args.head_lr}], weight_decay=0.01)
    per_epoch = math.ceil(n / args.batch_size)
    plan = {"total": args.epochs * per_epoch}  # resized after the measured warm-up steps
    warm = args.warmup_steps

    def lr_factor(s: int) -> float:
        return min(1.0, (s + 1) / warm) * max(0.02, (plan["total"] - s) / max(1, plan["total"] - warm))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    budget = args.budget_minutes * 60.0
    log_lines: list[str] = []
    evals: list[dict[str, Any]] = []
    best: Optional[dict[str, Any]] = None
    best_key: tuple[float, float] = (-1.0, -1.0)

    def say(msg: str) -> None:
        log_progress(msg)
        log_lines.append(msg)

    def evaluate(tag: str, step: int) -> None:
        nonlocal best, best_key
        t = time.perf_counter()
        s = score(model, tok, val.a, val.b)
        r1, t1 = reuse_at(va_y, s, 0.01)
        r2, _ = reuse_at(va_y, s, 0.02)
        a = auc(va_y, s)
        e = {"tag": tag, "step": step, "reuse_at_1pct": r1, "threshold_1pct": t1, "reuse_at_2pct": r2, "auc": a,
             "seconds": time.perf_counter() - t}
        evals.append(e)
        say(f"validation {tag} step {step}: rewordings reused {r1:.3f} at <=1% wrong (t={t1:.3f}), {r2:.3f} at <=2%, "
            f"AUC {a:.4f} ({e['seconds']:.0f}s)")
        if (r1, a) > best_key:
            best_key, best = (r1, a), {"state": trainable_state(model), "scores": s, "eval": e}
        model.train()

    step = 0
    epoch = 0
    t_train = time.perf_counter()
    stale = 0
    t_measure, step_measure = t_train, 0
    pace: Optional[float] = None
    done = False
    while not done:
        epoch += 1
        model.train()
        flip = rng.integers(0, 2, n).astype(bool)  # one order per pair per epoch
        encs = [rev[i] if flip[i] else fwd[i] for i in range(n)]
        lens = np.asarray([len(e.ids) for e in encs])
        perm = rng.permutation(n)
        batches = []
        for s in range(0, n, args.batch_size * 50):  # similar lengths together, batches shuffled
            chunk = perm[s:s + args.batch_size * 50]
            chunk = chunk[np.argsort(lens[chunk], kind="stable")]
            batches += [chunk[k:k + args.batch_size] for k in range(0, len(chunk), args.batch_size)]
        rng.shuffle(batches)  # type: ignore[arg-type]
        t1 = time.perf_counter()
        run = 0.0
        for bi, idx in enumerate(batches):
            logit = model(*batch_tensors(torch, [encs[i] for i in idx]))
            loss = (torch.nn.functional.binary_cross_entropy_with_logits(
                logit, torch.from_numpy(y[idx].astype(np.float32)), reduction="none")
                * torch.from_numpy(w[idx].astype(np.float32))).mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(enc_params, 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            run = 0.98 * run + 0.02 * float(loss.detach()) if bi else float(loss.detach())
            if step == 10:  # the first steps are slower (allocation, caches): not measured
                t_measure, step_measure = time.perf_counter(), step
            if step >= args.measure_steps and step % 25 == 0:
                # the machine is shared: the plan is re-sized from the recent steps' pace, so that
                # training ends within the budget whatever else runs (the LR decays to the new end)
                sps = (time.perf_counter() - t_measure) / (step - step_measure)
                t_measure, step_measure = time.perf_counter(), step
                pace = sps if pace is None else 0.7 * pace + 0.3 * sps
                # evaluation: forward only over the validation pairs, ~1/3 of a training step per pair
                eval_s = len(val) / args.batch_size * pace / 3.0
                left = budget - (time.perf_counter() - t_start)
                evals_left = 1 + max(0, int((step + left / pace) // per_epoch) - int(step // per_epoch))
                total = int((left - evals_left * eval_s) / pace) + step
                plan["total"] = max(step + 1, min(total, args.max_epochs * per_epoch))
                if step % 100 == 0 or step == args.measure_steps:
                    say(f"pace {pace:.3f} s/step (batch {args.batch_size}); {per_epoch} steps/epoch; "
                        f"plan {plan['total']} steps = {plan['total'] / per_epoch:.2f} epochs in the budget")
            if bi % 50 == 0:
                say(f"epoch {epoch} batch {bi}/{len(batches)} step {step}/{plan['total']} loss {run:.4f} "
                    f"{(time.perf_counter() - t1) / (bi + 1):.2f}s/batch")
            if step >= plan["total"]:
                done = True
                break
        say(f"epoch {epoch}: {time.perf_counter() - t1:.0f}s, {bi + 1} steps, loss {run:.4f}")
        before = best_key
        evaluate(f"epoch {epoch}" + ("" if bi + 1 == len(batches) else f" (partial, {bi + 1} steps)"), step)
        stale = stale + 1 if best_key <= before else 0
        if stale >= args.patience:
            say(f"early stop: validation did not improve for {stale} evaluation(s)")
            done = True
    assert best is not None
    torch.save(best["state"], out_dir / "best.pt")
    np.save(out_dir / "val_scores.npy", best["scores"])
    manifest.update({
        "recipe": {"model": "all-MiniLM-L6-v2 cross-encoder, [CLS] stored [SEP] new [SEP], mean pool -> linear",
                   "trained": "all 6 transformer layers + head (embeddings frozen: the installed base model's)",
                   "orders": "both: one order per pair drawn per epoch",
                   "hard_negatives": "the natural answer-changing near-misses (same surface, another entity/number/...)",
                   "selection": "validation rewordings reused at <=1% answer-changing reused, then AUC"},
        "config": {k: v for k, v in vars(args).items() if k != "func"}, "log": log_lines, "evals": evals,
        "kept": best["eval"], "steps": step, "epochs_run": epoch, "commit": git_commit(),
        "train_seconds": time.perf_counter() - t_train, "command": "python -m evaluation.training.judge_full train "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("func", "cmd"))})
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1))
    say(f"kept {best['eval']['tag']}: wrote {out_dir / 'best.pt'}")


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m evaluation.training.judge_full", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--name", default="judge-ft")
    t.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    t.add_argument("--snapshot", default="", help="a manifest.json whose snapshot_lines to reuse")
    t.add_argument("--init", default="", help="a best.pt to continue from")
    t.add_argument("--epochs", type=int, default=3, help="the plan before the step time is measured")
    t.add_argument("--max-epochs", type=int, default=6)
    t.add_argument("--budget-minutes", type=float, default=58.0)
    t.add_argument("--measure-steps", type=int, default=60)
    t.add_argument("--warmup-steps", type=int, default=100)
    t.add_argument("--patience", type=int, default=1)
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--lr", type=float, default=4e-5)
    t.add_argument("--head-lr", type=float, default=1e-3)
    t.add_argument("--dropout", type=float, default=0.1)
    t.add_argument("--max-tokens", type=int, default=64)
    t.add_argument("--qqp", type=int, default=2000)
    t.add_argument("--scenes", type=int, default=1200)
    t.add_argument("--easyvqa", type=int, default=800)
    t.add_argument("--gptcache", type=int, default=300)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--seed", type=int, default=32)
    t.set_defaults(func=cmd_train)
    args = ap.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
