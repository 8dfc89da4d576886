"""The verifier's training and evaluation data: labelled question pairs, their
embeddings (cached on disk between runs) and their signals.

Read in place, never copied into the repo:

* ``../shared/data/qqp_val.csv`` -- Quora question pairs, duplicate or not;
* easy-vqa's questions -- every pair of questions about the same image, labelled
  "reuse correct" when their ground-truth answers are equal;
* the contrast/paraphrase suite (``eval/data/contrast_suite.jsonl``), train split.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from mlc_integrations.verify.text.edits import edit_features
from mlc_integrations.verify import WordWeights, profile, signals_from_profiles

from ...paths import REPO_ROOT, shared_data_dir

DEFAULT_DATA_DIR = shared_data_dir()
DEFAULT_CACHE_DIR = Path(os.environ.get("MLC_EVAL_CACHE", Path.home() / ".cache" / "mlc_integrations"))
SEED = 7
# Share of qqp_val held out (by question) from training: the Quora test set.
QQP_TEST_FRACTION = 0.3


def log_progress(msg: str) -> None:
    """Progress on stderr (stdout carries the tables)."""
    print(msg, file=sys.stderr, flush=True)


def eval_parser(module: str, doc: Optional[str]) -> argparse.ArgumentParser:
    """The command line shared by the verifier's evaluation scripts: data and cache folders."""
    ap = argparse.ArgumentParser(prog=f"python -m evaluation.{module}", description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    ap.add_argument("--cache-dir", default=str(DEFAULT_CACHE_DIR), help="embedding cache (never in the repo)")
    return ap


@dataclass
class PairSet:
    """Pairs (a, b) with labels, sample weights and the data set each came from."""

    a: list[str]
    b: list[str]
    y: np.ndarray
    w: np.ndarray
    source: np.ndarray  # "qqp" / "easyvqa" / "suite"
    # rows of one group stay on one side of a cross-validation split (None: each row alone)
    group: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.a)

    def groups(self) -> np.ndarray:
        if self.group is not None:
            return self.group
        return np.asarray([f"{s}:{i}" for i, s in enumerate(self.source)])


def load_qqp(data_dir: Path) -> PairSet:
    path = data_dir / "qqp_val.csv"
    a, b, y = [], [], []
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if not row["question1"].strip() or not row["question2"].strip():
                continue
            a.append(row["question1"])
            b.append(row["question2"])
            y.append(int(row["is_duplicate"]))
    n = len(a)
    return PairSet(a, b, np.asarray(y), np.ones(n), np.asarray(["qqp"] * n))


def easyvqa_pairs(split: str) -> PairSet:
    """Every pair of questions about one image; label = same ground-truth answer.

    easy-vqa asks the same 107 template questions about thousands of images, so
    pairs are aggregated by question pair: every question pair weighs the same
    (how often easy-vqa happens to ask two questions together says nothing about a
    cache's traffic), split into a "same" and a "different" row by the fraction of
    images on which their answers agreed.
    """
    import easy_vqa

    qs, ans, ids = getattr(easy_vqa, f"get_{split}_questions")()
    by_img: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for q, a, i in zip(qs, ans, ids):
        by_img[int(i)].append((q, a))
    counts: Counter[tuple[str, str, int]] = Counter()
    for qa in by_img.values():
        for i in range(len(qa)):
            for j in range(i + 1, len(qa)):
                (q1, a1), (q2, a2) = qa[i], qa[j]
                if q1 == q2:
                    continue
                x, z = sorted((q1, q2))
                counts[(x, z, int(a1 == a2))] += 1
    totals: Counter[tuple[str, str]] = Counter()
    for (x, z, _), n in counts.items():
        totals[(x, z)] += n
    keys = sorted(counts)
    return PairSet(
        [k[0] for k in keys], [k[1] for k in keys], np.asarray([k[2] for k in keys]),
        np.asarray([counts[k] / totals[(k[0], k[1])] for k in keys], dtype=np.float64),
        np.asarray(["easyvqa"] * len(keys)),
    )


def concat(*sets: PairSet) -> PairSet:
    return PairSet(
        [x for s in sets for x in s.a], [x for s in sets for x in s.b],
        np.concatenate([s.y for s in sets]), np.concatenate([s.w for s in sets]),
        np.concatenate([s.source for s in sets]), np.concatenate([s.groups() for s in sets]),
    )


class EmbeddingCache:
    """Text embeddings of the verifier's text model, cached on disk between runs."""

    def __init__(self, model: Optional[str], cache_dir: Path) -> None:
        from mlc_integrations.embed.models import TextEmbedder

        self.embedder = TextEmbedder.shared(model)
        self.embedder.dim  # loads it: the file name depends on the backend that serves
        # torch keeps the tag of the files written before there were other backends
        key = self.embedder.name if self.embedder.backend == "torch" else f"{self.embedder.name}|{self.embedder.backend}"
        tag = hashlib.sha256(key.encode()).hexdigest()[:12]
        self.path = cache_dir / f"text-embeddings-{tag}.npz"
        self.vecs: dict[str, np.ndarray] = {}
        if self.path.exists():
            data = np.load(self.path, allow_pickle=False)
            self.vecs = dict(zip(data["texts"].tolist(), data["vecs"]))

    def cosines(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        todo = sorted({t for t in list(a) + list(b) if t not in self.vecs})
        if todo:
            log_progress(f"embedding {len(todo)} texts with {self.embedder.name} (cached in {self.path})")
            vecs = self.embedder._ensure().encode(todo)  # bypasses the embedder's LRU memo
            self.vecs.update(zip(todo, np.asarray(vecs, dtype=np.float32)))
            self.path.parent.mkdir(parents=True, exist_ok=True)
            texts = sorted(self.vecs)
            np.savez(self.path, texts=np.asarray(texts), vecs=np.stack([self.vecs[t] for t in texts]))
        va = np.stack([self.vecs[t] for t in a])
        vb = np.stack([self.vecs[t] for t in b])
        return np.clip((va * vb).sum(axis=1), -1.0, 1.0)

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        """Normalized embeddings of ``texts`` (embedding the ones not cached yet)."""
        todo = [t for t in texts if t not in self.vecs]
        if todo:
            self.cosines(todo, todo)
        return np.stack([self.vecs[t] for t in texts]).astype(np.float64)


def signal_matrix(pairs: PairSet, cosines: np.ndarray, weights: Optional[WordWeights] = None) -> np.ndarray:
    profiles: dict[str, Any] = {}

    def prof(t: str) -> Any:
        p = profiles.get(t)
        if p is None:
            p = profiles[t] = profile(t)
        return p

    return np.stack([signals_from_profiles(prof(x), prof(z), float(c), weights)
                     for x, z, c in zip(pairs.a, pairs.b, cosines)])


def text_feature_matrix(pairs: PairSet, cosines: np.ndarray, weights: Optional[WordWeights] = None) -> np.ndarray:
    """Rows of :data:`~mlc_integrations.verify.TEXT_FEATURE_NAMES`: the signals and the
    edit features of ``a`` (the stored request) -> ``b`` (the new one)."""
    edits = np.stack([edit_features(stored=x, new=z) for x, z in zip(pairs.a, pairs.b)])
    return np.c_[signal_matrix(pairs, cosines, weights), edits]


def subset(pairs: PairSet, mask: np.ndarray) -> PairSet:
    idx = np.nonzero(mask)[0]
    return PairSet([pairs.a[i] for i in idx], [pairs.b[i] for i in idx], pairs.y[mask], pairs.w[mask],
                   pairs.source[mask], None if pairs.group is None else pairs.group[mask])


def question_components(qqp: PairSet) -> np.ndarray:
    """Each pair's connected component of the question graph (pairs sharing a question,
    directly or through other pairs, share it): 1,510 qqp_val pairs share a question."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for q1, q2 in zip(qqp.a, qqp.b):
        ra, rb = find(q1), find(q2)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return np.asarray([find(q) for q in qqp.a])


def split_qqp_by_question(qqp: PairSet, test_fraction: float = QQP_TEST_FRACTION) -> np.ndarray:
    """True for held-out pairs: components of the question graph go wholly to one side
    (by a hash of the component), so no question string appears on both sides."""
    cut = int(test_fraction * 1000)
    return np.asarray([int(hashlib.sha1(c.encode()).hexdigest()[:8], 16) % 1000 < cut
                       for c in question_components(qqp)])


def qqp_split(data_dir: Path) -> tuple[PairSet, PairSet]:
    """(training pairs, held-out pairs) of qqp_val, split by question; each pair's group is
    its question component (cross-validation on the training side keeps them together)."""
    qqp = load_qqp(data_dir)
    qqp.group = np.char.add("qqp:", question_components(qqp))
    held = split_qqp_by_question(qqp)
    train, test = subset(qqp, ~held), subset(qqp, held)
    overlap = (set(train.a) | set(train.b)) & (set(test.a) | set(test.b))
    assert not overlap, f"{len(overlap)} questions on both sides of the qqp split"
    return train, test


def suite_pairs(split: str, path: Optional[Path] = None) -> PairSet:
    """The contrast/paraphrase suite's ``split`` as pairs (a = stored, b = new)."""
    from ...contrast.suite import SUITE_PATH, load

    rows = [r for r in load(path or SUITE_PATH) if r["split"] == split]
    return PairSet([r["a"] for r in rows], [r["b"] for r in rows], np.asarray([int(r["same_answer"]) for r in rows]),
                   np.ones(len(rows)), np.asarray(["suite"] * len(rows)),
                   np.asarray([f"suite:{r['family']}" for r in rows]))  # a template family stays together


def build_training_set(args: argparse.Namespace) -> tuple[PairSet, np.ndarray, np.ndarray, dict[str, Any]]:
    """qqp_val's training side (split by question), easy-vqa train pairs and the contrast
    suite's train split; easy-vqa and the suite each weigh ``*_weight`` x qqp in total."""
    qqp, _held_out = qqp_split(Path(args.data_dir))
    vqa = easyvqa_pairs("train")
    vqa.w = vqa.w * (len(qqp) * args.easyvqa_weight / vqa.w.sum())
    suite = suite_pairs("train")
    suite.w = suite.w * (len(qqp) * args.suite_weight / suite.w.sum())
    pairs = concat(qqp, vqa, suite)
    emb = EmbeddingCache(args.text_model, Path(args.cache_dir))
    cos = emb.cosines(pairs.a, pairs.b)
    t0 = time.perf_counter()
    df, n_docs = WordWeights.fit(sorted(set(pairs.a) | set(pairs.b)))
    x = text_feature_matrix(pairs, cos, WordWeights(df, n_docs))
    log_progress(f"signals and edit features for {len(pairs)} pairs in {time.perf_counter() - t0:.1f}s")
    return pairs, cos, x, {"df": df, "n_docs": n_docs}
