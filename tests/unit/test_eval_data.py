"""easy-vqa labels, ground-truth answers and workload construction."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("easy_vqa")

from evaluation.harness import workloads as W  # noqa: E402
from evaluation.sources.easyvqa import (  # noqa: E402
    COLORS,
    SHAPES,
    UnknownQuestion,
    infer_attributes,
    load_split,
    questions_for,
    true_answer,
)


def test_recovered_attributes_agree_with_every_dataset_answer() -> None:
    # load_split raises if a recovered (colour, shape) contradicts any dataset answer.
    train, test = load_split("train"), load_split("test")
    assert len(train) > 3000 and len(test) > 800
    for im in test[:200]:
        assert im.color in COLORS and im.shape in SHAPES
        assert all(true_answer(q, im.color, im.shape) == a for q, a in im.qa)


def test_true_answer_templates_and_negation() -> None:
    assert true_answer("what color is the shape?", "red", "circle") == "red"
    assert true_answer("what is the red shape?", "red", "circle") == "circle"
    assert true_answer("is there a red shape?", "red", "circle") == "yes"
    assert true_answer("is there not a red shape?", "red", "circle") == "no"
    assert true_answer("is no triangle present?", "red", "circle") == "yes"
    assert true_answer("does the image contain a triangle?", "red", "circle") == "no"
    with pytest.raises(UnknownQuestion):
        true_answer("how many shapes are there?", "red", "circle")


def test_infer_attributes_by_elimination() -> None:
    qs = [f"is there a {c} shape?" for c in COLORS if c != "teal"] + ["is there a circle?", "is there a triangle?"]
    color, shape = infer_attributes(qs, ["no"] * len(qs))
    assert (color, shape) == ("teal", "rectangle")


def test_question_groups_paraphrases_share_answers_negations_flip() -> None:
    g = questions_for("blue", "triangle")
    for kind in ("color", "shape", "has_color", "has_no_color", "has_shape", "has_no_shape"):
        assert len({true_answer(q, "blue", "triangle") for q in g[kind]}) == 1
    assert true_answer(g["has_color"][0], "blue", "triangle") == "yes"
    assert true_answer(g["has_no_color"][0], "blue", "triangle") == "no"


def test_rephrase_keeps_answer_and_negation_flips_it() -> None:
    im = load_split("test")[0]
    rng = random.Random(0)
    for q, a in im.qa:
        p = W.rephrase(q, im, rng)
        assert p is not None and p != q and im.answer(p) == a
        n = W.rephrase(q, im, rng, negate=True)
        if q.startswith("what"):
            assert n is None
        else:
            assert n is not None and im.answer(n) != a


def test_vqa_stream_is_deterministic_and_truthful() -> None:
    a = W.vqa_stream("test", n_sessions=6, seed=3)
    b = W.vqa_stream("test", n_sessions=6, seed=3)
    assert [(i.text, i.truth, i.kind, i.image) for i in a.items] == [(i.text, i.truth, i.kind, i.image) for i in b.items]
    c = W.vqa_stream("test", n_sessions=6, seed=4)
    assert [i.text for i in c.items] != [i.text for i in a.items]
    kinds = a.kinds()
    assert kinds["new question"] >= 12 and all(i.image for i in a.items)
    assert {i.mime for i in a.items} <= {"image/png", "image/jpeg"}


def test_camera_stream_truth_changes_only_at_cuts() -> None:
    wl = W.camera_stream("test", n_scenes=3, frames_per_scene=4, seed=1)
    assert len(wl.items) == 2 * 3 * 4
    for prev, cur in zip(wl.items, wl.items[1:]):
        if cur.kind == "drifted frame":
            assert cur.truth == prev.truth and cur.text == prev.text
    assert len({i.image for i in wl.items}) == len(wl.items)  # every frame is new pixels


def test_photo_stream_uses_local_photos_only() -> None:
    wl = W.photo_stream(seed=0, variants_per_photo=1)
    names = wl.meta["photos"]
    assert len(names) >= 10
    assert sum(1 for i in wl.items if i.kind == "original photo") == len(names)
    assert {i.truth for i in wl.items} == set(names)


@pytest.mark.skipif(not (W.shared_data_dir() / "qqp_val.csv").exists(), reason="shared data folder absent")
def test_qqp_truth_is_the_duplicate_cluster() -> None:
    wl = W.qqp_stream(n_pairs=50, seed=0)
    firsts = wl.items[:50]
    by_text = {i.text: i.truth for i in firsts}
    rows = {(a, b): d for a, b, d in W._qqp_rows()}
    for a, b in rows:
        if a in by_text and rows[(a, b)]:
            second = next(i for i in wl.items[50:] if i.text == b)
            assert second.truth == by_text[a]


@pytest.mark.skipif(not (W.shared_data_dir() / "meancache_contextual_queries.json").exists(),
                    reason="shared data folder absent")
def test_contextual_follow_up_never_shares_the_main_truth() -> None:
    wl = W.contextual_stream(seed=0, n=10)
    mains = {i.text: i.truth for i in wl.items if i.kind == "main query"}
    for it in wl.items:
        if it.kind == "follow-up in conversation":
            main_text = it.context[0][1]
            assert it.truth != mains[main_text]
            assert it.context[1][0] == "ai"
