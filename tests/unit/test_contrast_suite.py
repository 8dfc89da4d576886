"""The committed contrast/paraphrase suite: size, kinds, split hygiene, reproducibility."""

from __future__ import annotations

from collections import Counter

import pytest

from evaluation.contrast.natural import ISSUE_EXAMPLES, PARAPHRASE_KINDS
from evaluation.contrast.suite import SUITE_PATH, build, check, load


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return load(SUITE_PATH)


def test_suite_size_and_kinds(rows: list[dict]) -> None:
    assert len(rows) >= 600
    changing = {r["kind"] for r in rows if not r["same_answer"]}
    assert len(changing) >= 10
    assert PARAPHRASE_KINDS <= {r["kind"] for r in rows if r["same_answer"]}
    assert all(set(r) >= {"a", "b", "same_answer", "kind", "family", "split"} for r in rows)
    assert all(r["a"] != r["b"] for r in rows)


def test_every_kind_is_in_both_splits_with_disjoint_families(rows: list[dict]) -> None:
    per_kind = Counter((r["kind"], r["split"]) for r in rows)
    for kind in {r["kind"] for r in rows}:
        assert per_kind[(kind, "train")] and per_kind[(kind, "test")], kind
    check(rows)  # raises if a family is in both splits or an issue example is in train
    train_families = {r["family"] for r in rows if r["split"] == "train"}
    test_families = {r["family"] for r in rows if r["split"] == "test"}
    assert not train_families & test_families


def test_issue_examples_are_test_only(rows: list[dict]) -> None:
    issue_texts = {t for _, a, b in ISSUE_EXAMPLES for t in (a, b)}
    assert not [r for r in rows if r["split"] == "train" and {r["a"], r["b"]} & issue_texts]
    assert {r["split"] for r in rows if r["family"] == "issue"} == {"test"}


def test_check_rejects_a_leak() -> None:
    _, a, b = ISSUE_EXAMPLES[0]
    with pytest.raises(AssertionError):
        check([{"a": a, "b": b, "family": "x", "split": "train"}])


def test_generator_reproduces_the_committed_file(rows: list[dict]) -> None:  # ~4 s
    assert build() == rows


def test_fresh_held_out_set_is_well_formed_and_disjoint_from_the_suite(rows: list[dict]) -> None:
    """contrast_fresh.jsonl: hand-written after the edit rules were frozen, test-only."""
    fresh = load(SUITE_PATH.parent / "contrast_fresh.jsonl")
    assert all(set(r) == {"a", "b", "same_answer", "kind", "family", "split", "source"} for r in fresh)
    assert all(isinstance(r["a"], str) and isinstance(r["b"], str) and r["a"] != r["b"] for r in fresh)
    assert {(r["family"], r["split"], r["source"]) for r in fresh} == {("fresh", "test", "fresh")}
    # same kinds as the suite, with the same answer-changing / same-answer labelling
    assert {r["kind"] for r in fresh} == {r["kind"] for r in rows}
    assert all(r["same_answer"] == (r["kind"] in PARAPHRASE_KINDS) for r in fresh)
    per_kind = Counter(r["kind"] for r in fresh)
    assert min(per_kind.values()) >= 20, per_kind
    pairs = [frozenset((r["a"], r["b"])) for r in fresh]
    assert len(set(pairs)) == len(pairs)  # no (a, b) twice, nor (a, b) and (b, a)
    suite_pairs = {frozenset((r["a"], r["b"])) for r in rows}
    assert not [sorted(p) for p in pairs if p in suite_pairs]
    # stronger: no request text is shared either, so nothing was seen in the suite's train split
    suite_texts = {t for r in rows for t in (r["a"], r["b"])}
    assert not [t for r in fresh for t in (r["a"], r["b"]) if t in suite_texts]
