"""The QQP-target experiments run end to end on a slice of qqp_val (tiny settings)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlc_integrations.eval import qqp_target, workloads as W

pytestmark = pytest.mark.skipif(not (W.shared_data_dir() / "qqp_val.csv").exists(),
                                reason="shared data folder absent")


def test_cv_smoke_writes_out_of_fold_scores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    qqp_target.main(["--cache-dir", str(tmp_path), "--limit", "120", "cv", "--top-layers", "1",
                     "--epochs", "1", "--max-folds", "1", "--threads", "1"])
    table = capsys.readouterr().out
    assert "1 of 5 folds scored (24 pairs)" in table
    assert "cross-encoder, top 1 layers, 1 epochs, both orders" in table
    saved = np.load(next(tmp_path.glob("cross-encoder-oof-k1-e1-*.npz")))
    scored = ~np.isnan(saved["oof"])
    assert scored.sum() == 24 and np.isfinite(saved["single"][scored]).all()
    assert set(np.unique(saved["y"])) <= {0, 1}


def test_audit_counts_slices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    qqp_target.main(["--cache-dir", str(tmp_path), "--limit", "300", "audit"])
    out = capsys.readouterr().out
    assert "qqp_val label audit (300 pairs," in out
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| cosine >= ")]
    assert len(rows) == 2
    n98, n95 = int(rows[0][2]), int(rows[1][2])
    assert 0 < n98 <= n95 <= 300  # the 0.98 slice is inside the 0.95 slice
