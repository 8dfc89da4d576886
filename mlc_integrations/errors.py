"""One small hierarchy of typed errors.

In the default fail-open mode these never reach the caller of an LLM: the engine
turns them into counted misses (lookup) or logged no-ops (update). With
``strict=True`` they are raised so that bad input is found early.
"""

from __future__ import annotations

import logging
import threading


class MLCError(Exception):
    """Base class of every error raised by mlc_integrations."""


class ConfigurationError(MLCError, ValueError):
    """An option names nothing that exists (a mistyped image encoder or verifier name);
    raised when the engine is built, whatever ``strict`` says, with the accepted names."""


class InvalidRequestError(MLCError, ValueError):
    """The request cannot be keyed: wrong types, empty or oversized prompt, bad JSON."""


class ImageDecodeError(InvalidRequestError):
    """An image could not be decoded (corrupt, truncated, empty, not an image)."""


class ImageTooLargeError(InvalidRequestError):
    """An image exceeds ``max_image_pixels`` or ``max_image_bytes`` (decompression bomb guard)."""


class PayloadError(MLCError, ValueError):
    """A response payload is not JSON-serializable or exceeds ``max_response_bytes``."""


class StorageError(MLCError):
    """The vector store (Chroma) failed: unreachable server, corrupt directory, ..."""


class DirectoryInUseError(StorageError):
    """Another process has this embedded cache directory open (share it with ``mlc serve``)."""


class ModelUnavailableError(MLCError):
    """An embedding model could not be loaded (no weights offline, bad checkpoint path)."""


_warned: set[str] = set()
_warned_lock = threading.Lock()


def first_time(kind: str) -> int:
    """The logging level for a failure of ``kind``: WARNING the first time in this
    process (bad input must be visible by default), INFO afterwards (no log flood)."""
    with _warned_lock:
        if kind in _warned:
            return logging.INFO
        _warned.add(kind)
        return logging.WARNING
