"""One small hierarchy of typed errors.

In the default fail-open mode these never reach the caller of an LLM: the engine
turns them into counted misses (lookup) or logged no-ops (update). With
``strict=True`` they are raised so that bad input is found early.
"""

from __future__ import annotations


class MLCError(Exception):
    """Base class of every error raised by mlc_integrations."""


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


class ModelUnavailableError(MLCError):
    """An embedding model could not be loaded (no weights offline, bad checkpoint path)."""
