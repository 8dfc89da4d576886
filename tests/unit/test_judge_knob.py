"""One knob in the user's terms: ``VerifierOptions(max_wrong_reuse=...)``, the tolerated
share of answer-changing requests that reuse a stored answer, read through the
calibration table shipped with the judge; the judge decides by default, the trees where
it cannot."""

from __future__ import annotations

from typing import Any

import pytest

from mlc_integrations import VerifierOptions
from mlc_integrations.errors import ConfigurationError
from mlc_integrations.verify.policy import (DEFAULT_MAX_WRONG_REUSE, JUDGE_BY_DEFAULT, JudgeChoice, make_policy)
from mlc_integrations.verify.text.judge import DEFAULT_JUDGE_PATH, JudgeUnavailable, read_judge, threshold_for

TABLE = [{"max_wrong_reuse": 0.005, "threshold": 0.97}, {"max_wrong_reuse": 0.01, "threshold": 0.9},
         {"max_wrong_reuse": 0.02, "threshold": 0.7}, {"max_wrong_reuse": 0.05, "threshold": 0.4}]


# ----------------------------------------------------------------------------- the mapping
def test_a_share_in_the_table_reads_its_own_threshold() -> None:
    assert threshold_for(TABLE, 0.01) == 0.9
    assert threshold_for(TABLE, 0.05) == 0.4


def test_a_share_between_rows_takes_the_stricter_row_never_more_wrong_reuse_than_asked() -> None:
    assert threshold_for(TABLE, 0.015) == 0.9
    assert threshold_for(TABLE, 0.049) == 0.7


def test_a_share_under_the_table_takes_its_strictest_threshold() -> None:
    assert threshold_for(TABLE, 0.001) == 0.97


def test_a_judge_without_a_table_cannot_map_the_knob() -> None:
    with pytest.raises(JudgeUnavailable):
        threshold_for([], 0.01)


def test_the_shipped_table_trades_monotonically() -> None:
    """More tolerated wrong reuse never raises the threshold nor lowers the rewordings reused."""
    cal = read_judge(DEFAULT_JUDGE_PATH)["meta"]["calibration"]
    rows = sorted(cal, key=lambda r: r["max_wrong_reuse"])
    assert len(rows) >= 8 and any(r["max_wrong_reuse"] == DEFAULT_MAX_WRONG_REUSE for r in rows)
    for lo, hi in zip(rows, rows[1:]):
        assert hi["threshold"] <= lo["threshold"]
        assert hi["validation_rewordings_reused"] >= lo["validation_rewordings_reused"]
    for r in rows:  # measured on the validation split: never more wrong reuse than the row allows
        assert r["validation_wrong_reuse"] <= r["max_wrong_reuse"] + 1e-9


def test_the_shipped_threshold_is_the_tables_one_percent_row() -> None:
    meta = read_judge(DEFAULT_JUDGE_PATH)["meta"]
    assert meta["threshold"] == threshold_for(meta["calibration"], 0.01)


# ----------------------------------------------------------------------------- bad values
@pytest.mark.parametrize("bad", [0, 0.0, 1, 1.5, -0.01, float("nan"), float("inf"), "1%", None, True])
def test_a_knob_outside_zero_one_is_a_configuration_error(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_wrong_reuse"):
        VerifierOptions(max_wrong_reuse=bad)


def test_make_policy_refuses_a_bad_knob_too() -> None:
    with pytest.raises(ConfigurationError, match="max_wrong_reuse"):
        make_policy("trees", max_wrong_reuse=2.0)


# ----------------------------------------------------------------------------- through the options
def test_the_default_options_ask_one_percent() -> None:
    assert VerifierOptions().max_wrong_reuse == 0.01 == DEFAULT_MAX_WRONG_REUSE
    assert VerifierOptions().model == "default"


def test_a_non_default_knob_travels_with_the_model_name_to_the_engine() -> None:
    opts = VerifierOptions(max_wrong_reuse=0.02)
    assert opts.model == JudgeChoice("default", 0.02)
    assert VerifierOptions(model="trees", max_wrong_reuse=0.02).model == "trees"


@pytest.fixture(scope="session")
def judge_policy(text_embedder: Any) -> Any:
    return make_policy("judge")


def test_the_default_is_the_judge_only_while_it_beats_the_trees(text_embedder: Any) -> None:
    policy = make_policy("default")
    assert (policy.judge is not None) == JUDGE_BY_DEFAULT
    assert policy.stats()["decided_by"] == ("judge" if JUDGE_BY_DEFAULT else "trees")


def test_the_judge_by_name_takes_the_one_percent_threshold_of_its_table(judge_policy: Any) -> None:
    assert judge_policy.judge is not None and judge_policy.judge.calibration
    assert judge_policy.threshold == judge_policy.judge.threshold_for(0.01)
    assert judge_policy.stats()["judge"]["max_wrong_reuse"] == 0.01


def test_a_looser_knob_lowers_the_judges_threshold(judge_policy: Any) -> None:
    loose = make_policy(VerifierOptions(model="judge", max_wrong_reuse=0.05).model)
    assert loose.threshold == loose.judge.threshold_for(0.05) < judge_policy.threshold


def test_trees_by_name_or_by_environment_keep_the_trees(monkeypatch: pytest.MonkeyPatch, text_embedder: Any) -> None:
    assert make_policy("trees").judge is None
    monkeypatch.setenv("MLC_JUDGE", "off")
    assert make_policy("judge").judge is None
