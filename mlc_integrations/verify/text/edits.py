"""What kind of edit separates two requests?

A cached answer can be reused for a reworded request ("What does this image show?"
for "What is shown in this picture?") but not for one whose answer differs (*left* /
*right*, "from A to B" / "from B to A", 'Is "Apple" capitalized?' / '"apple"').
Embedding cosines score both alike. :func:`analyse` aligns the two requests token by
token and names the edit:

* surface only: case, whitespace, punctuation, Unicode compatibility forms;
* inside quotes, code, regexes or indented structured data: any change, even of case
  or spacing, is kept apart (it changes the answer);
* reordering: a moved block (harmless) vs arguments swapped around a directional
  connector ("from A to B", "A bigger than B") or a symmetric one ("A and B");
* substituted content words, classified by the WordNet lexicon
  (:mod:`mlc_integrations.verify.text.lexicon`): synonym, hypernym, antonym, co-hyponym, another
  named entity, unrelated, unknown;
* inserted or deleted content (a constraint) by what it names: time, place, person,
  format, modifier;
* closed-class words: negation, numbers, quantifiers, modality, question words,
  prepositions, pronouns, tense, degree; request frames ("could you", "please").

It returns a fixed-length vector (:data:`EDIT_FEATURE_NAMES`) for the verifier's
model and a readable ``kind``. Pure and deterministic.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional

import numpy as np

from .tokens import (
    degree_of,
    is_entity,
    match_moved_numbers,
    merge_phrases,
    AMBIGUOUS_NUMBERS,
    COORDINATORS,
    DEGREE,
    FUNCTION_WORDS,
    FUTURE_AUX,
    MODALS,
    NEGATION,
    PAST_AUX,
    PREPOSITIONS,
    PRESENT_AUX,
    PRONOUNS,
    QUANTIFIERS,
    WH,
    Token,
    align_tokens,
    is_structured,
    is_wordlike,
    number_value,
    polite_sentences,
    protected_diff,
    request_frame,
    spacing,
    spelling_key,
    surface_kind,
    tokenize,
    wh_equivalents,
)
from ...runtime.lru import LRU
from .lexicon import Lexicon

# Bounds on the work per pair, so that a pasted document costs milliseconds, not seconds:
_MAX_DISCORDANT = 64  # discordant word pairs examined: enough to tell a swap from a moved block
_MAX_UNITS = 16  # unmatched content words per side compared through the lexicon (the rest: insertions)
_MAX_ORDERED = 128  # matched content words whose order is compared

# ---------------------------------------------------------------------------- features
EDIT_FEATURE_NAMES: tuple[str, ...] = (
    "edit_identical",
    "edit_surface_only",  # only case / spacing / punctuation / Unicode forms differ, outside quotes and code
    "edit_case_changes",  # words differing only in case (outside quotes and code)
    "edit_space_changed",  # spacing differs (outside quotes, code, structured data)
    "edit_punct_changes",
    "edit_compat_only",  # equal under NFKC only (full-width letters, ligatures)
    "edit_protected_changed",  # quoted / code / regex spans that differ
    "edit_protected_case_space",  # ... of which only in case or spacing
    "edit_structure_changed",  # indentation / line structure of structured text differs
    "edit_moved",  # content words out of order as a moved block ("In this picture, what ...")
    "edit_swap_directional",  # arguments swapped around "to", "from", "than", "of": answer-changing
    "edit_swap_symmetric",  # swapped around "and", "or", "vs"
    "edit_sub_synonym",
    "edit_sub_weak_synonym",  # synonyms only through rare senses ("big"/"bad")
    "edit_sub_derived",  # the same concept in another word class ("tall" / "height", "invent" / "invention")
    "edit_sub_hypernym",
    "edit_sub_antonym",
    "edit_sub_cohyponym",
    "edit_sub_entity",
    "edit_sub_unrelated",
    "edit_sub_unknown",  # a substituted word WordNet does not know
    "edit_inflection",  # same lemma, another form (plural, tense)
    "edit_degree",  # big / bigger / biggest, more / most / less
    "edit_ins_content",  # content words inserted or deleted (both sides)
    # what the inserted, deleted or replaced (not synonymous) content words name: a changed constraint
    "edit_constraint_time", "edit_constraint_place", "edit_constraint_person", "edit_constraint_format",
    "edit_constraint_modifier", "edit_constraint_entity", "edit_constraint_unknown",
    "edit_number_changed",
    "edit_number_added",
    "edit_negation",  # the parity of negations differs
    "edit_quantifier",
    "edit_modal",  # can / should / must ... (not in a request frame)
    "edit_request_form",  # "could you", "please", "tell me": the frame of the request, not its content
    "edit_wh",
    "edit_preposition",  # a preposition replaced ("on" / "under")
    "edit_preposition_added",
    "edit_pronoun",
    "edit_tense",
    "edit_changed_fraction",  # words not matched as equal / all words
)
_F = {n: i for i, n in enumerate(EDIT_FEATURE_NAMES)}


@dataclass
class EditAnalysis:
    """The edit between two requests: ``kind`` (short label, most answer-changing
    edit first), ``detail`` (the words involved) and the feature vector."""

    kind: str
    detail: str
    features: np.ndarray
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, float]:
        return dict(zip(EDIT_FEATURE_NAMES, (float(v) for v in self.features)))

    def explain(self) -> str:
        return f"{self.kind}: {self.detail}" if self.detail else self.kind


class EditAnalyser:
    """Aligns two requests and classifies the edit (see the module docstring)."""

    def __init__(self, lexicon: Optional[Lexicon] = None) -> None:
        self._lexicon = lexicon
        # A stored request is compared with many new ones: its tokens are computed once.
        self._tokenize = lru_cache(maxsize=4096)(lambda text: tuple(tokenize(text)))
        # A refused candidate is analysed twice (its features, then the refusal's detail).
        self._pairs: LRU[tuple[str, str], EditAnalysis] = LRU(1024)

    @property
    def lexicon(self) -> Lexicon:
        if self._lexicon is None:
            self._lexicon = Lexicon.default()
        return self._lexicon

    def analyse(self, a: str, b: str) -> EditAnalysis:
        """The edit turning request ``a`` (e.g. the stored one) into ``b`` (the new one);
        memoized per pair (treat the result as read-only)."""
        found = self._pairs.get((a, b))
        if found is None:
            found = self._analyse(a, b)
            self._pairs.put((a, b), found)
        return found

    def _analyse(self, a: str, b: str) -> EditAnalysis:
        f = np.zeros(len(EDIT_FEATURE_NAMES))
        surface = surface_kind(a, b)
        prot, prot_soft = protected_diff(a, b)
        f[_F["edit_protected_changed"]], f[_F["edit_protected_case_space"]] = prot, prot_soft
        if is_structured(a) or is_structured(b):
            la = [ln.rstrip() for ln in a.strip("\n").split("\n")]
            lb = [ln.rstrip() for ln in b.strip("\n").split("\n")]
            f[_F["edit_structure_changed"]] = float(la != lb and [x.strip() for x in la] == [y.strip() for y in lb])
        if surface == "identical":
            f[_F["edit_identical"]] = 1.0
            return EditAnalysis("identical", "", f)
        ta, tb = self._tokenize(a), self._tokenize(b)
        wa, wb = [t for t in ta if is_wordlike(t)], [t for t in tb if is_wordlike(t)]
        pa, pb = [t.low for t in ta if not is_wordlike(t)], [t.low for t in tb if not is_wordlike(t)]
        f[_F["edit_punct_changes"]] = sum(((Counter(pa) - Counter(pb)) + (Counter(pb) - Counter(pa))).values())
        f[_F["edit_space_changed"]] = float(spacing(a) != spacing(b))
        if surface is not None and not prot:
            f[_F["edit_surface_only"]] = 1.0
            f[_F["edit_compat_only"]] = float(surface == "unicode-only")
            f[_F["edit_case_changes"]] = sum(x.raw != y.raw for x, y in zip(wa, wb))
            return EditAnalysis(surface, "", f)
        return _Alignment(self.lexicon, wa, wb, f, prot, prot_soft).run()


class _Alignment:
    """One pair's alignment state (built and discarded per call)."""

    def __init__(self, lex: Lexicon, wa: list[Token], wb: list[Token], f: np.ndarray, prot: float,
                 prot_soft: float) -> None:
        self.lex, self.wa, self.wb, self.f = lex, wa, wb, f
        self.prot, self.prot_soft = prot, prot_soft
        self.events: list[tuple[int, str, str]] = []  # (rank, kind, detail): lowest rank is reported

    def add(self, rank: int, kind: str, detail: str = "") -> None:
        self.events.append((rank, kind, detail))

    def run(self) -> EditAnalysis:
        wa, wb, f = self.wa, self.wb, self.f
        match, ua, ub = align_tokens([t.low for t in wa], [t.low for t in wb])
        f[_F["edit_case_changes"]] = sum(wa[i].raw != wb[j].raw and not (wa[i].initial or wb[j].initial)
                                         and not wa[i].protected for i, j in match.items())
        f[_F["edit_changed_fraction"]] = (len(ua) + len(ub)) / max(len(wa) + len(wb), 1)
        self._numbers()
        frame_a = {i for i in ua if request_frame(wa, i)} | polite_sentences(wa, ua)
        frame_b = {j for j in ub if request_frame(wb, j)} | polite_sentences(wb, ub)
        same_a, same_b = wh_equivalents(self.lex, wa, wb, ua, ub)
        self._function_words(ua, ub, frame_a, frame_b, same_a, same_b)
        ca = [i for i in ua if self._content(wa[i]) and i not in frame_a | same_a]
        cb = [j for j in ub if self._content(wb[j]) and j not in frame_b | same_b]
        overflow = max(len(ca) - _MAX_UNITS, 0) + max(len(cb) - _MAX_UNITS, 0)
        ca, cb = ca[:_MAX_UNITS], cb[:_MAX_UNITS]
        f[_F["edit_ins_content"]] += overflow
        self._moves(ca, cb, match)  # same word elsewhere: a reordering, not an edit of content
        match_moved_numbers(wa, wb, ua, ub, match)
        self._substitutions(ca, cb, match)
        self._order(match)
        if self.prot:
            self.add(1, "quoted/code change", "case or spacing only" if self.prot_soft == self.prot else "")
        if f[_F["edit_structure_changed"]]:
            self.add(0, "structure change", "indentation")
        if not self.events:
            if f[_F["edit_changed_fraction"]]:
                self.add(90, "rewording")
            else:  # the same words once contractions are expanded: "what's" / "what is"
                f[_F["edit_surface_only"]] = 1.0
                self.add(95, "case-only" if f[_F["edit_case_changes"]] else
                         "punctuation-only" if f[_F["edit_punct_changes"]] else "contraction or spelling")
        self.events.sort(key=lambda e: e[0])
        rank, kind, detail = self.events[0]
        return EditAnalysis(kind, detail, f, [f"{k}: {d}" if d else k for _, k, d in self.events[1:]])

    # ------------------------------------------------------------- pieces
    @staticmethod
    def _content(t: Token) -> bool:
        return t.low not in FUNCTION_WORDS and number_value(t.low) is None and t.low[0].isalpha()

    def _numbers(self) -> None:
        def values(w: list[Token], strict: bool) -> Counter[float]:
            return Counter(v for t in w if (v := number_value(t.low)) is not None
                           and not (strict and t.low in AMBIGUOUS_NUMBERS))

        # "one"/"second"/"half" are numbers only when the other side has a number too
        # ("which one" is not a count).
        na, nb = values(self.wa, True), values(self.wb, True)
        if na or nb:
            na, nb = values(self.wa, False), values(self.wb, False)
        only_a, only_b = sum((na - nb).values()), sum((nb - na).values())
        self.f[_F["edit_number_changed"]] = min(only_a, only_b)
        self.f[_F["edit_number_added"]] = abs(only_a - only_b)
        if only_a or only_b:
            da = ",".join(f"{v:g}" for v in sorted((na - nb).elements()))
            db = ",".join(f"{v:g}" for v in sorted((nb - na).elements()))
            self.add(10, "number change", f"{da or '-'} -> {db or '-'}")

    def _function_words(self, ua: list[int], ub: list[int], frame_a: set[int], frame_b: set[int],
                        same_a: set[int], same_b: set[int]) -> None:
        f, wa, wb = self.f, self.wa, self.wb
        neg_a = sum(t.low in NEGATION for t in wa)
        neg_b = sum(t.low in NEGATION for t in wb)
        if neg_a % 2 != neg_b % 2:
            f[_F["edit_negation"]] = 1.0
            self.add(5, "negation", "")
        if frame_a or frame_b:
            f[_F["edit_request_form"]] = len(frame_a) + len(frame_b)
            self.add(80, "request form", f"{' '.join(wa[i].low for i in sorted(frame_a)) or '-'} -> "
                                         f"{' '.join(wb[j].low for j in sorted(frame_b)) or '-'}")

        framed = bool(frame_a or frame_b)

        def diff(cls: frozenset[str] | dict[str, str], feature: str, rank: int, label: str,
                 added: str = "count") -> None:
            """Words of one closed class on one side only. ``added``: what a word with no
            counterpart counts as: "count" (a change), a feature name, or "ignore"."""
            key = (lambda w: cls[w]) if isinstance(cls, dict) else (lambda w: w)  # noqa: E731
            xa = Counter(key(wa[i].low) for i in ua if wa[i].low in cls and i not in frame_a | same_a)
            xb = Counter(key(wb[j].low) for j in ub if wb[j].low in cls and j not in frame_b | same_b)
            oa, ob = xa - xb, xb - xa
            sub, add = min(sum(oa.values()), sum(ob.values())), abs(sum(oa.values()) - sum(ob.values()))
            if added == "count":
                sub, add = sub + add, 0
            elif added != "ignore":
                f[_F[added]] += add
            f[_F[feature]] += sub
            if sub:
                self.add(rank, label, f"{' '.join(sorted(oa)) or '-'} -> {' '.join(sorted(ob)) or '-'}")

        diff(QUANTIFIERS, "edit_quantifier", 30, "quantifier change")
        diff(DEGREE, "edit_degree", 26, "degree change")
        diff(MODALS, "edit_modal", 32, "modality change")
        # "Tell me the capital" / "What is the capital": a question word added by a request frame
        diff(WH, "edit_wh", 34, "question-word change", "ignore" if framed else "count")
        diff(PREPOSITIONS, "edit_preposition", 36, "preposition change", "edit_preposition_added")
        diff(PRONOUNS, "edit_pronoun", 40, "pronoun change")
        tense = lambda w, idx: {("past" if w[i].low in PAST_AUX else "future" if w[i].low in FUTURE_AUX  # noqa: E731
                                 else "present") for i in idx if w[i].low in PAST_AUX | PRESENT_AUX | FUTURE_AUX}
        ta, tb = tense(wa, range(len(wa))), tense(wb, range(len(wb)))
        if ta and tb and ta != tb:
            f[_F["edit_tense"]] = 1.0
            self.add(38, "tense change", f"{'/'.join(sorted(ta))} -> {'/'.join(sorted(tb))}")

    def _moves(self, ca: list[int], cb: list[int], match: dict[int, int]) -> None:
        """Unmatched content words that occur unmatched on the other side too (same
        word or same lemma) were moved or reinflected: match them."""
        for i in list(ca):
            ti = self.wa[i]
            for j in cb:
                tj = self.wb[j]
                if ti.low == tj.low or self.lex.relation(ti.low, tj.low) == "same" \
                        or spelling_key(ti.low) == spelling_key(tj.low):
                    match[i] = j
                    ca.remove(i)
                    cb.remove(j)
                    if ti.low != tj.low and spelling_key(ti.low) == spelling_key(tj.low):
                        self.f[_F["edit_sub_synonym"]] += 1
                        self.add(88, "spelling variant", f"{ti.low} -> {tj.low}")
                    elif ti.low != tj.low:
                        degree = degree_of(self.lex, ti.low) != degree_of(self.lex, tj.low)
                        self.f[_F["edit_degree" if degree else "edit_inflection"]] += 1
                        self.add(26 if degree else 85, "degree change" if degree else "inflection",
                                 f"{ti.low} -> {tj.low}")
                    break

    def _substitutions(self, ca: list[int], cb: list[int], match: dict[int, int]) -> None:
        f, lex = self.f, self.lex
        ua, ub = merge_phrases(self.lex, ca, self.wa), merge_phrases(self.lex, cb, self.wb)
        order = {"same": 0, "synonym": 1, "similar": 1, "derived": 2, "hypernym": 2, "hyponym": 2, "antonym": 3,
                 "cohyponym": 4, "unrelated": 5, "unknown": 6}
        cands = []
        for x, (wx, ix, tx) in enumerate(ua):
            for y, (wy, iy, ty) in enumerate(ub):
                rel = lex.relation_detail(wx, wy)
                if spelling_key(wx) == spelling_key(wy):
                    rel = type(rel)("synonym", 0)
                # prefer related words, then words at the same place in the sentence
                pos_gap = abs(ix[0] / max(len(self.wa), 1) - iy[0] / max(len(self.wb), 1))
                cands.append((order[rel.kind], pos_gap, x, y, rel))
        used_a: set[int] = set()
        used_b: set[int] = set()
        for _, _, x, y, rel in sorted(cands, key=lambda c: (c[0], c[1])):
            if x in used_a or y in used_b:
                continue
            used_a.add(x)
            used_b.add(y)
            (wx, ix, tx), (wy, iy, ty) = ua[x], ub[y]
            detail = f"{wx.replace('_', ' ')} -> {wy.replace('_', ' ')}"
            kind = rel.kind
            if is_entity(self.lex, wx, tx) and is_entity(self.lex, wy, ty) and kind not in ("same", "synonym"):
                f[_F["edit_sub_entity"]] += 1
                self.add(14, "different entity", detail)
            elif kind in ("synonym", "similar", "same"):
                strong = rel.cost <= 2 or kind == "same"
                f[_F["edit_sub_synonym" if strong else "edit_sub_weak_synonym"]] += 1
                self.add(82 if strong else 60, "synonym" if strong else "rare-sense synonym", detail)
            elif kind == "derived":
                strong = rel.cost <= 1  # through rare senses it is no evidence of the same meaning
                f[_F["edit_sub_derived" if strong else "edit_sub_weak_synonym"]] += 1
                self.add(84 if strong else 60, "derived form" if strong else "rare-sense relation", detail)
            elif kind in ("hypernym", "hyponym"):
                f[_F["edit_sub_hypernym"]] += 1
                self.add(70, kind, detail)
            elif kind == "antonym":
                f[_F["edit_sub_antonym"]] += 1
                self.add(12, "antonym", detail)
            elif kind == "cohyponym":
                f[_F["edit_sub_cohyponym"]] += 1
                self.add(16, "co-hyponym", detail)
            else:
                f[_F["edit_sub_unknown" if kind == "unknown" else "edit_sub_unrelated"]] += 1
                self.add(50 if kind == "unknown" else 55, f"{kind} word change", detail)
            if kind not in ("same", "synonym", "similar", "derived"):
                self._constraint(wx, tx)
                self._constraint(wy, ty)
            for i, j in zip(ix, iy):
                match.setdefault(i, j)  # aligned for the order analysis
        for side, units, used in (("removed", ua, used_a), ("added", ub, used_b)):
            for k, (word, _idx, tok) in enumerate(units):
                if k not in used:
                    self._inserted(word, tok, side)

    def _constraint(self, word: str, tok: Token) -> str:
        """Count what a changed content word names (time, place, audience, format, ...)."""
        cls = "entity" if is_entity(self.lex, word, tok) else self.lex.semantic_class(word) or "unknown"
        cls = {"communication": "format", "quantity": "format"}.get(cls, cls)
        if cls != "other":
            self.f[_F[f"edit_constraint_{cls}"]] += 1
        return cls

    def _inserted(self, word: str, tok: Token, side: str) -> None:
        self.f[_F["edit_ins_content"]] += 1
        cls = self._constraint(word, tok)
        label = {"person": "audience", "other": "content"}.get(cls, cls)
        self.add(20, f"{side} {label}", word.replace("_", " "))

    def _order(self, match: dict[int, int]) -> None:
        """Pairs of arguments whose order flipped: a swap when the words between
        them are the same on both sides, else a moved block."""
        wa, wb, f = self.wa, self.wb, self.f
        # arguments: content words and numbers ("12 divided by 4" / "4 divided by 12")
        pairs = sorted((i, j) for i, j in match.items()
                       if self._content(wa[i]) or number_value(wa[i].low) is not None)[:_MAX_ORDERED]
        fn = lambda w, lo, hi: [t.low for t in w[lo + 1:hi] if not self._content(t)]  # noqa: E731
        moved = directional = symmetric = 0
        swapped: tuple[str, str] = ("", "")
        for x in range(len(pairs)):
            for y in range(x + 1, len(pairs)):
                (i1, j1), (i2, j2) = pairs[x], pairs[y]
                if j1 < j2:
                    continue
                if moved + directional + symmetric >= _MAX_DISCORDANT:
                    break
                between_a, between_b = fn(wa, i1, i2), fn(wb, j2, j1)
                if between_a and between_a == between_b:
                    if all(w in COORDINATORS for w in between_a):
                        symmetric += 1
                    else:
                        directional += 1
                        swapped = (wa[i1].low, wa[i2].low)
                else:
                    moved += 1
        # the words displaced around swapped arguments are not a separate moved block
        moved = 0 if directional or symmetric else moved
        f[_F["edit_moved"]], f[_F["edit_swap_directional"]], f[_F["edit_swap_symmetric"]] = moved, directional, symmetric
        if directional:
            self.add(11, "argument swap", f"{swapped[0]} <-> {swapped[1]}")
        elif symmetric:
            self.add(75, "symmetric swap", "")
        elif moved:
            self.add(78, "reordering", "")


_default_analyser = EditAnalyser()


def analyse(a: str, b: str, lexicon: Optional[Lexicon] = None) -> EditAnalysis:
    """The edit turning request ``a`` into ``b`` (shipped lexicon unless one is given)."""
    return (EditAnalyser(lexicon) if lexicon is not None else _default_analyser).analyse(a, b)


def edit_features(a: str, b: str) -> np.ndarray:
    """The :data:`EDIT_FEATURE_NAMES` vector of a pair (for the verifier's model)."""
    return analyse(a, b).features
