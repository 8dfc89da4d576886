"""The README's recipe for several worker processes (uvicorn/gunicorn workers): one
``mlc serve --dir D`` and every worker pointing at it. Two worker processes share hits;
an embedded engine on the served directory gets an error that names the recipe."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mlc_integrations import DirectoryInUseError, MLCEngine
from mlc_integrations.ops.server import free_port
from tests.integration.test_exit_durability import ROOT, _env, read, write
from mlc_integrations import TierOptions


def test_two_workers_share_one_cache_through_mlc_serve(tmp_path: Path) -> None:
    directory, port = tmp_path / "mlc_cache", free_port()
    serve = subprocess.Popen([sys.executable, "-m", "mlc_integrations.ops.cli", "serve", "--dir", str(directory),
                              "--port", str(port)], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert serve.stdout is not None
        ready = serve.stdout.readline()
        assert ready.startswith("serving cache directory"), (ready, serve.stderr.read() if serve.poll() else "")
        where = ["--host", "127.0.0.1", "--port", str(port)]
        # worker 1 stores an answer through the LangChain cache, worker 2 finds it
        answer, _err = write(1, "langchain", "end", where)
        assert read(["langchain:1"], where) == {"langchain:1": answer}
        # an embedded engine on the served directory is told where the server is
        with pytest.raises(DirectoryInUseError, match=rf"served by `mlc serve` at 127.0.0.1:{port} .*"
                                                      rf"chroma_host='127.0.0.1', chroma_port={port}"):
            MLCEngine(persist_directory=str(directory), image_encoder=None, tiers=TierOptions(l1=False))
        # the CLI too: --dir names the server's --host/--port, which read the same cache
        cli = [sys.executable, "-m", "mlc_integrations.ops.cli"]
        by_dir = subprocess.run([*cli, "stats", "--dir", str(directory)], cwd=ROOT, env=_env(),
                                capture_output=True, text=True, timeout=120)
        assert by_dir.returncode == 1 and f"--host 127.0.0.1 --port {port} instead of --dir" in by_dir.stderr
        by_server = subprocess.run([*cli, "stats", *where, "--json"], cwd=ROOT, env=_env(),
                                   capture_output=True, text=True, timeout=120)
        assert by_server.returncode == 0, by_server.stderr[-2000:]
        assert json.loads(by_server.stdout)["caches"][0]["entries"] == 1
        # a second `mlc serve` on the busy port fails before it claims to serve
        busy = subprocess.run([*cli, "serve", "--dir", str(tmp_path / "other"), "--port", str(port)], cwd=ROOT,
                              env=_env(), capture_output=True, text=True, timeout=120)
        assert busy.returncode == 1 and "serving" not in busy.stdout and f"port {port} on 127.0.0.1 is in use" in busy.stderr
    finally:
        serve.send_signal(signal.SIGTERM)
        out, err = serve.communicate(timeout=60)
    assert serve.returncode == 0, err[-2000:]
    assert "stopped" in out
    # the server is gone and its lock released: the directory opens embedded, answers included
    with MLCEngine(persist_directory=str(directory), image_encoder=None, tiers=TierOptions(l1=False)) as engine:
        assert engine.count() == 1
