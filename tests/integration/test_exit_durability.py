"""An acknowledged update outlives the program that made it: short-lived writer
processes (real interpreters, not forks) store one answer each through the engine, the
LangChain cache, ``CachedChatModel`` and ``CachedMultiModalLLM``, and end without
``close()`` -- at the script's end, by ``sys.exit``, by an uncaught exception or by
SIGTERM. A fresh reader process then finds every answer, on an embedded directory and
through a Chroma server. (Before shutdown.py, the write-behind queue was drained by an
``atexit`` hook that ran after Chroma could start no more: the answer was dropped.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

import pytest

from mlc_integrations.ops.server import ChromaServer

ROOT = Path(__file__).resolve().parents[2]
EXITS = ("end", "sys_exit", "exception", "sigterm", "end", "sys_exit")
# (via, exit) per writer: 6 through the engine and 6 through the LangChain cache, every
# way of ending, plus the two wrappers.
WRITERS = ([("engine", e) for e in EXITS] + [("langchain", e) for e in EXITS]
           + [("chat", "end"), ("llamaindex", "sys_exit")])


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def _child(*args: str) -> list[str]:
    return [sys.executable, "-m", "tests.integration.exit_child", *args]


def write(key: int, via: str, how: str, where: list[str]) -> tuple[str, str]:
    """Run one writer to its end; returns (its STORED answer, its stderr)."""
    proc = subprocess.Popen(_child("write", "--via", via, "--exit", how, "--key", str(key), *where),
                            cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if how == "sigterm" and line.startswith("STORED"):
        proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)  # every thread's stack on stderr (faulthandler)
        try:
            out, err = proc.communicate(timeout=10)
        finally:
            proc.kill()
        raise AssertionError(f"writer {via}/{how} did not end:\n{err[-6000:]}") from None
    expected_rc = {"end": 0, "sys_exit": 3, "exception": 1, "sigterm": -signal.SIGTERM}[how]
    assert line.startswith("STORED "), (line, out, err)
    assert proc.returncode == expected_rc, (how, proc.returncode, err[-2000:])
    return line[len("STORED "):].strip(), err


def read(keys: list[str], where: list[str]) -> dict[str, Optional[str]]:
    out = subprocess.run(_child("read", "--keys", ",".join(keys), *where), cwd=ROOT, env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _check(results: list[tuple[int, str, str, tuple[str, str]]], where: list[str]) -> None:
    for _key, _via, how, (_answer, err) in results:
        assert "write-behind failed" not in err and "not written" not in err, (how, err[-2000:])
        assert "Traceback" not in err or how == "exception", err[-2000:]
    found = read([f"{via}:{key}" for key, via, _how, _w in results], where)
    expected = {f"{via}:{key}": answer for key, via, _how, (answer, _err) in results}
    assert found == expected
    assert sum(v is not None for v in found.values()) == len(WRITERS)


def test_every_acknowledged_update_survives_its_process_on_an_embedded_directory(tmp_path: Path) -> None:
    where = ["--dir", str(tmp_path / "cache")]
    # An embedded directory admits one process at a time: the writers run one after another.
    results = [(key, via, how, write(key, via, how, where)) for key, (via, how) in enumerate(WRITERS)]
    _check(results, where)
    # Every writer exited without close(), yet each exit counted as clean: no check warning.
    assert all("not closed cleanly" not in err for *_x, (_a, err) in results)


def test_every_acknowledged_update_survives_its_process_through_a_server(chroma_server: ChromaServer,
                                                                           prefix: str) -> None:
    where = ["--host", chroma_server.host, "--port", str(chroma_server.port), "--prefix", prefix]

    def one(item: tuple[int, tuple[str, str]]) -> tuple[int, str, str, Any]:
        key, (via, how) = item
        return key, via, how, write(key, via, how, where)

    with ThreadPoolExecutor(4) as pool:  # several processes on one server at once
        results = list(pool.map(one, enumerate(WRITERS)))
    _check(results, where)


def test_a_program_that_exits_while_the_warm_start_loads_models_ends_cleanly(tmp_path: Path) -> None:
    """Built and gone at once: the release stops and awaits the warm start, so no model is
    still loading in native code while the interpreter tears down (it crashed 2 runs in 3)."""
    code = ("import sys; from mlc_integrations import MLCEngine, TierOptions; "
            "MLCEngine(persist_directory=sys.argv[1], image_encoder=None, tiers=TierOptions(text_backend='onnx-fp32'))")
    for k in range(3):
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path / f"c{k}")], cwd=ROOT, env=_env(),
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (k, out.returncode, out.stderr[-2000:])
