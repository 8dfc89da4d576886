"""One process at a time on an embedded Chroma directory.

Chroma's embedded mode (``PersistentClient``) is single-process: two processes writing
one directory each keep their own index in memory and overwrite each other's files. So
an engine on ``persist_directory`` holds an exclusive lock on ``<dir>/.mlc.lock`` (with
the owner's pid in it) and a second process gets a clear error pointing at server mode.
The lock is ``flock``-based: the kernel drops it when the owner exits, killed or not, so
a crash never leaves a stale lock. Engines of one process share it (counted).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Optional

from ..errors import DirectoryInUseError

log = logging.getLogger(__name__)

LOCK_NAME = ".mlc.lock"

_lock = threading.Lock()
_held: dict[str, list[int]] = {}  # real path -> [fd, number of engines holding it]
_shared: set[str] = set()  # real paths two engines of this process held at once (while the lock lasted)


class DirectoryLock:
    def __init__(self, path: str) -> None:
        self.path = path
        self._released = False

    @classmethod
    def acquire(cls, directory: str) -> "DirectoryLock":
        real = str(Path(directory).resolve())
        with _lock:
            held = _held.get(real)
            if held is not None:
                held[1] += 1
                _shared.add(real)
                return cls(real)
            os.makedirs(real, exist_ok=True)
            fd = _lock_file(real)
            _held[real] = [fd, 1]
        return cls(real)

    def release(self) -> None:
        with _lock:
            if self._released:
                return
            self._released = True
            held = _held.get(self.path)
            if held is None:
                return
            held[1] -= 1
            if held[1] == 0:
                del _held[self.path]
                _shared.discard(self.path)
                if held[0] >= 0:
                    os.close(held[0])  # closing the descriptor drops the flock


    def sole_holder(self) -> bool:
        """No other engine of this process has held this directory since this one took it
        (then this engine is the directory's only writer)."""
        with _lock:
            return not self._released and self.path not in _shared


def _lock_file(directory: str) -> int:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: Chroma's own rules apply
        log.debug("no flock on this platform: %s is not protected against a second process", directory)
        return -1
    lock_path = os.path.join(directory, LOCK_NAME)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = _owner(fd)
        os.close(fd)
        served = served_at(directory)
        if served is not None:
            raise DirectoryInUseError(
                f"the cache directory {directory!r} is served by `mlc serve` at {served['host']}:{served['port']} "
                f"(pid {served['pid']}): give this process chroma_host={served['host']!r}, "
                f"chroma_port={served['port']} instead of persist_directory") from None
        raise DirectoryInUseError(
            f"the cache directory {directory!r} is in use by another process{owner}. Chroma's embedded "
            "mode is single-process: to share one cache between processes (web workers), run "
            f"`mlc serve --dir {directory} --port 8000` once and give every process "
            "chroma_host='127.0.0.1', chroma_port=8000 instead of persist_directory; or give each process its "
            "own persist_directory."
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _owner(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode().strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


SERVED_NAME = ".mlc-served.json"  # written by `mlc serve` while it holds the directory


def mark_served(directory: str, host: str, port: int) -> Path:
    """Say in ``directory`` that this process serves it at ``host:port`` (removed by the server on exit)."""
    import json

    path = Path(directory) / SERVED_NAME
    path.write_text(json.dumps({"host": host, "port": port, "pid": os.getpid()}), encoding="utf-8")
    return path


def served_at(directory: "str | os.PathLike[str]") -> "Optional[dict]":
    """Where ``mlc serve`` serves ``directory`` (host, port, pid), if a live process says so."""
    import json

    try:
        info = json.loads((Path(directory) / SERVED_NAME).read_text(encoding="utf-8"))
        os.kill(int(info["pid"]), 0)  # a marker left by a killed server names a dead pid
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info


def held_directories() -> list[str]:
    """Directories this process holds (for tests and diagnostics)."""
    with _lock:
        return sorted(_held)


__all__ = ["DirectoryLock", "DirectoryInUseError", "LOCK_NAME", "held_directories"]
