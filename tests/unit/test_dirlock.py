"""An embedded cache directory belongs to one process; a second one gets a clear error."""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

import pytest

from mlc_integrations.store.dirlock import DirectoryInUseError, DirectoryLock, held_directories


def _hold(directory: str, ready, stop) -> None:  # type: ignore[no-untyped-def]
    DirectoryLock.acquire(directory)
    ready.set()
    stop.wait(60)


def _try(directory: str, out) -> None:  # type: ignore[no-untyped-def]
    try:
        DirectoryLock.acquire(directory)
        out.put("acquired")
    except DirectoryInUseError as exc:
        out.put(str(exc))


@pytest.fixture
def ctx() -> multiprocessing.context.BaseContext:
    return multiprocessing.get_context("spawn")


def test_second_process_gets_a_clear_error_until_the_owner_dies(tmp_path: Path, ctx) -> None:
    d = str(tmp_path / "cache")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    owner = ctx.Process(target=_hold, args=(d, ready, stop))
    owner.start()
    try:
        assert ready.wait(60)
        p = ctx.Process(target=_try, args=(d, out))
        p.start()
        msg = out.get(timeout=60)
        p.join(30)
        assert f"pid {owner.pid}" in msg and "mlc serve --dir" in msg and "persist_directory" in msg
    finally:
        os.kill(owner.pid, signal.SIGKILL)  # a killed owner leaves no stale lock
        owner.join(30)
    p = ctx.Process(target=_try, args=(d, out))
    p.start()
    assert out.get(timeout=60) == "acquired"
    p.join(30)


def test_engines_of_one_process_share_the_directory(make_engine, tmp_path: Path) -> None:
    d = tmp_path / "shared"
    a = make_engine(persist_directory=str(d), warm_start=False, image_encoder=None)
    b = make_engine(persist_directory=str(d), warm_start=False, image_encoder=None)
    assert str(d.resolve()) in held_directories()
    a.close()
    assert str(d.resolve()) in held_directories()  # b still holds it
    b.close()
    assert str(d.resolve()) not in held_directories()
    assert (d / ".mlc.lock").read_text().strip() == str(os.getpid())
