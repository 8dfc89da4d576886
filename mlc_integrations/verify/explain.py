"""What differs between two requests, in the user's own words.

A refusal must say what the user changed ("different: Paris → Rome", "added: for
beginners", "negation: can → can't"), never a category that contradicts the decision
(a refusal is never explained as a "rewording"). :func:`difference` aligns the two
requests word by word (case, punctuation and function words that never carry the
difference on their own are compared loosely) and names the spans that differ.
"""

from __future__ import annotations

import difflib
import re
import unicodedata

_WORD = re.compile(r"[\w'’\-\.]+|[^\w\s]", re.UNICODE)
_NEG = {"not", "no", "never", "none", "nothing", "nobody", "without", "cannot", "neither", "nor", "nowhere"}
_FILLER = {"the", "a", "an", "please", "this", "that", "these", "those", "some", "any", "of", "for", "to", "in", "on",
           "is", "are", "do", "does", "can", "could", "would", "how", "what", "i", "you", "me", "my", "it", "there",
           "be", "and", "or", "with"}


def _tokens(text: str) -> list[str]:
    t = unicodedata.normalize("NFKC", text)
    return [w.strip(".").replace("’", "'") for w in _WORD.findall(t) if w.strip(".") and w[0].isalnum()]


def _negated(words: list[str]) -> bool:
    return any(w.lower() in _NEG or w.lower().endswith("n't") for w in words)


def _phrase(words: list[str]) -> str:
    return " ".join(words)


def difference(stored: str, new: str, limit: int = 3) -> str:
    """The differing spans of ``stored`` → ``new``, most telling first, e.g.
    ``different: Paris → Rome; added: for beginners``. Empty when only case and
    punctuation differ."""
    a, b = _tokens(stored), _tokens(new)
    la, lb = [w.lower() for w in a], [w.lower() for w in b]
    sm = difflib.SequenceMatcher(a=la, b=lb, autojunk=False)
    parts: list[tuple[int, str]] = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            continue
        wa, wb = a[i1:i2], b[j1:j2]
        if _negated(wa) != _negated(wb):
            parts.append((0, f"negation: {_phrase(wa) or '—'} → {_phrase(wb) or '—'}"))
        elif op == "replace":  # a one-word swap (a name, a colour) tells more than a reworded phrase
            parts.append((1 if len(wa) == len(wb) == 1 else 2, f"different: {_phrase(wa)} → {_phrase(wb)}"))
        elif op == "insert":
            rank = 4 if all(w.lower() in _FILLER for w in wb) else 2
            parts.append((rank, f"added: {_phrase(wb)}"))
        else:
            rank = 4 if all(w.lower() in _FILLER for w in wa) else 3
            parts.append((rank, f"dropped: {_phrase(wa)}"))
    if not parts:
        return ""
    if sorted(la) == sorted(lb):  # the same words in another order: name what moved
        at = [i for i in range(len(la)) if la[i] != lb[i]]
        if len(at) == 2:
            return f"swapped: {a[at[0]]} ↔ {a[at[1]]}"
        i, j = at[0], at[-1] + 1  # the span that moved, without the words both keep in place
        return f"swapped: {_phrase(a[i:j])} → {_phrase(b[i:j])}"
    parts.sort(key=lambda p: p[0])
    out = [p[1] for p in parts[:limit]]
    if len(parts) > limit:
        out.append(f"and {len(parts) - limit} more change{'s' if len(parts) - limit > 1 else ''}")
    return "; ".join(out)


def refusal_reason(stored: str, new: str, probability: float, threshold: float, who: str = "judge") -> str:
    """The sentence a refusal shows: what differs, then the deciding model's confidence."""
    diff = difference(stored, new)
    head = diff or "the same words in another sense"
    return f"{head} ({who}: P(same answer) {probability:.2f} < {threshold:.2f})"
