"""The QQP-target experiments run end to end on a slice of qqp_val (tiny settings)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evaluation.studies import qqp_target

from evaluation.harness import workloads as W

pytestmark = pytest.mark.skipif(not (W.shared_data_dir() / "qqp_val.csv").exists(),
                                reason="shared data folder absent")


def test_cv_then_stack_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--cache-dir", str(tmp_path), "--limit", "150"]
    qqp_target.main(common + ["cv", "--top-layers", "1", "--epochs", "1", "--threads", "1"])
    table = capsys.readouterr().out
    assert "5 of 5 folds scored (150 pairs)" in table
    assert "cross-encoder, top 1 layers, 1 epochs, both orders" in table
    assert "24 signals + cross-encoder score, trees (stacked)" in table
    scores = next(tmp_path.glob("cross-encoder-oof-k1-e1-*-f5.npz"))
    saved = np.load(scores)
    assert np.isfinite(saved["oof"]).all() and np.isfinite(saved["single"]).all()
    assert set(np.unique(saved["y"])) <= {0, 1}
    qqp_target.main(common + ["stack", str(scores), "--seeds", "7"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 24 signals")]
    assert len(rows) == 3  # signals, + cross-encoder, + cross-encoder + head


def test_stack_refuses_an_incomplete_run(tmp_path: Path) -> None:
    bad = tmp_path / "partial.npz"
    np.savez(bad, oof=np.r_[np.full(50, np.nan), np.zeros(50)], single=np.zeros(100), y=np.zeros(100, dtype=int))
    with pytest.raises(SystemExit, match="not a complete 5-fold run"):
        qqp_target.main(["--cache-dir", str(tmp_path), "--limit", "100", "stack", str(bad)])


def test_audit_counts_slices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    qqp_target.main(["--cache-dir", str(tmp_path), "--limit", "300", "audit"])
    out = capsys.readouterr().out
    assert "qqp_val label audit (300 pairs," in out
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| cosine >= ")]
    assert len(rows) == 2
    n98, n95 = int(rows[0][2]), int(rows[1][2])
    assert 0 < n98 <= n95 <= 300  # the 0.98 slice is inside the 0.95 slice
