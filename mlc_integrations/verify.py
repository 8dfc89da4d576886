"""Verification: is a retrieved neighbour's answer the answer to the new request?

A cosine threshold alone cannot separate paraphrases from requests whose answer
differs ("is there a cat?" / "is there no cat?" are closer than many true
paraphrases). This module sits between candidate retrieval and reuse:

* :func:`extract_signals` -- cheap deterministic signals of a (new text, stored
  text) pair: negation, numbers / units / dates, content and attribute words
  present on one side only, question-word, length and word-order cues, overlaps,
  and the cosine itself.
* :class:`Verifier` -- a small calibrated model (gradient-boosted trees trained by
  ``python -m mlc_integrations.eval.train_verifier``) read from plain JSON
  (``assets/verifier.json``) and evaluated with numpy only: no scikit-learn at run
  time, no pickle. It outputs the probability that reusing the stored answer is
  correct, and the threshold that reaches a requested precision.
* :class:`VerificationPolicy` -- what the engine asks: accept or refuse a
  candidate. In error-bounded mode (``max_false_hit_rate``) it also explores a
  small fraction of would-be hits, turns the responses the adapter stores next into
  labels, and recalibrates itself online (globally per probability band and per
  cached entry). See ``docs/verification.md``.
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
import threading
import time
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np

log = logging.getLogger(__name__)

DEFAULT_VERIFIER_PATH = Path(__file__).parent / "assets" / "verifier.json"
VERIFIER_FORMAT = "mlc-verifier"
VERIFIER_FORMAT_VERSION = 2  # 2: optional "vectors" model with an embedding head

# ---------------------------------------------------------------------------- lexicons
# Small closed word lists. Negation, numbers, units and dates change an answer by
# themselves; attribute words (colour, shape, size, direction, comparison, ...) are
# the content words whose swap most often changes it.

NEGATIONS = frozenset(
    "not no never none nobody nothing neither nor nowhere without cannot "
    "dont doesnt didnt isnt arent wasnt werent cant couldnt wont wouldnt shouldnt "
    "havent hasnt hadnt mustnt neednt aint".split()
)
_NT_FIX = {"ca": "can", "wo": "will", "sha": "shall", "ai": "is"}

WH_WORDS = frozenset("what why how when where who whom whose which whether".split())
MODALS = frozenset("can could should would will shall may might must".split())

_NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000,
    "million": 1e6, "billion": 1e9, "trillion": 1e12, "dozen": 12, "half": 0.5,
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6,
    "seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10, "twice": 2, "double": 2, "triple": 3,
}
# "one"/"second" are also ordinary words ("which one", "a second opinion"): they count
# as numbers only when the other side has a number too (see _numbers).
_AMBIGUOUS_NUMBER_WORDS = frozenset({"one", "second", "half", "double"})

UNITS = frozenset(
    "% $ € £ ¥ ° percent percentage dollar euro pound rupee yen yuan bitcoin "
    "kg g mg lb lbs oz ton tonne gram kilogram kilo ounce "
    "km m cm mm mi mile meter metre kilometer kilometre inch foot feet ft yard "
    "l ml liter litre gallon cup tablespoon teaspoon "
    "ms sec second minute min hour hr day week month year decade century "
    "kb mb gb tb byte bit kbps mbps gbps hz khz mhz ghz w kw watt volt v amp mah "
    "celsius fahrenheit kelvin calorie kcal mph kph rpm pixel px mp k".split()
)
MONTHS = frozenset(
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec".split()
)
WEEKDAYS = frozenset("monday tuesday wednesday thursday friday saturday sunday".split())
RELATIVE_TIME = frozenset(
    "today tomorrow yesterday tonight now currently before after ago next last previous "
    "past future recent recently latest earlier later morning evening night weekend".split()
)

ATTRIBUTE_WORDS = frozenset(
    # colours
    "red green blue yellow black white gray grey brown teal orange purple pink violet "
    "cyan magenta gold silver beige maroon navy turquoise "
    # shapes
    "circle square rectangle triangle oval ellipse star diamond hexagon pentagon cube "
    "sphere cylinder cone line dot round "
    # size, amount, comparison, ordering
    "big small large tiny huge short long tall high low wide narrow thick thin heavy light "
    "more less most least many few much little fewer greater smaller bigger larger higher "
    "lower longer shorter better worse best worst top bottom maximum minimum max min "
    "increase decrease rise fall "
    # direction, position
    "left right up down above below over under inside outside front back behind north south "
    "east west upper lower forward backward "
    # polarity, state
    "true false yes good bad positive negative hot cold warm cool old new young early late "
    "open closed on off alive dead male female man woman men women boy girl "
    "first last same different possible impossible legal illegal safe dangerous "
    "cheap expensive fast slow easy hard difficult rich poor happy sad love hate "
    "buy sell win lost start stop begin end enter exit import export".split()
)

STOPWORDS = frozenset(
    "a an the and or but if then so than that this these those there here of to in on at by "
    "for with from into onto about as it its itself i me my mine myself we us our ours you "
    "your yours yourself he him his she her hers they them their theirs is are was were be "
    "been being am do does did doing done have has had having get gets got getting "
    "which who whom whose what why how when where whether can could should would will shall "
    "may might must also just very really any some all each every such own other another "
    "only even still too quite rather much via per vs versus etc ever one ones "
    "someone something anyone anything way ways thing things lot lots please tell know "
    "like make makes made s t d ll re ve".split()
) - ATTRIBUTE_WORDS

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
    attributes: frozenset[str]
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
            tokens.append(_NT_FIX.get(base, base))
            tokens.append("not")
            negations += 1
            continue
        if "'" in tok and not tok.endswith("'s"):
            tok = tok.split("'")[0]
        tokens.append(tok)
        if tok in NEGATIONS:
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
        if tok in _NUMBER_WORDS:
            (number_words if tok in _AMBIGUOUS_NUMBER_WORDS else numbers).append(f"{float(_NUMBER_WORDS[tok]):g}")
        if tok in UNITS or stem in UNITS:
            units.add(stem if stem in UNITS else tok)
        if tok in MONTHS or tok in WEEKDAYS or tok in RELATIVE_TIME:
            dates.add(tok)
        if tok in STOPWORDS or tok in NEGATIONS or not tok[0].isalpha():
            continue
        if tok in _NUMBER_WORDS:
            continue
        content.append(stem)
    squashed = " " + " ".join(tokens) + " "
    entities = frozenset(w.casefold() for w in _CAP_WORD.findall(norm)) - STOPWORDS
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
        attributes=frozenset(c for c in content if c in ATTRIBUTE_WORDS),
        entities=entities,
        char3=frozenset(squashed[i:i + 3] for i in range(len(squashed) - 2)),
        bigrams=frozenset(zip(tokens, tokens[1:])),
    )


def _jaccard(a: frozenset[Any] | set[Any], b: frozenset[Any] | set[Any]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def _multiset_diff(a: Sequence[str], b: Sequence[str]) -> int:
    from collections import Counter

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
        from collections import Counter

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
    "attribute_mismatch",  # colour/shape/size/direction/polarity words on one side only
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
    """The signal vector (order: :data:`SIGNAL_NAMES`) of two profiled texts."""
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
    diff_w = [wt(w) for w in diff]
    union_w = sum(wt(w) for w in ca | cb)
    shared_w = sum(wt(w) for w in ca & cb)
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
            float(sum(diff_w)),
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
# the embedding head (:class:`_EmbeddingHead`), used by the "vectors" model.
VECTOR_SIGNAL_NAMES: tuple[str, ...] = ("embedding_head",)
FEATURE_NAMES: tuple[str, ...] = SIGNAL_NAMES + VECTOR_SIGNAL_NAMES


def extract_signals(new_text: str, stored_text: str, cosine: float,
                    weights: Optional[WordWeights] = None) -> dict[str, float]:
    """Named signals for one pair (explanations and tests)."""
    vec = signals_from_profiles(profile(new_text), profile(stored_text), cosine, weights)
    return dict(zip(SIGNAL_NAMES, (float(v) for v in vec)))


# ---------------------------------------------------------------------------- the model
class VerifierFormatError(ValueError):
    """The verifier file is not a model this version can evaluate."""


@dataclass
class _TreeEnsemble:
    """Gradient-boosted trees flattened into arrays: evaluated for all trees at once."""

    features: list[str]
    baseline: float
    feature: np.ndarray  # (nodes,) int, -1 at leaves
    threshold: np.ndarray  # (nodes,) float: go left when x <= threshold
    left: np.ndarray  # (nodes,) int, absolute node index
    right: np.ndarray
    value: np.ndarray  # (nodes,) float, leaf value (already times the learning rate)
    roots: np.ndarray  # (trees,) int
    depth: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "_TreeEnsemble":
        feats, thr, left, right, val, roots = [], [], [], [], [], []
        depth = 0
        off = 0
        for t in d["trees"]:
            n = len(t["feature"])
            if not all(len(t[k]) == n for k in ("threshold", "left", "right", "value")):
                raise VerifierFormatError("tree arrays of different lengths")
            roots.append(off)
            feats.extend(t["feature"])
            thr.extend(t["threshold"])
            left.extend(off + c if c >= 0 else -1 for c in t["left"])
            right.extend(off + c if c >= 0 else -1 for c in t["right"])
            val.extend(t["value"])
            depth = max(depth, int(t.get("depth", n)))
            off += n
        ens = cls(
            features=list(d["features"]),
            baseline=float(d["baseline"]),
            feature=np.asarray(feats, dtype=np.int64),
            threshold=np.asarray(thr, dtype=np.float64),
            left=np.asarray(left, dtype=np.int64),
            right=np.asarray(right, dtype=np.int64),
            value=np.asarray(val, dtype=np.float64),
            roots=np.asarray(roots, dtype=np.int64),
            depth=depth,
        )
        inner = ens.feature >= 0
        if inner.any() and (ens.feature[inner].max() >= len(ens.features) or (ens.left[inner] < 0).any()
                            or (ens.right[inner] < 0).any()):
            raise VerifierFormatError("tree references a missing feature or child")
        return ens

    def raw(self, x: np.ndarray) -> np.ndarray:
        """Sum of leaf values plus baseline (log-odds) for rows of ``x`` (n, features)."""
        n = x.shape[0]
        node = np.broadcast_to(self.roots, (n, len(self.roots))).copy()
        rows = np.arange(n)[:, None]
        for _ in range(self.depth + 1):
            f = self.feature[node]
            inner = f >= 0
            if not inner.any():
                break
            go_left = x[rows, np.where(inner, f, 0)] <= self.threshold[node]
            node = np.where(inner, np.where(go_left, self.left[node], self.right[node]), node)
        return self.baseline + self.value[node].sum(axis=1)


@dataclass
class _Logistic:
    features: list[str]
    coef: np.ndarray
    intercept: float
    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "_Logistic":
        k = len(d["features"])
        coef = np.asarray(d["coef"], dtype=np.float64)
        mean = np.asarray(d.get("mean", [0.0] * k), dtype=np.float64)
        scale = np.asarray(d.get("scale", [1.0] * k), dtype=np.float64)
        if not (coef.shape == mean.shape == scale.shape == (k,)):
            raise VerifierFormatError("logistic model arrays do not match its feature list")
        return cls(list(d["features"]), coef, float(d["intercept"]), mean, scale)

    def raw(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mean) / self.scale) @ self.coef + self.intercept


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """[|u - v|, u * v] of rows of normalized embeddings (symmetric in u and v; the
    second half sums to the cosine)."""
    u, v = np.atleast_2d(np.asarray(u, dtype=np.float64)), np.atleast_2d(np.asarray(v, dtype=np.float64))
    return np.hstack([np.abs(u - v), u * v])


@dataclass
class _EmbeddingHead:
    """Logistic regression on :func:`pair_features` of the two texts' embeddings: the
    classic sentence-pair classification head, a learned per-dimension weighted cosine.
    Its log-odds is the ``embedding_head`` input of the "vectors" model."""

    dim: int
    coef: np.ndarray  # (2 * dim,)
    intercept: float
    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "_EmbeddingHead":
        if d.get("kind") != "logistic" or d.get("input") != "absdiff_product":
            raise VerifierFormatError(f"unknown embedding head {d.get('kind')!r}/{d.get('input')!r}")
        dim = int(d["dim"])
        coef = np.asarray(d["coef"], dtype=np.float64)
        mean = np.asarray(d["mean"], dtype=np.float64)
        scale = np.asarray(d["scale"], dtype=np.float64)
        if not (coef.shape == mean.shape == scale.shape == (2 * dim,)) or not (scale > 0).all():
            raise VerifierFormatError("embedding head arrays do not match its dimension")
        return cls(dim, coef, float(d["intercept"]), mean, scale)

    def raw(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return ((pair_features(u, v) - self.mean) / self.scale) @ self.coef + self.intercept


@dataclass
class VerifierModel:
    """One calibrated model: raw score -> isotonic calibration -> probability."""

    name: str
    scorer: Union[_TreeEnsemble, _Logistic]
    cal_x: np.ndarray
    cal_y: np.ndarray
    operating_points: list[dict[str, float]]
    columns: np.ndarray  # indices into FEATURE_NAMES
    head: Optional[_EmbeddingHead] = None

    @property
    def needs_vectors(self) -> bool:
        return self.head is not None

    @classmethod
    def from_json(cls, name: str, d: Mapping[str, Any]) -> "VerifierModel":
        kind = d.get("kind")
        if kind == "gbdt":
            scorer: Union[_TreeEnsemble, _Logistic] = _TreeEnsemble.from_json(d)
        elif kind == "logistic":
            scorer = _Logistic.from_json(d)
        else:
            raise VerifierFormatError(f"model {name!r}: unknown kind {kind!r}")
        unknown = [f for f in scorer.features if f not in FEATURE_NAMES]
        if unknown:
            raise VerifierFormatError(f"model {name!r} uses signals this version does not compute: {unknown}")
        head = _EmbeddingHead.from_json(d["embedding_head"]) if d.get("embedding_head") else None
        if (head is None) != ("embedding_head" not in scorer.features):
            raise VerifierFormatError(f"model {name!r}: the embedding_head input and its head come together")
        cal = d.get("calibration") or {}
        cx = np.asarray(cal.get("x", []), dtype=np.float64)
        cy = np.asarray(cal.get("y", []), dtype=np.float64)
        if cx.shape != cy.shape or cx.ndim != 1 or (cx.size and (np.diff(cx) < 0).any()):
            raise VerifierFormatError(f"model {name!r}: calibration must be increasing x with matching y")
        ops = sorted((dict(op) for op in d.get("operating_points", [])), key=lambda o: o["precision"])
        return cls(name, scorer, cx, cy, ops, np.asarray([FEATURE_NAMES.index(f) for f in scorer.features]), head)

    def probability(self, signals: np.ndarray, u: Optional[np.ndarray] = None,
                    v: Optional[np.ndarray] = None) -> np.ndarray:
        """Calibrated P(reuse is correct) for rows of the full signal matrix (and, for a
        model with an embedding head, the rows' two embeddings ``u``, ``v``)."""
        x = np.atleast_2d(signals)
        if self.head is not None:
            if u is None or v is None:
                raise ValueError(f"model {self.name!r} needs the two texts' embeddings")
            x = np.c_[x[:, :len(SIGNAL_NAMES)], self.head.raw(u, v)]
        raw = self.scorer.raw(x[:, self.columns])
        if self.cal_x.size:
            return np.interp(raw, self.cal_x, self.cal_y)
        return 1.0 / (1.0 + np.exp(-raw))

    def threshold_for_precision(self, precision: float) -> float:
        """The probability a hit must reach: the requested precision itself.

        Probabilities are calibrated (isotonic, out-of-fold), so accepting only
        candidates with P(correct) >= precision gives every accepted set an expected
        precision >= precision, whatever the mix of candidates. ``operating_points``
        record what that threshold measured in cross-validation.
        """
        return float(precision)


class Verifier:
    """The calibrated verifier read from JSON (``assets/verifier.json`` by default).

    It holds up to four models, used according to what is known about a pair:
    ``vectors`` (texts and both embeddings of the text model it was trained with:
    the cosine and the embedding head), ``full`` (texts and that model's cosine),
    ``lexical`` (texts only: another embedding model, or CLIP's text tower) and
    ``cosine`` (no stored text: ``store_prompts=False``).
    """

    def __init__(self, data: Mapping[str, Any], source: str = "<dict>") -> None:
        if data.get("format") != VERIFIER_FORMAT:
            raise VerifierFormatError(f"{source}: not an {VERIFIER_FORMAT} file")
        if int(data.get("version", 0)) > VERIFIER_FORMAT_VERSION:
            raise VerifierFormatError(f"{source}: format version {data.get('version')} is newer than this library")
        self.source = source
        self.text_model: str = str(data.get("text_model", ""))
        self.training: dict[str, Any] = dict(data.get("training", {}))
        self.models: dict[str, VerifierModel] = {
            name: VerifierModel.from_json(name, m) for name, m in dict(data.get("models", {})).items()
        }
        if "full" not in self.models:
            raise VerifierFormatError(f"{source}: no 'full' model")
        ww = data.get("word_weights") or {}
        self.weights = WordWeights(ww.get("df", {}), int(ww.get("n_docs", 1))) if ww else WordWeights.uniform()
        self._data = data

    @classmethod
    def load(cls, path: Union[str, Path, None] = None) -> "Verifier":
        """Read a verifier JSON file (the shipped one when ``path`` is None)."""
        p = Path(path) if path is not None else DEFAULT_VERIFIER_PATH
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise VerifierFormatError(f"cannot read verifier {p}: {exc}") from exc
        return cls(data, str(p))

    _default: "Optional[Verifier]" = None
    _default_lock = threading.Lock()

    @classmethod
    def default(cls) -> "Verifier":
        """The shipped verifier, read once per process."""
        with cls._default_lock:
            if cls._default is None:
                cls._default = cls.load()
            return cls._default

    def to_json(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._data))

    def save(self, path: Union[str, Path]) -> None:
        Path(path).write_text(json.dumps(self._data, indent=None, separators=(",", ":")), encoding="utf-8")

    def model_for(self, have_text: bool, have_cosine: bool, have_vectors: bool = False) -> Optional[VerifierModel]:
        if have_text and have_cosine:
            if have_vectors and "vectors" in self.models:
                return self.models["vectors"]
            return self.models["full"]
        if have_text:
            return self.models.get("lexical")
        if have_cosine:
            return self.models.get("cosine")
        return None

    def head_dim(self) -> Optional[int]:
        """Embedding dimension the "vectors" model expects (None: no such model)."""
        m = self.models.get("vectors")
        return m.head.dim if m is not None and m.head is not None else None

    def _usable(self, vectors: Optional[tuple[Any, Any]]) -> bool:
        if vectors is None or vectors[0] is None or vectors[1] is None:
            return False
        dim = self.head_dim()
        return dim is not None and np.shape(vectors[0])[-1] == dim == np.shape(vectors[1])[-1]

    def probability(self, new_text: Optional[str], stored_text: Optional[str], cosine: Optional[float],
                    vectors: Optional[tuple[Any, Any]] = None) -> tuple[float, str]:
        """(P(reuse correct), model name) for one pair; (nan, '') if nothing applies.

        ``vectors``: the two texts' normalized embeddings (new, stored) from the text
        model the verifier was trained with; they select the "vectors" model.
        """
        have_text = new_text is not None and stored_text is not None
        have_vectors = cosine is not None and self._usable(vectors)
        model = self.model_for(have_text, cosine is not None, have_vectors)
        if model is None:
            return float("nan"), ""
        if have_text:
            sig = signals_from_profiles(_profile_cached(new_text), _profile_cached(stored_text),  # type: ignore[arg-type]
                                        float(cosine) if cosine is not None else 0.0, self.weights)
        else:
            sig = np.zeros(len(SIGNAL_NAMES))
            sig[0] = float(cosine)  # type: ignore[arg-type]
        u, v = vectors if model.needs_vectors else (None, None)  # type: ignore[misc]
        return float(model.probability(sig, u, v)[0]), model.name

    def probabilities(self, pairs: Sequence[tuple[str, str]], cosines: Sequence[float], model: str = "full",
                      vectors: Optional[tuple[np.ndarray, np.ndarray]] = None) -> np.ndarray:
        """Batch probabilities (evaluation and tests); ``vectors`` = (new rows, stored
        rows) of embeddings for the "vectors" model."""
        x = np.stack([signals_from_profiles(profile(a), profile(b), float(c), self.weights)
                      for (a, b), c in zip(pairs, cosines)])
        u, v = vectors if vectors is not None else (None, None)
        return self.models[model].probability(x, u, v)


class _ProfileCache:
    def __init__(self, maxsize: int = 4096) -> None:
        self._d: OrderedDict[str, TextProfile] = OrderedDict()
        self._lock = threading.Lock()
        self.maxsize = maxsize

    def __call__(self, text: str) -> TextProfile:
        with self._lock:
            p = self._d.get(text)
            if p is not None:
                self._d.move_to_end(text)
                return p
        p = profile(text)
        with self._lock:
            self._d[text] = p
            while len(self._d) > self.maxsize:
                self._d.popitem(last=False)
        return p


_profile_cached = _ProfileCache()


# ---------------------------------------------------------------------------- answers
def normalize_answer(text: str) -> str:
    """Case, Unicode form, whitespace and surrounding punctuation folded."""
    t = unicodedata.normalize("NFKC", text).casefold()
    t = re.sub(r"\s+", " ", t).strip()
    return t.strip(" .!?,;:\"'")


AnswerMatcher = Callable[[str, str], bool]


def exact_answer_match(fresh: str, stored: str) -> bool:
    """Normalized exact match: a conservative label (a reworded but equal answer counts
    as a wrong reuse), which can only make the false-hit estimate pessimistic."""
    return normalize_answer(fresh) == normalize_answer(stored)


# ---------------------------------------------------------------------------- policy
# Default precision asked of the verifier: at 0.80 it refuses every negation and
# changed colour/shape word on easy-vqa's test split and all 300 changed-number qqp_val
# questions, and keeps 47 % of the paraphrases ("full" model, the default; 53 % with the
# opt-in "vectors" model);
# cross-validated precision 0.855 on qqp_val (0.908 class-balanced; 1.000 on easy-vqa)
# with "full" (0.881 / 0.926 with "vectors").
# At 0.90 and above it keeps under 10 % of easy-vqa's same-answer pairs. Reproduce:
#   python -m mlc_integrations.eval.train_verifier train   (table "Shipped model")
#   python -m mlc_integrations.eval.train_verifier vqa
DEFAULT_MIN_PRECISION = 0.80
DEFAULT_EXPLORE_RATE = 0.05
# Bands of calibrated probability in which the online calibration counts labels;
# finer near 1, where the decision threshold lives.
BAND_EDGES: tuple[float, ...] = (0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.96, 0.97,
                                 0.98, 0.99, 0.995, 1.0)


@dataclass
class Decision:
    """The verifier's verdict on one candidate.

    ``outcome``: ``accepted``; ``refused`` (probability under the threshold, or the
    entry's own labels say it is often wrong); ``explored`` (a would-be hit answered
    as a miss on purpose, to be labelled by the next update); ``unverified`` (no
    model applies: accepted on the raw cosine thresholds).
    """

    accept: bool
    probability: float
    threshold: float
    outcome: str
    model: str = ""
    band: int = -1
    tier: str = ""

    @property
    def verified(self) -> bool:
        return self.outcome != "unverified"


@dataclass
class _Band:
    lo: float
    hi: float
    prior_error: float
    traffic: int = 0
    labels: int = 0
    wrong: int = 0
    hits: int = 0
    explored: int = 0


@dataclass
class _EntryRecord:
    labels: int = 0
    wrong: int = 0


@dataclass
class _PendingLabel:
    entry_id: str
    band: int
    stored_answer: str
    explored: bool
    at: float = field(default_factory=time.monotonic)


class VerificationPolicy:
    """Accept or refuse candidates; in error-bounded mode, keep checking itself.

    Static mode (default): accept when the calibrated probability reaches the
    threshold the verifier measured for ``min_precision``.

    Error-bounded mode (``max_false_hit_rate=δ``): probabilities are grouped in
    bands; each band's error rate is a posterior mean that starts at the offline
    calibration (worth ``prior_strength`` labels) and moves with online labels.
    The threshold is the lowest band such that an upper confidence bound on the
    false-hit rate of everything accepted (bands weighted by their traffic) stays
    <= δ. Labels come for free from refused candidates (the application calls the
    model and stores the fresh answer, which is compared with the candidate's),
    and from exploration: a fraction ``explore_rate`` of would-be hits whose band
    is not yet individually proven <= δ is answered as a miss on purpose.

    Per neighbourhood (a cached entry, within one band), labels shrink toward the
    band's estimate: an entry whose neighbours were often served wrongly is refused
    even when its band is accepted, and an entry whose own labels prove its
    neighbourhood <= δ (upper bound) is accepted even when its band is not: popular
    entries earn hits where the global threshold alone would refuse them.
    """

    def __init__(
        self,
        verifier: Verifier,
        *,
        min_precision: float = DEFAULT_MIN_PRECISION,
        max_false_hit_rate: Optional[float] = None,
        explore_rate: float = DEFAULT_EXPLORE_RATE,
        prior_strength: float = 20.0,
        entry_prior_strength: float = 5.0,
        confidence_z: float = 1.645,
        answer_match: Union[str, AnswerMatcher] = "exact",
        cosine_matches_verifier: bool = True,
        embedding_head: bool = False,
        max_pending: int = 10_000,
        pending_ttl: float = 3600.0,
        max_entries_tracked: int = 100_000,
        seed: Optional[int] = None,
    ) -> None:
        if not (0.0 < min_precision < 1.0):
            raise ValueError("min_precision must be in (0, 1)")
        if max_false_hit_rate is not None and not (0.0 < max_false_hit_rate < 1.0):
            raise ValueError("max_false_hit_rate must be in (0, 1) or None")
        if not (0.0 <= explore_rate <= 1.0):
            raise ValueError("explore_rate must be in [0, 1]")
        if answer_match == "exact":
            self._match: AnswerMatcher = exact_answer_match
        elif callable(answer_match):
            self._match = answer_match
        else:
            raise ValueError("answer_match must be 'exact' or a callable(fresh_answer, stored_answer) -> bool")
        self.verifier = verifier
        # Opt-in: the "vectors" model raised qqp_val's cross-validated AP (0.802 -> 0.817)
        # but lowered common paraphrases ("capital city of France" / "capital of France":
        # 0.88 -> 0.54; "picture" / "image": 0.89 -> 0.68): it learns Quora's labelling
        # quirks. Default: the texts + cosine ("full") model.
        self.embedding_head = bool(embedding_head)
        self.min_precision = float(min_precision)
        self.max_false_hit_rate = None if max_false_hit_rate is None else float(max_false_hit_rate)
        self.explore_rate = float(explore_rate)
        self.prior_strength = float(prior_strength)
        self.entry_prior_strength = float(entry_prior_strength)
        self.z = float(confidence_z)
        self.cosine_matches_verifier = cosine_matches_verifier
        self.max_pending = max_pending
        self.pending_ttl = pending_ttl
        self.max_entries_tracked = max_entries_tracked
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {k: 0 for k in ("candidates", "accepted", "refused", "explored", "unverified",
                                                     "refused_by_entry", "accepted_by_entry", "labels", "labels_wrong",
                                                     "explored_labels", "explored_wrong", "pending_expired")}
        self._latency: list[float] = []
        self._warned: set[str] = set()
        self._bands = [_Band(lo, hi, max(1e-4, 1.0 - (lo + min(hi, 1.0)) / 2.0))
                       for lo, hi in zip(BAND_EDGES[:-1], BAND_EDGES[1:])]
        self._entries: OrderedDict[tuple[str, int], _EntryRecord] = OrderedDict()  # (entry, band)
        self._pending: OrderedDict[str, dict[str, _PendingLabel]] = OrderedDict()
        self._accept_from = len(self._bands)  # index of the lowest accepted band
        if self.error_bounded:
            self._recompute()

    @property
    def error_bounded(self) -> bool:
        return self.max_false_hit_rate is not None

    @property
    def wants_vectors(self) -> bool:
        """True when the verifier has a model that uses the two texts' embeddings and
        the engine's cosine comes from its text model (worth fetching a stored vector)."""
        return self.embedding_head and self.cosine_matches_verifier and self.verifier.head_dim() is not None

    @property
    def mode(self) -> str:
        return "error_bounded" if self.error_bounded else "static"

    # ------------------------------------------------------------- thresholds
    def static_threshold(self, model: str) -> float:
        return self.verifier.models[model].threshold_for_precision(self.min_precision)

    @property
    def threshold(self) -> float:
        """The current decision threshold on the probability (full model)."""
        if not self.error_bounded:
            return self.static_threshold("full")
        with self._lock:
            return self._band_threshold()

    def _band_threshold(self) -> float:
        return self._bands[self._accept_from].lo if self._accept_from < len(self._bands) else 1.0

    def _band_of(self, p: float) -> int:
        for i, b in enumerate(self._bands):
            if p < b.hi:
                return i
        return len(self._bands) - 1

    def _band_error(self, b: _Band) -> float:
        return (b.wrong + self.prior_strength * b.prior_error) / (b.labels + self.prior_strength)

    def _band_var(self, b: _Band) -> float:
        # Agresti-Coull style: z^2/2 extra pseudo-errors keep rare-event bounds honest.
        n = b.labels + self.prior_strength + self.z ** 2
        e = (b.wrong + self.prior_strength * b.prior_error + self.z ** 2 / 2) / n
        return e * (1 - e) / n

    def _band_proven(self, b: _Band) -> bool:
        assert self.max_false_hit_rate is not None
        return self._band_error(b) + self.z * math.sqrt(self._band_var(b)) <= self.max_false_hit_rate

    def _aggregate(self, start: int) -> tuple[float, float]:
        """(estimate, upper bound) of the false-hit rate when bands >= start are accepted."""
        sel = self._bands[start:]
        weights = np.array([float(b.traffic) for b in sel])
        # Bands without traffic serve nobody: they weigh nothing (uniform before any traffic).
        weights = weights / weights.sum() if weights.sum() > 0 else np.full(len(sel), 1.0 / len(sel))
        errs = np.array([self._band_error(b) for b in sel])
        var = np.array([self._band_var(b) for b in sel])
        est = float(weights @ errs)
        return est, est + self.z * float(math.sqrt(float((weights ** 2) @ var)))

    def _recompute(self) -> None:
        assert self.max_false_hit_rate is not None
        k = len(self._bands)
        for start in range(len(self._bands) - 1, -1, -1):
            if not self._bands[start].traffic:
                continue  # a band is opened only once it is seen (its first candidate recomputes)
            if self._aggregate(start)[1] <= self.max_false_hit_rate:
                k = start  # the lowest band whose accepted set keeps the bound
        self._accept_from = k

    # ------------------------------------------------------------- deciding
    def decide(
        self,
        new_text: Optional[Union[str, bytes]],
        stored_text: Optional[str],
        cosine: Optional[float],
        *,
        entry_id: str = "",
        request_key: str = "",
        stored_answer: Optional[str] = None,
        vectors: Optional[tuple[Any, Any]] = None,
    ) -> Decision:
        """Verdict on one candidate (``cosine`` None when it is not the verifier's text
        model's; ``vectors`` the (new, stored) embeddings behind that cosine, if known;
        ``stored_answer`` the candidate's answer text, which error-bounded mode compares
        with the fresh answer the application stores next)."""
        t0 = time.perf_counter()
        if isinstance(new_text, (bytes, bytearray)):
            new_text = bytes(new_text).decode("utf-8", "replace")
        if cosine is not None and not self.cosine_matches_verifier:
            cosine = None
        p, model = self.verifier.probability(new_text, stored_text, cosine, vectors if self.embedding_head else None)
        if not model:
            self._warn_once("unverified", "verifier has no model for candidates without stored text and without "
                            "the cosine of its text model; accepting on the raw thresholds")
            with self._lock:
                self._counts["candidates"] += 1
                self._counts["unverified"] += 1
            return Decision(True, float("nan"), float("nan"), "unverified")
        if stored_text is None:
            self._warn_once("no_text", "prompts are not stored (store_prompts=False): verifying on the calibrated "
                            "cosine only, which needs a much higher similarity for the same precision")
        with self._lock:
            self._counts["candidates"] += 1
            if self.error_bounded:
                d = self._decide_bounded(p, model, entry_id, request_key, stored_answer)
            else:
                thr = self.static_threshold(model)
                d = Decision(p >= thr, p, thr, "accepted" if p >= thr else "refused", model)
            self._counts[d.outcome] += 1
            if len(self._latency) >= 10_000:
                del self._latency[:5000]
            self._latency.append((time.perf_counter() - t0) * 1000.0)
        return d

    def _entry_view(self, entry_id: str, bi: int) -> Optional[tuple[float, float]]:
        """(error estimate, upper bound) of one entry's neighbourhood in one band, its
        labels shrunk toward the band's estimate; None without labels."""
        rec = self._entries.get((entry_id, bi))
        if rec is None or not rec.labels:
            return None
        e_band = self._band_error(self._bands[bi])
        m = self.entry_prior_strength
        est = (rec.wrong + m * e_band) / (rec.labels + m)
        n = rec.labels + m + self.z ** 2
        e = (rec.wrong + m * e_band + self.z ** 2 / 2) / n
        return est, est + self.z * math.sqrt(e * (1 - e) / n)

    def _decide_bounded(self, p: float, model: str, entry_id: str, request_key: str,
                        stored_answer: Optional[str]) -> Decision:
        assert self.max_false_hit_rate is not None
        delta = self.max_false_hit_rate
        bi = self._band_of(p)
        band = self._bands[bi]
        band.traffic += 1
        if band.traffic & (band.traffic - 1) == 0:
            self._recompute()  # traffic shares moved (1st, 2nd, 4th, ... candidate of a band)
        thr = self._band_threshold()
        entry = self._entry_view(entry_id, bi) if entry_id else None
        proven = self._band_proven(band)
        if bi < self._accept_from:
            # The band is not accepted; a neighbourhood whose own labels prove it <= δ is.
            if entry is None or entry[1] > delta:
                self._add_pending(request_key, entry_id, bi, stored_answer, explored=False)
                return Decision(False, p, thr, "refused", model, bi)
            self._counts["accepted_by_entry"] += 1
            proven = False  # keep checking it
        elif entry is not None and entry[0] > max(delta, self._band_error(band)):
            # The band is accepted, but this entry's neighbours were often served wrongly.
            self._counts["refused_by_entry"] += 1
            self._add_pending(request_key, entry_id, bi, stored_answer, explored=False)
            return Decision(False, p, thr, "refused", model, bi)
        if not proven and self._rng.random() < self.explore_rate:
            band.explored += 1
            self._add_pending(request_key, entry_id, bi, stored_answer, explored=True)
            return Decision(False, p, thr, "explored", model, bi)
        band.hits += 1
        return Decision(True, p, thr, "accepted", model, bi)

    def _add_pending(self, request_key: str, entry_id: str, band: int, stored_answer: Optional[str],
                     explored: bool) -> None:
        if not request_key or stored_answer is None:
            return
        slot = self._pending.get(request_key)
        if slot is None:
            slot = self._pending[request_key] = {}
        else:
            self._pending.move_to_end(request_key)
        if entry_id not in slot and len(slot) < 4:
            slot[entry_id] = _PendingLabel(entry_id, band, str(stored_answer)[:8192], explored)
        while len(self._pending) > self.max_pending:
            self._pending.popitem(last=False)
            self._counts["pending_expired"] += 1

    # ------------------------------------------------------------- labels
    def observe(self, request_key: str, fresh_answer: Optional[str]) -> list[bool]:
        """The application stored a fresh answer (its text) for ``request_key``: label the
        candidates this request was refused or explored with. Returns the labels
        (True = reusing the candidate would have been right)."""
        if not self.error_bounded:
            return []
        with self._lock:
            slot = self._pending.pop(request_key, None)
        if not slot or fresh_answer is None:
            return []
        fresh = str(fresh_answer)
        now = time.monotonic()
        labels = []
        for pend in slot.values():
            if now - pend.at > self.pending_ttl:
                with self._lock:
                    self._counts["pending_expired"] += 1
                continue
            try:
                right = bool(self._match(fresh, pend.stored_answer))
            except Exception as exc:  # a user matcher must not break update()
                log.warning("answer_match failed (%s); label skipped", exc)
                continue
            labels.append(right)
            self.record_label(pend.entry_id, pend.band, right, explored=pend.explored)
        return labels

    def record_label(self, entry_id: str, band: int, right: bool, *, explored: bool = False) -> None:
        """Add one label (used by :meth:`observe`; public for offline replay)."""
        with self._lock:
            b = self._bands[band]
            b.labels += 1
            b.wrong += 0 if right else 1
            self._counts["labels"] += 1
            self._counts["labels_wrong"] += 0 if right else 1
            if explored:
                self._counts["explored_labels"] += 1
                self._counts["explored_wrong"] += 0 if right else 1
            if entry_id:
                key = (entry_id, band)
                rec = self._entries.get(key)
                if rec is None:
                    rec = self._entries[key] = _EntryRecord()
                    while len(self._entries) > self.max_entries_tracked:
                        self._entries.popitem(last=False)
                else:
                    self._entries.move_to_end(key)
                rec.labels += 1
                rec.wrong += 0 if right else 1
            if self.error_bounded:
                self._recompute()

    def forget_entry(self, entry_id: str) -> None:
        with self._lock:
            for key in [k for k in self._entries if k[0] == entry_id]:
                del self._entries[key]

    # ------------------------------------------------------------- reporting
    def _warn_once(self, key: str, msg: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg)

    def stats(self) -> dict[str, Any]:
        """Counts, the current threshold, and a false-hit estimate only when labels back it."""
        with self._lock:
            out: dict[str, Any] = {"mode": self.mode, **self._counts}
            lat = list(self._latency)
            out["pending_labels"] = len(self._pending)
            out["latency_ms_per_candidate_p50"] = float(np.median(lat)) if lat else None
            if not self.error_bounded:
                out["min_precision"] = self.min_precision
                out["threshold"] = self.static_threshold("full")
                out["false_hit_rate"] = None
                out["false_hit_rate_note"] = ("not measured online in static mode (set max_false_hit_rate to "
                                              "measure it); offline cross-validated precision at this threshold "
                                              f">= {self.min_precision} on qqp_val and easy-vqa")
                return out
            out["max_false_hit_rate"] = self.max_false_hit_rate
            out["explore_rate"] = self.explore_rate
            out["threshold"] = self._band_threshold()
            accepted = self._bands[self._accept_from:]
            labelled = sum(b.labels for b in accepted)
            if self._accept_from < len(self._bands) and labelled:
                est, ucb = self._aggregate(self._accept_from)
                out["false_hit_rate"] = {"estimate": est, "upper_bound": ucb, "labels": labelled,
                                         "basis": "online labels in the accepted bands, offline calibration as prior"}
            else:
                out["false_hit_rate"] = None
                out["false_hit_rate_note"] = "no labels yet in the accepted bands: no measured estimate"
            # Hits through neighbourhood evidence: each was accepted only while its own
            # upper bound was <= δ (counted in "accepted_by_entry").
            out["neighbourhoods_accepted"] = sum(
                1 for (eid, bi), rec in self._entries.items()
                if bi < self._accept_from and rec.labels
                and (v := self._entry_view(eid, bi)) is not None and v[1] <= self.max_false_hit_rate)
            out["explored_measured_false_hit_rate"] = (
                self._counts["explored_wrong"] / self._counts["explored_labels"]
                if self._counts["explored_labels"] else None)
            out["bands"] = [
                {"p": [b.lo, min(b.hi, 1.0)], "traffic": b.traffic, "labels": b.labels, "wrong": b.wrong,
                 "hits": b.hits, "explored": b.explored, "error_estimate": self._band_error(b),
                 "accepted": i >= self._accept_from}
                for i, b in enumerate(self._bands) if b.traffic or b.labels
            ]
            out["entries_with_labels"] = len(self._entries)
            return out

    def reset_stats(self) -> None:
        with self._lock:
            for k in self._counts:
                self._counts[k] = 0
            self._latency.clear()


def make_policy(
    verifier: Any = "default",
    *,
    min_precision: float = DEFAULT_MIN_PRECISION,
    max_false_hit_rate: Optional[float] = None,
    explore_rate: float = DEFAULT_EXPLORE_RATE,
    text_model: Optional[str] = None,
    seed: Optional[int] = None,
    embedding_head: bool = False,
) -> Optional[VerificationPolicy]:
    """The policy for the engine's ``verifier`` option.

    ``"default"`` the shipped verifier; ``None``/``"off"``/``False`` no verification
    (raw cosine thresholds, as other semantic caches); a path to a verifier JSON; a
    :class:`Verifier`; or a ready :class:`VerificationPolicy` (used as is).
    """
    if verifier is None or verifier is False or verifier == "off":
        if max_false_hit_rate is not None:
            raise ValueError("max_false_hit_rate needs the verifier (verifier='off' was given)")
        return None
    if isinstance(verifier, VerificationPolicy):
        return verifier
    if verifier is True or verifier == "default":
        v = Verifier.default()
    elif isinstance(verifier, Verifier):
        v = verifier
    elif isinstance(verifier, (str, Path)):
        v = Verifier.load(verifier)
    else:
        raise ValueError("verifier must be 'default', 'off'/None, a path to a verifier JSON, a Verifier or a "
                         f"VerificationPolicy, not {type(verifier).__name__}")
    from .models import resolve_text_model

    same_model = resolve_text_model(text_model) == resolve_text_model(v.text_model or None)
    if not same_model:
        log.info("engine text model differs from the verifier's (%s): verifying without the cosine signal",
                 v.text_model)
    return VerificationPolicy(v, min_precision=min_precision, max_false_hit_rate=max_false_hit_rate,
                              explore_rate=explore_rate, cosine_matches_verifier=same_model, seed=seed,
                              embedding_head=embedding_head)
