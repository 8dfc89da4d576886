"""A local Chroma server for tests, benchmarks and the cookbook: ``chroma run`` on loopback.

Several application processes share one cache by pointing their engines at one
Chroma server::

    from .. import MLCEngine
    from .server import ChromaServer

    with ChromaServer(path="./chroma-data") as server:
        engine = MLCEngine(chroma_host=server.host, chroma_port=server.port)
        ...

The helper only binds loopback addresses: an unauthenticated Chroma reachable from
the network would hand every cached answer to anyone who asks. Production
deployments run their own Chroma server or cluster (see ``docs/operations.md``).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from typing import Any, Optional, Union

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
HEARTBEAT_PATH = "/api/v2/heartbeat"

_running: "weakref.WeakSet[ChromaServer]" = weakref.WeakSet()
_running_lock = threading.Lock()


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on ``host:port`` (or it cannot be bound)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free to listen on
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now (the OS picks it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def chroma_executable() -> str:
    """The ``chroma`` console script of this interpreter's environment, else the one on PATH."""
    candidate = Path(sys.executable).with_name("chroma")
    if candidate.exists():
        return str(candidate)
    found = shutil.which("chroma")
    if found:
        return found
    raise FileNotFoundError(
        "the 'chroma' command was not found next to this Python nor on PATH; install chromadb in this environment"
    )


class ChromaServer:
    """Start, probe and stop one ``chroma run`` process on a loopback port.

    ``path`` is the data directory (a temporary one, removed on :meth:`close`, when
    None). ``port`` None picks a free port. :meth:`start` returns once the server
    answers its heartbeat; :meth:`stop` sends SIGTERM, then SIGKILL after
    ``stop_timeout``; :meth:`kill` is the SIGKILL crash for tests; :meth:`restart`
    brings it back on the same port and data.
    """

    def __init__(
        self,
        path: Optional[Union[str, os.PathLike[str]]] = None,
        *,
        host: str = "127.0.0.1",
        port: Optional[int] = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 10.0,
        executable: Optional[str] = None,
    ) -> None:
        if host not in LOOPBACK_HOSTS:
            raise ValueError(
                f"ChromaServer binds loopback only ({', '.join(LOOPBACK_HOSTS)}), got {host!r}: an open Chroma "
                "server serves every cached answer to anyone who can reach it. Run and secure your own Chroma "
                "deployment for network access and point MLCEngine(chroma_host=...) at it."
            )
        self.host = host
        self._fixed_port = port
        self.port: int = port or 0
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.executable = executable
        self._own_dir: Optional[str] = None
        if path is None:
            self._own_dir = tempfile.mkdtemp(prefix="mlc-chroma-")
            path = Path(self._own_dir) / "data"
        self.path = Path(path)
        self.log_path = self.path.parent / f"{self.path.name}.chroma-server.log"
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._log_file: Any = None

    # ------------------------------------------------------------------ info
    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def heartbeat(self, timeout: float = 1.0) -> bool:
        """True when the server answers its heartbeat within ``timeout`` seconds."""
        try:
            with urllib.request.urlopen(self.url + HEARTBEAT_PATH, timeout=timeout) as resp:  # noqa: S310 (loopback)
                return 200 <= resp.status < 300
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "ChromaServer":
        """Start the server and wait for its heartbeat. The first start picks a free port
        (another one if it was taken meanwhile); later starts reuse it."""
        if self.running:
            return self
        attempts = 1 if self._fixed_port else 3
        last: Optional[Exception] = None
        for _ in range(attempts):
            if not self._fixed_port:
                self.port = free_port(self.host)
            try:
                self._launch()
                self._fixed_port = self.port  # a later start() or restart() comes back on the same port
                return self
            except RuntimeError as exc:
                last = exc
                self._terminate(kill=True)
        raise RuntimeError(f"Chroma server did not start: {last}")

    def _launch(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        cmd = [
            self.executable or chroma_executable(),
            "run",
            "--host", self.host,
            "--port", str(self.port),
            "--path", str(self.path),
        ]
        env = dict(os.environ, ANONYMIZED_TELEMETRY="False", NO_COLOR="1")
        self._log_file = open(self.log_path, "ab")
        log.info("starting Chroma server: %s", " ".join(cmd))
        # Own session: a Ctrl-C aimed at the application does not take the server down mid-write.
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT,
            env=env, start_new_session=True,
        )
        with _running_lock:
            _running.add(self)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"chroma run exited with code {self._proc.returncode} on port {self.port}:\n{self.log_tail()}"
                )
            if self.heartbeat(timeout=1.0):
                log.info("Chroma server up at %s (pid %d)", self.url, self._proc.pid)
                return
            time.sleep(0.1)
        raise RuntimeError(f"no heartbeat from {self.url} within {self.startup_timeout:.0f} s:\n{self.log_tail()}")

    def _terminate(self, kill: bool) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            if kill:
                proc.kill()
                proc.wait()
            else:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(self.stop_timeout)
                except subprocess.TimeoutExpired:
                    log.warning("Chroma server pid %d ignored SIGTERM for %.0f s; killing it", proc.pid, self.stop_timeout)
                    proc.kill()
                    proc.wait()
        self._proc = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def stop(self) -> None:
        """Stop the server cleanly (SIGTERM, then SIGKILL after ``stop_timeout``). Data stays."""
        self._terminate(kill=False)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would (for tests)."""
        self._terminate(kill=True)

    def restart(self) -> "ChromaServer":
        """Stop and start again on the same port and data directory."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the server and remove the data directory if this object created it."""
        self.stop()
        with _running_lock:
            _running.discard(self)
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
            self._own_dir = None

    def __enter__(self) -> "ChromaServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"ChromaServer({self.url}, path={str(self.path)!r}, {state})"


@atexit.register
def _stop_leftover_servers() -> None:
    # A server started by this process must not outlive it (a crashed test run, a script
    # that forgot close()): it would hold the port and the data directory.
    with _running_lock:
        servers = list(_running)
    for server in servers:
        try:
            server.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass
