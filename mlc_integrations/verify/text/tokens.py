"""Text side of the edit analysis (:mod:`mlc_integrations.verify.text.edits`): a tokenizer that keeps case, expands contractions and marks quoted text, code
and structured data, the token alignment, the surface comparisons (case, spacing,
punctuation, Unicode forms) that need no alignment, and the words that frame a request
rather than make its content ("could you", "thanks", "in what year" for "when"). The
closed word classes it reads are :mod:`.words`'."""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Optional

from .words import (
    CONTRACTIONS,
    MODALS,
    NEGATED_BASES,
    NUMBER_WORDS,
    POLITENESS,
    REQUEST_VERBS,
    S_IS_AFTER,
    UNMARKED_NEGATIONS,
    WH,
)

if TYPE_CHECKING:
    from .lexicon import Lexicon

# British/American and other spelling variants: orthographic rules, applied to both words.
_SPELLING = tuple((re.compile(pat), rep) for pat, rep in (
    (r"our(?=(s|ed|ing|ite|ites|able|ful|less)?\b)", "or"), (r"(?<=[^aeiou])re\b", "er"),
    (r"is(e|ed|es|ing|ation)\b", r"iz\1"), (r"ys(e|ed|es|ing)\b", r"yz\1"), (r"ogue\b", "og"),
    (r"ll(ed|ing|er)\b", r"l\1"), (r"ae", "e"), (r"oe", "e")))

_QUOTED = re.compile(r"```.*?```|`[^`\n]+`|\"[^\"\n]+\"|\u201c[^\u201d\n]+\u201d|\u2018[^\u2019\n]+\u2019"
                     r"|(?<![\w'])'[^'\n]+'(?![\w])", re.S)
_CHUNK = re.compile(r"\S+")
# a chunk of non-space text is code when it holds one of these (searched per chunk: linear time)
_CODE_MARK = re.compile(r"[\[\]{}<>=*^$|\\#@~_]|\w\(|::|->|[a-z][A-Z]|\w\.\w")
_WORD = re.compile(r"\d+(?:[.,:]\d+)*(?:st|nd|rd|th|s)?|[^\W\d_]+(?:['\u2019\-][^\W\d_]+)*|[^\w\s]")


@dataclass(frozen=True)
class Token:
    raw: str  # as written (case kept)
    low: str  # lower case, contraction expanded
    start: int  # character offset in the text (sentence-initial test)
    protected: bool  # inside quotes, code or structured data
    initial: bool  # first word of a sentence
    written: str = ""  # the word as the user wrote it, contraction and all ("Can't" for "can" and "not")


@lru_cache(maxsize=65536)
def spelling_key(w: str) -> str:
    """A key equal for spelling variants of one word (colour/color, organise/organize)."""
    for pat, rep in _SPELLING:
        w = pat.sub(rep, w)
    return w


def protected_spans(text: str) -> list[tuple[int, int]]:
    """Sorted (start, end) of quoted text, backticked code and unquoted code-like chunks."""
    quoted = [m.span() for m in _QUOTED.finditer(text)]
    spans = list(quoted)
    q = 0
    for m in _CHUNK.finditer(text):
        while q < len(quoted) and quoted[q][1] <= m.start():
            q += 1
        if q < len(quoted) and quoted[q][0] <= m.start() < quoted[q][1]:
            continue
        if _CODE_MARK.search(m.group(0)):
            end = m.end()
            while end > m.start() + 1 and text[end - 1] in ".,?!":
                end -= 1  # sentence punctuation after the code is not code
            spans.append((m.start(), end))
    return sorted(spans)


def is_structured(text: str) -> bool:
    """Several lines, some indented: YAML, code, tables (spacing is content there)."""
    lines = text.split("\n")
    return len(lines) > 1 and any(ln[:1] in (" ", "\t") for ln in lines[1:] if ln.strip())


def tokenize(text: str) -> list[Token]:
    """Words, numbers and punctuation of ``text`` (NFC), contractions expanded."""
    text = unicodedata.normalize("NFC", text)
    spans = protected_spans(text)
    structured = is_structured(text)
    out: list[Token] = []
    prev_end_punct = True
    k = 0
    for m in _WORD.finditer(text):
        raw = m.group(0)
        while k < len(spans) and spans[k][1] <= m.start():
            k += 1  # spans are sorted and tokens come in order: one walk over both
        prot = structured or (k < len(spans) and spans[k][0] <= m.start())
        low = raw.casefold().replace("\u2019", "'")
        initial = prev_end_punct and raw[0].isalnum()
        if raw[0].isalnum():
            prev_end_punct = False
        elif raw in ".?!:\n":
            prev_end_punct = True
        parts: list[str] = [low]
        if low == "cannot":
            parts = ["can", "not"]  # as "can't"
        elif low in UNMARKED_NEGATIONS:  # "dont" as "don't"
            parts = [NEGATED_BASES.get(low[:-2], low[:-2]), "not"]
        for suf, full in CONTRACTIONS.items():
            if low.endswith(suf) and len(low) > len(suf):
                base = low[: -len(suf)]
                parts = [NEGATED_BASES.get(base, base), full] if suf == "n't" else [base, full]
                break
        else:
            if low.endswith("'s") and len(low) > 2:
                parts = [low[:-2], "is"] if low[:-2] in S_IS_AFTER else [low[:-2]]
        for n, p in enumerate(parts):
            out.append(Token(raw if len(parts) == 1 else p, p, m.start(), prot, initial and n == 0, raw))
    return out


def number_value(low: str) -> Optional[float]:
    if low[0].isdigit():
        t = re.sub(r"(st|nd|rd|th|s)$", "", low)
        t = t.replace(",", "") if re.fullmatch(r"\d{1,3}(,\d{3})+", t) else t.replace(",", ".")
        try:
            return float(t)
        except ValueError:
            return None
    return NUMBER_WORDS.get(low)


def is_wordlike(t: Token) -> bool:
    return t.low[0].isalnum()


def surface_kind(a: str, b: str) -> Optional[str]:
    if a == b:
        return "identical"
    na, nb = unicodedata.normalize("NFC", a), unicodedata.normalize("NFC", b)
    if na == nb:
        return "unicode-only"
    squash = lambda s: " ".join(s.split())  # noqa: E731
    if squash(na) == squash(nb):
        return "whitespace-only"
    if squash(na).casefold() == squash(nb).casefold():
        return "case-only"
    strip = lambda s: re.sub(r"[^\w\s]", " ", s)  # noqa: E731
    if squash(strip(na)).casefold() == squash(strip(nb)).casefold():
        return "punctuation-only"
    if unicodedata.normalize("NFKC", na) == unicodedata.normalize("NFKC", nb):
        return "unicode-only"
    return None


def spacing(text: str) -> Counter[str]:
    """Spacing beyond single spaces between words: doubled spaces, tabs, line breaks,
    leading or trailing space."""
    c = Counter(re.findall(r"\s{2,}|[^\S ]", text.strip()))
    c["<pad>"] = int(text[:1].isspace()) + int(text[-1:].isspace())
    return c


def protected_texts(text: str, marks: bool = True) -> list[str]:
    """The quoted / code spans of ``text`` (NFC), with their quotes and backticks unless
    ``marks`` is False."""
    t = unicodedata.normalize("NFC", text)
    return [t[s:e] if marks else t[s:e].strip("`'\"\u201c\u201d\u2018\u2019") for s, e in protected_spans(t)]


def protected_diff(a: str, b: str) -> tuple[int, int]:
    """(spans that differ, of which only in case or spacing) between the quoted/code
    spans of the two texts."""
    sa, sb = protected_texts(a, marks=False), protected_texts(b, marks=False)
    if is_structured(a) or is_structured(b):
        sa, sb = sa + [a], sb + [b]
    if sa == sb:
        return 0, 0
    changed = soft = 0
    if len(sa) == len(sb):
        for x, y in zip(sa, sb):
            if x != y:
                changed += 1
                soft += int("".join(x.split()).casefold() == "".join(y.split()).casefold())
        return changed, soft
    ca, cb = Counter(sa), Counter(sb)
    return sum(((ca - cb) + (cb - ca)).values()), 0


_LONG_MIDDLE = 200  # tokens: beyond this, difflib's junk heuristic keeps the alignment fast


def align_tokens(a: list[str], b: list[str]) -> tuple[dict[int, int], list[int], list[int]]:
    """Token alignment: (matched a index -> b index, unmatched a indices, unmatched b
    indices). The shared prefix and suffix are matched first (a long shared context with
    a small edit is the common case); difflib aligns the middle, treating very frequent
    tokens as junk only when the middle is long (its exact search is quadratic there)."""
    n, m = len(a), len(b)
    pre = 0
    while pre < min(n, m) and a[pre] == b[pre]:
        pre += 1
    suf = 0
    while suf < min(n, m) - pre and a[n - 1 - suf] == b[m - 1 - suf]:
        suf += 1
    match = {k: k for k in range(pre)}
    match.update({n - 1 - k: m - 1 - k for k in range(suf)})
    ua: list[int] = []
    ub: list[int] = []
    mid_a, mid_b = a[pre:n - suf], b[pre:m - suf]
    sm = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=max(len(mid_a), len(mid_b)) > _LONG_MIDDLE)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            match.update({pre + i1 + k: pre + j1 + k for k in range(i2 - i1)})
        else:
            ua.extend(range(pre + i1, pre + i2))
            ub.extend(range(pre + j1, pre + j2))
    return match, ua, ub


# ---------------------------------------------------------------------------- request frames
def request_frame(w: list[Token], i: int) -> bool:
    """Is word i part of the request's frame ("could you", "tell me", "please")?"""
    low = w[i].low
    nxt = w[i + 1].low if i + 1 < len(w) else ""
    prev = w[i - 1].low if i else ""
    return ((low in MODALS and nxt == "you") or (low == "you" and prev in MODALS | {"do", "thank"})
            or (low == "me" and prev in REQUEST_VERBS) or (low in REQUEST_VERBS and nxt == "me")
            or low in POLITENESS or (low == "know" and prev in ("me", "to", "you")))


def polite_sentences(w: list[Token], unmatched: list[int]) -> set[int]:
    """Words of a short sentence found on one side only that greets or thanks
    ("Hello!", "Thank you in advance."): the frame of the request, not its content."""
    out: set[int] = set()
    sentence: list[int] = []
    unmatched_set = set(unmatched)
    for i in range(len(w) + 1):
        if i == len(w) or (w[i].initial and sentence):
            if (len(sentence) <= 5 and all(k in unmatched_set for k in sentence)
                    and any(w[k].low in POLITENESS for k in sentence) and not any(w[k].low in WH for k in sentence)):
                out.update(sentence)
            sentence = []
        if i < len(w):
            sentence.append(i)
    return out


def wh_equivalents(lex: "Lexicon", wa: list[Token], wb: list[Token], ua: list[int],
                   ub: list[int]) -> tuple[set[int], set[int]]:
    """Question words asked two ways: "when" / "in what year", "who" / "which artist",
    "where" / "in which city", "how tall" / "what height". Returns the words on each
    side that only restate the other side's question word."""
    kinds = {"when": "time", "where": "place", "who": "person"}
    out_a: set[int] = set()
    out_b: set[int] = set()
    if len(ua) > 64 or len(ub) > 64:
        return out_a, out_b  # a question asked two ways is short; long rewrites are not this
    sa, sb = set(ua), set(ub)
    for (w, u, us, out), (w2, u2, us2, out2) in (((wa, ua, sa, out_a), (wb, ub, sb, out_b)),
                                                ((wb, ub, sb, out_b), (wa, ua, sa, out_a))):
        for i in u:
            if w[i].low not in ("what", "which"):
                continue
            nxt = w[i + 1].low if i + 1 in us else ""  # "which artist", "what year"
            for j in u2:
                q = w2[j].low
                if kinds.get(q) and nxt and lex.semantic_class(nxt) == kinds[q]:
                    out.update((i, i + 1))
                    out2.add(j)
                    break
                adj = w2[j + 1].low if q == "how" and j + 1 in us2 else ""  # "how tall" / "what ... height"
                noun = next((k for k in u if adj and lex.relation(adj, w[k].low) == "derived"), None)
                if noun is not None:
                    out.update((i, noun))
                    out2.update((j, j + 1))
                    break
    return out_a, out_b


def match_moved_numbers(wa: list[Token], wb: list[Token], ua: list[int], ub: list[int], match: dict[int, int]) -> None:
    """The same number unmatched on both sides moved: match it, so that operands
    swapped around "divided by", "from", "to" count as an argument swap."""
    free_b = [j for j in ub if number_value(wb[j].low) is not None]
    for i in ua:
        if number_value(wa[i].low) is None:
            continue
        j = next((j for j in free_b if wb[j].low == wa[i].low), None)
        if j is not None:
            match[i] = j
            free_b.remove(j)


def merge_phrases(lex: "Lexicon", idx: list[int], w: list[Token]) -> list[tuple[str, list[int], Token]]:
    """Adjacent unmatched words WordNet knows as one lemma ("New York") become one unit."""
    units: list[tuple[str, list[int], Token]] = []
    k = 0
    while k < len(idx):
        for n in (3, 2):
            run = idx[k:k + n]
            if len(run) == n and run[-1] - run[0] == n - 1:
                phrase = "_".join(w[i].low for i in run)
                if lex.known(phrase):
                    units.append((phrase, run, w[run[0]]))
                    k += n
                    break
        else:
            units.append((w[idx[k]].low, [idx[k]], w[idx[k]]))
            k += 1
    return units


def degree_of(lex: "Lexicon", word: str) -> str:
    """"comparative" / "superlative" for an inflected adjective ("bigger", "best"), "" otherwise."""
    if not any(pos == "a" and lem != word for pos, lem in lex.lemmatize(word)):
        return ""
    return "superlative" if word.endswith("st") else "comparative"


def is_entity(lex: "Lexicon", word: str, t: Token) -> bool:
    """A name: WordNet says so (Paris), or it is capitalized mid-sentence and WordNet
    does not write it with a capital itself ("Fedora" is a name, "Monday" is not)."""
    if lex.is_proper(word):
        return True
    capitalized = (t.raw[:1].isupper() and not t.initial) or (t.raw.isupper() and len(t.raw) > 1)
    return capitalized and not lex.capitalized(word)
