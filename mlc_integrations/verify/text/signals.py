"""Signals of a (stored text, new text) pair: what the verifier's models read.

Cheap and deterministic: negation, numbers / units / dates, content and attribute
words present on one side only, question words, length and word-order cues, overlaps,
and the cosine itself (:func:`extract_signals`, :func:`signals_from_profiles`); and
:func:`pair_features` of the two texts' embeddings, the input of the embedding head.
Training (``evaluation``) and serving compute them with these same
functions.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from ...runtime.lru import LRU
from .edits import EDIT_FEATURE_NAMES, edit_features
from .lexicon import Lexicon
from .words import (
    AMBIGUOUS_NUMBERS,
    MODALS,
    MONTHS,
    NEGATED_BASES,
    NEGATIONS,
    NUMBER_WORDS,
    RELATIVE_TIME,
    STOPWORDS,
    UNITS,
    UNMARKED_NEGATIONS,
    WEEKDAYS,
    WH_WORDS,
)

# Negation, numbers, units and dates change an answer by themselves; attribute words
# (colours, shapes, words with an antonym: sizes, directions, states) are the content
# words whose swap most often changes it: the lexicon says which (Lexicon.is_attribute).
# The closed word classes: :mod:`.words`.

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'", "\u00b4": "'"})
_TOKEN = re.compile(
    r"\d+(?:[.,]\d+)*(?:st|nd|rd|th)?"  # numbers, 1,000 3.5 1st
    r"|[a-z]+(?:'[a-z]+)?"  # words, contractions
    r"|[$€£¥%°]"  # currency and percent
)
_CAP_WORD = re.compile(r"(?<![.?!]\s)(?<!^)\b[A-Z][a-zA-Z]+\b")


def _stem(word: str) -> str:
    """Light stemmer: plural and possessive forms only (safe for attribute words)."""
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("ses", "xes", "zes", "ches", "shes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


@dataclass
class TextProfile:
    """What the signals need from one text, computed once per text."""

    tokens: list[str]
    negations: int
    numbers: tuple[str, ...]  # canonical values (see _number_value)
    number_words: tuple[str, ...]  # values of ambiguous words ("one", "second")
    units: frozenset[str]
    dates: frozenset[str]
    wh: frozenset[str]
    modals: frozenset[str]
    content: list[str]  # stems of content words, in order
    attributes: frozenset[str]  # the content stems the lexicon calls attribute words
    entities: frozenset[str]
    char3: frozenset[str]
    bigrams: frozenset[tuple[str, str]]


def _number_value(tok: str) -> str:
    """Canonical form of a numeric token: its value when it is one number ("1,000",
    "3.5", "2nd"), else the token itself (versions "1.8.0", lists "4,6,12")."""
    t = re.sub(r"(st|nd|rd|th)$", "", tok)
    if "," in t and re.fullmatch(r"\d{1,3}(,\d{3})+", t):
        t = t.replace(",", "")
    elif re.fullmatch(r"\d+,\d+", t):
        t = t.replace(",", ".")
    try:
        return f"{float(t):g}"
    except ValueError:
        return t


def profile(text: str) -> TextProfile:
    """Tokenize and classify the words of one text (pure, deterministic)."""
    norm = unicodedata.normalize("NFKC", text).translate(_APOSTROPHES)
    low = norm.casefold()
    raw = _TOKEN.findall(low)
    tokens: list[str] = []
    negations = 0
    for tok in raw:
        if tok.endswith("n't"):
            base = tok[:-3]
            tokens.append(NEGATED_BASES.get(base, base))
            tokens.append("not")
            negations += 1
            continue
        if "'" in tok and not tok.endswith("'s"):
            tok = tok.split("'")[0]
        tokens.append(tok)
        if tok in NEGATIONS or tok in UNMARKED_NEGATIONS:
            negations += 1
    numbers: list[str] = []
    number_words: list[str] = []
    units: set[str] = set()
    dates: set[str] = set()
    content: list[str] = []
    for tok in tokens:
        if tok[0].isdigit():
            numbers.append(_number_value(tok))
            continue
        stem = _stem(tok)
        if tok in NUMBER_WORDS:
            (number_words if tok in AMBIGUOUS_NUMBERS else numbers).append(f"{float(NUMBER_WORDS[tok]):g}")
        if tok in UNITS or stem in UNITS:
            units.add(stem if stem in UNITS else tok)
        if tok in MONTHS or tok in WEEKDAYS or tok in RELATIVE_TIME:
            dates.add(tok)
        if tok in STOPWORDS or tok in NEGATIONS or tok in UNMARKED_NEGATIONS or not tok[0].isalpha():
            continue
        if tok in NUMBER_WORDS:
            continue
        content.append(stem)
    squashed = " " + " ".join(tokens) + " "
    entities = frozenset(w.casefold() for w in _CAP_WORD.findall(norm)) - STOPWORDS
    lex = Lexicon.default() if content else None
    return TextProfile(
        tokens=tokens,
        negations=negations,
        numbers=tuple(sorted(numbers)),
        number_words=tuple(sorted(number_words)),
        units=frozenset(units),
        dates=frozenset(dates),
        wh=frozenset(t for t in tokens if t in WH_WORDS),
        modals=frozenset(t for t in tokens if t in MODALS),
        content=content,
        attributes=frozenset(c for c in content if lex is not None and lex.is_attribute(c)),
        entities=entities,
        char3=frozenset(squashed[i:i + 3] for i in range(len(squashed) - 2)),
        bigrams=frozenset(zip(tokens, tokens[1:])),
    )


def _jaccard(a: frozenset[Any] | set[Any], b: frozenset[Any] | set[Any]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def _multiset_diff(a: Sequence[str], b: Sequence[str]) -> int:
    ca, cb = Counter(a), Counter(b)
    return sum(((ca - cb) + (cb - ca)).values())


def _order_disagreement(a: list[str], b: list[str]) -> tuple[float, int]:
    """(fraction, count) of discordant pairs among the words both texts share."""
    pos_b: dict[str, int] = {}
    for i, w in enumerate(b):
        pos_b.setdefault(w, i)
    seen: set[str] = set()
    seq: list[int] = []
    for w in a:
        if w in pos_b and w not in seen:
            seen.add(w)
            seq.append(pos_b[w])
    n = len(seq)
    if n < 2:
        return 0.0, 0
    disc = sum(1 for i in range(n) for j in range(i + 1, n) if seq[i] > seq[j])
    return disc / (n * (n - 1) / 2), disc


class WordWeights:
    """Inverse document frequency of content-word stems: a differing rare word
    ("Canada" vs "India", "H2" vs "H2S") matters more than a differing common one.

    Learned without labels from the training texts and stored in the verifier JSON;
    a stem missing from the table counts as rare.
    """

    def __init__(self, df: Mapping[str, int], n_docs: int) -> None:
        self.n_docs = max(int(n_docs), 1)
        self._idf = {w: math.log((self.n_docs + 1) / (int(c) + 1)) for w, c in df.items()}
        self.rare = math.log((self.n_docs + 1) / 2)

    def __call__(self, stem: str) -> float:
        return self._idf.get(stem, self.rare)

    @classmethod
    def uniform(cls) -> "WordWeights":
        w = cls({}, 1)
        w.rare = 1.0
        return w

    @classmethod
    def fit(cls, texts: Sequence[str], min_df: int = 3) -> tuple[dict[str, int], int]:
        """Document frequencies (stems seen in >= ``min_df`` texts) of a corpus."""
        df: Counter[str] = Counter()
        for t in texts:
            df.update(set(profile(t).content))
        return {w: c for w, c in sorted(df.items()) if c >= min_df}, len(texts)


_UNIFORM = WordWeights.uniform()

SIGNAL_NAMES: tuple[str, ...] = (
    "cosine",  # the embedding cosine the candidate was retrieved with
    "negation_mismatch",  # negation words differ in count: "is there (no) cat"
    "number_mismatch",  # numbers/quantities differ: "15%" vs "25%", "two" vs "3"
    "number_diff",  # how many numbers differ
    "unit_mismatch",  # units/currency differ: km vs miles, $ vs €
    "date_mismatch",  # months, weekdays, relative time differ
    "attribute_mismatch",  # attribute words (Lexicon.is_attribute: colour, shape, antonym) on one side only
    "wh_mismatch",  # question words differ: how vs why
    "modal_mismatch",  # can/should/will differ
    "entity_diff",  # capitalized names on one side only
    "content_diff",  # content-word stems on one side only (both sides summed)
    "content_substituted",  # min over sides: >0 means a word was swapped, not added
    "content_added",  # max over sides
    "content_jaccard",
    "diff_weight",  # IDF-weighted content_diff: rare words count more
    "diff_weight_max",  # rarest differing word
    "weighted_overlap",  # IDF-weighted Jaccard of content stems
    "token_jaccard",
    "char3_jaccard",
    "bigram_jaccard",
    "order_disagreement",  # fraction of shared content words in swapped order
    "order_swaps",  # count of swapped pairs: "from Canada to India" vs "from India to Canada"
    "length_ratio",
    "length_diff",
)


def signals_from_profiles(a: TextProfile, b: TextProfile, cosine: float,
                          weights: Optional[WordWeights] = None) -> np.ndarray:
    """The signal vector (order: :data:`SIGNAL_NAMES`) of two profiled texts (stored,
    new). Symmetric: every signal is the same with ``a`` and ``b`` exchanged."""
    wt = weights or _UNIFORM
    ca, cb = set(a.content), set(b.content)
    only_a, only_b = ca - cb, cb - ca
    diff = only_a | only_b
    nums_a, nums_b = list(a.numbers), list(b.numbers)
    if (nums_a or a.number_words) and (nums_b or b.number_words):
        # "one"/"second" count as numbers only when both sides mention numbers
        nums_a += a.number_words
        nums_b += b.number_words
    num_diff = _multiset_diff(nums_a, nums_b)
    la, lb = len(a.tokens), len(b.tokens)
    # Summed in sorted order: a set's iteration order follows the string hash seed, and
    # float sums in another order differ in the last bits (training was not reproducible).
    diff_w = [wt(w) for w in sorted(diff)]
    union_w = math.fsum(wt(w) for w in sorted(ca | cb))
    shared_w = math.fsum(wt(w) for w in sorted(ca & cb))
    order_frac, order_n = _order_disagreement(a.content, b.content)
    return np.array(
        [
            cosine,
            float(a.negations != b.negations),
            float(num_diff > 0),
            float(num_diff),
            float(a.units != b.units),
            float(a.dates != b.dates),
            float(len(a.attributes ^ b.attributes)),
            float(a.wh != b.wh),
            float(a.modals != b.modals),
            float(len(a.entities ^ b.entities)),
            float(len(diff)),
            float(min(len(only_a), len(only_b))),
            float(max(len(only_a), len(only_b))),
            _jaccard(ca, cb),
            math.fsum(diff_w),
            float(max(diff_w, default=0.0)),
            shared_w / union_w if union_w else 1.0,
            _jaccard(set(a.tokens), set(b.tokens)),
            _jaccard(a.char3, b.char3),
            _jaccard(a.bigrams, b.bigrams),
            order_frac,
            float(order_n),
            (min(la, lb) / max(la, lb)) if max(la, lb) else 1.0,
            float(abs(la - lb)),
        ],
        dtype=np.float64,
    )


# Inputs computed from the two texts' embeddings rather than their words: the score of
# the embedding head (:mod:`.model`), used by the "vectors" model.
VECTOR_SIGNAL_NAMES: tuple[str, ...] = ("embedding_head",)
# A model's row: the signals, then the edit features (:mod:`mlc_integrations.verify.text.edits`:
# what kind of edit turns the stored request into the new one), then the head's score.
TEXT_FEATURE_NAMES: tuple[str, ...] = SIGNAL_NAMES + EDIT_FEATURE_NAMES
FEATURE_NAMES: tuple[str, ...] = TEXT_FEATURE_NAMES + VECTOR_SIGNAL_NAMES


def extract_signals(*, stored: str, new: str, cosine: float,
                    weights: Optional[WordWeights] = None) -> dict[str, float]:
    """Named signals for one pair (explanations and tests)."""
    vec = signals_from_profiles(profile(stored), profile(new), cosine, weights)
    return dict(zip(SIGNAL_NAMES, (float(v) for v in vec)))


def text_features(*, stored: str, new: str, cosine: float, weights: Optional[WordWeights] = None,
                  edits: bool = True, profiles: Optional[tuple[TextProfile, TextProfile]] = None) -> np.ndarray:
    """One pair's row of :data:`TEXT_FEATURE_NAMES`: the signals and, if ``edits``, the
    edit features of ``stored`` -> ``new`` (zeros when a model does not read them, so
    the lexicon is never loaded for it). ``profiles``: the (stored, new) profiles, if
    already computed. Keyword-only: the edit features are not symmetric."""
    ps, pn = profiles if profiles is not None else (cached_profile(stored), cached_profile(new))
    sig = signals_from_profiles(ps, pn, cosine, weights)
    ed = edit_features(stored=stored, new=new) if edits else np.zeros(len(EDIT_FEATURE_NAMES))
    return np.concatenate([sig, ed])


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """[|u - v|, u * v] of rows of normalized embeddings (symmetric in u and v; the
    second half sums to the cosine). The embedding head's input, at training and at
    run time."""
    u, v = np.atleast_2d(np.asarray(u, dtype=np.float64)), np.atleast_2d(np.asarray(v, dtype=np.float64))
    return np.hstack([np.abs(u - v), u * v])


# Profiles of recently seen texts: a stored question is compared with many new ones.
_PROFILES: LRU[str, TextProfile] = LRU(4096)


def cached_profile(text: str) -> TextProfile:
    """:func:`profile`, memoized for the most recent 4,096 texts."""
    p = _PROFILES.get(text)
    if p is None:
        p = profile(text)
        _PROFILES.put(text, p)
    return p
