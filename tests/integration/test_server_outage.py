"""A Chroma server that goes down, restarts or hangs mid-run never breaks the caller.

Lookups become counted misses, updates are dropped and counted, each costs at most
the request timeout (and nothing at all while the server is known to be down), and
the engine reconnects by itself when the server is back.

The tests assert what the store did -- connection attempts, timeouts, calls failed fast
without a request -- on an injected clock, not how long it took: wall-clock bounds fail
on a loaded machine. How fast a miss is when the server is down is a benchmark's job.
"""

from __future__ import annotations

import dataclasses

import os
import signal
import threading
import time
from typing import Any

import pytest

from mlc_integrations import MLCEngine, StorageError
from mlc_integrations.ops.server import ChromaServer, free_port
from tests.integration.workers import engine, question
from mlc_integrations import StorageOptions
from mlc_integrations.store.exact_index import ExactIndex


def _server_engine(server: ChromaServer, prefix: str, **kw: Any) -> MLCEngine:
    storage = dataclasses.replace(kw.pop("storage", StorageOptions()), collection_prefix=prefix)
    eng = engine(**kw, chroma_host=server.host, chroma_port=server.port, storage=storage)
    # What is under test is the store path: the exact index would answer a remembered entry
    # from memory for up to its revalidation bound (exact_index.py), outage or not.
    eng.entries.hot = ExactIndex(max_items=0)
    if eng._warm is not None:  # counted calls below: the warm start's own are done first
        eng._warm.join(60)
    return eng


class FakeMonotonic:
    """The store's retry-interval clock, frozen unless a test moves it."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _wait_until(pred: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_down_server_misses_drops_updates_and_reconnects(private_chroma_server: ChromaServer) -> None:
    server = private_chroma_server
    eng = _server_engine(server, "outage")
    clock = eng.store.monotonic = FakeMonotonic()
    for k in range(5):
        assert eng.update(question(k), {"key": k}) is not None
    assert eng.lookup(question(0)).payload == {"key": 0}
    attempts = eng.store.connect_attempts

    server.kill()
    for k in range(5):
        assert eng.lookup(question(k)) is None
        assert eng.lookup(question(k, paraphrase=1)) is None
    # A refused connection costs one reconnect attempt; every later call within the retry
    # interval fails fast, without a request (the clock does not move here).
    assert eng.store.connect_attempts == attempts + 1
    assert eng.store.failed_fast == 9 and eng.store.timeouts == 0
    assert eng.update(question(100), {"key": 100}) is None
    assert eng.update(question(101), {"key": 101}) is None
    st = eng.stats()
    assert st["lookups"] == 11 and st["hits"] == 1 and st["misses"] == 10
    assert st["updates"] == 5 and st["updates_failed"] == 2
    failures = {k: v for k, v in st["errors"].items() if k.startswith(("lookup:", "update:"))}
    assert sum(failures.values()) == 12 and st["entries"] is None
    # 9 failed fast; the first failed reconnecting, typed by its cause too (not a bare StorageError)
    assert failures.get("lookup:ServerUnreachableError", 0) == 10
    assert eng.store.connect_attempts == attempts + 1 and eng.store.failed_fast == 11 + 1  # + the stats count
    clock.now += eng.store.retry_interval  # the interval passed: the next call tries once more, and fails
    assert eng.lookup(question(0)) is None and eng.store.connect_attempts == attempts + 2

    server.start()  # same port, same data directory

    def back() -> bool:
        clock.now += eng.store.retry_interval
        return eng.lookup(question(0)) is not None

    assert _wait_until(back, timeout=10), "engine did not reconnect"
    for k in range(5):  # data written before the crash survived it
        assert eng.lookup(question(k)).payload == {"key": k}
        assert eng.lookup(question(k, paraphrase=2)).tier == "L1"
    assert eng.lookup(question(100)) is None  # the dropped update really was dropped
    assert eng.update(question(100), {"key": 100}) is not None
    assert eng.lookup(question(100)).payload == {"key": 100}
    st = eng.stats()
    assert st["hits"] + st["misses"] == st["lookups"]


def test_restart_under_load_from_threads(private_chroma_server: ChromaServer) -> None:
    """Four threads keep looking up and updating while the server restarts."""
    server = private_chroma_server
    eng = _server_engine(server, "restart")
    for k in range(20):
        eng.update(question(k), {"key": k})
    stop = threading.Event()
    errors: list[BaseException] = []
    wrong: list[tuple[int, Any]] = []
    ops = [0] * 4  # per thread: no shared counter to race on
    updates = [0] * 4

    def worker(t: int) -> None:
        k = t
        while not stop.is_set():
            try:
                hit = eng.lookup(question(k % 40, paraphrase=k % 2))
                if hit is not None and hit.payload.get("key") != k % 40:
                    wrong.append((k % 40, hit.payload))
                if k % 3 == 0:
                    eng.update(question(k % 40), {"key": k % 40})
                    updates[t] += 1
                ops[t] += 1
            except BaseException as exc:  # noqa: BLE001 - nothing may escape the fail-open engine
                errors.append(exc)
            k += 4

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    time.sleep(1.0)
    server.restart()  # SIGTERM, then a new server process on the same port and data
    ok = _wait_until(lambda: eng.lookup(question(1)) is not None, timeout=15)
    ops_after_return = sum(ops)
    time.sleep(1.0)
    stop.set()
    for th in threads:
        th.join(30)
    assert ok, "engine did not reconnect after the restart"
    assert not errors and not wrong
    assert sum(ops) > ops_after_return  # the threads kept working after the server came back
    st = eng.stats()
    assert st["hits"] + st["misses"] == st["lookups"]
    assert st["updates"] + st["updates_failed"] == 20 + sum(updates)  # every update either stored or counted
    assert st["updates_failed"] > 0 and st["misses"] > 0  # the outage really happened under load
    # Everything acknowledged before the clean restart is there.
    for k in range(20):
        assert eng.lookup(question(k)).payload == {"key": k}


def test_hung_server_costs_one_timeout_then_fails_fast(private_chroma_server: ChromaServer) -> None:
    """A server that accepts connections but never answers (SIGSTOP) must not hang lookups:
    chromadb's own HTTP client has no timeout, the engine bounds it."""
    server = private_chroma_server
    eng = _server_engine(server, "hung", storage=StorageOptions(timeout=1.0))
    clock = eng.store.monotonic = FakeMonotonic()
    eng.update(question(1), {"key": 1})
    assert server.pid is not None
    attempts = eng.store.connect_attempts
    os.kill(server.pid, signal.SIGSTOP)
    try:
        assert eng.lookup(question(1)) is None  # returns: the request is bounded by chroma_timeout
        # One timeout, not retried (retrying a hung server would only double the wait).
        assert eng.store.timeouts == 1 and eng.store.connect_attempts == attempts
        assert eng.stats()["errors"].get("lookup:StorageError") == 1
        for _ in range(20):
            assert eng.lookup(question(1)) is None
            assert eng.update(question(2), {"key": 2}) is None
        # Then misses without a request while the server is known to be unresponsive.
        assert eng.store.timeouts == 1 and eng.store.failed_fast >= 40
        assert eng.store.connect_attempts == attempts
    finally:
        os.kill(server.pid, signal.SIGCONT)

    def back() -> bool:
        clock.now += eng.store.retry_interval
        return eng.lookup(question(1)) is not None

    assert _wait_until(back, timeout=10)
    st = eng.stats()
    assert st["updates_failed"] == 20 and st["hits"] + st["misses"] == st["lookups"]
    assert st["errors"].get("lookup:ServerUnreachableError", 0) >= 20


def test_engine_created_while_server_down_starts_working_when_it_comes_up(tmp_path: Any) -> None:
    port = free_port()
    server = ChromaServer(tmp_path / "data", port=port)
    eng = engine(chroma_host="127.0.0.1", chroma_port=port, storage=StorageOptions(collection_prefix="late"))
    assert eng.lookup(question(1)) is None and eng.update(question(1), {"key": 1}) is None
    strict = engine(chroma_host="127.0.0.1", chroma_port=port, strict=True, storage=StorageOptions(collection_prefix="late"))
    with pytest.raises(StorageError, match="unreachable"):
        strict.lookup(question(1))
    try:
        server.start()
        assert server.port == port
        assert _wait_until(lambda: eng.update(question(1), {"key": 1}) is not None, timeout=10)
        assert eng.lookup(question(1)).payload == {"key": 1}
        assert strict.lookup(question(1)).payload == {"key": 1}  # strict engines reconnect too
    finally:
        server.close()

