"""easy-vqa as labelled data: images with their (colour, shape) and a ground-truth
answerer for every question template the dataset uses.

easy-vqa draws one shape of one colour per 64x64 image and asks 24 question
templates about it. We recover each image's colour and shape from its questions and
answers (direct answers first, then elimination over yes/no answers), so questions
the workloads generate (paraphrases, negations) have a known true answer too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional

COLORS = ("red", "green", "blue", "black", "gray", "teal", "brown", "yellow")
SHAPES = ("circle", "rectangle", "triangle")

_C = "|".join(COLORS)
_S = "|".join(SHAPES)

# Question templates of easy-vqa, by what they ask. {c} = colour, {s} = shape.
COLOR_QUESTIONS = ("what color is the shape?", "what is the color of the shape?",
                   "what color is the {s}?", "what is the color of the {s}?")
SHAPE_QUESTIONS = ("what shape is in the image?", "what shape is present?",
                   "what shape does the image contain?", "what is the {c} shape?")
HAS_COLOR = ("is there a {c} shape?", "is there a {c} shape in the image?",
             "does the image contain a {c} shape?", "is a {c} shape present?")
HAS_NO_COLOR = ("is there not a {c} shape?", "is there not a {c} shape in the image?",
                "does the image not contain a {c} shape?", "is no {c} shape present?")
HAS_SHAPE = ("is there a {s}?", "is there a {s} in the image?",
             "does the image contain a {s}?", "is a {s} present?")
HAS_NO_SHAPE = ("is there not a {s}?", "is there not a {s} in the image?",
                "does the image not contain a {s}?", "is no {s} present?")

_NEG = re.compile(r"\b(not|no)\b")


class UnknownQuestion(ValueError):
    """The question is not one of easy-vqa's templates."""


def _kind(question: str) -> tuple[str, Optional[str], bool]:
    """(kind, attribute word, negated) of an easy-vqa question."""
    q = question.strip().lower()
    if q.startswith("what"):
        if "color" in q:
            return "color", None, False
        if "shape" in q:
            return "shape", None, False
        raise UnknownQuestion(question)
    neg = bool(_NEG.search(q))
    m = re.search(rf"\b({_C})\b", q)
    if m:
        return "has_color", m.group(1), neg
    m = re.search(rf"\b({_S})\b", q)
    if m:
        return "has_shape", m.group(1), neg
    raise UnknownQuestion(question)


def true_answer(question: str, color: str, shape: str) -> str:
    """The ground-truth answer to an easy-vqa-template question about an image."""
    kind, word, neg = _kind(question)
    if kind == "color":
        return color
    if kind == "shape":
        return shape
    present = (word == color) if kind == "has_color" else (word == shape)
    return "yes" if present != neg else "no"


def infer_attributes(questions: list[str], answers: list[str]) -> tuple[Optional[str], Optional[str]]:
    """Colour and shape of one image from its question/answer pairs (None if undetermined)."""
    color: Optional[str] = None
    shape: Optional[str] = None
    not_colors: set[str] = set()
    not_shapes: set[str] = set()
    for q, a in zip(questions, answers):
        kind, word, neg = _kind(q)
        if kind == "color":
            color = a
        elif kind == "shape":
            shape = a
            m = re.match(rf"what is the ({_C}) shape\?", q.strip().lower())
            if m:
                color = m.group(1)
        else:
            present = (a == "yes") != neg
            if kind == "has_color":
                if present:
                    color = word
                else:
                    not_colors.add(str(word))
            else:
                if present:
                    shape = word
                else:
                    not_shapes.add(str(word))
    if color is None:
        left = [c for c in COLORS if c not in not_colors]
        color = left[0] if len(left) == 1 else None
    if shape is None:
        left = [s for s in SHAPES if s not in not_shapes]
        shape = left[0] if len(left) == 1 else None
    return color, shape


@dataclass
class VQAImage:
    """One easy-vqa image with its recovered attributes and its own questions."""

    image_id: int
    path: str
    color: str
    shape: str
    qa: list[tuple[str, str]] = field(default_factory=list)

    @property
    def caption_key(self) -> str:
        return f"{self.color} {self.shape}"

    def answer(self, question: str) -> str:
        return true_answer(question, self.color, self.shape)


@lru_cache(maxsize=2)
def load_split(split: str) -> tuple[VQAImage, ...]:
    """Images of ``split`` ('train' or 'test') whose colour and shape are determined.

    Every kept image's dataset answers are checked against :func:`true_answer`.
    """
    import easy_vqa

    if split not in ("train", "test"):
        raise ValueError("split must be 'train' or 'test'")
    qs, ans, ids = getattr(easy_vqa, f"get_{split}_questions")()
    paths = getattr(easy_vqa, f"get_{split}_image_paths")()
    by_id: dict[int, list[tuple[str, str]]] = {}
    for q, a, i in zip(qs, ans, ids):
        by_id.setdefault(int(i), []).append((q, a))
    out = []
    for i in sorted(by_id):
        qa = by_id[i]
        color, shape = infer_attributes([q for q, _ in qa], [a for _, a in qa])
        if color is None or shape is None or i not in paths:
            continue
        if any(true_answer(q, color, shape) != a for q, a in qa):
            raise AssertionError(f"easy-vqa {split} image {i}: recovered attributes contradict its answers")
        out.append(VQAImage(i, paths[i], color, shape, qa))
    return tuple(out)


def questions_for(color: str, shape: str) -> dict[str, list[str]]:
    """Every template instantiated for an image, grouped by what it asks.

    ``paraphrases`` of one group share an answer; ``negations`` flip a yes/no answer.
    """
    other_c = [c for c in COLORS if c != color]
    other_s = [s for s in SHAPES if s != shape]
    return {
        "color": [t.format(s=shape) for t in COLOR_QUESTIONS],
        "shape": [t.format(c=color) for t in SHAPE_QUESTIONS],
        "has_color": [t.format(c=color) for t in HAS_COLOR],
        "has_no_color": [t.format(c=color) for t in HAS_NO_COLOR],
        "has_shape": [t.format(s=shape) for t in HAS_SHAPE],
        "has_no_shape": [t.format(s=shape) for t in HAS_NO_SHAPE],
        "other_color": [t.format(c=c) for t in HAS_COLOR for c in other_c],
        "other_shape": [t.format(s=s) for t in HAS_SHAPE for s in other_s],
    }
