"""Chroma storage: how vectors and responses are kept, apart from any policy.

One collection per tier, named from the tier:

* ``{prefix}_exact``  -- L0.5 and the response store: id = exact key, document = the
  response as JSON, metadata = scope/namespace/context keys, timestamps, prompt text.
* ``{prefix}_l1``     -- L1 text embeddings, id = entry id.
* ``{prefix}_l2_image`` / ``{prefix}_l2_prompt`` -- L2 image embeddings (one record per
  image of an entry) and prompt embeddings.

Embedded (:class:`chromadb.PersistentClient` or in-memory) or a Chroma server
(:class:`chromadb.HttpClient`): the engine does not otherwise notice which.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional, TypeVar

from .errors import StorageError

log = logging.getLogger(__name__)

T = TypeVar("T")

TIER_COLLECTIONS = {
    "exact": "exact",
    "l1": "l1",
    "l2_image": "l2_image",
    "l2_prompt": "l2_prompt",
}
_DUMMY_VECTOR = [1.0]


def _settings() -> Any:
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False, allow_reset=False)


class ChromaStore:
    """Chroma client plus the tier collections, created lazily and re-opened on failure.

    Every call goes through :meth:`call`, which reconnects once (re-creating the client
    and collection handles) when the server restarted or a handle went stale.
    """

    def __init__(
        self,
        persist_directory: Optional[str] = None,
        chroma_host: Optional[str] = None,
        chroma_port: int = 8000,
        collection_prefix: str = "mlc",
        client: Any = None,
        chroma_ssl: bool = False,
        chroma_headers: Optional[dict[str, str]] = None,
    ) -> None:
        if persist_directory and chroma_host:
            raise ValueError("give either persist_directory (embedded) or chroma_host (server), not both")
        self.persist_directory = persist_directory
        self.chroma_host = chroma_host
        self.chroma_port = chroma_port
        self.chroma_ssl = chroma_ssl
        self.chroma_headers = chroma_headers
        if not persist_directory and not chroma_host and client is None:
            # Chroma's in-memory clients share one process-wide system: give each
            # in-memory engine its own collections, as an in-memory cache should be.
            import uuid

            collection_prefix = f"{collection_prefix}-mem{uuid.uuid4().hex[:10]}"
        self.prefix = collection_prefix
        self._client = client
        self._user_client = client is not None
        self._collections: dict[str, Any] = {}
        self._dims: dict[str, int] = {}
        self._lock = threading.RLock()

    @property
    def mode(self) -> str:
        if self._user_client:
            return "client"
        if self.chroma_host:
            return "server"
        return "persistent" if self.persist_directory else "ephemeral"

    def _make_client(self) -> Any:
        import chromadb

        if self.chroma_host:
            return chromadb.HttpClient(
                host=self.chroma_host,
                port=self.chroma_port,
                ssl=self.chroma_ssl,
                headers=self.chroma_headers,
                settings=_settings(),
            )
        if self.persist_directory:
            return chromadb.PersistentClient(path=str(self.persist_directory), settings=_settings())
        return chromadb.EphemeralClient(settings=_settings())

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                try:
                    self._client = self._make_client()
                except Exception as exc:
                    raise StorageError(f"cannot open Chroma ({self.mode}): {type(exc).__name__}: {exc}") from exc
            return self._client

    def name(self, tier: str) -> str:
        return f"{self.prefix}_{TIER_COLLECTIONS[tier]}"

    def collection(self, tier: str, dim: Optional[int] = None, model: str = "") -> Any:
        """The collection of a tier; ``dim``/``model`` are recorded and checked."""
        col = self._collections.get(tier)
        if col is not None:
            if dim is not None and self._dims.get(tier) not in (None, dim):
                raise StorageError(
                    f"collection {self.name(tier)!r} holds {self._dims[tier]}-d vectors, "
                    f"this engine's model gives {dim}-d; use another collection_prefix or clear the cache"
                )
            return col
        with self._lock:
            col = self._collections.get(tier)
            if col is None:
                meta: dict[str, Any] = {"hnsw:space": "cosine", "mlc_tier": tier}
                if dim is not None:
                    meta["dim"] = dim
                if model:
                    meta["model"] = model[-200:]
                try:
                    col = self.client.get_or_create_collection(self.name(tier), embedding_function=None, metadata=meta)
                except Exception as exc:
                    raise StorageError(f"cannot open collection {self.name(tier)!r}: {exc}") from exc
                stored_dim = (col.metadata or {}).get("dim")
                if dim is not None and stored_dim not in (None, dim):
                    raise StorageError(
                        f"collection {self.name(tier)!r} was built with {stored_dim}-d vectors "
                        f"(model {(col.metadata or {}).get('model')!r}); this engine's model gives {dim}-d. "
                        "Use another collection_prefix or clear the cache."
                    )
                self._collections[tier] = col
                if stored_dim is not None:
                    self._dims[tier] = int(stored_dim)
                elif dim is not None:
                    self._dims[tier] = dim
            return col

    def reset_handles(self) -> None:
        """Forget client and collection handles so the next call reconnects."""
        with self._lock:
            self._collections.clear()
            if not self._user_client and self.chroma_host:
                self._client = None

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run a Chroma operation; on failure reconnect once and retry, then raise StorageError."""
        try:
            return fn()
        except StorageError:
            raise
        except Exception as first:
            log.debug("chroma %s failed (%s); reconnecting once", what, first)
            self.reset_handles()
            try:
                return fn()
            except StorageError:
                raise
            except Exception as exc:
                raise StorageError(f"Chroma {what} failed: {type(exc).__name__}: {exc}") from exc

    @staticmethod
    def dummy_vector() -> list[float]:
        return list(_DUMMY_VECTOR)

    def heartbeat(self) -> bool:
        try:
            self.client.heartbeat()
            return True
        except Exception:
            return False
