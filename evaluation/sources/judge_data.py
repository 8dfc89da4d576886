"""Training, validation and test pairs of the L1 judge (issue 25).

Natural pairs (LLM-written, ``evaluation/data/text_pairs/train/w*.jsonl`` of the main
checkout, spec in ``SPEC.md``) are read from a *snapshot*: the first N lines of each
writer's file (the files grow while writers work), N recorded in the snapshot manifest,
so a split is reproducible after the files grow.

Split (fixed before any result was looked at): per writer, whole domains are held out
as the validation split, which chooses the operating point and never trains: the 2
domains whose ``sha1("judge-val-25:<writer>:<domain>")`` is smallest among the domains
present in the snapshot (1 when the writer has 2-3 domains, none with 1).

Other training sources (their held-out parts never train): qqp_val's training side
(split by question, :func:`evaluation.training.verifier.data.qqp_split`), GPTCache's paraphrase
pairs (all positives), easy-vqa *train* question pairs (soft label: share of images on
which the two answers agree), the contrast suite's *train* split and scene question
pairs written with the *train* templates (label: same question program, argument swaps
and negated opposites included).

Test only: the blind natural sets (``text_pairs_blind/b1``-``b4``; b3, b4 by writers who never saw the spec), the suite's test split,
``contrast_fresh.jsonl``, qqp_val's held-out 30 %.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from ..paths import REPO_ROOT

MAIN_DATA = Path(REPO_ROOT.parent / "main" / "evaluation" / "data")
NATURAL_DIR = MAIN_DATA / "text_pairs" / "train"
BLIND_DIR = MAIN_DATA / "text_pairs_blind"
WRITERS = tuple(f"w{i}" for i in range(1, 11))  # round 1: w1-w5, round 2: w6-w10 (same split rule)
SPLIT_SALT = "judge-val-25"
GPTCACHE_PAIRS = REPO_ROOT.parent / "shared" / "data" / "gptcache_paraphrase_pairs.json"


def _data_dir(sub: Path) -> Path:
    """The main checkout's copy (where the lead commits the data), else this checkout's."""
    if sub.exists():
        return sub
    return REPO_ROOT / "evaluation" / "data" / sub.relative_to(MAIN_DATA)


@dataclass
class Pairs:
    """(a = stored, b = new) pairs with a soft label, a weight and where each came from."""

    a: list[str] = field(default_factory=list)
    b: list[str] = field(default_factory=list)
    y: list[float] = field(default_factory=list)
    w: list[float] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    kind: list[str] = field(default_factory=list)

    def add(self, a: str, b: str, y: float, source: str, kind: str = "", w: float = 1.0) -> None:
        self.a.append(a)
        self.b.append(b)
        self.y.append(float(y))
        self.w.append(float(w))
        self.source.append(source)
        self.kind.append(kind)

    def extend(self, other: "Pairs") -> "Pairs":
        for k in ("a", "b", "y", "w", "source", "kind"):
            getattr(self, k).extend(getattr(other, k))
        return self

    def __len__(self) -> int:
        return len(self.a)

    def select(self, mask: Sequence[bool]) -> "Pairs":
        out = Pairs()
        for i, keep in enumerate(mask):
            if keep:
                out.add(self.a[i], self.b[i], self.y[i], self.source[i], self.kind[i], self.w[i])
        return out

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.y, dtype=np.float64), np.asarray(self.w, dtype=np.float64)


# --------------------------------------------------------------------------- natural pairs
def snapshot_counts(directory: Optional[Path] = None) -> dict[str, int]:
    """Complete lines in each writer's file now (a line still being written is not counted)."""
    d = directory or _data_dir(NATURAL_DIR)
    out = {}
    for w in WRITERS:
        p = d / f"{w}.jsonl"
        if p.exists():
            text = p.read_bytes()
            out[w] = text.count(b"\n")
    return out


def read_natural(counts: dict[str, int], directory: Optional[Path] = None) -> list[dict[str, Any]]:
    d = directory or _data_dir(NATURAL_DIR)
    rows = []
    for w, n in sorted(counts.items()):
        with open(d / f"{w}.jsonl", encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if i >= n:
                    break
                if line.strip():
                    r = json.loads(line)
                    r.setdefault("writer", w)
                    rows.append(r)
    return rows


def _rank(writer: str, domain: str) -> str:
    return hashlib.sha1(f"{SPLIT_SALT}:{writer}:{domain}".encode()).hexdigest()


def validation_domains(rows: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    """Per writer, the held-out domains (see the module docstring)."""
    by_writer: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        by_writer[r["writer"]].add(r["domain"])
    out = {}
    for w, ds in sorted(by_writer.items()):
        k = 2 if len(ds) >= 4 else 1 if len(ds) >= 2 else 0
        out[w] = sorted(sorted(ds, key=lambda d: _rank(w, d))[:k])
    return out


def natural_split(counts: dict[str, int]) -> tuple[Pairs, Pairs, dict[str, Any]]:
    """(train, validation, manifest) of the natural pairs in the snapshot ``counts``."""
    rows = read_natural(counts)
    val = validation_domains(rows)
    tr, va = Pairs(), Pairs()
    for r in rows:
        held = r["domain"] in val.get(r["writer"], [])
        (va if held else tr).add(r["a"], r["b"], float(bool(r["same_answer"])), f"natural:{r['writer']}",
                                 str(r.get("kind", "")))
    manifest = {"snapshot_lines": counts, "validation_domains": val, "train_pairs": len(tr), "validation_pairs": len(va),
                "domains": {w: sorted(Counter(r["domain"] for r in rows if r["writer"] == w)) for w in counts}}
    return tr, va, manifest


BLIND_SETS = ("b1", "b2", "b3", "b4")  # b3, b4: writers who never saw the spec


def blind_pairs(names: Sequence[str] = ("b1", "b2")) -> Pairs:
    """The blind natural test sets (test only: never train, calibrate or choose on them)."""
    out = Pairs()
    for name in names:
        p = _data_dir(BLIND_DIR) / f"{name}.jsonl"
        for line in p.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                out.add(r["a"], r["b"], float(bool(r["same_answer"])), f"blind:{r.get('writer', name)}",
                        str(r.get("topic", "")))
    return out


# --------------------------------------------------------------------------- other sources
def qqp_pairs(data_dir: Path, held_out: bool = False) -> Pairs:
    from ..training.verifier.data import qqp_split

    tr, te = qqp_split(data_dir)
    s = te if held_out else tr
    out = Pairs()
    for a, b, y in zip(s.a, s.b, s.y):
        out.add(a, b, float(y), "qqp")
    return out


def gptcache_pairs() -> Pairs:
    out = Pairs()
    if GPTCACHE_PAIRS.exists():
        for r in json.loads(GPTCACHE_PAIRS.read_text(encoding="utf-8")):
            out.add(r["origin"], r["similar"], 1.0, "gptcache", "paraphrase")
    return out


def easyvqa_soft_pairs() -> Pairs:
    """easy-vqa *train* question pairs about one image, one row per question pair; label:
    the share of images on which the two questions' answers agree."""
    from ..training.verifier.data import easyvqa_pairs

    p = easyvqa_pairs("train")
    agg: dict[tuple[str, str], float] = defaultdict(float)
    for a, b, y, w in zip(p.a, p.b, p.y, p.w):
        agg[(a, b)] += float(y) * float(w)
    out = Pairs()
    for (a, b), y in sorted(agg.items()):
        out.add(a, b, y, "easyvqa")
    return out


def suite(split: str, path: Optional[Path] = None) -> Pairs:
    from ..contrast.suite import SUITE_PATH, load

    out = Pairs()
    for r in load(path or SUITE_PATH):
        if split == "all" or r["split"] == split:
            out.add(r["a"], r["b"], float(bool(r["same_answer"])), "suite" if path is None else "fresh",
                    str(r.get("kind", r.get("category", ""))))
    return out


def fresh() -> Pairs:
    from ..paths import EVAL_DATA

    return suite("all", EVAL_DATA / "contrast_fresh.jsonl")


def scene_pairs(n_scenes: int = 400, seed: int = 25) -> Pairs:
    """Question pairs about procedural scenes in the *train* templates: paraphrases (label 1)
    and one-word contrasts or negations (label 0), by whether the programs mean the same."""
    from ..scenes.questions import canonical, contrast, negation, paraphrase, sample_question
    from ..scenes.graphs import scenes as gen_scenes

    rng = random.Random(seed)
    out = Pairs()
    seen = set()
    for sc in gen_scenes("train", n_scenes):
        for _ in range(3):
            q = sample_question(sc, rng, split="train")
            for other, kind in ((paraphrase(q, rng, "train"), "paraphrase"), (contrast(q, sc, rng, "train"), "contrast"),
                                (negation(q, rng, "train"), "negation")):
                if other is None or (q.text, other.text) in seen:
                    continue
                seen.add((q.text, other.text))
                same = canonical(q.program) == canonical(other.program)
                out.add(q.text, other.text, float(same), "scenes", kind)
    return out


# Each source's total weight relative to the natural training pairs (= 1).
SOURCE_SHARE = {"natural": 1.0, "qqp": 0.6, "gptcache": 0.05, "easyvqa": 0.15, "suite": 0.3, "scenes": 0.2}


def _sample(p: Pairs, n: int, rng: random.Random) -> Pairs:
    if len(p) <= n:
        return p
    keep = set(rng.sample(range(len(p)), n))
    return p.select([i in keep for i in range(len(p))])


def training_set(data_dir: Path, counts: dict[str, int], max_easyvqa: int = 800, max_qqp: int = 3000,
                 max_scenes: int = 1200, max_gptcache: int = 500, seed: int = 25) -> tuple[Pairs, Pairs, dict[str, Any]]:
    """(train, validation, manifest). Weights: each source sums to ``SOURCE_SHARE`` x the
    natural training pairs' count."""
    nat_tr, nat_va, manifest = natural_split(counts)
    rng = random.Random(seed)
    # subsampled (seeded) to fit a CPU budget: one epoch reads every pair once
    evqa = _sample(easyvqa_soft_pairs(), max_easyvqa, rng)
    qqp = _sample(qqp_pairs(data_dir), max_qqp, rng)
    scenes = _sample(scene_pairs(), max_scenes, rng)
    parts = {"natural": nat_tr, "qqp": qqp, "gptcache": _sample(gptcache_pairs(), max_gptcache, rng), "easyvqa": evqa,
             "suite": suite("train"), "scenes": scenes}
    train = Pairs()
    n_nat = max(1, len(nat_tr))
    for name, p in parts.items():
        if not len(p):
            continue
        p.w = [SOURCE_SHARE[name] * n_nat / len(p)] * len(p)
        train.extend(p)
    manifest["train_sources"] = {k: len(v) for k, v in parts.items()}
    manifest["source_share"] = SOURCE_SHARE
    return train, nat_va, manifest
