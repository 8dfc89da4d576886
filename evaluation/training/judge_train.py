"""Train the L1 judge (issue 25): a LoRA cross-encoder on all-MiniLM-L6-v2 whose head
also reads the verifier's signals and edit features.

    python -m evaluation.training.judge_train train --name judge-r8 [--rank 8 --epochs 2 ...]
    python -m evaluation.training.judge_train train --name judge-r8 --write   # also assets/judge.npz

Data and split: :mod:`evaluation.sources.judge_data` (the natural pairs are read from a snapshot
of the writers' files: ``--snapshot FILE`` reuses a recorded one). Writes
``~/.cache/mlc_integrations/judge/<name>/judge.npz`` (the file the library reads) and
``manifest.json`` (data snapshot, split, configuration, training log). Evaluation:
``python -m evaluation.studies.judge_eval``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from mlc_integrations.verify.text.judge import JUDGE_FORMAT, JUDGE_FORMAT_VERSION, lora_targets
from ..sources.judge_data import Pairs, snapshot_counts, training_set
from .verifier.data import DEFAULT_CACHE_DIR, DEFAULT_DATA_DIR, EmbeddingCache, log_progress

JUDGE_CACHE = DEFAULT_CACHE_DIR / "judge"


def cached_features(a: Sequence[str], b: Sequence[str], cos: np.ndarray) -> np.ndarray:
    """:func:`features`, kept on disk (evaluation cache) by a digest of the rows."""
    import hashlib

    h = hashlib.sha256()
    for x, z, c in zip(a, b, cos):
        h.update(f"{x}\0{z}\0{c:.6f}\n".encode())
    path = JUDGE_CACHE / f"features-{h.hexdigest()[:16]}.npy"
    if path.exists():
        return np.load(path)
    x = features(a, b, cos)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, x)
    return x


def features(a: Sequence[str], b: Sequence[str], cos: np.ndarray) -> np.ndarray:
    """The head's feature rows of (stored a -> new b), as the library computes them."""
    from mlc_integrations.verify import Verifier, text_features

    w = Verifier.default().weights
    return np.stack([text_features(stored=sa, new=nb, cosine=float(c), weights=w) for sa, nb, c in zip(a, b, cos)])




def build_model(model_dir: str, rank: int, alpha: float, n_feats: int, hidden: int, dropout: float,
                lora_layers: int) -> Any:
    """MiniLM with LoRA adapters on the top ``lora_layers`` layers (the lower ones stay the
    base model's: their outputs are computed once, :func:`frozen_states`) and the head."""
    import torch
    from transformers import AutoModel

    base = AutoModel.from_pretrained(model_dir, attn_implementation="eager")
    for p in base.parameters():
        p.requires_grad_(False)

    class Lora(torch.nn.Module):
        def __init__(self, lin: torch.nn.Linear) -> None:
            super().__init__()
            self.lin = lin
            self.A = torch.nn.Parameter(torch.randn(rank, lin.in_features) / math.sqrt(lin.in_features))
            self.B = torch.nn.Parameter(torch.zeros(lin.out_features, rank))
            self.scale = alpha / rank
            self.drop = torch.nn.Dropout(dropout)

        def forward(self, x: Any) -> Any:
            return self.lin(x) + (self.drop(x) @ self.A.T @ self.B.T) * self.scale

    n_layers = base.config.num_hidden_layers
    first = n_layers - lora_layers
    targets = [t for t in lora_targets(n_layers) if int(t.split(".")[2]) >= first]
    for name in targets:
        parent_name, attr = name.rsplit(".", 1)
        parent = base.get_submodule(parent_name)
        setattr(parent, attr, Lora(getattr(parent, attr)))

    class Judge(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = base
            d = base.config.hidden_size
            self.fc1 = torch.nn.Linear(d + n_feats, hidden)
            self.fc2 = torch.nn.Linear(hidden, 1)
            self.targets = targets
            self.first = first

        def forward(self, h: Any, mask: Any, z: Any) -> Any:
            """``h``: the input of layer ``first`` (padded), ``mask`` its attention mask."""
            add = (1.0 - mask[:, None, None, :].to(h.dtype)) * torch.finfo(h.dtype).min
            for layer in self.bert.encoder.layer[self.first:]:
                r = layer(h, attention_mask=add)
                h = r[0] if isinstance(r, tuple) else r
            m = mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            x = torch.cat([pooled, z], dim=1)
            return self.fc2(torch.nn.functional.gelu(self.fc1(x), approximate="tanh")).squeeze(-1)

    return Judge()


def frozen_states(model: Any, encs: Sequence[Any], batch: int = 128) -> list[Any]:
    """Per row, the [tokens, 384] input of the first adapted layer (float16 to save memory)."""
    import torch

    out: list[Any] = [None] * len(encs)
    order = np.argsort([len(e.ids) for e in encs], kind="stable")
    with torch.no_grad():
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            ids, mask, types = batch_tensors(torch, [encs[i] for i in idx])
            if model.first == 0:  # adapters everywhere: only the embeddings are frozen
                h = model.bert.embeddings(input_ids=ids, token_type_ids=types)
            else:
                h = model.bert(input_ids=ids, attention_mask=mask, token_type_ids=types,
                               output_hidden_states=True).hidden_states[model.first]
            for j, i in enumerate(idx):
                out[i] = h[j, :len(encs[i].ids)].to(torch.float16).clone()
            if s % (batch * 40) == 0:
                log_progress(f"  frozen layers: {s}/{len(encs)}")
    return out


def pad_states(torch: Any, hs: Sequence[Any]) -> tuple[Any, Any]:
    t = max(h.shape[0] for h in hs)
    h = torch.zeros(len(hs), t, hs[0].shape[1])
    m = torch.zeros(len(hs), t, dtype=torch.long)
    for j, x in enumerate(hs):
        h[j, :x.shape[0]] = x.float()
        m[j, :x.shape[0]] = 1
    return h, m


def encode(tok: Any, a: Sequence[str], b: Sequence[str]) -> list[Any]:
    return tok.encode_batch(list(zip(a, b)))


def batch_tensors(torch: Any, encs: Sequence[Any]) -> tuple[Any, Any, Any]:
    width = max(len(e.ids) for e in encs)
    ids = np.zeros((len(encs), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for i, e in enumerate(encs):
        n = len(e.ids)
        ids[i, :n], mask[i, :n], types[i, :n] = e.ids, e.attention_mask, e.type_ids
    return torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(types)


def export_npz(model: Any, meta: dict[str, Any], mean: np.ndarray, scale: np.ndarray, path: Path) -> None:
    """The shipped file: adapters in float16, head and standardization in float32."""
    arrays: dict[str, np.ndarray] = {}
    for name in model.targets:
        mod = model.bert.get_submodule(name)
        arrays[f"lora_A:{name}"] = mod.A.detach().numpy().astype(np.float16)
        arrays[f"lora_B:{name}"] = mod.B.detach().numpy().astype(np.float16)
    arrays["head_w1"] = model.fc1.weight.detach().numpy().T.astype(np.float32)
    arrays["head_b1"] = model.fc1.bias.detach().numpy().astype(np.float32)
    arrays["head_w2"] = model.fc2.weight.detach().numpy().T.reshape(-1).astype(np.float32)
    arrays["head_b2"] = model.fc2.bias.detach().numpy().astype(np.float32)
    arrays["feat_mean"] = mean.astype(np.float32)
    arrays["feat_scale"] = scale.astype(np.float32)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)


def round_adapters(model: Any) -> None:
    """Adapters as shipped (float16), so that what is evaluated is what ships."""
    import torch

    with torch.no_grad():
        for name in model.targets:
            mod = model.bert.get_submodule(name)
            mod.A.copy_(mod.A.half().float())
            mod.B.copy_(mod.B.half().float())


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        return ""


def cmd_train(args: argparse.Namespace) -> None:
    import torch
    from mlc_integrations.embed.models import resolve_text_model
    from mlc_integrations.embed.text_onnx import load_tokenizer

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    out_dir = JUDGE_CACHE / args.name
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.snapshot:
        counts = json.loads(Path(args.snapshot).read_text())["snapshot_lines"]
    else:
        counts = snapshot_counts()
    train, val, manifest = training_set(Path(args.data_dir), counts)
    log_progress(f"training pairs {len(train)} {manifest['train_sources']}; validation {len(val)}")
    emb = EmbeddingCache(None, Path(args.cache_dir))
    t0 = time.perf_counter()
    # both orders: the judge reads (stored, new), and either side may come first in a pair;
    # each epoch reads every pair once, in one of its two orders (drawn per epoch)
    a2, b2 = train.a + train.b, train.b + train.a
    y, w = train.arrays()
    y2, w2 = np.r_[y, y], np.r_[w, w]
    cos2 = emb.cosines(a2, b2)
    x2 = cached_features(a2, b2, cos2)
    log_progress(f"features of {len(a2)} rows in {time.perf_counter() - t0:.0f}s")
    mean = x2.mean(0)
    scale = x2.std(0)
    scale[scale < 1e-6] = 1.0
    z2 = np.clip((x2 - mean) / scale, -6, 6)

    model_dir = resolve_text_model(None)
    tok = load_tokenizer(model_dir)
    tok.enable_truncation(args.max_tokens, strategy="longest_first")
    model = build_model(model_dir, args.rank, args.alpha, x2.shape[1], args.hidden, args.dropout, args.lora_layers)
    encs = encode(tok, a2, b2)
    lens = np.asarray([len(e.ids) for e in encs])
    t0 = time.perf_counter()
    states = frozen_states(model, encs)
    log_progress(f"frozen layers 0..{model.first - 1} of {len(encs)} rows in {time.perf_counter() - t0:.0f}s")
    lora = [p for n, p in model.named_parameters() if p.requires_grad and (n.endswith(".A") or n.endswith(".B"))]
    head = list(model.fc1.parameters()) + list(model.fc2.parameters())
    opt = torch.optim.AdamW([{"params": lora, "lr": args.lr}, {"params": head, "lr": args.head_lr}], weight_decay=0.01)
    n = len(encs)
    half = n // 2
    steps = args.epochs * math.ceil(half / args.batch_size)
    warm = max(1, int(0.05 * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * max(0.02, (steps - s) / steps))
    rng = np.random.default_rng(args.seed)
    w_t = w2 / w2.mean()
    log_lines = []
    step = 0
    for epoch in range(args.epochs):
        model.train()
        perm = rng.permutation(half) + half * rng.integers(0, 2, half)
        batches = []
        for s in range(0, half, args.batch_size * 50):  # similar lengths together, batches shuffled
            chunk = perm[s:s + args.batch_size * 50]
            chunk = chunk[np.argsort(lens[chunk], kind="stable")]
            batches += [chunk[k:k + args.batch_size] for k in range(0, len(chunk), args.batch_size)]
        rng.shuffle(batches)  # type: ignore[arg-type]
        t1 = time.perf_counter()
        run = 0.0
        for bi, idx in enumerate(batches):
            h, mask = pad_states(torch, [states[i] for i in idx])
            z = torch.from_numpy(z2[idx].astype(np.float32))
            if args.no_features:  # ablation: the cross-encoder alone
                z = z * 0.0
            elif args.feature_dropout:  # the encoder must not lean on the edit features alone
                keep = (torch.rand(z.shape[0], 1) >= args.feature_dropout).float()
                z = z * keep
            logit = model(h, mask, z)
            loss = (torch.nn.functional.binary_cross_entropy_with_logits(
                logit, torch.from_numpy(y2[idx].astype(np.float32)), reduction="none")
                * torch.from_numpy(w_t[idx].astype(np.float32))).mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(lora + head, 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            run = 0.98 * run + 0.02 * float(loss.detach()) if bi else float(loss.detach())
            if bi % 50 == 0:
                msg = (f"epoch {epoch + 1} batch {bi}/{len(batches)} loss {run:.4f} "
                       f"{(time.perf_counter() - t1) / (bi + 1):.2f}s/batch")
                log_progress(msg)
                log_lines.append(msg)
        log_lines.append(f"epoch {epoch + 1}: {time.perf_counter() - t1:.0f}s, loss {run:.4f}")
        log_progress(log_lines[-1])
    round_adapters(model)
    if args.no_features:
        import torch as _t

        with _t.no_grad():
            model.fc1.weight[:, -x2.shape[1]:] = 0.0  # never trained: must not read the features
    meta = {
        "format": JUDGE_FORMAT, "version": JUDGE_FORMAT_VERSION, "name": args.name,
        "base_model": "all-MiniLM-L6-v2", "lora_rank": args.rank, "lora_alpha": args.alpha,
        "lora_targets": model.targets, "lora_layers": args.lora_layers, "max_tokens": args.max_tokens, "hidden": args.hidden,
        "features": "TEXT_FEATURE_NAMES (signals + edit features, stored -> new)",
        "threshold": 0.5, "retrieval_floor": None, "trained_at_commit": git_commit(),
        "config": {k: v for k, v in vars(args).items() if k not in ("func",)},
    }
    export_npz(model, meta, mean, scale, out_dir / "judge.npz")
    torch.save({k: v for k, v in model.state_dict().items() if ".A" in k or ".B" in k or k.startswith("fc")},
               out_dir / "trainable.pt")
    manifest.update({"config": meta["config"], "log": log_lines, "commit": meta["trained_at_commit"],
                     "feature_rows": int(len(a2))})
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1))
    log_progress(f"wrote {out_dir / 'judge.npz'} ({(out_dir / 'judge.npz').stat().st_size / 1024:.0f} KB)")


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m evaluation.training.judge_train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--name", default="judge")
    t.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    t.add_argument("--cache-dir", default=str(DEFAULT_CACHE_DIR))
    t.add_argument("--snapshot", default="", help="a manifest.json whose snapshot_lines to reuse")
    t.add_argument("--rank", type=int, default=8)
    t.add_argument("--lora-layers", type=int, default=3, help="adapters on the top N layers")
    t.add_argument("--alpha", type=float, default=16.0)
    t.add_argument("--hidden", type=int, default=32)
    t.add_argument("--dropout", type=float, default=0.05)
    t.add_argument("--feature-dropout", type=float, default=0.2)
    t.add_argument("--no-features", action="store_true", help="ablation: the head reads the encoder only")
    t.add_argument("--epochs", type=int, default=2)
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--lr", type=float, default=5e-4)
    t.add_argument("--head-lr", type=float, default=2e-3)
    t.add_argument("--max-tokens", type=int, default=64)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--seed", type=int, default=25)
    t.set_defaults(func=cmd_train)
    args = ap.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
