"""The scene workloads (GQA-like, offline) and what an ideal cache could reuse in them.

* ``scenes``: sessions of questions about one procedural scene each
  (:mod:`.scenes`, :mod:`.scene_questions`) -- new questions from every GQA family,
  exact repeats, paraphrases, answer-changing contrasts and negations, the picture
  re-saved losslessly, re-encoded as JPEG, resized; earlier questions asked about
  other scenes; earlier scenes revisited.
* ``scenes-edit``: a camera watching each scene: questions on a first frame, the
  same questions on drifted frames (shift, zoom, exposure, sensor noise: nothing
  moves, every answer stays), then on a frame after a small edit (one object moves
  to the other side of another, changes colour, or disappears: some answers change,
  some do not), then on drifted frames of the edited scene.

Every item's truth comes from the scene graph of the picture it shows. ``meta`` holds
the scene (lineage), the scene state, the question's meaning (:func:`canonical`) and
two flags computed by :func:`mark_oracle_reusable`:

* ``reusable``: an earlier request of the stream had the same meaning, showed the
  same scene (any encoding, any camera, before or after an edit) and had the same
  true answer. An ideal cache -- one that knows which stored answer is right -- could
  answer it from that earlier request. This is the stream's *oracle-reusable* set.
* ``reusable_any_scene``: the same without "same scene": an earlier request with the
  same meaning and answer about any picture (an upper bound no image-keyed cache is
  expected to reach: it would have to know two different scenes agree).
"""

from __future__ import annotations

import random
from typing import Optional

import numpy as np

from ..sources import imageops
from .questions import FAMILIES, Question, canonical, contrast, negation, paraphrase, sample_question
from .graphs import EDIT_KINDS, Camera, Scene, generate_scene, propose_edit, render
from ..harness.workloads import WorkItem, Workload


def _item(q: Question, scene: Scene, image: bytes, kind: str, mime: str = "image/png") -> WorkItem:
    truth = q.answer(scene)
    if truth is None:  # every caller asks only questions defined on the scene shown
        raise ValueError(f"question {q.text!r} has no answer on {scene.state}")
    return WorkItem(text=q.text, truth=truth, kind=kind, image=image, mime=mime,
                    meta={"scene": scene.scene_id, "state": scene.state, "meaning": repr(canonical(q.program)),
                          "family": q.family})


def mark_oracle_reusable(items: list[WorkItem]) -> dict[str, int]:
    """Set ``meta["reusable"]`` and ``meta["reusable_any_scene"]`` on every item (see the
    module docstring) and return their counts."""
    same: set[tuple[object, object, str]] = set()
    anywhere: set[tuple[object, str]] = set()
    n_same = n_any = 0
    for it in items:
        key = (it.meta["meaning"], it.truth)
        it.meta["reusable"] = (it.meta["scene"],) + key in same
        it.meta["reusable_any_scene"] = key in anywhere
        n_same += bool(it.meta["reusable"])
        n_any += bool(it.meta["reusable_any_scene"])
        same.add((it.meta["scene"],) + key)  # type: ignore[arg-type]
        anywhere.add(key)  # type: ignore[arg-type]
    return {"requests": len(items), "reusable": n_same, "reusable_any_scene": n_any}


def _pick_scenes(split: str, n: int, rng: random.Random) -> list[Scene]:
    return [generate_scene(split, i) for i in sorted(rng.sample(range(100_000), n))]


FOLLOW_UPS = ("exact repeat", "paraphrase", "contrast", "negation", "re-saved PNG", "JPEG re-encode", "resized",
              "paraphrase + JPEG", "contrast + JPEG")


def scene_stream(split: str = "test", n_sessions: int = 32, seed: int = 0) -> Workload:
    """Sessions of questions about one scene each (see the module docstring)."""
    rng = random.Random(seed)
    chosen = _pick_scenes(split, n_sessions, rng)
    items: list[WorkItem] = []
    earlier: list[tuple[Scene, object, Question]] = []
    for s in chosen:
        pil = render(s, Camera(noise_seed=rng.randrange(2**31)))
        base = imageops.png_bytes(pil)
        asked: list[Question] = []
        for fam in rng.sample(FAMILIES, rng.randint(2, 4)):
            q = sample_question(s, rng, fam, split)
            items.append(_item(q, s, base, "new question"))
            asked.append(q)
        if earlier and rng.random() < 0.5:
            # An earlier session's question, word for word, about this (different) scene.
            _, _, q = rng.choice(earlier)
            if q.answer(s) is not None:
                items.append(_item(q, s, base, "same question, other scene"))
                asked.append(q)
        for kind in rng.sample(FOLLOW_UPS, rng.randint(4, 6)):
            q = rng.choice(asked)
            if kind in ("paraphrase", "paraphrase + JPEG"):
                nq: Optional[Question] = paraphrase(q, rng, split)
            elif kind in ("contrast", "contrast + JPEG"):
                nq = contrast(q, s, rng, split)
            elif kind == "negation":
                nq = negation(q, rng, split)
            else:
                nq = q
            if nq is None:
                continue
            if kind.endswith("JPEG") or kind == "JPEG re-encode":
                items.append(_item(nq, s, imageops.jpeg_bytes(pil, rng.choice([75, 85, 95])), kind, "image/jpeg"))
            elif kind == "re-saved PNG":
                items.append(_item(nq, s, imageops.png_bytes(pil, compress_level=rng.choice([0, 1, 9])), kind))
            elif kind == "resized":
                items.append(_item(nq, s, imageops.png_bytes(imageops.resize(pil, rng.choice([0.75, 1.5]))), kind))
            else:
                items.append(_item(nq, s, base, kind))
        if earlier and rng.random() < 0.35:
            ps, ppil, pq = rng.choice(earlier)
            if ps.scene_id != s.scene_id:
                items.append(_item(pq, ps, imageops.jpeg_bytes(ppil, 85), "revisit earlier scene (JPEG)",  # type: ignore[arg-type]
                                   "image/jpeg"))
        earlier.extend((s, pil, q) for q in asked)
    counts = mark_oracle_reusable(items)
    return Workload(
        name="scenes",
        description=f"procedural scenes ({split} split): {len(chosen)} sessions of GQA-style questions about one scene each",
        items=items, multimodal=True,
        meta={"split": split, "sessions": len(chosen), "seed": seed, "oracle": counts})


def _tracked_questions(before: Scene, after: Scene, rng: random.Random, split: str,
                       k: int) -> Optional[list[Question]]:
    """``k`` questions of distinct meanings defined on both scenes: up to half whose
    answer the edit changes, the rest whose answer it keeps (None if none changes)."""
    changed: dict[str, Question] = {}
    kept: dict[str, Question] = {}
    for _ in range(160):
        q = sample_question(before, rng, None, split)
        a, b = q.answer(before), q.answer(after)
        if b is None:
            continue
        (changed if a != b else kept).setdefault(repr(canonical(q.program)), q)
    if not changed:
        return None
    pick = list(changed.values())[: max(1, k // 2)]
    pick += list(kept.values())[: k - len(pick)]
    rng.shuffle(pick)
    return pick


def edit_stream(split: str = "test", n_scenes: int = 16, seed: int = 0, questions: int = 6,
                drift_frames: int = 2) -> Workload:
    """A camera over each scene; one small edit per scene (see the module docstring)."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    items: list[WorkItem] = []
    edits_done: dict[str, int] = {}
    chosen = _pick_scenes(split, n_scenes, rng)
    for n, s in enumerate(chosen):
        tracked = after = None
        for kind in EDIT_KINDS[n % 3:] + EDIT_KINDS[: n % 3]:  # rotate: move, recolour, remove
            after = propose_edit(s, kind, nrng)
            tracked = _tracked_questions(s, after, rng, split, questions) if after is not None else None
            if tracked:
                break
        if not tracked or after is None:
            continue
        edits_done[kind] = edits_done.get(kind, 0) + 1
        cam = Camera(noise_seed=int(nrng.integers(2**31)))

        def frame(scene: Scene, c: Camera) -> bytes:
            return imageops.png_bytes(render(scene, c), compress_level=1)

        img = frame(s, cam)
        for q in tracked:
            items.append(_item(q, s, img, "first frame"))
        for _f in range(drift_frames):
            cam = Camera.drifted(nrng, cam)
            img = frame(s, cam)
            for q in rng.sample(tracked, min(3, len(tracked))):
                p = paraphrase(q, rng, split) if rng.random() < 0.3 else None
                items.append(_item(p or q, s, img, "camera drift + paraphrase" if p else "camera drift"))
        cam = Camera.drifted(nrng, cam)
        img = frame(after, cam)
        for q in tracked:
            changed = q.answer(after) != q.answer(s)
            items.append(_item(q, after, img, f"after {kind}: answer {'changed' if changed else 'unchanged'}"))
        for _f in range(max(1, drift_frames - 1)):
            cam = Camera.drifted(nrng, cam)
            img = frame(after, cam)
            for q in rng.sample(tracked, min(3, len(tracked))):
                items.append(_item(q, after, img, "camera drift after edit"))
    counts = mark_oracle_reusable(items)
    return Workload(
        name="scenes-edit",
        description=(f"procedural scenes ({split} split): a drifting camera over {sum(edits_done.values())} scenes, "
                     f"one edit each ({', '.join(f'{k} {v}' for k, v in sorted(edits_done.items()))})"),
        items=items, multimodal=True,
        meta={"split": split, "scenes": len(chosen), "seed": seed, "edits": edits_done, "oracle": counts})


def changed_answer_kinds(workload: Workload) -> list[str]:
    """The request kinds whose truth an edit changed (reusing the earlier answer is wrong)."""
    return sorted(k for k in workload.kinds() if k.endswith("answer changed"))

