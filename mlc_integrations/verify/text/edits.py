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

from bisect import bisect_left
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
    Token,
    align_tokens,
    is_structured,
    is_wordlike,
    number_value,
    polite_sentences,
    protected_diff,
    protected_texts,
    request_frame,
    spacing,
    spelling_key,
    surface_kind,
    tokenize,
    wh_equivalents,
)
from ...runtime.lru import LRU
from .lexicon import Lexicon
from .words import (
    AMBIGUOUS_NUMBERS,
    COORDINATORS,
    DEGREE,
    FUNCTION_WORDS,
    FUTURE_AUX,
    MODALS,
    NEGATIONS,
    PAST_AUX,
    PREPOSITIONS,
    PRESENT_AUX,
    PRONOUNS,
    QUANTIFIERS,
    WH,
)

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


@dataclass(frozen=True)
class Change:
    """One edit found between two requests: the analysis' ``kind`` and ``detail`` (lower
    case, "argument swap" / "lyon <-> nice"), its ``rank`` (lower: more likely to change
    the answer) and ``text``, what the user changed in their own words ("swapped: Lyon ↔
    Nice", "added: for beginners"; empty for an edit of case or spelling alone)."""

    rank: int
    kind: str
    detail: str = ""
    text: str = ""

    def explain(self) -> str:
        return f"{self.kind}: {self.detail}" if self.detail else self.kind


@dataclass
class EditAnalysis:
    """The edit between two requests: ``kind`` (short label, most answer-changing
    edit first), ``detail`` (the words involved), the feature vector, and every
    :class:`Change` found, the reported one first. The verifier's model reads
    ``features``; a refusal names :meth:`what_changed`: both come from this one analysis."""

    kind: str
    detail: str
    features: np.ndarray
    notes: list[str] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    # the aligned spans that differ ("different: A → B"): named when no change is
    rewritten: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, float]:
        return dict(zip(EDIT_FEATURE_NAMES, (float(v) for v in self.features)))

    def explain(self) -> str:
        return f"{self.kind}: {self.detail}" if self.detail else self.kind

    def what_changed(self, limit: int = 3) -> str:
        """What the user changed, in their own words, the reported edit first: e.g.
        ``different: Paris → Rome; added: for beginners``. Empty when only case,
        spacing or punctuation differ (outside quotes and code)."""
        texts: list[str] = []
        for c in self.changes:
            if c.text and c.text not in texts:
                texts.append(c.text)
        if not texts and not self.features[_F["edit_surface_only"]]:
            texts = list(dict.fromkeys(self.rewritten))
        out = texts[:limit]
        if len(texts) > limit:
            more = len(texts) - limit
            out.append(f"and {more} more change{'s' if more > 1 else ''}")
        return "; ".join(out)


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

    def analyse(self, *, stored: str, new: str) -> EditAnalysis:
        """The edit turning the ``stored`` request into the ``new`` one; memoized per pair
        (treat the result as read-only). Keyword-only: the two are not interchangeable
        ("added" on one side is "dropped" on the other)."""
        found = self._pairs.get((stored, new))
        if found is None:
            found = self._analyse(stored, new)
            self._pairs.put((stored, new), found)
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
            return EditAnalysis(surface, "", f, changes=[Change(95, surface)])
        quoted = ""
        if prot:  # the first quoted / code span that differs, as written
            qa, qb = protected_texts(a), protected_texts(b)
            if qa != qb:
                x, y = next(((x, y) for x, y in zip(qa, qb) if x != y), (" ".join(qa), " ".join(qb)))
                quoted = f"different: {x or '—'} → {y or '—'}"
        return _Alignment(self.lexicon, wa, wb, f, prot, prot_soft, quoted).run()


class _Alignment:
    """One pair's alignment state (built and discarded per call)."""

    def __init__(self, lex: Lexicon, wa: list[Token], wb: list[Token], f: np.ndarray, prot: float,
                 prot_soft: float, quoted: str = "") -> None:
        self.lex, self.wa, self.wb, self.f = lex, wa, wb, f
        self.prot, self.prot_soft, self.quoted = prot, prot_soft, quoted
        self.events: list[Change] = []  # the lowest rank is reported
        self.gap_a: dict[int, int] = {}  # unmatched token -> its gap in the first alignment
        self.gap_b: dict[int, int] = {}
        self.first_match: dict[int, int] = {}
        self.first_inverse: dict[int, int] = {}
        self.by_start: tuple[dict[int, list[int]], dict[int, list[int]]] = ({}, {})  # the tokens of one written word

    def add(self, rank: int, kind: str, detail: str = "", text: str = "") -> None:
        self.events.append(Change(rank, kind, detail, text))

    # ------------------------------------------------------------- the user's words
    @staticmethod
    def _written(w: list[Token], idx: "set[int] | list[int]") -> str:
        """The words at ``idx`` as written (a contraction once: "Can't", not "can not")."""
        out: list[str] = []
        seen: set[int] = set()
        for i in sorted(idx):
            if w[i].start not in seen:
                seen.add(w[i].start)
                out.append(w[i].written or w[i].raw)
        return " ".join(out)

    def _sides(self, ia: "set[int] | list[int]", ib: "set[int] | list[int]", gaps: bool) -> tuple[set[int], set[int]]:
        """Token indices to name for an edit at ``ia`` / ``ib``: with ``gaps``, the whole
        unaligned stretch each lies in on both sides ("a" -> "no", "for beginners"); and the
        other half of a contraction the edit split ("Can" -> "Can't")."""
        A, B = set(ia), set(ib)
        if gaps:
            g = {self.gap_a[i] for i in A if i in self.gap_a} | {self.gap_b[j] for j in B if j in self.gap_b}
            A |= {i for i, k in self.gap_a.items() if k in g}
            B |= {j for j, k in self.gap_b.items() if k in g}
        for side, other, w, m, by in ((A, B, self.wa, self.first_match, self.by_start[0]),
                                      (B, A, self.wb, self.first_inverse, self.by_start[1])):
            other |= {m[k] for i in list(side) for k in by[w[i].start] if k != i and k in m}
        return A, B

    def _text(self, ia: "set[int] | list[int]", ib: "set[int] | list[int]", gaps: bool = False,
              label: str = "") -> str:
        """"different: A → B", "added: B", "dropped: A" (or ``label``: A → B) for the edit at ``ia`` / ``ib``."""
        A, B = self._sides(ia, ib, gaps)
        x, y = self._written(self.wa, A), self._written(self.wb, B)
        if label:
            return f"{label}: {x or '—'} → {y or '—'}"
        if x and y:
            return f"different: {x} → {y}"
        return f"added: {y}" if y else f"dropped: {x}" if x else ""

    def _gaps(self, match: dict[int, int], ua: list[int], ub: list[int]) -> None:
        """Number the unaligned stretches of the first (monotone) alignment: the tokens
        between the same two aligned pairs share a gap on both sides."""
        self.first_match = dict(match)
        self.first_inverse = {j: i for i, j in match.items()}
        for w, by in zip((self.wa, self.wb), self.by_start):
            for i, t in enumerate(w):
                by.setdefault(t.start, []).append(i)
        pairs = sorted(match.items())
        ka, kb = [i for i, _ in pairs], sorted(j for _, j in pairs)
        self.gap_a = {i: bisect_left(ka, i) for i in ua}
        self.gap_b = {j: bisect_left(kb, j) for j in ub}

    def _rewritten(self, limit: int = 16) -> list[str]:
        """The first ``limit`` gaps of the first alignment, named as the user wrote them."""
        by_a: dict[int, list[int]] = {}
        by_b: dict[int, list[int]] = {}
        for gaps, by in ((self.gap_a, by_a), (self.gap_b, by_b)):
            for i, g in gaps.items():
                by.setdefault(g, []).append(i)
        gaps = sorted(set(by_a) | set(by_b))[:limit]
        return [t for g in gaps if (t := self._text(by_a.get(g, []), by_b.get(g, [])))]

    def run(self) -> EditAnalysis:
        wa, wb, f = self.wa, self.wb, self.f
        match, ua, ub = align_tokens([t.low for t in wa], [t.low for t in wb])
        self._gaps(match, ua, ub)
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
            self.add(1, "quoted/code change", "case or spacing only" if self.prot_soft == self.prot else "",
                     self.quoted)
        if f[_F["edit_structure_changed"]]:
            self.add(0, "structure change", "indentation", "indentation changed")
        if not self.events:
            if f[_F["edit_changed_fraction"]]:
                self.add(90, "rewording")
            else:  # the same words once contractions are expanded: "what's" / "what is"
                f[_F["edit_surface_only"]] = 1.0
                self.add(95, "case-only" if f[_F["edit_case_changes"]] else
                         "punctuation-only" if f[_F["edit_punct_changes"]] else "contraction or spelling")
        self.events.sort(key=lambda e: e.rank)
        top = self.events[0]
        named = any(e.text for e in self.events)  # else a refusal names the aligned spans that differ
        return EditAnalysis(top.kind, top.detail, f, [e.explain() for e in self.events[1:]], self.events,
                            [] if named else self._rewritten())

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
            ia = [i for i, t in enumerate(self.wa) if number_value(t.low) in (na - nb)]
            ib = [j for j, t in enumerate(self.wb) if number_value(t.low) in (nb - na)]
            self.add(10, "number change", f"{da or '-'} -> {db or '-'}", self._text(ia, ib, gaps=True))

    def _function_words(self, ua: list[int], ub: list[int], frame_a: set[int], frame_b: set[int],
                        same_a: set[int], same_b: set[int]) -> None:
        f, wa, wb = self.f, self.wa, self.wb
        neg_a = sum(t.low in NEGATIONS for t in wa)
        neg_b = sum(t.low in NEGATIONS for t in wb)
        if neg_a % 2 != neg_b % 2:
            f[_F["edit_negation"]] = 1.0
            self.add(5, "negation", "", self._text([i for i in ua if wa[i].low in NEGATIONS],
                                                   [j for j in ub if wb[j].low in NEGATIONS], True, "negation"))
        if frame_a or frame_b:
            f[_F["edit_request_form"]] = len(frame_a) + len(frame_b)
            self.add(80, "request form", f"{' '.join(wa[i].low for i in sorted(frame_a)) or '-'} -> "
                                         f"{' '.join(wb[j].low for j in sorted(frame_b)) or '-'}",
                     self._text(frame_a, frame_b))

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
                ia = [i for i in ua if wa[i].low in cls and key(wa[i].low) in oa and i not in frame_a | same_a]
                ib = [j for j in ub if wb[j].low in cls and key(wb[j].low) in ob and j not in frame_b | same_b]
                self.add(rank, label, f"{' '.join(sorted(oa)) or '-'} -> {' '.join(sorted(ob)) or '-'}",
                         self._text(ia, ib, gaps=True))

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
            aux = PAST_AUX | PRESENT_AUX | FUTURE_AUX
            self.add(38, "tense change", f"{'/'.join(sorted(ta))} -> {'/'.join(sorted(tb))}",
                     self._text([i for i in ua if wa[i].low in aux], [j for j in ub if wb[j].low in aux], True))

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
                        self.add(88, "spelling variant", f"{ti.low} -> {tj.low}")  # not named in a refusal
                    elif ti.low != tj.low:
                        degree = degree_of(self.lex, ti.low) != degree_of(self.lex, tj.low)
                        self.f[_F["edit_degree" if degree else "edit_inflection"]] += 1
                        self.add(26 if degree else 85, "degree change" if degree else "inflection",
                                 f"{ti.low} -> {tj.low}", self._text([i], [j]))

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
            text = self._text(ix, iy)
            kind = rel.kind
            if is_entity(self.lex, wx, tx) and is_entity(self.lex, wy, ty) and kind not in ("same", "synonym"):
                f[_F["edit_sub_entity"]] += 1
                self.add(14, "different entity", detail, text)
            elif kind in ("synonym", "similar", "same"):
                strong = rel.cost <= 2 or kind == "same"
                f[_F["edit_sub_synonym" if strong else "edit_sub_weak_synonym"]] += 1
                self.add(82 if strong else 60, "synonym" if strong else "rare-sense synonym", detail, text)
            elif kind == "derived":
                strong = rel.cost <= 1  # through rare senses it is no evidence of the same meaning
                f[_F["edit_sub_derived" if strong else "edit_sub_weak_synonym"]] += 1
                self.add(84 if strong else 60, "derived form" if strong else "rare-sense relation", detail, text)
            elif kind in ("hypernym", "hyponym"):
                f[_F["edit_sub_hypernym"]] += 1
                self.add(70, kind, detail, text)
            elif kind == "antonym":
                f[_F["edit_sub_antonym"]] += 1
                self.add(12, "antonym", detail, text)
            elif kind == "cohyponym":
                f[_F["edit_sub_cohyponym"]] += 1
                self.add(16, "co-hyponym", detail, text)
            else:
                f[_F["edit_sub_unknown" if kind == "unknown" else "edit_sub_unrelated"]] += 1
                self.add(50 if kind == "unknown" else 55, f"{kind} word change", detail, text)
            if kind not in ("same", "synonym", "similar", "derived"):
                self._constraint(wx, tx)
                self._constraint(wy, ty)
            for i, j in zip(ix, iy):
                match.setdefault(i, j)  # aligned for the order analysis
        for side, units, used in (("removed", ua, used_a), ("added", ub, used_b)):
            for k, (word, idx, tok) in enumerate(units):
                if k not in used:
                    self._inserted(word, tok, side, idx)

    def _constraint(self, word: str, tok: Token) -> str:
        """Count what a changed content word names (time, place, audience, format, ...)."""
        cls = "entity" if is_entity(self.lex, word, tok) else self.lex.semantic_class(word) or "unknown"
        cls = {"communication": "format", "quantity": "format"}.get(cls, cls)
        if cls != "other":
            self.f[_F[f"edit_constraint_{cls}"]] += 1
        return cls

    def _inserted(self, word: str, tok: Token, side: str, idx: list[int]) -> None:
        self.f[_F["edit_ins_content"]] += 1
        cls = self._constraint(word, tok)
        label = {"person": "audience", "other": "content"}.get(cls, cls)
        # named with the words around it that changed too ("for beginners")
        text = self._text(idx, [], gaps=True) if side == "removed" else self._text([], idx, gaps=True)
        self.add(20, f"{side} {label}", word.replace("_", " "), text)

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
        args: dict[str, set[tuple[int, int]]] = {"directional": set(), "symmetric": set()}
        out_of_order: Counter[tuple[int, int]] = Counter()  # word -> discordant pairs it is in
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
                        args["symmetric"] |= {pairs[x], pairs[y]}
                    else:
                        directional += 1
                        swapped = (wa[i1].low, wa[i2].low)
                        args["directional"] |= {pairs[x], pairs[y]}
                else:
                    moved += 1
                    out_of_order.update((pairs[x], pairs[y]))
        # the words displaced around swapped arguments are not a separate moved block
        moved = 0 if directional or symmetric else moved
        f[_F["edit_moved"]], f[_F["edit_swap_directional"]], f[_F["edit_swap_symmetric"]] = moved, directional, symmetric
        if directional:
            self.add(11, "argument swap", f"{swapped[0]} <-> {swapped[1]}", self._swap_text(args["directional"]))
        elif symmetric:
            self.add(75, "symmetric swap", "", self._swap_text(args["symmetric"]))
        elif moved:
            self.add(78, "reordering", "", self._moved_text(out_of_order))

    def _moved_text(self, out_of_order: Counter[tuple[int, int]]) -> str:
        """"moved: Excel" (the words out of order with the most others), or the whole
        stretch when every word moved alike: "reordered: England beat France → France beat England"."""
        most = max(out_of_order.values())
        words = [p for p, n in out_of_order.items() if n == most]
        if len(words) < len(out_of_order):
            return f"moved: {self._written(self.wa, [i for i, _ in words])}"
        ia, ib = sorted(i for i, _ in words), sorted(j for _, j in words)
        return (f"reordered: {self._written(self.wa, range(ia[0], ia[-1] + 1))} → "
                f"{self._written(self.wb, range(ib[0], ib[-1] + 1))}")

    def _swap_text(self, pairs: set[tuple[int, int]]) -> str:
        """"swapped: A ↔ B" for two words, else the stretch from the first to the last
        swapped word on each side: "swapped: New York to Florida → Florida to New York"."""
        ia, ib = sorted(i for i, _ in pairs), sorted(j for _, j in pairs)
        if len(ia) == 2:
            return f"swapped: {self._written(self.wa, ia[:1])} ↔ {self._written(self.wa, ia[1:])}"
        return (f"swapped: {self._written(self.wa, range(ia[0], ia[-1] + 1))} → "
                f"{self._written(self.wb, range(ib[0], ib[-1] + 1))}")


_default_analyser = EditAnalyser()


def analyse(*, stored: str, new: str, lexicon: Optional[Lexicon] = None) -> EditAnalysis:
    """What changed between two requests: the edit turning ``stored`` into ``new``
    (shipped lexicon unless one is given). The one answer to that question: the
    verifier's edit features and a refusal's text (:meth:`EditAnalysis.what_changed`)
    both come from it."""
    return (EditAnalyser(lexicon) if lexicon is not None else _default_analyser).analyse(stored=stored, new=new)


def edit_features(*, stored: str, new: str) -> np.ndarray:
    """The :data:`EDIT_FEATURE_NAMES` vector of a pair (for the verifier's model)."""
    return analyse(stored=stored, new=new).features
