"""Cookbook example 05: two worker processes share one cache through a Chroma server.

The test starts the server itself (``ChromaServer``: ``chroma run`` on 127.0.0.1, a free
port, a temporary data directory), runs the example against it and stops it.
"""

from __future__ import annotations

from pathlib import Path

from mlc_integrations.ops.server import ChromaServer
from tests.unit.test_cookbook import run_example


def test_second_process_reuses_the_first_ones_entries(tmp_path: Path) -> None:
    server = ChromaServer(tmp_path / "chroma-data").start()
    try:
        assert server.host == "127.0.0.1" and server.heartbeat()
        summary = run_example("05_shared_cache_server",
                              ["--chroma-host", server.host, "--chroma-port", str(server.port)])
    finally:
        server.close()
    assert not server.running

    a, b = summary["worker_a"], summary["worker_b"]
    assert a["pid"] != b["pid"], "two separate processes"
    assert not summary["server_started_here"] and summary["server"] == f"127.0.0.1:{server.port}"
    # Worker A computes: two misses, two model calls, two entries in the server.
    assert [s["cache"] for s in a["steps"]] == ["miss", "miss"]
    assert a["model_calls"] == 2 and a["entries_after"] == 2
    assert all(s["produced_by_pid"] == a["pid"] for s in a["steps"])

    same, paraphrase, same_kind, other = b["steps"]
    # Worker B reuses A's entry: no model call, and the answer is the one A's model produced.
    assert same["cache"] == "L0.5" and paraphrase["cache"] == "L1"
    assert same["entry_id"] == paraphrase["entry_id"]
    for step in (same, paraphrase):
        assert step["produced_by_pid"] == a["pid"] and step["answer"] == "blue"
    # Another photo of a blue circle: L2 may reuse A's answer; either way it is right.
    assert same_kind["correct"]
    if same_kind["cache"] != "miss":
        assert same_kind["cache"] == "L2" and same_kind["produced_by_pid"] == a["pid"]
    # A different picture is B's own work.
    assert other["cache"] == "miss" and other["produced_by_pid"] == b["pid"] and other["answer"] == "red"
    assert b["model_calls"] == sum(s["cache"] == "miss" for s in b["steps"])
    assert summary["b_steps_reusing_a_answers"] >= 2 and summary["wrong_answers"] == 0
