"""The committed contrast/paraphrase suite: size, kinds, split hygiene, reproducibility."""

from __future__ import annotations

from collections import Counter

import pytest

from mlc_integrations.eval.contrast_natural import ISSUE_EXAMPLES, PARAPHRASE_KINDS
from mlc_integrations.eval.contrast_suite import SUITE_PATH, build, check, load


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


@pytest.mark.slow
def test_generator_reproduces_the_committed_file(rows: list[dict]) -> None:
    assert build() == rows
