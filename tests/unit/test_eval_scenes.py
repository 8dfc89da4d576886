"""The procedural scenes benchmark: deterministic generator, ground truth from the scene
graph (hand-checked scenes), paraphrases/contrasts, oracle-reusable marking, and the
quick scene sweeps end to end through `mlc sweep`."""

from __future__ import annotations

import colorsys
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evaluation.scenes import questions as Q
from evaluation.scenes.workloads import edit_stream, mark_oracle_reusable, scene_stream
from evaluation.scenes.graphs import (
    COLORS,
    PAD,
    Background,
    Camera,
    Scene,
    SceneObject,
    generate_scene,
    move_object,
    propose_edit,
    recolor_object,
    remove_object,
    render,
    valid,
)
from evaluation.harness.workloads import WorkItem
from evaluation.harness.baselines import TINY_CLIP_CONFIG


def _hand_scene() -> Scene:
    """red circle (large, left, front) overlapping a blue square (small, middle, behind);
    green triangle (medium, right, top)."""
    return Scene("hand", (
        SceneObject(0, "circle", "red", "large", 70.0, 150.0, 0),
        SceneObject(1, "square", "blue", "small", 110.0, 120.0, 1),
        SceneObject(2, "triangle", "green", "medium", 190.0, 60.0, 2),
    ), Background(7))


def _ans(scene: Scene, op: str, *args: Any) -> str | None:
    return Q.evaluate(Q.Program(op, tuple(args)), scene)


CIRCLE, SQUARE, TRIANGLE = Q.Ref(shape="circle"), Q.Ref(shape="square"), Q.Ref(shape="triangle")


def test_generator_is_deterministic_and_splits_are_different_scenes() -> None:
    a, b = generate_scene("test", 5), generate_scene("test", 5)
    assert a == b and valid(a) and 2 <= len(a.objects) <= 6
    assert np.array_equal(np.asarray(render(a, Camera(noise_seed=3))), np.asarray(render(b, Camera(noise_seed=3))))
    assert generate_scene("train", 5).objects != a.objects
    assert len({generate_scene("test", i).objects for i in range(30)}) == 30
    # a drifted camera changes pixels, not the scene graph
    d = render(a, Camera.drifted(np.random.default_rng(0), Camera(noise_seed=3)))
    assert d.size == (224, 224) and not np.array_equal(np.asarray(d), np.asarray(render(a, Camera(noise_seed=3))))


def test_pictures_show_the_scene_graph() -> None:
    # The frontmost object's centre pixel has that object's hue (lighting and noise aside).
    for i in range(12):
        s = generate_scene("test", i)
        o = min(s.objects, key=lambda o: o.depth)
        px = np.asarray(render(s, Camera(noise=0)))[round(o.y) - PAD, round(o.x) - PAD] / 255.0
        hue = colorsys.rgb_to_hsv(*px)[0]
        dist = {c: min(abs(hue - colorsys.rgb_to_hsv(*(np.array(v) / 255.0))[0]),
                       1 - abs(hue - colorsys.rgb_to_hsv(*(np.array(v) / 255.0))[0])) for c, v in COLORS.items()}
        assert min(dist, key=dist.get) == o.color, (s.state, o, px)


def test_hand_checked_answers() -> None:
    s = _hand_scene()
    assert valid(s)
    assert _ans(s, "relate", "left", CIRCLE, SQUARE) == "yes"
    assert _ans(s, "relate", "right", CIRCLE, SQUARE) == "no"
    assert _ans(s, "relate", "above", TRIANGLE, CIRCLE) == "yes"
    assert _ans(s, "relate", "front", CIRCLE, SQUARE) == "yes"
    assert _ans(s, "relate_not", "left", CIRCLE, SQUARE) == "no"
    assert _ans(s, "choose", "left", TRIANGLE, CIRCLE) == "large red circle"
    assert _ans(s, "count", Q.Ref()) == "3"
    assert _ans(s, "count_not", Q.Ref(color="red")) == "2"
    assert _ans(s, "exist", Q.Ref(color="green", shape="triangle")) == "yes"
    assert _ans(s, "exist_not", Q.Ref(color="green", shape="circle")) == "yes"
    assert _ans(s, "query", "color", SQUARE) == "blue"
    assert _ans(s, "bigger", CIRCLE, TRIANGLE) == "yes" and _ans(s, "smaller", CIRCLE, TRIANGLE) == "no"
    assert _ans(s, "same_color", CIRCLE, SQUARE) == "no"
    assert _ans(s, "superlative", "leftmost", "shape") == "circle"
    assert _ans(s, "superlative", "smallest", "color") == "blue"
    assert _ans(s, "and", Q.Ref(color="red"), Q.Ref(shape="diamond")) == "no"
    assert _ans(s, "or", Q.Ref(color="red"), Q.Ref(shape="diamond")) == "yes"
    assert _ans(s, "more", Q.Ref(shape="circle"), Q.Ref(shape="diamond")) == "yes"
    assert _ans(s, "query", "color", Q.Ref(shape="diamond")) is None  # refers to nothing: never asked


def test_edits_change_exactly_the_answers_they_should() -> None:
    s = _hand_scene()
    moved = move_object(s, 0, 150.0, 170.0)  # the circle crosses to the right of the square
    assert valid(moved) and moved.state == "hand+move0" and moved.scene_id == s.scene_id
    assert _ans(moved, "relate", "left", CIRCLE, SQUARE) == "no"
    assert _ans(moved, "superlative", "leftmost", "shape") == "square"
    assert _ans(moved, "count", Q.Ref()) == _ans(s, "count", Q.Ref())  # unchanged by a move
    assert _ans(moved, "relate", "above", TRIANGLE, CIRCLE) == "yes"
    recolored = recolor_object(s, 1, "red")
    assert _ans(recolored, "same_color", CIRCLE, SQUARE) == "yes"
    assert _ans(recolored, "count", Q.Ref(color="red")) == "2"
    assert _ans(recolored, "relate", "left", CIRCLE, SQUARE) == "yes"
    removed = remove_object(s, 2)
    assert _ans(removed, "exist", TRIANGLE) == "no" and _ans(removed, "count", Q.Ref()) == "2"
    assert _ans(removed, "relate", "above", TRIANGLE, CIRCLE) is None
    rng = np.random.default_rng(0)
    for i in range(20):
        g = generate_scene("test", i)
        for kind in ("move", "recolor", "remove"):
            e = propose_edit(g, kind, rng)
            assert e is None or (valid(e) and e.objects != g.objects)


def test_paraphrases_keep_and_contrasts_change_the_answer() -> None:
    rng = random.Random(0)
    for i in range(15):
        s = generate_scene("test", i)
        for fam in Q.FAMILIES:
            q = Q.sample_question(s, rng, fam)
            a = q.answer(s)
            for e in Q.equivalents(q.program):
                assert Q.canonical(e) == Q.canonical(q.program) and Q.evaluate(e, s) == a
            p = Q.paraphrase(q, rng)
            assert p is not None and p.text != q.text and p.answer(s) == a
            c = Q.contrast(q, s, rng)
            assert c is None or (c.answer(s) not in (None, a) and Q.canonical(c.program) != Q.canonical(q.program))
    # Held-out wordings exist only in the test split.
    p = Q.Program("relate", ("left", CIRCLE, SQUARE))
    train, test = set(Q.wordings(p, "train")), set(Q.wordings(p, "test"))
    assert train < test and "is the circle positioned to the left of the square?" in test - train


def test_oracle_reusable_marks_same_meaning_same_scene_same_answer() -> None:
    def it(text: str, truth: str, scene: str, meaning: str) -> WorkItem:
        return WorkItem(text, truth, "k", meta={"scene": scene, "state": scene, "meaning": meaning})

    items = [it("q", "yes", "A", "m1"), it("q'", "yes", "A", "m1"), it("q", "no", "A", "m1"),
             it("q", "yes", "B", "m1"), it("r", "yes", "A", "m2")]
    counts = mark_oracle_reusable(items)
    assert [i.meta["reusable"] for i in items] == [False, True, False, False, False]
    assert [i.meta["reusable_any_scene"] for i in items] == [False, True, False, True, False]
    assert counts == {"requests": 5, "reusable": 1, "reusable_any_scene": 2}


def test_streams_are_deterministic_and_truthful() -> None:
    a, b = scene_stream(n_sessions=4, seed=2), scene_stream(n_sessions=4, seed=2)
    assert [(i.text, i.truth, i.kind, i.image) for i in a.items] == [(i.text, i.truth, i.kind, i.image) for i in b.items]
    assert a.kinds()["new question"] >= 8 and all(i.image for i in a.items)
    e = edit_stream(n_scenes=3, seed=1)
    kinds = e.kinds()
    assert kinds["first frame"] >= 3 and any(k.endswith("answer changed") for k in kinds)
    for item in e.items:
        if item.kind.endswith("answer changed"):
            # the same question was asked before the edit, with another answer
            before = [p for p in e.items if p.meta["scene"] == item.meta["scene"] and p.meta["meaning"] == item.meta["meaning"]
                      and p.kind == "first frame"]
            assert before and before[0].truth != item.truth and not item.meta["reusable"]
        if item.kind.startswith("camera drift"):
            assert item.meta["reusable"]
    assert e.meta["oracle"]["reusable"] == sum(bool(i.meta["reusable"]) for i in e.items)


@pytest.mark.parametrize("workload", ["scenes", "scenes-edit"])
def test_quick_scene_sweep_end_to_end(workload: str, tmp_path: Path, text_embedder: Any,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from evaluation.cli import main

    out = tmp_path / "report"
    assert main(["sweep", "--workload", workload, "--quick", "--latency-ms", "0", "--out", str(out)]) == 0
    data = json.loads((out / f"sweep_{workload}.json").read_text())
    configs = {r["config"] for r in data["results"]}
    assert {"no cache", "exact-only", TINY_CLIP_CONFIG, "MLC as shipped", "L2 only (raw)", "MLC all tiers (raw)"} <= configs
    sc = data["extra"]["scenes"]
    assert sc["clip_model"] == "mlc-scenes-tiny" and 0 < sc["oracle"]["reusable"] < sc["oracle"]["requests"]
    for r in data["results"]:
        assert 0.0 <= r["accuracy"] <= 1.0 and r["n"] == sc["oracle"]["requests"]
        s = sc["scores"][r["label"]]
        assert s["served_reusable"] + s["right_by_chance"] == r["hits"] - r["wrong_hits"]
        assert set(sc["speedup_at_ms"][r["label"]]) == {"300", "1000"}
    base = next(r for r in data["results"] if r["config"] == "no cache")
    assert base["hits"] == 0 and sc["speedup_at_ms"][base["label"]]["1000"] == pytest.approx(1.0)
    exact = next(r for r in data["results"] if r["config"] == "exact-only")
    assert exact["wrong_hits"] == 0
    if workload == "scenes-edit":
        assert sc["changed_answer_kinds"] and all(s["changed_answer_requests"] > 0 for s in sc["scores"].values())
    md = (out / f"sweep_{workload}.md").read_text()
    assert "Experiment 2 table" in md and "Oracle-reusable" in md and f"scenes_{workload}.png" in md
    assert (out / f"scenes_{workload}.png").stat().st_size > 1000
    assert "report:" in capsys.readouterr().out


def test_scenes_clip_is_small_reproducible_and_loads_through_the_engine(tmp_path: Path, text_embedder: Any) -> None:
    import hashlib

    from mlc_integrations import MLCEngine
    from evaluation.training.train_scenes_clip import MODEL_CFG, MODEL_DIR, train
    from mlc_integrations.request import CacheRequest

    assert json.loads((MODEL_DIR / "open_clip_config.json").read_text())["model_cfg"] == MODEL_CFG
    assert (MODEL_DIR / "open_clip_model.safetensors").stat().st_size < 8_000_000
    a = train(tmp_path / "a", steps=2, n_scenes=3, scenes_per_step=2, progress=False, evaluate_after=False)
    b = train(tmp_path / "b", steps=2, n_scenes=3, scenes_per_step=2, progress=False, evaluate_after=False)
    digest = [hashlib.sha256((tmp_path / x / "open_clip_model.safetensors").read_bytes()).hexdigest() for x in "ab"]
    assert digest[0] == digest[1] and a["final_loss"] == b["final_loss"]
    # The packaged model: a drifted frame of a scene is an L2 hit, the scene after a recolour is not.
    s = generate_scene("test", 1)
    eng = MLCEngine(image_encoder=str(MODEL_DIR))
    eng.update(CacheRequest(text="what color is the square?", images=[render(s, Camera(noise_seed=1))]), {"text": "x"})
    drift = render(s, Camera.drifted(np.random.default_rng(1), Camera(noise_seed=1)))
    hit = eng.lookup(CacheRequest(text="what color is the square?", images=[drift]))
    assert eng.l2_status == "on" and hit is not None and hit.tier == "L2"
    other = recolor_object(s, s.objects[0].oid, next(c for c in COLORS if c != s.objects[0].color))
    assert eng.lookup(CacheRequest(text="what color is the square?", images=[render(other, Camera(noise_seed=1))])) is None


def test_diagnosis_lists_each_wrong_hit_and_each_unserved_reusable_request(text_embedder: Any) -> None:
    from evaluation.harness.backends import GroundTruthOracle
    from evaluation.harness.baselines import mlc_cache
    from evaluation.harness.runner import run_workload
    from evaluation.scenes.diagnose import diagnose, markdown
    from evaluation.scenes.experiments import scenes_clip

    wl = edit_stream(n_scenes=1, seed=0)
    rows = diagnose(wl, mlc_cache(image_encoder=scenes_clip()))
    run = run_workload(wl, mlc_cache(image_encoder=scenes_clip()), GroundTruthOracle(latency_s=0.0), config=TINY_CLIP_CONFIG)
    assert [r["outcome"] for r in rows] == run.outcomes  # the same decisions as the sweep's runner
    assert all(r["tier"] in ("L0.5", "L1", "L2") for r in rows if r["outcome"] != "miss")
    md = markdown(wl, "defaults", rows)
    wrong = [r for r in rows if r["outcome"] == "wrong"]
    missed = [r for r in rows if r["reusable"] and r["outcome"] == "miss"]
    assert md.count("\n| after ") + md.count("\n| camera ") + md.count("\n| first ") == len(wrong) + len(missed)
