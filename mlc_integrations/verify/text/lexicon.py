"""Lexical relations between English words, from WordNet 3.0 (shipped with the package).

Whether a substituted word changes a request's answer depends on how the two words
relate: "picture"/"image" (synonyms) keep it, "left"/"right" (antonyms),
"cat"/"dog" (co-hyponyms: same kind of thing, another value) and "Paris"/"London"
change it. :func:`relation` answers that question for two words:

    >>> relation("bigger", "smaller")
    'antonym'

The data is a compact derivation of WordNet 3.0 (``assets/lexicon/wordnet.json.gz``,
built by ``python -m evaluation.training.build_lexicon``; licence notice beside it).
It is read lazily on first use, from the package, never from the network; relations
are cached, so a repeated question costs about a microsecond.

Senses are weighed by frequency: a relation through a word's common senses wins
over one through a rare sense ("big"/"bad" share only a rare sense of "big").
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Optional, Union
from ...assets import ASSETS_DIR

log = logging.getLogger(__name__)

DEFAULT_LEXICON_PATH = ASSETS_DIR / "lexicon" / "wordnet.json.gz"
LEXICON_FORMAT = "mlc-lexicon"
LEXICON_FORMAT_VERSION = 1

#: Everything :func:`relation` can answer, most specific first. ``hypernym``: the
#: second word is more general ("dog" -> "animal"); ``hyponym``: more specific;
#: ``similar``: adjectives of one WordNet cluster ("huge"/"large"); ``derived``: one
#: concept in another word class ("invent"/"invention", "tall"/"height"); ``cohyponym``:
#: two values of one close category ("red"/"blue", "Monday"/"Friday", "cat"/"dog")
#: or of one attribute ("hot"/"warm": temperature); ``unknown``: a word WordNet lacks.
RELATIONS = ("same", "synonym", "antonym", "similar", "derived", "hypernym", "hyponym", "cohyponym", "unrelated",
             "unknown")

# WordNet's detachment rules (morphy(7WN)): suffix -> replacement, tried in order
# after the exception lists.
_SUFFIXES: dict[str, tuple[tuple[str, str], ...]] = {
    "n": (("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"),
          ("men", "man"), ("ies", "y")),
    "v": (("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"), ("ing", "")),
    "a": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
    "r": (),
}
# A sense never seen in WordNet's sense-tagged corpus costs this much more than its
# rank: such senses exist ("big" = "bad" in "a big cold") but rarely mean what a
# request means.
_UNATTESTED_PENALTY = 4
_MAX_SENSES = 12  # per lemma and part of speech: the tail is rare senses
_HYPERNYM_DEPTH = 4  # "dog" -> "domestic animal" -> "animal": 2 steps
_CONTRAST_DEPTH = 2  # co-hyponyms share a non-general hypernym within 2 steps of both
_PROFILE_MAX_COST = 8  # relations through rarer senses than this are not looked for
_PRIORITY = {k: i for i, k in enumerate(RELATIONS)}


@dataclass(frozen=True)
class Relation:
    """How two words relate: ``kind`` (one of :data:`RELATIONS`) and ``cost``, the
    summed sense ranks it goes through (0: both words' most frequent senses)."""

    kind: str
    cost: int = 0


_NONE = 1 << 30  # "no such relation" in cost comparisons


@dataclass
class _Profile:
    """Synset -> cheapest sense cost maps of one word (see ``Lexicon._profile_uncached``)."""

    senses: dict[int, int] = field(default_factory=dict)
    heads: dict[int, int] = field(default_factory=dict)
    antonyms: dict[int, int] = field(default_factory=dict)
    attributes: dict[int, int] = field(default_factory=dict)
    derived: dict[int, int] = field(default_factory=dict)
    ancestors: dict[int, int] = field(default_factory=dict)
    contrast: dict[int, int] = field(default_factory=dict)


def _put(d: dict[int, int], key: int, cost: int) -> None:
    if cost < d.get(key, _NONE):
        d[key] = cost


def _meet(x: dict[int, int], y: dict[int, int]) -> int:
    """Cheapest summed cost over the keys two maps share (``_NONE`` if none)."""
    if len(x) > len(y):
        x, y = y, x
    return min((c + y[k] for k, c in x.items() if k in y), default=_NONE)


def _adjacency(pairs: Any) -> dict[int, tuple[int, ...]]:
    adj: dict[int, list[int]] = {}
    for a, b in pairs:
        adj.setdefault(a, []).append(b)
        adj.setdefault(b, []).append(a)
    return {k: tuple(v) for k, v in adj.items()}


class LexiconFormatError(ValueError):
    """The lexicon file is not one this version can read."""


def _key(word: str) -> str:
    return "_".join(word.strip().casefold().replace("\u2019", "'").split())


class Lexicon:
    """The WordNet-derived lexicon (use :meth:`default` for the shipped one)."""

    def __init__(self, data: Mapping[str, Any], source: str = "<dict>") -> None:
        if data.get("format") != LEXICON_FORMAT:
            raise LexiconFormatError(f"{source}: not an {LEXICON_FORMAT} file")
        if int(data.get("version", 0)) > LEXICON_FORMAT_VERSION:
            raise LexiconFormatError(f"{source}: format version {data.get('version')} is newer than this library")
        self.source = source
        self.lexnames: list[str] = list(data["lexnames"])
        self._lemmas: dict[str, dict[str, list[int]]] = data["lemmas"]
        self._pos: str = data["pos"]
        self._lexname: list[int] = data["lexname"]
        self._hyper: list[list[int]] = data["hyper"]
        self._similar = {int(k): tuple(v) for k, v in data["similar"].items()}
        self._attribute = {int(k): tuple(v) for k, v in data["attribute"].items()}
        self._direct_antonyms = frozenset((int(a), int(b)) for a, b in data["antonyms"])
        self._antonyms = set(self._direct_antonyms)
        self._antonyms |= {(int(a), int(b)) for a, b in data["derived_antonyms"]}
        self._derivation = frozenset((int(a), int(b)) for a, b in data.get("derivation", ()))
        self._antonym_of = _adjacency(self._antonyms)
        self._derived_of = _adjacency(self._derivation)
        self._proper = frozenset(int(i) for i in data["proper"])
        self._capitalized = frozenset(int(i) for i in data.get("capitalized", ()))
        self._general = frozenset(int(i) for i in data["general"])
        self._exceptions: dict[str, dict[str, list[str]]] = data["exceptions"]
        self._members_map: Optional[dict[int, list[str]]] = None
        self._children_map: Optional[dict[int, list[int]]] = None
        # Bounded caches per instance: words and pairs recur across requests.
        self.lemmatize = lru_cache(maxsize=65536)(self._lemmatize)  # type: ignore[method-assign]
        self.senses = lru_cache(maxsize=65536)(self._senses)  # type: ignore[method-assign]
        self._ancestors = lru_cache(maxsize=65536)(self._ancestors_uncached)
        self._profile = lru_cache(maxsize=65536)(self._profile_uncached)
        self._relation = lru_cache(maxsize=131072)(self._relation_uncached)
        self.is_attribute = lru_cache(maxsize=65536)(self._is_attribute)  # type: ignore[method-assign]
        self._with_antonym = frozenset(s for pair in self._direct_antonyms for s in pair)

    # ------------------------------------------------------------- loading
    @classmethod
    def load(cls, path: Union[str, Path, None] = None) -> "Lexicon":
        """Read a lexicon file (the shipped one when ``path`` is None)."""
        p = Path(path) if path is not None else DEFAULT_LEXICON_PATH
        try:
            with gzip.open(p, "rt", encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError) as exc:
            raise LexiconFormatError(f"cannot read lexicon {p}: {exc}") from exc
        lex = cls(data, str(p))
        log.debug("lexicon %s: %d synsets", p, len(lex._pos))
        return lex

    _default: "Optional[Lexicon]" = None
    _default_lock = threading.Lock()

    @classmethod
    def default(cls) -> "Lexicon":
        """The shipped lexicon, read once per process (on first use)."""
        with cls._default_lock:
            if cls._default is None:
                cls._default = cls.load()
            return cls._default

    # ------------------------------------------------------------- words
    def _lemmatize(self, word: str) -> tuple[tuple[str, str], ...]:
        """(part of speech, lemma) pairs WordNet knows for ``word`` ("children" ->
        child/n, "bigger" -> big/a, "left" -> left/a, left/n, leave/v, ...)."""
        w = _key(word)
        out: list[tuple[str, str]] = []
        for pos in "nvar":
            known = self._lemmas[pos]
            cands: list[str] = []
            if w in known:
                cands.append(w)
            cands.extend(self._exceptions[pos].get(w, ()))
            if not cands:
                for suffix, repl in _SUFFIXES[pos]:
                    if w.endswith(suffix) and len(w) > len(suffix):
                        cands.append(w[: len(w) - len(suffix)] + repl)
            for c in cands:
                if c in known and (pos, c) not in out:
                    out.append((pos, c))
        return tuple(out)

    def known(self, word: str) -> bool:
        """True when WordNet has the word (in any inflection)."""
        return bool(self.lemmatize(word))

    def _senses(self, word: str) -> tuple[tuple[int, int], ...]:
        """(synset, cost) of every sense of ``word``, cheapest first; cost = sense rank,
        plus a penalty for senses unattested in WordNet's tagged corpus."""
        best: dict[int, int] = {}
        lemmas = self.lemmatize(word)
        # A part of speech never seen in the tagged corpus while another one is ("old"
        # the noun vs "old" the adjective) is a rare reading of the word as a whole.
        attested = any(self._lemmas[pos][lem][0] > 0 for pos, lem in lemmas)
        for pos, lemma in lemmas:
            entry = self._lemmas[pos][lemma]
            tagged = int(entry[0]) if attested else max(int(entry[0]), 1)
            for rank, sid in enumerate(entry[1:1 + _MAX_SENSES]):
                cost = rank if rank < tagged else rank + _UNATTESTED_PENALTY
                if cost < best.get(sid, 1 << 30):
                    best[sid] = cost
        return tuple(sorted(best.items(), key=lambda kv: (kv[1], kv[0])))

    def categories(self, word: str, max_cost: int = 1) -> frozenset[str]:
        """WordNet lexicographer files ("noun.time", "noun.location", "adj.all", ...)
        of the word's common senses (cost <= ``max_cost``): what kind of thing it is."""
        return frozenset(self.lexnames[self._lexname[s]] for s, c in self.senses(word) if c <= max_cost)

    def semantic_class(self, word: str) -> str:
        """What a word names, from the lexicographer files of its common senses: "time"
        (yesterday, year), "place" (city, kitchen is not), "person" (child, expert),
        "communication" (sentence, summary), "quantity" (word count units), "modifier"
        (adjectives and adverbs only), "other"; "" when WordNet lacks the word."""
        cats = self.categories(word, 0)
        if not cats:
            return ""
        for cat, name in (("noun.time", "time"), ("noun.location", "place"), ("noun.person", "person"),
                          ("noun.communication", "communication"), ("noun.quantity", "quantity")):
            if cat in cats:
                return name
        if not any(c.startswith(("noun.", "verb.")) for c in cats):
            return "modifier"
        return "other"

    def _is_attribute(self, word: str) -> bool:
        """Whether the word names a value of an attribute, the kind of word whose swap
        changes an answer ("red", "triangle", "above", "open"): one of its common senses
        (cost <= 1) is a shape (noun.shape), a quality that is both a noun attribute and an
        adjective (colours: "teal"), or has a direct antonym ("above"/"below", "big"/"small")."""
        cats = self.categories(word, 1)
        if "noun.shape" in cats or ("noun.attribute" in cats and "adj.all" in cats):
            return True
        return any(s in self._with_antonym for s in self._own_senses(word, 1, None))

    def is_proper(self, word: str) -> bool:
        """True when the word's most frequent sense names an individual (a city, a
        person, a country) rather than a kind."""
        s = self.senses(word)
        return bool(s) and s[0][0] in self._proper

    def capitalized(self, word: str) -> bool:
        """True when WordNet writes one of the word's common senses with a capital
        without it naming an individual ("Monday", "French"): a capital letter then
        does not make the word a name."""
        return any(sid in self._capitalized for sid, c in self.senses(word) if c <= 1)

    def attested(self, word: str) -> bool:
        """True when one of the word's senses occurs in WordNet's sense-tagged corpus
        (a rough "common word" test)."""
        return any(self._lemmas[pos][lem][0] > 0 for pos, lem in self.lemmatize(word))

    # ------------------------------------------------------------- word sets
    def vocabulary(self, pos: str) -> list[str]:
        """Attested single-word lemmas of one part of speech ("n", "v", "a", "r"),
        sorted: the pool evaluation suites draw word pairs from."""
        return sorted(lem for lem, entry in self._lemmas[pos].items()
                      if entry[0] > 0 and lem.isalpha())

    def _members(self) -> dict[int, list[str]]:
        """synset -> its lemmas (built on first use: only word-set queries need it)."""
        if self._members_map is None:
            m: dict[int, list[str]] = {}
            for pos in "nvar":
                for lemma, entry in self._lemmas[pos].items():
                    for sid in entry[1:]:
                        m.setdefault(sid, []).append(lemma)
            self._members_map = m
        return self._members_map

    def _children(self) -> dict[int, list[int]]:
        if self._children_map is None:
            c: dict[int, list[int]] = {}
            for sid, hs in enumerate(self._hyper):
                for h in hs:
                    c.setdefault(h, []).append(sid)
            self._children_map = c
        return self._children_map

    def _word_set(self, sids: Any, exclude: str) -> list[str]:
        members = self._members()
        out: list[str] = []
        for sid in sids:
            for lem in members.get(sid, ()):
                if lem != exclude and lem not in out:
                    out.append(lem)
        return out

    def _own_senses(self, word: str, max_cost: int, pos: Optional[str]) -> list[int]:
        return [s for s, c in self.senses(word) if c <= max_cost and (pos is None or self._pos[s] == pos)]

    def synonyms(self, word: str, max_cost: int = 0, pos: Optional[str] = None) -> list[str]:
        """Other lemmas of the word's senses up to ``max_cost`` ("film" -> movie, ...)."""
        return self._word_set(self._own_senses(word, max_cost, pos), _key(word))

    def antonyms(self, word: str, max_cost: int = 0, pos: Optional[str] = None) -> list[str]:
        """Lemmas of the direct antonyms of the word's senses up to ``max_cost``."""
        mine = set(self._own_senses(word, max_cost, pos))
        return self._word_set(sorted({b if a in mine else a for a, b in self._direct_antonyms
                                      if a in mine or b in mine}), _key(word))

    def cohyponyms(self, word: str, max_cost: int = 0, pos: Optional[str] = None) -> list[str]:
        """Contrast set: lemmas of the sibling synsets under the direct (non-general)
        hypernyms of the word's senses up to ``max_cost`` ("Monday" -> Tuesday, ...)."""
        mine = self._own_senses(word, max_cost, pos)
        children = self._children()
        sib = [c for s in mine for h in self._hyper[s] if h not in self._general for c in children.get(h, ())
               if c not in mine]
        return self._word_set(sib, _key(word))

    # ------------------------------------------------------------- relations
    def _ancestors_uncached(self, sid: int) -> dict[int, int]:
        """Hypernyms of a synset within :data:`_HYPERNYM_DEPTH` steps -> distance."""
        out: dict[int, int] = {}
        frontier = [sid]
        for d in range(1, _HYPERNYM_DEPTH + 1):
            nxt = []
            for s in frontier:
                for h in self._hyper[s]:
                    if h not in out:
                        out[h] = d
                        nxt.append(h)
            frontier = nxt
        return out

    def _heads(self, sid: int) -> tuple[int, ...]:
        """An adjective synset and the cluster head(s) it is a satellite of."""
        return (sid,) + self._similar.get(sid, ())

    def _profile_uncached(self, word: str) -> "_Profile":
        """Everything a relation needs about one word, as synset -> cheapest cost maps:
        a relation is then a few dictionary intersections, not a loop over sense pairs."""
        pr = _Profile()
        for x, c in self.senses(word):
            if c > _PROFILE_MAX_COST:
                break  # senses are cheapest first; the rare tail would only add costly relations
            _put(pr.senses, x, c)
            heads = self._similar.get(x, ())
            for h in heads:
                _put(pr.heads, h, c)
            for k, node in enumerate((x,) + heads):  # antonyms of a cluster head are indirect: +1
                for y in self._antonym_of.get(node, ()):
                    _put(pr.antonyms, y, c + min(k, 1))
                for att in self._attribute.get(node, ()):
                    _put(pr.attributes, att, c)
            for y in self._derived_of.get(x, ()):
                _put(pr.derived, y, c)
            if self._pos[x] in "nv":
                for h, d in self._ancestors(x).items():
                    _put(pr.ancestors, h, c + d - 1)
                    if d <= _CONTRAST_DEPTH and h not in self._general:
                        _put(pr.contrast, h, c)
        return pr

    def _relation_uncached(self, a: str, b: str) -> Relation:
        ka, kb = _key(a), _key(b)
        if ka == kb:
            return Relation("same")
        la, lb = self.lemmatize(ka), self.lemmatize(kb)
        if not la or not lb:
            return Relation("unknown")
        if {lem for _, lem in la} & {lem for _, lem in lb}:
            return Relation("same")
        pa, pb = self._profile(ka), self._profile(kb)
        targets_b = dict(pb.senses)  # an antonym of b itself (0) or of its cluster head (+1)
        for h, c in pb.heads.items():
            _put(targets_b, h, c + 1)
        cands = [
            ("synonym", _meet(pa.senses, pb.senses)),
            ("antonym", _meet(pa.antonyms, targets_b)),
            # a satellite and its head ("huge"/"large"); two satellites of one head are one
            # step further apart, and often contrasting values ("red"/"blue" under "chromatic")
            ("similar", min(_meet(pa.senses, pb.heads), _meet(pb.senses, pa.heads), _meet(pa.heads, pb.heads) + 1)),
            # one concept in another word class; an adjective and its attribute ("tall"/"height")
            ("derived", min(_meet(pa.derived, pb.senses), _meet(pa.attributes, pb.senses),
                            _meet(pb.attributes, pa.senses))),
            ("hypernym", _meet(pa.ancestors, pb.senses)),
            ("hyponym", _meet(pb.ancestors, pa.senses)),
            ("cohyponym", min(_meet(pa.contrast, pb.contrast), _meet(pa.attributes, pb.attributes) + 1)),
        ]
        found = [(cost, _PRIORITY[kind], kind) for kind, cost in cands if cost < _NONE]
        if not found:
            return Relation("unrelated")
        cost, _, kind = min(found)
        syn = cands[0][1]
        if kind == "derived" and syn < _NONE:
            # Two words that share a synset are synonyms even when a cheaper derivational
            # link (another word class) also joins them: "picture" / "image".
            return Relation("synonym", int(syn))
        return Relation(kind, int(cost))

    def relation_detail(self, a: str, b: str) -> Relation:
        """:func:`relation` with the sense cost it was found at (cached)."""
        return self._relation(a, b)

    def relation(self, a: str, b: str) -> str:
        """How ``b`` relates to ``a``: one of :data:`RELATIONS`."""
        return self._relation(a, b).kind


def relation(a: str, b: str) -> str:
    """How word ``b`` relates to word ``a`` in the shipped lexicon (see :data:`RELATIONS`)."""
    return Lexicon.default().relation(a, b)


def default_lexicon() -> Lexicon:
    return Lexicon.default()
