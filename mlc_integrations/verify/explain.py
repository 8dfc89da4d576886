"""What differs between two requests, in the user's own words.

A refusal must say what the user changed ("different: Paris → Rome", "added: for
beginners", "negation: Can → Can't"), never a category that contradicts the decision
(a refusal is never explained as a "rewording"). The words come from the edit analysis
(:func:`~mlc_integrations.verify.text.edits.analyse`) whose features the verifier's model
read: a refusal names the edit that decided, most answer-changing first.
"""

from __future__ import annotations

from .text.edits import analyse


def difference(*, stored: str, new: str, limit: int = 3) -> str:
    """The edits of ``stored`` → ``new``, most telling first, e.g. ``different: Paris →
    Rome; added: for beginners``. Empty when only case and punctuation differ."""
    return analyse(stored=stored, new=new).what_changed(limit)


def refusal_reason(*, stored: str, new: str, probability: float, threshold: float, who: str = "judge") -> str:
    """The sentence a refusal shows: what differs, then the deciding model's confidence."""
    head = difference(stored=stored, new=new) or "the same words in another sense"
    return f"{head} ({who}: P(same answer) {probability:.2f} < {threshold:.2f})"
