"""`mlc stats`, `mlc scopes`, `mlc clear` read the stored cache (not the CLI's own
configuration); a mistyped --dir is an error, never a new directory; clear asks first;
`mlc quickstart` is documented."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from mlc_integrations import MLCEngine
from mlc_integrations.ops.cli import build_parser, main
from mlc_integrations.ops.inspection import size_on_disk
from mlc_integrations.keys import scope_digest
from mlc_integrations.request import CacheRequest
from mlc_integrations.store.schema import TIERS
from mlc_integrations import StorageOptions

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0  # a fixed creation time for the first entries (2023-11-14)


def _put(eng: MLCEngine, text: str, scope: str, namespace: str = "default", image: bool = False,
         ttl: float | None = None) -> None:
    images = [Image.new("RGB", (16, 16), (200, 10, 10))] if image else []
    eng.update(CacheRequest(text=text, images=images, scope=scope, namespace=namespace), {"text": f"answer to {text}"},
               ttl=ttl)


@pytest.fixture
def cache_dir(tmp_path: Path, text_embedder: Any) -> Path:
    """A small persistent cache: scopes m1 and m2, namespaces default and tenant-b, one
    entry with a picture, one expired; written in two sessions at known times."""
    d = tmp_path / "cache"
    with MLCEngine(persist_directory=str(d), durable=True, clock=lambda: T0, image_encoder=None) as eng:
        _put(eng, "What color is the car?", "m1", image=True)
        _put(eng, "What is the capital of France?", "m1")
        _put(eng, "How old is the universe?", "m1", ttl=60)  # expired long before now
    with MLCEngine(persist_directory=str(d), durable=True, clock=lambda: T0 + 3600, image_encoder=None) as eng:
        _put(eng, "What is the capital of France?", "m1", namespace="tenant-b")
        _put(eng, "What is the capital of France?", "m2")
    return d


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _count(d: Path) -> int:
    with MLCEngine(persist_directory=str(d), warm_start=False, image_encoder=None) as eng:
        return eng.count()


# ---------------------------------------------------------------------------- stats
def test_stats_reports_the_stored_cache_per_scope_namespace_and_tier(cache_dir: Path, capsys) -> None:
    out = _json(capsys, ["stats", "--dir", str(cache_dir), "--json"])
    assert out["bytes_on_disk"] == size_on_disk(cache_dir) and out["bytes_on_disk"] > 0
    (c,) = out["caches"]
    assert c["prefix"] == "mlc" and c["entries"] == 5 and c["expired"] == 1
    assert c["tiers"] == {t: 5 if t in ("exact", "l1", "l1_static") else 0 for t in (tier.name for tier in TIERS)}  # no L2 rows
    m1, m2 = scope_digest("m1"), scope_digest("m2")
    assert c["entries_per_scope"] == {m1: 4, m2: 1}
    assert c["entries_per_namespace"] == {scope_digest("default"): 4, scope_digest("tenant-b"): 1}
    assert "config" not in out and "l1_threshold" not in json.dumps(out), "the CLI's own settings are not the cache"


def test_stats_text_names_digests_sizes_and_never_prompts(cache_dir: Path, capsys) -> None:
    assert main(["stats", "--dir", str(cache_dir)]) == 0
    text = capsys.readouterr().out
    assert "on disk" in text and "5 entries (1 expired" in text
    assert "rows per tier: exact 5, l1 5, " in text and "l2_image 0" in text
    assert f"{scope_digest('m1')}  4" in text and f"{scope_digest('default')}  4  (namespace 'default')" in text
    assert "capital" not in text and "France" not in text  # prompts are stored, never shown


def test_stats_of_several_prefixes_and_of_one(cache_dir: Path, capsys, text_embedder: Any) -> None:
    with MLCEngine(persist_directory=str(cache_dir), durable=True, image_encoder=None, storage=StorageOptions(collection_prefix="other")) as eng:
        _put(eng, "Is it raining?", "m3")
    out = _json(capsys, ["stats", "--dir", str(cache_dir), "--json"])
    assert {c["prefix"]: c["entries"] for c in out["caches"]} == {"mlc": 5, "other": 1}
    out = _json(capsys, ["stats", "--dir", str(cache_dir), "--prefix", "other", "--json"])
    assert [c["entries"] for c in out["caches"]] == [1]
    assert main(["stats", "--dir", str(cache_dir), "--prefix", "nope"]) == 2
    assert "no cache with prefix 'nope'" in capsys.readouterr().err


# ---------------------------------------------------------------------------- scopes
def test_scopes_lists_each_pair_with_entries_and_dates(cache_dir: Path, capsys) -> None:
    out = _json(capsys, ["scopes", "--dir", str(cache_dir), "--json"])
    rows = {(s["scope"], s["ns"]): s for s in out["caches"][0]["scopes"]}
    m1_default = rows[(scope_digest("m1"), scope_digest("default"))]
    assert (m1_default["entries"], m1_default["expired"], m1_default["with_images"]) == (3, 1, 1)
    assert m1_default["oldest"] == m1_default["newest"] == T0 and m1_default["ns_label"] == "default"
    tenant_b = rows[(scope_digest("m1"), scope_digest("tenant-b"))]
    assert tenant_b["entries"] == 1 and tenant_b["oldest"] == T0 + 3600 and tenant_b["ns_label"] is None
    assert len(rows) == 3 and all(s["model"] is None for s in rows.values())  # raw scopes are not stored; "m1" names no model

    assert main(["scopes", "--dir", str(cache_dir)]) == 0
    text = capsys.readouterr().out
    assert "3 scope/namespace pairs, 5 entries" in text and scope_digest("tenant-b") in text
    assert "capital" not in text


# ---------------------------------------------------------------------------- --dir mistakes
@pytest.mark.parametrize("command", [["stats"], ["scopes"], ["clear", "--yes"]])
def test_a_mistyped_dir_is_an_error_and_creates_nothing(tmp_path: Path, command: list[str], capsys) -> None:
    missing = tmp_path / "cahce"
    assert main([*command, "--dir", str(missing)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not missing.exists()

    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([*command, "--dir", str(empty)]) == 2
    assert "not a cache directory: it has no chroma.sqlite3" in capsys.readouterr().err
    assert list(empty.iterdir()) == [], "nothing written, not even a lock file"

    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    assert main([*command, "--dir", str(a_file)]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_a_directory_in_use_by_another_process_is_refused(cache_dir: Path, capsys) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
         "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, str(os.getpid()).encode()); print('held', flush=True); "
         "time.sleep(60)", str(cache_dir / ".mlc.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert main(["stats", "--dir", str(cache_dir)]) == 1
        err = capsys.readouterr().err
        assert f"in use by another process (pid {holder.pid})" in err and "mlc serve --dir" in err
    finally:
        holder.kill()
        holder.wait()


# ---------------------------------------------------------------------------- clear
class _Terminal(io.StringIO):
    """stdin as a terminal with the user's typed answer."""

    def isatty(self) -> bool:
        return True


def test_clear_without_a_terminal_refuses_unless_yes(cache_dir: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # piped input: not a confirmation
    assert main(["clear", "--dir", str(cache_dir)]) == 2
    assert "would delete 5 entries of every scope; not asking without a terminal: pass --yes" in capsys.readouterr().err
    assert _count(cache_dir) == 5
    assert main(["clear", "--dir", str(cache_dir), "--yes"]) == 0
    assert "cleared 5 entries of every scope" in capsys.readouterr().out
    assert _count(cache_dir) == 0


def test_clear_asks_on_a_terminal_and_a_no_keeps_everything(cache_dir: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", _Terminal("n\n"))
    assert main(["clear", "--dir", str(cache_dir), "--scope", "m1"]) == 1
    out = capsys.readouterr().out
    assert f"delete 4 entries of scope {scope_digest('m1')} from" in out and "aborted: nothing deleted" in out
    assert _count(cache_dir) == 5

    monkeypatch.setattr(sys, "stdin", _Terminal("y\n"))
    assert main(["clear", "--dir", str(cache_dir), "--scope", "m1", "--namespace", "tenant-b"]) == 0
    assert "cleared 1 entries" in capsys.readouterr().out
    out = _json(capsys, ["scopes", "--dir", str(cache_dir), "--json"])
    assert {(s["scope"], s["ns"]) for s in out["caches"][0]["scopes"]} == {
        (scope_digest("m1"), scope_digest("default")), (scope_digest("m2"), scope_digest("default"))}


def test_clear_by_digest_as_scopes_shows_it(cache_dir: Path, capsys) -> None:
    m2 = scope_digest("m2")
    assert main(["clear", "--dir", str(cache_dir), "--scope-digest", m2[:8], "--yes"]) == 0
    assert f"cleared 1 entries of scope {m2}" in capsys.readouterr().out
    out = _json(capsys, ["stats", "--dir", str(cache_dir), "--json"])
    assert out["caches"][0]["entries_per_scope"] == {scope_digest("m1"): 4}
    assert out["caches"][0]["tiers"]["l1"] == 4, "the entry's vectors went with it"

    assert main(["clear", "--dir", str(cache_dir), "--scope-digest", "ffffffff", "--yes"]) == 2
    assert "matches no stored scope" in capsys.readouterr().err
    assert main(["clear", "--dir", str(cache_dir), "--namespace-digest", "xyz", "--yes"]) == 2
    assert "at least 6 hex digits" in capsys.readouterr().err
    assert main(["clear", "--dir", str(cache_dir), "--scope", "never-stored", "--yes"]) == 0
    assert "nothing to clear" in capsys.readouterr().out
    assert _count(cache_dir) == 4


def test_clear_needs_a_prefix_when_the_directory_holds_several(cache_dir: Path, capsys, text_embedder: Any) -> None:
    with MLCEngine(persist_directory=str(cache_dir), durable=True, image_encoder=None, storage=StorageOptions(collection_prefix="other")) as eng:
        _put(eng, "Is it raining?", "m3")
    assert main(["clear", "--dir", str(cache_dir), "--yes"]) == 2
    assert "several caches; choose one with --prefix (mlc, other)" in capsys.readouterr().err
    assert main(["clear", "--dir", str(cache_dir), "--prefix", "other", "--yes"]) == 0
    assert "cleared 1 entries of every scope" in capsys.readouterr().out
    out = _json(capsys, ["stats", "--dir", str(cache_dir), "--json"])
    assert {c["prefix"]: c["entries"] for c in out["caches"]} == {"mlc": 5, "other": 0}


def test_cleared_cache_still_serves_what_is_left(cache_dir: Path, capsys, text_embedder: Any) -> None:
    assert main(["clear", "--dir", str(cache_dir), "--scope", "m2", "--yes"]) == 0
    with MLCEngine(persist_directory=str(cache_dir), warm_start=False, image_encoder=None) as eng:
        assert eng.lookup(CacheRequest(text="What is the capital of France?", scope="m2")) is None
        hit = eng.lookup(CacheRequest(text="What is the capital of France?", scope="m1"))
        assert hit is not None and hit.tier == "L0.5"


# ---------------------------------------------------------------------------- demo, quickstart
def test_demo_reports_each_phase_on_stderr(monkeypatch, capsys) -> None:
    """The demo's minutes are never silent: each phase is a line on stderr (a bar too on a terminal)."""
    from evaluation.harness import experiments
    from evaluation.harness.runner import RunResult

    class Workload:
        def __init__(self, name: str, n: int) -> None:
            self.name, self.items, self.meta = name, list(range(n)), {}

    seen: list[tuple[str, str, Any]] = []

    def run_workload(wl: Any, cache: Any, oracle: Any, *, config: str, label: str, progress: Any) -> RunResult:
        seen.append((wl.name, config, progress))
        return RunResult(workload=wl.name, config=config, label=label, backend="oracle")

    monkeypatch.setattr(experiments, "build", lambda name, quick, seed: Workload(name, 3 if name == "vqa" else 2))
    monkeypatch.setattr(experiments, "warm_models", lambda **kw: None)
    monkeypatch.setattr(experiments, "run_workload", run_workload)
    monkeypatch.setattr(experiments, "attach_speedups", lambda results: None)
    class Shipped:  # MultimodalSemanticCache as the demo builds it: only a directory chosen
        def __init__(self, **kw: Any) -> None:
            assert set(kw) == {"persist_directory"}, kw

        def close(self) -> None:
            pass

    monkeypatch.setattr("mlc_integrations.langchain.MultimodalSemanticCache", Shipped)
    experiments.demo(latency_ms=1, video=False, progress=True)
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "demo: building the streams (easy-vqa VQA, camera)",
        "demo: loading the models (all-MiniLM-L6-v2, efficientnet-lite0)",
        "demo [1/4]: vqa, 3 requests without a cache (every one calls the 1 ms oracle)",
        "demo [2/4]: vqa, 3 requests through MultimodalSemanticCache",
        "demo [3/4]: camera, 2 requests without a cache (every one calls the 1 ms oracle)",
        "demo [4/4]: camera, 2 requests through MultimodalSemanticCache",
    ]
    assert [(w, c) for w, c, _bar in seen] == [("vqa", "no cache"), ("vqa", "MLC as shipped"), ("camera", "no cache"),
                                              ("camera", "MLC as shipped")]
    bars = {id(b) for _w, _c, b in seen}
    assert len(bars) == 1 and seen[0][2] is not None and seen[0][2].total == 10, "one bar over the whole demo"
    experiments.demo(latency_ms=1, video=False, progress=False)
    assert capsys.readouterr().err == ""


def test_quickstart_is_in_the_readme_and_prints_each_decision(capsys, text_embedder: Any) -> None:
    assert "`mlc quickstart`" in (ROOT / "README.md").read_text()
    assert main(["quickstart"]) == 0
    lines = {line.split("->")[0].strip(): line for line in capsys.readouterr().out.splitlines() if "->" in line}
    assert "tier=L0.5" in lines["HIT  exact repeat, same picture"]
    assert "tier=L1" in lines["HIT  paraphrase, text only"] and "verifier=" in lines["HIT  paraphrase, text only"]
    for never in ("same question, different picture", "same text, another model", "different question"):
        assert f"MISS {never}" in lines, never


def test_help_lists_the_inspection_commands() -> None:
    text = build_parser().format_help()
    for command in ("stats", "scopes", "clear", "quickstart"):
        assert command in text


# ---------------------------------------------------------------------------- read-only, by model
def test_stats_and_scopes_leave_the_directory_as_they_found_it(cache_dir: Path, capsys, caplog) -> None:
    before = sorted(p.name for p in cache_dir.iterdir())
    assert not any(n.startswith(".mlc-open") for n in before)
    for command in ("stats", "scopes"):
        assert main([command, "--dir", str(cache_dir)]) == 0
        assert sorted(p.name for p in cache_dir.iterdir()) == before, command  # no open marker left
    capsys.readouterr()
    # ... so the next engine opens it as cleanly closed: no "not closed cleanly" warning
    with caplog.at_level("WARNING"), MLCEngine(persist_directory=str(cache_dir), warm_start=False,
                                               image_encoder=None) as eng:
        eng.count()
    assert "not closed cleanly" not in caplog.text


OPENAI_4O = ('{"id": ["langchain", "chat_models", "openai", "ChatOpenAI"], "kwargs": {"model_name": "gpt-4o", '
             '"temperature": 0.0}, "lc": 1, "type": "constructor"}---[(\'stop\', None)]')
OPENAI_4O_HOT = OPENAI_4O.replace('"temperature": 0.0', '"temperature": 0.7')
LOCAL_LLAMA = "[('_type', 'ollama-chat'), ('model', 'llama3.2'), ('stop', None)]"


def test_clear_by_model_name_matches_every_scope_of_that_model(tmp_path: Path, capsys, text_embedder: Any) -> None:
    d = tmp_path / "cache"
    with MLCEngine(persist_directory=str(d), durable=True, image_encoder=None) as eng:
        for scope in (OPENAI_4O, OPENAI_4O_HOT, LOCAL_LLAMA):
            _put(eng, "What is the capital of France?", scope)
    out = _json(capsys, ["scopes", "--dir", str(d), "--json"])
    assert sorted(s["model"] for s in out["caches"][0]["scopes"]) == ["gpt-4o", "gpt-4o", "llama3.2"]
    assert main(["clear", "--dir", str(d), "--model", "gpt-4o", "--yes"]) == 0
    assert "cleared 2 entries of model 'gpt-4o'" in capsys.readouterr().out
    out = _json(capsys, ["stats", "--dir", str(d), "--json"])
    assert out["caches"][0]["entries_per_scope"] == {scope_digest(LOCAL_LLAMA): 1}
    assert main(["clear", "--dir", str(d), "--model", "gpt-5", "--yes"]) == 0
    assert "nothing to clear" in capsys.readouterr().out


@pytest.mark.parametrize("scope, model", [
    (OPENAI_4O, "gpt-4o"),
    (LOCAL_LLAMA, "llama3.2"),
    ("[('_type', 'fake-list-chat-model'), ('responses', ['a']), ('stop', None)]", "fake-list-chat-model"),
    ('llamaindex:{"class":"llama_index.llms.openai.OpenAI","settings":{"model":"\\"gpt-4o-mini\\""}}', "gpt-4o-mini"),
    ("m1", ""),
    ("[(__import__('os').system('true'), 1)]", ""),  # a literal only: nothing runs
])
def test_the_model_a_scope_names(scope: str, model: str) -> None:
    from mlc_integrations.keys import model_label

    assert model_label(scope) == model


def test_stats_shows_the_traffic_the_cache_served_from_its_persisted_counters(tmp_path: Path, capsys,
                                                                             text_embedder: Any) -> None:
    d = tmp_path / "cache"
    for _process in range(2):  # two engines (as two processes would), counters added up
        with MLCEngine(persist_directory=str(d), durable=True, image_encoder=None) as eng:
            _put(eng, "What is the capital of France?", "m1")
            eng.lookup(CacheRequest(text="What is the capital of France?", scope="m1"))  # exact hit
            eng.lookup(CacheRequest(text="How tall is Mount Everest?", scope="m1"))  # miss
    out = _json(capsys, ["stats", "--dir", str(d), "--json"])
    traffic = out["caches"][0]["traffic"]
    assert traffic["engines"] == 2 and traffic["lookups"] == 4 and traffic["hits"] == 2 and traffic["misses"] == 2
    assert traffic["tiers"]["L0.5"]["hit"] == 2 and traffic["hit_rate"] == 0.5
    assert main(["stats", "--dir", str(d)]) == 0
    assert "traffic (2 engine(s)): 4 lookups, 2 hits (50.0 %" in capsys.readouterr().out
