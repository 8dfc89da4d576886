"""GQA-style questions about a :class:`~.scenes.Scene`, answered from its scene graph.

A question is a small *program* (:class:`Program`: an operation and its arguments)
plus one of several wordings of it. Families, as in GQA: existence, attribute,
relation (left/right, above/below, in front/behind), counting, comparison (bigger,
more, same colour), superlative (leftmost, largest), logical (and/or) and negation.

* Paraphrases: every operation has several templates (:mod:`.scene_templates`), and
  argument swaps share them (``right(a, b)`` is ``left(b, a)``). :func:`canonical`
  names the meaning -- also ``not left(a, b)`` = ``right(a, b)``, since relations never
  tie; two questions with one canonical key have the same answer on every scene.
* Contrasts: :func:`contrast` changes one word of the program so that the answer on
  the given scene changes (left -> right, red -> blue, and -> or, ...).
* Held out: the last templates of each list (:data:`HELD_OUT`) are used only for the
  test split, so wordings seen when tuning on train are not the ones tested.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Optional

from .templates import EXT_WORDS, HELD_OUT, REL_WORDS, TEMPLATES
from .graphs import COLORS, SHAPES, SIZE_ORDER, Scene, SceneObject, overlap


@dataclass(frozen=True)
class Ref:
    """A description of objects: any of colour, shape, size (None = any)."""

    color: Optional[str] = None
    shape: Optional[str] = None
    size: Optional[str] = None

    def matches(self, o: SceneObject) -> bool:
        return ((self.color is None or o.color == self.color) and (self.shape is None or o.shape == self.shape)
                and (self.size is None or o.size == self.size))

    def resolve(self, scene: Scene) -> list[SceneObject]:
        return [o for o in scene.objects if self.matches(o)]

    def text(self, plural: bool = False) -> str:
        noun = (self.shape or "object") + ("s" if plural else "")
        return " ".join(w for w in (self.size, self.color, noun) if w)


@dataclass(frozen=True)
class Program:
    op: str
    args: tuple


FAMILY = {
    "exist": "existence", "query": "attribute", "verify": "attribute", "relate": "relation", "choose": "relation",
    "count": "counting", "more": "comparison", "fewer": "comparison", "bigger": "comparison",
    "smaller": "comparison", "same_color": "comparison", "superlative": "superlative", "and": "logical",
    "or": "logical", "exist_not": "negation", "relate_not": "negation", "count_not": "negation",
}
FAMILIES = tuple(dict.fromkeys(FAMILY.values()))

OPPOSITE = {"left": "right", "right": "left", "above": "below", "below": "above", "front": "behind", "behind": "front",
            "leftmost": "rightmost", "rightmost": "leftmost", "topmost": "bottommost", "bottommost": "topmost",
            "largest": "smallest", "smallest": "largest", "more": "fewer", "fewer": "more",
            "bigger": "smaller", "smaller": "bigger", "and": "or", "or": "and"}


def _unique(ref: Ref, scene: Scene) -> Optional[SceneObject]:
    found = ref.resolve(scene)
    return found[0] if len(found) == 1 else None


def _holds(rel: str, a: SceneObject, b: SceneObject) -> bool:
    return {"left": a.x < b.x, "right": a.x > b.x, "above": a.y < b.y, "below": a.y > b.y,
            "front": a.depth < b.depth, "behind": a.depth > b.depth}[rel]


def _extreme(ext: str, scene: Scene) -> Optional[SceneObject]:
    key = {"leftmost": lambda o: o.x, "rightmost": lambda o: -o.x, "topmost": lambda o: o.y,
           "bottommost": lambda o: -o.y, "largest": lambda o: -o.radius, "smallest": lambda o: o.radius}[ext]
    objs = sorted(scene.objects, key=key)
    if len(objs) > 1 and key(objs[0]) == key(objs[1]):
        return None  # no single largest/smallest
    return objs[0]


def _yn(b: bool) -> str:
    return "yes" if b else "no"


def evaluate(p: Program, scene: Scene) -> Optional[str]:
    """The ground-truth answer of ``p`` on ``scene``; None when the question does not
    apply (a reference that no longer names exactly one object, no single extreme)."""
    op, a = p.op, p.args
    if op in ("exist", "exist_not"):
        return _yn(bool(a[0].resolve(scene)) == (op == "exist"))
    if op in ("and", "or"):
        x, y = bool(a[0].resolve(scene)), bool(a[1].resolve(scene))
        return _yn((x and y) if op == "and" else (x or y))
    if op in ("count", "count_not"):
        n = len(a[0].resolve(scene))
        return str(n if op == "count" else len(scene.objects) - n)
    if op in ("more", "fewer"):
        na, nb = len(a[0].resolve(scene)), len(a[1].resolve(scene))
        return _yn(na > nb if op == "more" else na < nb)
    if op == "superlative":
        o = _extreme(a[0], scene)
        return None if o is None else getattr(o, a[1])
    if op in ("query", "verify"):
        o = _unique(a[-1], scene)
        if o is None:
            return None
        return getattr(o, a[0]) if op == "query" else _yn(getattr(o, a[0]) == a[1])
    # Two-object operations: both references must name exactly one object.
    refs = a[1:] if op in ("relate", "relate_not", "choose") else a
    oa, ob = _unique(refs[0], scene), _unique(refs[1], scene)
    if oa is None or ob is None or oa.oid == ob.oid:
        return None
    if op == "relate":
        return _yn(_holds(a[0], oa, ob))
    if op == "relate_not":
        return _yn(not _holds(a[0], oa, ob))
    if op == "choose":
        return (oa if _holds(a[0], oa, ob) else ob).name
    if op in ("bigger", "smaller"):
        return _yn(oa.radius > ob.radius if op == "bigger" else oa.radius < ob.radius)
    if op == "same_color":
        return _yn(oa.color == ob.color)
    raise ValueError(f"unknown operation {op!r}")


def canonical(p: Program) -> tuple:
    """A key equal for programs that mean the same on every scene."""
    op, a = p.op, p.args
    if op == "relate_not":  # relations never tie, so "not left" is "right"
        return canonical(Program("relate", (OPPOSITE[a[0]],) + tuple(a[1:])))
    if op == "relate" and a[0] in ("right", "below", "behind"):
        return ("relate", OPPOSITE[a[0]], a[2], a[1])
    if op in ("fewer", "smaller"):
        return (OPPOSITE[op], a[1], a[0])
    if op == "choose":
        return ("choose", a[0]) + tuple(sorted(a[1:], key=repr))
    if op in ("same_color", "and", "or"):
        return (op,) + tuple(sorted(a, key=repr))
    return (op,) + tuple(a)


# ------------------------------------------------------------------------ wordings
def _key(p: Program) -> str:
    """Which template list words ``p``."""
    if p.op in ("query", "verify", "choose"):
        return f"{p.op}:{p.args[0]}"
    if p.op == "superlative":
        return f"superlative:{p.args[1]}"
    return p.op


def _allowed(options: tuple[str, ...], split: str) -> tuple[str, ...]:
    return options if split == "test" else options[:-HELD_OUT]


def _article(s: str) -> str:
    return re.sub(r"\ba (?=[aeiou])", "an ", s)


def _refs(p: Program) -> tuple[Ref, ...]:
    return tuple(x for x in p.args if isinstance(x, Ref))


def wordings(p: Program, split: str = "test") -> list[str]:
    """Every wording of ``p`` itself (not of its equivalents) allowed in ``split``:
    its templates, crossed with the relation or extreme phrases where it has them."""
    op, a = p.op, p.args
    fill: dict[str, str] = {}
    for name, ref in zip("ab", _refs(p)):
        fill[name] = ref.text()
        fill["p" + name] = ref.text(plural=True)
    if op == "verify":
        fill["v"] = a[1]
    if op == "count_not":
        fill["v"] = a[0].color if a[0].color else f"{a[0].shape}s"
    slot, words = "", ("",)
    if op in ("relate", "relate_not"):
        slot, words = "r", _allowed(REL_WORDS[a[0]], split)
    elif op == "superlative":
        slot, words = "e", _allowed(EXT_WORDS[a[0]], split)
    out = [_article(t.format(**fill, **({slot: w} if slot else {})))
           for t in _allowed(TEMPLATES[_key(p)], split) for w in words]
    return list(dict.fromkeys(out))


def equivalents(p: Program) -> list[Program]:
    """``p`` and the programs worded differently that mean the same (argument swaps)."""
    op, a = p.op, p.args
    out = [p]
    if op == "relate":
        out.append(Program("relate", (OPPOSITE[a[0]], a[2], a[1])))
    elif op in ("bigger", "smaller", "more", "fewer"):
        out.append(Program(OPPOSITE[op], (a[1], a[0])))
    elif op in ("same_color", "and", "or"):
        out.append(Program(op, (a[1], a[0])))
    elif op == "choose":
        out.append(Program(op, (a[0], a[2], a[1])))
    return out


def all_wordings(p: Program, split: str = "test") -> list[str]:
    return list(dict.fromkeys(w for q in equivalents(p) for w in wordings(q, split)))


@dataclass(frozen=True)
class Question:
    program: Program
    text: str

    @property
    def family(self) -> str:
        return FAMILY[self.program.op]

    def answer(self, scene: Scene) -> Optional[str]:
        return evaluate(self.program, scene)


def ask(p: Program, rng: random.Random, split: str = "test", avoid: tuple[str, ...] = ()) -> Optional[Question]:
    """``p`` in a randomly chosen wording of its own (not one of ``avoid``)."""
    opts = [w for w in wordings(p, split) if w not in avoid]
    return Question(p, rng.choice(opts)) if opts else None


def paraphrase(q: Question, rng: random.Random, split: str = "test") -> Optional[Question]:
    """Same meaning (possibly with swapped arguments), another wording."""
    opts = [(e, w) for e in equivalents(q.program) for w in wordings(e, split) if w != q.text]
    if not opts:
        return None
    e, w = rng.choice(opts)
    return Question(e, w)


# ------------------------------------------------------------------------- sampling
def describe(o: SceneObject, scene: Scene, avoid: tuple[str, ...] = ()) -> Optional[Ref]:
    """The shortest description naming only ``o`` in ``scene``, without the ``avoid`` attributes."""
    for attrs in (("shape",), ("color", "shape"), ("size", "shape"), ("color",), ("size", "color", "shape")):
        if any(x in avoid for x in attrs):
            continue
        ref = Ref(**{x: getattr(o, x) for x in attrs})
        if _unique(ref, scene) is not None and _unique(ref, scene).oid == o.oid:
            return ref
    return None


def _random_ref(scene: Scene, rng: random.Random, present: Optional[bool] = None) -> Ref:
    """A colour+shape, shape-only or colour-only description, present or absent."""
    for _ in range(50):
        kind = rng.choice(("cs", "cs", "s", "c"))
        ref = Ref(color=rng.choice(list(COLORS)) if "c" in kind else None, shape=rng.choice(SHAPES) if "s" in kind else None)
        if present is None or bool(ref.resolve(scene)) == present:
            return ref
    o = rng.choice(scene.objects)
    return Ref(color=o.color, shape=o.shape)


def _two(scene: Scene, rng: random.Random, avoid: tuple[str, ...] = (), need=lambda a, b: True) -> Optional[tuple[Ref, Ref]]:
    pairs = [(a, b) for a in scene.objects for b in scene.objects if a.oid != b.oid and need(a, b)]
    rng.shuffle(pairs)
    for a, b in pairs:
        ra, rb = describe(a, scene, avoid), describe(b, scene, avoid)
        if ra and rb:
            return ra, rb
    return None


def sample_program(scene: Scene, family: str, rng: random.Random) -> Optional[Program]:
    objs = scene.objects
    if family == "existence":
        return Program("exist", (_random_ref(scene, rng, rng.random() < 0.5),))
    if family == "attribute":
        attr = rng.choice(("color", "color", "shape", "size", "verify"))
        o = rng.choice(objs)
        if attr == "verify":
            ref = describe(o, scene, ("color",))
            v = o.color if rng.random() < 0.5 else rng.choice([c for c in COLORS if c != o.color])
            return Program("verify", ("color", v, ref)) if ref else None
        ref = describe(o, scene, (attr,))
        return Program("query", (attr, ref)) if ref else None
    if family == "relation":
        overl = [(a, b) for a in objs for b in objs if a.oid < b.oid and overlap(a, b)]
        rel = rng.choice(("left", "right", "above", "below") + (("front", "behind") if overl else ()))
        pair = _two(scene, rng, need=(lambda a, b: overlap(a, b)) if rel in ("front", "behind") else (lambda a, b: True))
        if pair is None:
            return None
        if rng.random() < 0.25 and rel in ("left", "right"):
            return Program("choose", (rel,) + pair)
        return Program("relate", (rel,) + pair)
    if family == "counting":
        ref = rng.choice((Ref(), Ref(shape=rng.choice(SHAPES)), Ref(color=rng.choice(list(COLORS))),
                          Ref(shape=rng.choice(objs).shape), Ref(color=rng.choice(objs).color)))
        return Program("count", (ref,))
    if family == "comparison":
        kind = rng.choice(("more", "fewer", "bigger", "smaller", "same_color"))
        if kind in ("more", "fewer"):
            attr = rng.choice(("shape", "color"))
            vals = SHAPES if attr == "shape" else tuple(COLORS)
            va, vb = rng.sample([getattr(o, attr) for o in objs] + list(vals), 2)
            if va == vb:
                return None
            return Program(kind, (Ref(**{attr: va}), Ref(**{attr: vb})))
        if kind == "same_color":
            pair = _two(scene, rng, ("color",))
            return Program(kind, pair) if pair else None
        pair = _two(scene, rng, need=lambda a, b: a.size != b.size)
        return Program(kind, pair) if pair else None
    if family == "superlative":
        ext = rng.choice(tuple(EXT_WORDS))
        return Program("superlative", (ext, rng.choice(("color", "shape"))))
    if family == "logical":
        return Program(rng.choice(("and", "or")), (_random_ref(scene, rng, rng.random() < 0.6),
                                                   _random_ref(scene, rng, rng.random() < 0.6)))
    if family == "negation":
        kind = rng.choice(("exist_not", "relate_not", "count_not"))
        if kind == "exist_not":
            return Program(kind, (_random_ref(scene, rng, rng.random() < 0.5),))
        if kind == "count_not":
            o = rng.choice(objs)
            return Program(kind, (Ref(color=o.color) if rng.random() < 0.5 else Ref(shape=o.shape),))
        pair = _two(scene, rng)
        return Program(kind, (rng.choice(("left", "right", "above", "below")),) + pair) if pair else None
    raise ValueError(f"unknown family {family!r}")


def sample_question(scene: Scene, rng: random.Random, family: Optional[str] = None,
                    split: str = "test") -> Question:
    """A question of ``family`` (random if None) whose answer on ``scene`` is defined."""
    for _ in range(200):
        fam = family or rng.choice(FAMILIES)
        p = sample_program(scene, fam, rng)
        if p is not None and p.args and all(x is not None for x in p.args) and evaluate(p, scene) is not None:
            if p.op in ("and", "or") and p.args[0] == p.args[1]:
                continue
            q = ask(p, rng, split)
            if q is not None:
                return q
    raise RuntimeError(f"no {family} question found for {scene.state}")  # pragma: no cover


def _mutations(p: Program, scene: Scene) -> list[Program]:
    """Programs one word away from ``p``."""
    op, a = p.op, p.args
    out: list[Program] = []

    def swap_ref(r: Ref) -> list[Ref]:
        if r == Ref():
            return [Ref(shape=s) for s in SHAPES] + [Ref(color=c) for c in COLORS]
        alts = []
        if r.color:
            alts += [Ref(c, r.shape, r.size) for c in COLORS if c != r.color]
        if r.shape:
            alts += [Ref(r.color, s, r.size) for s in SHAPES if s != r.shape]
        if r.size:
            alts += [Ref(r.color, r.shape, s) for s in SIZE_ORDER if s != r.size]
        return alts

    if op in OPPOSITE:
        out.append(Program(OPPOSITE[op], a))
    if op in ("relate", "relate_not", "choose"):
        out.append(Program(op, (OPPOSITE[a[0]],) + tuple(a[1:])))
    if op in ("exist", "exist_not"):
        out.append(Program("exist_not" if op == "exist" else "exist", a))
    if op == "relate":
        out.append(Program("relate_not", a))
    if op == "superlative":
        out += [Program(op, (e, x)) for e in EXT_WORDS for x in ("color", "shape") if (e, x) != tuple(a)]
    if op == "verify":
        out += [Program(op, (a[0], c, a[2])) for c in COLORS if c != a[1]]
    if op == "query":
        out += [Program(op, (x, a[1])) for x in ("color", "shape", "size") if x != a[0] and getattr(a[1], x) is None]
    # Another object in place of one of the objects named.
    avoid = ("color",) if op == "same_color" else (a[0],) if op == "query" else ()
    if op in ("query", "verify", "relate", "relate_not", "choose", "bigger", "smaller", "same_color"):
        others = [r for o in scene.objects for r in [describe(o, scene, avoid)] if r]
        for i, x in enumerate(a):
            if isinstance(x, Ref):
                out += [Program(op, tuple(a[:i]) + (r,) + tuple(a[i + 1:])) for r in others if r not in a]
    if op in ("exist", "exist_not", "count", "count_not", "more", "fewer", "and", "or"):
        for i, x in enumerate(a):
            out += [Program(op, tuple(a[:i]) + (r,) + tuple(a[i + 1:])) for r in swap_ref(x)]
    return out


def contrast(q: Question, scene: Scene, rng: random.Random, split: str = "test") -> Optional[Question]:
    """A question one word away from ``q`` whose answer on ``scene`` differs."""
    truth = evaluate(q.program, scene)
    cands = [m for m in _mutations(q.program, scene)
             if canonical(m) != canonical(q.program) and evaluate(m, scene) not in (None, truth)]
    rng.shuffle(cands)
    for m in cands:
        c = ask(m, rng, split)
        if c is not None:
            return c
    return None


def negation(q: Question, rng: random.Random, split: str = "test") -> Optional[Question]:
    """The negated yes/no question (the answer flips), or None for other questions."""
    flip = {"exist": "exist_not", "exist_not": "exist", "relate": "relate_not", "relate_not": "relate"}
    if q.program.op not in flip:
        return None
    return ask(Program(flip[q.program.op], q.program.args), rng, split)
