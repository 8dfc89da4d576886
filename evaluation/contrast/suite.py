"""The contrast/paraphrase suite: labelled request pairs whose answers differ (one
word swapped for its opposite, two arguments swapped, a constraint added, a number,
negation, quantifier or modal changed, case or spacing changed inside quotes or
code) or stay the same (everyday rewordings).

    python -m evaluation.contrast.suite build   # regenerate data/contrast_suite.jsonl
    python -m evaluation.contrast.suite stats   # counts per kind and split

Rows: ``{a, b, same_answer, kind, family, split, source}``. Template families
(:mod:`.contrast_templates`) are filled from topic lists and from WordNet word pairs
(antonyms, contrast sets, synonyms, spelling variants: :mod:`mlc_integrations.verify.text.lexicon`);
hand-written pairs (:mod:`.contrast_natural`) add realism. Each family is wholly in
one split, and lexicon word pairs are split by a hash of the pair, so the test split
holds frames *and* words never seen in training. The issue's literal examples are a
test-only family. Deterministic: the same lexicon gives the same file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from mlc_integrations.verify.text.tokens import spelling_key
from mlc_integrations.verify.text.lexicon import Lexicon
from . import templates as T
from .natural import ISSUE_EXAMPLES, ISSUE_WORD_PAIRS, NATURAL_TEST, NATURAL_TRAIN, PARAPHRASE_KINDS
from ..paths import EVAL_DATA

SUITE_PATH = EVAL_DATA / "contrast_suite.jsonl"
SEED = 15
Pair = tuple[str, str]


def _pair_split(x: str, y: str) -> str:
    """A word pair's split, by a stable hash: a third of the pairs are test-only."""
    h = hashlib.sha1("|".join(sorted((x.lower(), y.lower()))).encode()).hexdigest()
    return "test" if int(h[:8], 16) % 3 == 0 else "train"


def _dedupe_synonyms(lex: Lexicon, words: Iterable[str]) -> list[str]:
    """One name per thing ("peking"/"beijing"): drop a word synonymous with one kept."""
    kept: list[str] = []
    for w in words:
        if all(lex.relation(w, k) != "synonym" for k in kept):
            kept.append(w)
    return kept


def _title(w: str) -> str:
    return " ".join(p.capitalize() for p in w.replace("_", " ").split())


class Pools:
    """Word pools and word-pair pools drawn from the lexicon."""

    def __init__(self, lex: Lexicon) -> None:
        self.lex = lex
        self._cache: dict[str, Any] = {}

    def _proper_set(self, seed: str, min_len: int = 4) -> list[str]:
        words = [w for w in self.lex.cohyponyms(seed, 0, "n") if w.isalpha() and len(w) >= min_len]
        return [_title(w) for w in _dedupe_synonyms(self.lex, [seed.lower()] + words)]

    def words(self, name: str) -> list[str]:
        if name in self._cache:
            return self._cache[name]
        lex = self.lex
        if name == "capitals":
            out = self._proper_set("Paris")
        elif name == "countries":
            out = [w for w in self._proper_set("France") if lex.is_proper(w)]
        elif name == "languages":
            out = self._proper_set("French", 5)
        elif name in ("days", "months"):
            # Calendar names are the siblings WordNet also lists with an abbreviation
            # ("tues" for Tuesday): that drops "workday", "midweek", "feria".
            seed = "monday" if name == "days" else "january"
            cands = [seed] + lex.cohyponyms(seed, 0, "n")
            out = [_title(w) for w in cands if w.isalpha()
                   and any(len(s) < len(w) and w.startswith(s) for s in lex.synonyms(w))]
        elif name == "colours":
            out = _dedupe_synonyms(lex, ["red"] + [w for w in lex.cohyponyms("red", 0, "n")
                                                   if w.isalpha() and lex.attested(w) and not w.endswith("ness")])
        elif name == "instruments":
            out = _dedupe_synonyms(lex, sorted({w for s in ("guitar", "violin", "trumpet", "drum")
                                                for w in [s] + lex.cohyponyms(s, 0, "n")
                                                if w.isalpha() and lex.attested(w)
                                                and lex.categories(w, 1) == {"noun.artifact"}}))
        else:
            raise KeyError(name)
        self._cache[name] = out
        return out

    def pairs(self, name: str) -> list[Pair]:
        """Variant pairs of a "lex:" pool (sorted, deterministic)."""
        key = "pairs:" + name
        if key in self._cache:
            return self._cache[key]
        lex = self.lex
        out: set[Pair] = set()
        if name.startswith("antonym_"):
            pos = name[-1]
            vocab = set(lex.vocabulary(pos))
            for w in sorted(vocab):
                for a in lex.antonyms(w, 0, pos):
                    if a in vocab and w in lex.antonyms(a, 0, pos) and len(a) <= 12 and len(w) <= 12:
                        out.add(tuple(sorted((w, a))))  # type: ignore[arg-type]
        elif name in ("animals", "foods"):
            cat = {"animals": "noun.animal", "foods": "noun.food"}[name]
            # words whose common senses are all of that kind ("lamb" the food and the animal is out)
            vocab = {w for w in lex.vocabulary("n") if len(w) <= 10 and lex.categories(w, 1) == {cat}}
            for w in sorted(vocab):
                for c in lex.cohyponyms(w, 0, "n"):
                    if c in vocab and lex.relation(w, c) == "cohyponym":
                        out.add(tuple(sorted((w, c))))  # type: ignore[arg-type]
        elif name == "synonyms":
            # man-made things only, so that "How do I clean a ...?" reads naturally
            vocab = {w for w in lex.vocabulary("n") if len(w) >= 4 and lex.categories(w, 1) == {"noun.artifact"}}
            for w in sorted(vocab):
                for s in lex.synonyms(w, 0, "n"):
                    if s in vocab and w in lex.synonyms(s, 0, "n") and not (s.startswith(w) or w.startswith(s)):
                        out.add(tuple(sorted((w, s))))  # type: ignore[arg-type]
        else:
            words = self.words(name)
            out = {(x, y) for i, x in enumerate(words) for y in words[i + 1:]}
        self._cache[key] = sorted(out)
        return self._cache[key]

    def spelling(self) -> list[Pair]:
        """(British, American) sentences: words swapped for their WordNet synonym with
        the same spelling key (colour/color, organise/organize)."""
        out = []
        for s in T.SPELLING_SENTENCES:
            words = s.rstrip("?.").split()
            swapped = []
            for w in words:
                alt = [v for v in self.lex.synonyms(w.lower(), 2) if v != w.lower() and v.isalpha()
                       and spelling_key(v) == spelling_key(w.lower())]
                swapped.append(alt[0] if alt else w)
            us = " ".join(swapped) + s[len(s.rstrip("?.")):]
            if us != s:
                out.append((s, us))
        return out


def _is_issue_pair(x: str, y: str) -> bool:
    return frozenset((x, y)) in ISSUE_WORD_PAIRS or frozenset((x.lower(), y.lower())) in ISSUE_WORD_PAIRS


def _surface_variant(q: str, rng: random.Random) -> str:
    """An everyday case/spacing variant of a plain question (no quotes or code)."""
    k = rng.randrange(4)
    if k == 0:
        return q.lower().rstrip("?.")
    if k == 1:
        return "  ".join(q.split(" "))
    if k == 2:
        return q.upper()
    return " " + q.replace(" ", "  ", 1) + " "


def _case_variants(words: Sequence[str]) -> list[Pair]:
    return [(w.capitalize(), w) if i % 2 == 0 else (w.upper(), w.capitalize()) for i, w in enumerate(words)]


def _yaml_variants(rng: random.Random, n: int) -> list[Pair]:
    keys = ["host", "port", "user", "timeout", "retries", "path", "level", "name"]
    out = []
    for _ in range(n):
        top = rng.choice(["server", "database", "logging", "app", "cache"])
        ks = rng.sample(keys, 3)
        lines = [f"{top}:"] + [f"  {k}: {rng.randint(1, 99)}" for k in ks]
        bad = list(lines)
        j = rng.randrange(2, 4)
        bad[j] = bad[j][rng.choice([1, 2]):] if rng.random() < 0.5 else "  " + bad[j]
        out.append(("\n".join(lines), "\n".join(bad)))
    return out


def _variants(fam: T.Family, pools: Pools, rng: random.Random) -> list[Pair]:
    v = fam.variants
    if isinstance(v, str):
        if v.startswith("lex:"):
            pairs = [p for p in pools.pairs(v[4:]) if _pair_split(*p) == fam.split]
        elif v.startswith("spelling:"):
            allp = pools.spelling()
            cut = (2 * len(allp)) // 3
            pairs = allp[:cut] if v.endswith("train") else allp[cut:]
        elif v.startswith("surface:"):
            rng2 = random.Random(v)
            qs = [_fill(q, T.BASE_SLOTS, rng2) for q in T.BASE_QUESTIONS for _ in range(8)]
            half = len(qs) // 2
            pairs = [(q, _surface_variant(q, rng2)) for q in (qs[:half] if v.endswith("train") else qs[half:])]
        elif v.startswith("case:"):
            pairs = _case_variants(T.WORDS)
        elif v.startswith("yaml:"):
            pairs = _yaml_variants(random.Random(fam.name), fam.n)
        else:
            raise ValueError(f"unknown variant pool {v!r}")
    else:
        pairs = list(v)  # type: ignore[call-overload]
    if fam.split == "train":
        pairs = [p for p in pairs if not _is_issue_pair(*p)]
    return pairs


def _fill(frame: str, slots: dict[str, Any], rng: random.Random, pools: Optional[Pools] = None,
          ab: Optional[Pair] = None) -> str:
    out = frame
    for name, pool in slots.items():
        if name == "AB":
            continue
        if isinstance(pool, str) and pool.startswith("lex:") and pools is not None:
            pool = pools.words(pool[4:])
        token = "{" + name + "}"
        while token in out:
            out = out.replace(token, str(rng.choice(pool)), 1)
    if ab is not None:
        out = out.replace("{A}", ab[0]).replace("{B}", ab[1])
    return out


def _family_rows(fam: T.Family, pools: Pools) -> list[dict[str, Any]]:
    rng = random.Random(f"{SEED}:{fam.name}")
    variants = _variants(fam, pools, rng)
    rng.shuffle(variants)
    ab_pool = fam.slots.get("AB")
    if isinstance(ab_pool, str):
        ab_pool = pools.words(ab_pool[4:])
    rows: list[dict[str, Any]] = []
    seen: set[Pair] = set()
    for k in range(fam.n * 4):
        if len(rows) >= fam.n:
            break
        fa, fb = fam.frames[k % len(fam.frames)]
        ab = None
        if ab_pool:
            x, y = rng.sample(range(len(ab_pool)), 2)
            ab = (ab_pool[x], ab_pool[y])
            if isinstance(ab[0], tuple):  # a pool of pairs: the two ends of one pair ("miles", "kilometres")
                ab = ab_pool[x]
        state = rng.getstate()
        a = _fill(fa, fam.slots, rng, pools, ab)
        rng.setstate(state)  # both sides get the same fillers
        b = _fill(fb, fam.slots, rng, pools, ab)
        if variants:
            x, y = variants[(k // len(fam.frames)) % len(variants)]
            if fa.startswith("{X}"):
                x, y = x[:1].upper() + x[1:], y[:1].upper() + y[1:]
            a, b = a.replace("{X}", x), b.replace("{X}", y)
            if k % 2:
                a, b = b, a  # either side may be the stored request
        if a == b or (a, b) in seen or "{" in a + b:
            continue
        seen.add((a, b))
        rows.append({"a": a, "b": b, "same_answer": fam.same_answer, "kind": fam.kind, "family": fam.name,
                     "split": fam.split, "source": "template"})
    return rows


def build(lex: Optional[Lexicon] = None) -> list[dict[str, Any]]:
    pools = Pools(lex or Lexicon.default())
    rows: list[dict[str, Any]] = []
    for fam in T.FAMILIES + T.PARAPHRASE_FAMILIES:
        rows.extend(_family_rows(fam, pools))
    for split, items, family in (("train", NATURAL_TRAIN, "natural_train"), ("test", NATURAL_TEST, "natural_test"),
                                 ("test", ISSUE_EXAMPLES, "issue")):
        for kind, a, b in items:
            rows.append({"a": a, "b": b, "same_answer": kind in PARAPHRASE_KINDS, "kind": kind, "family": family,
                         "split": split, "source": "issue" if family == "issue" else "natural"})
    check(rows)
    return rows


def check(rows: Sequence[dict[str, Any]]) -> None:
    """Invariants: no family in both splits, no issue example in train."""
    fam_split: dict[str, set[str]] = {}
    for r in rows:
        fam_split.setdefault(r["family"], set()).add(r["split"])
    both = [f for f, s in fam_split.items() if len(s) > 1]
    if both:
        raise AssertionError(f"families in both splits: {both}")
    issue_texts = {t for _, a, b in ISSUE_EXAMPLES for t in (a, b)}
    leaked = [r for r in rows if r["split"] == "train" and (r["a"] in issue_texts or r["b"] in issue_texts)]
    if leaked:
        raise AssertionError(f"issue examples in train: {leaked[:3]}")


def load(path: Path = SUITE_PATH) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def stats(rows: Sequence[dict[str, Any]]) -> str:
    c = Counter((r["kind"], r["split"]) for r in rows)
    kinds = sorted({r["kind"] for r in rows}, key=lambda k: (k in PARAPHRASE_KINDS, k))
    lines = ["| kind | same answer | train | test | families (train / test) |", "|---|---|---|---|---|"]
    for k in kinds:
        fams = {s: sorted({r["family"] for r in rows if r["kind"] == k and r["split"] == s}) for s in ("train", "test")}
        lines.append(f"| {k} | {k in PARAPHRASE_KINDS} | {c[(k, 'train')]} | {c[(k, 'test')]} | "
                     f"{len(fams['train'])} / {len(fams['test'])} |")
    tot = Counter(r["split"] for r in rows)
    ch = Counter(r["split"] for r in rows if not r["same_answer"])
    lines.append(f"| **all** | | {tot['train']} ({ch['train']} answer-changing) | {tot['test']} "
                 f"({ch['test']} answer-changing) | |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m evaluation.contrast.suite", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="regenerate the suite file")
    b.add_argument("--output", default=str(SUITE_PATH))
    s = sub.add_parser("stats", help="counts per kind and split")
    s.add_argument("--path", default=str(SUITE_PATH))
    args = ap.parse_args(argv)
    if args.cmd == "build":
        rows = build()
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
        print(f"wrote {out}: {len(rows)} pairs")
        print(stats(rows))
    else:
        print(stats(load(Path(args.path))))


if __name__ == "__main__":
    main()
