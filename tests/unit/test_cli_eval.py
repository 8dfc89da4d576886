"""The evaluation command line (`python -m evaluation`, `./dev mlc sweep`): a quick sweep writes a report whose numbers are
present and sane. (stats/scopes/clear on a persisted cache: test_cli.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evaluation.cli import build_parser, main
from mlc_integrations.ops.cli import build_parser as library_parser
from evaluation.harness.baselines import TINY_CLIP_CONFIG


def test_parser_has_the_commands() -> None:
    p = build_parser()
    for argv in (["demo"], ["sweep", "--workload", "vqa", "--quick"], ["bench", "--no-llm"],
                 ["train-clip", "--steps", "1"], ["encoder-study"]):
        assert callable(p.parse_args(argv).func)
    lib = library_parser()
    for argv in (["stats"], ["scopes"], ["clear"], ["quickstart"]):
        assert callable(lib.parse_args(argv).func)
    with pytest.raises(SystemExit):  # the installed `mlc` carries no evaluation command
        lib.parse_args(["sweep", "--workload", "vqa"])
    with pytest.raises(SystemExit):
        p.parse_args(["sweep", "--workload", "nope"])


def test_library_and_cli_parser_do_not_import_the_eval_package() -> None:
    """evaluation imports the library, never the reverse."""
    import subprocess
    import sys

    code = ("import sys, mlc_integrations, mlc_integrations.engine, mlc_integrations.verify, mlc_integrations.ops.cli as c; "
            "c.build_parser(); print(sorted(m for m in sys.modules if m.startswith('evaluation')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    import evaluation as eval_pkg  # the docstring states the rule

    assert "never imports" in (eval_pkg.__doc__ or "")


def test_quick_sweep_report_is_sane(tmp_path: Path, text_embedder: Any, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("easy_vqa")
    out = tmp_path / "report"
    assert main(["sweep", "--workload", "vqa", "--quick", "--taus", "0.9", "--latency-ms", "2",
                 "--out", str(out)]) == 0
    data = json.loads((out / "sweep_vqa.json").read_text())
    results = data["results"]
    configs = {r["config"] for r in results}
    assert {"no cache", "exact-only", TINY_CLIP_CONFIG, "L0.5 only", "L1 only (raw)", "L2 only (raw)", "MLC all tiers (raw)"} <= configs
    for r in results:
        assert r["n"] > 0
        for k in ("hit_rate", "accuracy", "false_hit_rate"):
            assert 0.0 <= r[k] <= 1.0, (r["label"], k, r[k])
        assert r["speedup"] is not None and r["speedup"] > 0
        assert r["wall_s"] > 0
    by = {r["config"]: r for r in results if r["params"].get("tau") in (None, 0.99)}
    assert by["no cache"]["accuracy"] == 1.0 and by["no cache"]["hits"] == 0
    assert by["exact-only"]["wrong_hits"] == 0 and by["exact-only"]["accuracy"] == 1.0
    assert by["L0.5 only"]["wrong_hits"] == 0 and by["L0.5 only"]["hits"] >= by["exact-only"]["hits"]
    assert by[TINY_CLIP_CONFIG]["lookup_p50_ms"] is not None
    assert "not a real model" in data["backends"]["oracle"]
    md = (out / "sweep_vqa.md").read_text()
    assert "NOT a real model" in md and "| no cache |" in md
    for plot in data["plots"]:
        assert (out / plot).stat().st_size > 1000
    assert "report:" in capsys.readouterr().out
