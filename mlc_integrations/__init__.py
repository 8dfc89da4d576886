"""mlc_integrations: multi-level caching for multimodal LLMs (LangChain and LlamaIndex)."""

from __future__ import annotations

from typing import Any

from .config import Limits, StorageOptions, TierOptions, VerifierOptions, WriteOptions
from .engine import MLCEngine
from .errors import (
    ConfigurationError,
    DirectoryInUseError,
    ImageDecodeError,
    ImageTooLargeError,
    InvalidRequestError,
    MLCError,
    ModelUnavailableError,
    PayloadError,
    StorageError,
)
from .images import ImageRef, image_digest
from .embed.models import ClipSpec
from .request import CacheControl, CacheRequest, Hit, Lookup, Refusal

__version__ = "0.1.0"

__all__ = [
    "MLCEngine",
    "StorageOptions",
    "WriteOptions",
    "Limits",
    "TierOptions",
    "VerifierOptions",
    "CacheRequest",
    "CacheControl",
    "Hit",
    "Lookup",
    "Refusal",
    "ImageRef",
    "ClipSpec",
    "image_digest",
    "MLCError",
    "ConfigurationError",
    "InvalidRequestError",
    "ImageDecodeError",
    "ImageTooLargeError",
    "PayloadError",
    "StorageError",
    "DirectoryInUseError",
    "ModelUnavailableError",
    "MultimodalSemanticCache",
    "CachedChatModel",
    "CachedMultiModalLLM",
]


def __getattr__(name: str) -> Any:
    # Adapters import their framework lazily: the engine works without either installed.
    if name == "MultimodalSemanticCache":
        from .langchain import MultimodalSemanticCache

        return MultimodalSemanticCache
    if name == "CachedChatModel":
        from .langchain import CachedChatModel

        return CachedChatModel
    if name == "CachedMultiModalLLM":
        from .llamaindex import CachedMultiModalLLM

        return CachedMultiModalLLM
    raise AttributeError(f"module 'mlc_integrations' has no attribute {name!r}")
