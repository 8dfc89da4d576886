"""An engine's resources are released exactly once: on ``close()``, when the engine is
garbage collected, at a normal interpreter exit, or on SIGTERM -- and acknowledged
write-behind entries reach the store first in every one of those cases.

Why not plain :mod:`atexit`: Python runs ``threading``'s exit hooks (``concurrent.futures``
refuses new work from then on) *before* ``atexit`` callbacks, and Chroma registers
``atexit`` hooks of its own when a client starts. A writer that first opened its store
from an ``atexit`` callback failed with "can't register atexit after shutdown" or
"cannot schedule new futures after interpreter shutdown" and dropped what a
short-lived program had stored. The drain therefore runs as a ``threading`` exit hook
registered after ``concurrent.futures``' own (these run in reverse order), i.e. while
threads, executors and Chroma still work. ``threading._register_atexit`` is the hook
``concurrent.futures`` itself uses (CPython 3.9+); where it is missing we fall back to
``atexit``.

SIGTERM's default action kills the process without any exit hook; when no handler is
installed (``SIG_DFL``) and an engine with a write-behind queue is created in the main
thread, a handler closes the live engines, then restores the default action and
re-delivers the signal, so the process still ends "killed by SIGTERM" as before. A
handler the application installed (uvicorn, gunicorn, ...) is left alone: those turn
SIGTERM into a normal exit, which drains through the exit hook.
"""

from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401  (its exit hook must be registered before ours)
import logging
import os
import signal
import threading
import weakref
from typing import Any, Callable

log = logging.getLogger(__name__)

# Finalizers of live engines (weakref.finalize objects: each runs its callback at most once).
_live: "list[weakref.finalize]" = []
_live_lock = threading.Lock()
_sigterm_installed = False


def register(owner: object, release: Callable[..., None], *args: Any) -> "weakref.finalize":
    """Run ``release(*args)`` once: when the returned finalizer is called (``close()``),
    when ``owner`` is garbage collected, or at exit. ``args`` must not reference ``owner``."""
    fin = weakref.finalize(owner, release, *args)
    fin.atexit = False  # ours runs earlier than weakref's own atexit pass (see the module docstring)
    with _live_lock:
        _live[:] = [f for f in _live if f.alive]
        _live.append(fin)
    return fin


def release_all() -> None:
    """Close every live engine (write-behind drained first). Safe to call more than once."""
    with _live_lock:
        pending = [f for f in _live if f.alive]
        _live.clear()
    for fin in reversed(pending):  # the newest first, like atexit
        try:
            fin()
        except Exception as exc:  # pragma: no cover - one engine never stops the others
            log.warning("closing a cache at exit failed: %s: %s", type(exc).__name__, exc)


def install_sigterm_handler() -> None:
    """Drain on SIGTERM when nobody else handles it (main thread only; idempotent)."""
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            _sigterm_installed = True  # the application's handler decides; a normal exit drains
            return
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError, AttributeError):  # no signals here (embedded interpreters, Windows)
        return
    _sigterm_installed = True


def _on_sigterm(signum: int, frame: Any) -> None:
    log.info("SIGTERM: writing pending cache entries before exiting")
    release_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


_register_exit_hook = getattr(threading, "_register_atexit", None)
if _register_exit_hook is not None:
    _register_exit_hook(release_all)
atexit.register(release_all)  # the fallback, and for interpreters where the hook above did not run
