"""Chroma storage: how vectors and responses are kept, apart from any policy.

One collection per tier, named and laid out by the entry schema (:mod:`.schema`).

Where the collections live: embedded (:class:`chromadb.PersistentClient` or in memory),
a Chroma server (:class:`chromadb.HttpClient`: single node or a distributed deployment,
with TLS, token authentication, a tenant and a database), Chroma Cloud
(:func:`chromadb.CloudClient`), or a client you built. The engine does not otherwise
notice which. Every remote kind is held to the same failure policy: each request
bounded by ``timeout`` (chromadb's own HTTP client waits forever), and a server that
cannot be reached, or that rejects the credentials, fails calls fast for
``retry_interval`` seconds instead of costing each call a round trip.

Opening a persistent or server store checks every vector collection for rows the HNSW
index cannot return and repairs them (:mod:`.index_repair` says why). A persistent store
also leaves a marker file while it is open (removed by :meth:`ChromaStore.close`), so
``check_index="after_crash"`` can limit the check to opens after a crash.
"""

from __future__ import annotations

import logging
import os
import string
import threading
import time
from typing import Any, Callable, Mapping, Optional, TypeVar, Union

from ..errors import StorageError
from . import schema
from .index_repair import (INDEX_CHECK_MODES, IndexCheck, OpenMarkers, PinnedCollection, PinnedIds,
                           default_check_index, repair)
from .schema import VECTOR_TIERS

log = logging.getLogger(__name__)

T = TypeVar("T")

_DUMMY_VECTOR = [1.0]
DEFAULT_TIMEOUT = 5.0  # seconds per Chroma server request (chromadb's own default is no timeout)
# HNSW beam width of a query. Chroma's default (10) found the true nearest neighbour for
# 52 % of probes among 100k random 384-d vectors, 100 for 95 % (1.7 -> 3.1 ms per query;
# benchmarks/probes.py ef):
# a neighbour the index does not return is a lost hit. Set when a collection is created.
DEFAULT_SEARCH_EF = 100
DEFAULT_RETRY_INTERVAL = 1.0  # seconds an unreachable server is not retried: calls fail fast meanwhile
CLOUD_HOST, CLOUD_PORT = "api.trychroma.com", 443  # chromadb.CloudClient's defaults
# The two headers Chroma's token authentication reads (chromadb.auth.token_authn).
TOKEN_HEADERS = ("X-Chroma-Token", "Authorization")
_TOKEN_CHARS = frozenset(string.digits + string.ascii_letters + string.punctuation)  # what chromadb accepts
# chromadb keeps one process-wide System per embedded identifier ("ephemeral", or the
# directory) and publishes it in a class dict *before* starting it; a second client
# created meanwhile (another engine's writer thread) gets a half-started System, fails,
# and its failure handler releases the first client's System ("no attribute 'bindings'",
# "Could not connect to tenant", KeyError 'ephemeral'). Every embedded client this
# package opens is therefore created under one lock.
_EMBEDDED_OPEN_LOCK = threading.Lock()


class ServerUnreachableError(StorageError):
    """No answer from the Chroma server (refused, timed out, connection dropped)."""


class StorageAuthenticationError(StorageError):
    """The Chroma server or Chroma Cloud rejected the credentials (no token, a wrong
    token or API key, or a tenant/database the credentials do not grant)."""


def _is_timeout(exc: BaseException) -> bool:
    import httpx

    return isinstance(exc, (httpx.TimeoutException, TimeoutError))


def _causes(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: Optional[BaseException] = exc
    while cur is not None and len(out) < 8:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _is_connection_failure(exc: BaseException) -> bool:
    """True for a failure to reach the server, as opposed to an error the server answered with."""
    import httpx

    return any(isinstance(c, (ServerUnreachableError, httpx.TransportError, ConnectionError, TimeoutError))
               for c in _causes(exc))


def _is_auth_failure(exc: BaseException) -> bool:
    """True when the server answered that the credentials are not accepted: chromadb's
    ``ChromaAuthError`` (HTTP 403, what Chroma's token authentication answers) or
    ``AuthorizationError`` (401), or a bare 401/403 from a gateway in front of Chroma."""
    import httpx
    from chromadb.errors import AuthorizationError, ChromaAuthError

    for c in _causes(exc):
        if isinstance(c, (StorageAuthenticationError, ChromaAuthError, AuthorizationError)):
            return True
        if isinstance(c, httpx.HTTPStatusError) and c.response.status_code in (401, 403):
            return True
    return False


def _describe(exc: BaseException) -> str:
    """An exception as ``Type: message`` (chromadb's errors keep their text in ``message()``)."""
    text = str(exc)
    message = getattr(exc, "message", None)
    if not text and callable(message):
        try:
            text = str(message())
        except Exception:  # a message() that needs arguments: the type alone says enough
            text = ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _settings() -> Any:
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False, allow_reset=False)


def token_headers(token: Optional[str], header: str = "X-Chroma-Token") -> dict[str, str]:
    """The request header that carries ``token`` as Chroma's token authentication reads
    it: ``X-Chroma-Token: <token>``, or ``Authorization: Bearer <token>``."""
    if token is None:
        return {}
    if header not in TOKEN_HEADERS:
        raise ValueError(f"token_header must be one of {TOKEN_HEADERS}, got {header!r}")
    if not token or not set(token) <= _TOKEN_CHARS:
        raise ValueError("a Chroma token is ASCII letters, digits and punctuation (chromadb refuses others)")
    return {header: f"Bearer {token}" if header == "Authorization" else token}


def _http_session(client: Any) -> Any:
    """The httpx session of a chromadb HTTP client (HttpClient, CloudClient); None for an
    embedded client or a chromadb version that moved it."""
    import httpx

    session = getattr(getattr(client, "_server", None), "_session", None)
    return session if isinstance(session, httpx.Client) else None


class ChromaStore:
    """Chroma client plus the tier collections, created lazily and re-opened on failure.

    Every call goes through :meth:`call`, which reconnects once (re-creating the client
    and collection handles) when the server restarted or a handle went stale.

    Remote stores (a server, Chroma Cloud, or a ``client`` you pass that talks HTTP) bound
    every request by ``timeout`` seconds (chromadb itself waits forever on a hung server),
    and after a failed reconnect -- the server unreachable, or rejecting the credentials --
    fail calls fast for ``retry_interval`` seconds, so a down server costs a lookup
    microseconds, not a timeout each; the first call after the interval tries again.

    A server is ``chroma_host``/``chroma_port`` (``chroma_ssl``: TLS, ``ssl_verify``: a CA
    bundle path or False, chromadb's ``chroma_server_ssl_verify``); ``token`` is sent in
    ``token_header`` (``"X-Chroma-Token"`` or ``"Authorization"``, as a bearer token), on
    top of any ``chroma_headers``; ``tenant``/``database`` choose where the collections
    live (Chroma's defaults when None). ``cloud_api_key`` makes it a Chroma Cloud client
    (:func:`chromadb.CloudClient`, with tenant and database from the key when None), on
    api.trychroma.com unless ``chroma_host`` names another Cloud-compatible endpoint.

    ``versions`` gives each versioned tier (:mod:`.schema`) the version of its vectors,
    which its collection name ends with.

    ``check_index`` says when opening the store checks its vector indexes (see
    :data:`INDEX_CHECK_MODES`; None: :func:`default_check_index` of the store's mode);
    :meth:`open` opens it (and checks) ahead of the first call; :meth:`check_index` runs the check on demand and
    :meth:`index_stats` counts what checks found. ``check_every_writes`` = N > 0 also
    re-checks a vector collection after every N writes to it (1: after each write, so
    no acknowledged vector is ever unreachable; the cost is one exhaustive query per
    check, see docs/operations.md).
    """

    def __init__(
        self,
        persist_directory: Optional[str] = None,
        chroma_host: Optional[str] = None,
        chroma_port: Optional[int] = None,
        collection_prefix: str = "mlc",
        client: Any = None,
        chroma_ssl: Optional[bool] = None,
        chroma_headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
        retry_interval: float = DEFAULT_RETRY_INTERVAL,
        hnsw_search_ef: int = DEFAULT_SEARCH_EF,
        check_index: Optional[str] = None,
        check_every_writes: int = 0,
        monotonic: Callable[[], float] = time.monotonic,
        *,
        token: Optional[str] = None,
        token_header: str = "X-Chroma-Token",
        tenant: Optional[str] = None,
        database: Optional[str] = None,
        ssl_verify: Union[bool, str, None] = None,
        cloud_api_key: Optional[str] = None,
        versions: Optional[Mapping[str, str]] = None,
    ) -> None:
        if check_index is not None and check_index not in INDEX_CHECK_MODES:
            raise ValueError(f"check_index must be one of {INDEX_CHECK_MODES}, got {check_index!r}")
        if persist_directory and (chroma_host or cloud_api_key):
            raise ValueError("give either persist_directory (embedded) or chroma_host / a Chroma Cloud API key "
                             "(server), not both")
        if client is not None and (chroma_host or cloud_api_key or token or tenant or database):
            raise ValueError("a client you pass carries its own address, credentials, tenant and database: "
                             "give those to the client, or give them here and no client")
        if cloud_api_key is not None and token is not None:
            raise ValueError("Chroma Cloud authenticates with its API key: give cloud_api_key or token, not both")
        self.cloud = cloud_api_key is not None
        if not self.cloud and not chroma_host and (token or tenant or database or chroma_headers or chroma_ssl):
            raise ValueError("token, headers, SSL, tenant and database are for a Chroma server: give chroma_host too")
        self._auth_headers = token_headers(token, token_header)  # validated now, not at the first call
        if self.cloud and not chroma_host:  # a port or SSL flag without a host is the engine's default, not Cloud's
            chroma_host, chroma_port, chroma_ssl = CLOUD_HOST, CLOUD_PORT, True
        self.persist_directory = persist_directory
        self.chroma_host = chroma_host
        self.chroma_port = 8000 if chroma_port is None else int(chroma_port)
        self.chroma_ssl = bool(chroma_ssl)
        self.chroma_headers = dict(chroma_headers or {})
        self.token_header = token_header if token is not None else None
        self.tenant = tenant
        self.database = database
        self.ssl_verify = ssl_verify
        self._cloud_api_key = cloud_api_key
        self.versions = dict(versions or {})
        self.timeout = timeout
        self.retry_interval = retry_interval
        if int(hnsw_search_ef) < 1:
            raise ValueError("hnsw_search_ef must be >= 1")
        self.hnsw_search_ef = int(hnsw_search_ef)
        self.monotonic = monotonic  # the retry interval's clock; injectable so tests need no sleeping
        # What the server-failure policy did, for tests and diagnosis: connection attempts
        # (client creations), requests that timed out, calls failed fast without a request.
        self.connect_attempts = 0
        self.timeouts = 0
        self.failed_fast = 0
        self.auth_failures = 0
        self._down_until = 0.0  # monotonic time before which the server is not retried
        self._down_error: type[StorageError] = ServerUnreachableError
        self._down_reason = ""
        self._generation = 0  # bumped on every reconnect, so concurrent failures reconnect once
        if not persist_directory and not chroma_host and client is None:
            # Chroma's in-memory clients share one process-wide system: give each
            # in-memory engine its own collections, as an in-memory cache should be.
            import uuid

            collection_prefix = f"{collection_prefix}-mem{uuid.uuid4().hex[:10]}"
        self.prefix = collection_prefix
        self._client = client
        self._user_client = client is not None
        # A client you pass that talks HTTP gets the same request bound and fail-fast.
        self._remote = bool(chroma_host) or (client is not None and _http_session(client) is not None)
        if client is not None and self._remote:
            self._bound_timeout(client)
        self._collections: dict[str, Any] = {}
        self._dims: dict[str, int] = {}
        self._lock = threading.RLock()
        self._closed = False  # close() ran: a warm-start open() still to come must not reopen
        self.check_index_mode = check_index if check_index is not None else default_check_index(self.mode)
        if check_every_writes < 0:
            raise ValueError("check_every_writes must be >= 0 (0: off)")
        self.check_every_writes = int(check_every_writes)
        self._writes_since_check: dict[str, int] = {t: 0 for t in VECTOR_TIERS}
        # Rows of each vector tier the index cannot reach even after a re-insert:
        # queries score them exactly (PinnedCollection). Filled by checks.
        self._pinned: dict[str, PinnedIds] = {t: PinnedIds() for t in VECTOR_TIERS}
        self._index_counts = {"index_checks": 0, "index_unreachable": 0, "index_reinserted": 0,
                              "index_pinned_total": 0, "index_unreadable": 0, "index_check_errors": 0}
        self.last_index_check: dict[str, IndexCheck] = {}
        self._markers = OpenMarkers(persist_directory, self.prefix) if persist_directory and not self._user_client else None

    @property
    def mode(self) -> str:
        if self._user_client:
            return "client"
        if self.cloud:
            return "cloud"
        if self.chroma_host:
            return "server"
        return "persistent" if self.persist_directory else "ephemeral"

    @property
    def where(self) -> str:
        """The store's address for messages (never a credential)."""
        if self.chroma_host:
            kind = "Chroma Cloud" if self.cloud else "Chroma server"
            return f"{kind} {self.chroma_host}:{self.chroma_port}"
        return "the client passed in" if self._user_client else "embedded Chroma"

    def _credentials(self) -> str:
        """What this store sends to prove who it is, for an error message (never the secret)."""
        if self.cloud:
            return "the Chroma Cloud API key (cloud_api_key)"
        if self.token_header:
            return f"a token in the {self.token_header} header"
        if self._user_client:
            return "the client's own credentials"
        return "no token (StorageOptions(token=...) sends one)"

    def _make_client(self) -> Any:
        import chromadb

        if self.chroma_host:
            self.connect_attempts += 1
            self._preflight()
            settings = _settings()
            if self.ssl_verify is not None:
                settings.chroma_server_ssl_verify = self.ssl_verify
            where = {k: v for k, v in (("tenant", self.tenant), ("database", self.database)) if v is not None}
            if self.cloud:
                settings.chroma_server_headers = dict(self.chroma_headers) or None
                client = chromadb.CloudClient(api_key=self._cloud_api_key, settings=settings, cloud_host=self.chroma_host,
                                              cloud_port=self.chroma_port, enable_ssl=self.chroma_ssl,
                                              tenant=self.tenant, database=self.database)
            else:
                client = chromadb.HttpClient(
                    host=self.chroma_host,
                    port=self.chroma_port,
                    ssl=self.chroma_ssl,
                    headers={**self.chroma_headers, **self._auth_headers},  # a copy: chromadb adds its own to it
                    settings=settings,
                    **where,
                )
            self._bound_timeout(client)
            return client
        if self.persist_directory:
            # Absolute: chromadb keys its embedded clients by the path string, so a relative one
            # would reach another directory's client after a chdir.
            with _EMBEDDED_OPEN_LOCK:
                return chromadb.PersistentClient(path=os.path.abspath(str(self.persist_directory)),
                                                 settings=_settings())
        with _EMBEDDED_OPEN_LOCK:
            return chromadb.EphemeralClient(settings=_settings())

    def _preflight(self) -> None:
        """Heartbeat with a bounded timeout: chromadb's client constructor talks to the
        server with no timeout at all, so an unresponsive server would hang it. (Chroma
        answers the heartbeat without authentication: credentials are judged next.)"""
        import httpx

        scheme = "https" if self.chroma_ssl else "http"
        host = f"[{self.chroma_host}]" if ":" in str(self.chroma_host) else self.chroma_host
        try:
            httpx.get(f"{scheme}://{host}:{self.chroma_port}/api/v2/heartbeat", timeout=self.timeout,
                      headers=self.chroma_headers, verify=self._verify())
        except httpx.HTTPError as exc:
            raise ServerUnreachableError(
                f"{self.where} unreachable: {type(exc).__name__}: {exc}"
            ) from exc

    def _verify(self) -> Any:
        """``ssl_verify`` as httpx takes it (a CA bundle path becomes a context: httpx 0.28
        deprecates paths)."""
        if isinstance(self.ssl_verify, str):
            import ssl

            return ssl.create_default_context(cafile=self.ssl_verify)
        return True if self.ssl_verify is None else self.ssl_verify

    def _bound_timeout(self, client: Any) -> None:
        import httpx

        session = _http_session(client)
        if session is not None:
            session.timeout = httpx.Timeout(self.timeout)
        else:  # a chromadb version that moved its HTTP session: requests are unbounded
            log.warning("cannot bound Chroma request timeout on this chromadb version; a hung server may block calls")

    def _open_error(self, exc: BaseException) -> StorageError:
        """A failure to create the client, as the error that names its cause."""
        if _is_auth_failure(exc):
            self.auth_failures += 1
            tenant = self.tenant or ("the key's" if self.cloud else "default_tenant")
            database = self.database or ("the key's" if self.cloud else "default_database")
            return StorageAuthenticationError(
                f"{self.where} refused the credentials (authentication failed; sent {self._credentials()}; "
                f"tenant {tenant}, database {database}): {_describe(exc)}")
        if isinstance(exc, StorageError):
            return exc
        return StorageError(f"cannot open Chroma ({self.mode}, {self.where}): {type(exc).__name__}: {exc}")

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                try:
                    self._client = self._make_client()
                except Exception as exc:
                    err = self._open_error(exc)
                    if err is exc:
                        raise
                    raise err from exc
                self._after_open()
            return self._client

    def open(self) -> None:
        """Open the store now, running the open check (:attr:`check_index_mode`), unless it
        was closed meanwhile. The engine's warm start calls this in its background thread,
        so the first call does not pay for the check. The check runs under the store lock,
        as the client is created: a call that needs the store meanwhile waits for it and
        never sees an index half repaired."""
        with self._lock:
            if not self._closed:
                self.client

    # ------------------------------------------------------------------ index checks
    @property
    def repairs(self) -> int:
        """Rows found unreachable by checks and made findable again (re-inserted or pinned)."""
        return self._index_counts["index_reinserted"] + self._index_counts["index_pinned_total"]

    def _after_open(self) -> None:
        """First client of this store: leave a marker, and check the indexes if asked to."""
        if self.check_index_mode == "never":
            return
        stale = []
        if self._markers is not None and self._markers.path is None:
            try:
                stale = self._markers.left_behind()
                self._markers.create()
            except OSError as exc:  # read-only directory: no crash detection, the store still works
                log.warning("cannot keep an open marker in %s (%s); index checks after a crash are off",
                            self.persist_directory, exc)
        if self.check_index_mode == "always" or stale:
            if stale:
                log.warning("%s was not closed cleanly (%d marker(s) left); checking its vector indexes",
                            self.persist_directory, len(stale))
            if self.check_index() is not None and self._markers is not None:
                self._markers.discard(stale)  # kept on failure: the next open checks again

    def check_index(self, tiers: tuple[str, ...] = VECTOR_TIERS) -> Optional[dict[str, IndexCheck]]:
        """Check the existing vector collections for rows their index cannot return, and repair
        them (one re-insert each; what stays unreachable is pinned). None if the check failed."""
        out: dict[str, IndexCheck] = {}
        try:
            with self._lock:
                existing = {c.name if hasattr(c, "name") else str(c) for c in self.client.list_collections()}
                for tier in tiers:
                    if self.name(tier) not in existing:
                        continue
                    col = self.client.get_collection(self.name(tier), embedding_function=None)
                    report = repair(col, tier, self._pinned[tier].snapshot())
                    self._record(report)
                    out[tier] = report
        except Exception as exc:  # never stop the cache from opening; the marker stays for the next open
            self._index_counts["index_check_errors"] += 1
            log.error("vector index check failed: %s: %s", type(exc).__name__, exc)
            return None
        return out

    def _record(self, report: IndexCheck) -> None:
        """Count what the check found that was not known before (pinned rows are re-found
        by every later check while they stay unreachable)."""
        c = self._index_counts
        known = self._pinned[report.tier].snapshot()
        new = sum(i not in known for i in report.unreachable)
        c["index_checks"] += 1
        c["index_unreachable"] += new
        c["index_reinserted"] += len(report.reinserted)
        c["index_unreadable"] += len(report.unreadable)
        c["index_pinned_total"] += sum(i not in known for i in report.pinned)
        pinned = self._pinned[report.tier]
        pinned.replace(report.pinned)  # wrappers already handed out share this object
        if pinned:
            self._collections.pop(report.tier, None)  # re-wrapped on next use
        self.last_index_check[report.tier] = report
        if new:
            log.warning("%s: %d of %d vectors were not reachable in the index; %d re-inserted, %d pinned, "
                        "%d unreadable (%.2f s)", self.name(report.tier), len(report.unreachable), report.rows,
                        len(report.reinserted), len(report.pinned), len(report.unreadable), report.seconds)

    def index_stats(self) -> dict[str, int]:
        """Counters for the engine's ``stats()``: collections checked, unreachable rows found,
        re-inserted, pinned (ever / now), unreadable, failed checks."""
        return dict(self._index_counts, index_pinned=sum(len(p) for p in self._pinned.values()))

    def _written(self, tier: str) -> None:
        """A vector write went through the store: re-check its collection every N writes."""
        self._writes_since_check[tier] += 1
        if self._writes_since_check[tier] >= self.check_every_writes:
            self._writes_since_check[tier] = 0
            self.check_index((tier,))

    def close(self) -> None:
        """A clean close: with ``check_index="after_crash"`` the next open of this directory
        does not check the indexes. Waits for an open check still running (warm start)."""
        with self._lock:
            self._closed = True
            if self._markers is not None:
                try:
                    self._markers.remove()
                except OSError as exc:
                    log.warning("cannot remove open marker: %s", exc)

    def name(self, tier: str) -> str:
        return schema.collection_name(self.prefix, tier, self.versions)

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
                meta: dict[str, Any] = {"hnsw:space": "cosine", schema.COLLECTION_TIER: tier}
                if tier in VECTOR_TIERS:  # the others are read by id only
                    meta["hnsw:search_ef"] = self.hnsw_search_ef
                if dim is not None:
                    meta[schema.COLLECTION_DIM] = dim
                if model:
                    meta[schema.COLLECTION_MODEL] = model[-200:]
                try:
                    col = self.client.get_or_create_collection(self.name(tier), embedding_function=None, metadata=meta)
                except StorageError:
                    raise
                except Exception as exc:
                    raise StorageError(f"cannot open collection {self.name(tier)!r}: {exc}") from exc
                stored_dim = (col.metadata or {}).get(schema.COLLECTION_DIM)
                stored_model = (col.metadata or {}).get(schema.COLLECTION_MODEL)
                if model and stored_model and stored_model != model[-200:]:
                    # Same size is not same space: EfficientNet-Lite0/1/2 all give 1280-d vectors.
                    raise StorageError(
                        f"collection {self.name(tier)!r} holds vectors of model {stored_model!r}; this engine's "
                        f"model is {model[-200:]!r}. Use another collection_prefix or clear the cache.")
                if dim is not None and stored_dim not in (None, dim):
                    raise StorageError(
                        f"collection {self.name(tier)!r} was built with {stored_dim}-d vectors "
                        f"(model {stored_model!r}); this engine's model gives {dim}-d. "
                        "Use another collection_prefix or clear the cache."
                    )
                if self._pinned.get(tier) or (self.check_every_writes and tier in VECTOR_TIERS):
                    on_write = (lambda t=tier: self._written(t)) if self.check_every_writes else None
                    col = PinnedCollection(col, self._pinned[tier], on_write)
                self._collections[tier] = col
                if stored_dim is not None:
                    self._dims[tier] = int(stored_dim)
                elif dim is not None:
                    self._dims[tier] = dim
            return col

    def reset_handles(self, generation: Optional[int] = None) -> None:
        """Forget client and collection handles so the next call reconnects.

        With ``generation`` (the value seen before a failed call), do nothing when another
        thread has reconnected since: one stale handle, one reconnect.
        """
        with self._lock:
            if generation is not None and generation != self._generation:
                return
            self._generation += 1
            self._collections.clear()
            if not self._user_client and self.chroma_host:
                old, self._client = self._client, None
                if old is not None:
                    try:
                        old.close()  # releases chromadb's per-client System and HTTP pool
                    except Exception as exc:  # a dead connection may fail to close; nothing to keep
                        log.debug("closing stale Chroma client: %s", exc)

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run a Chroma operation; on failure reconnect once and retry, then raise StorageError
        (:class:`ServerUnreachableError`, :class:`StorageAuthenticationError` when the cause is that)."""
        if self._down_until and self.monotonic() < self._down_until:
            self.failed_fast += 1
            raise self._down_error(
                f"Chroma {what} skipped: {self.where} failed less than {self.retry_interval:g} s ago "
                f"({self._down_reason})")
        generation = self._generation
        try:
            out = fn()
        except StorageError as exc:
            self._note_failure(exc)
            raise
        except Exception as first:
            if _is_timeout(first):  # a hung server: retrying would only double the wait
                self.timeouts += 1
                self._note_failure(first)
                raise StorageError(f"Chroma {what} timed out after {self.timeout:g} s: {first}") from first
            if _is_auth_failure(first):  # a reconnect would send the same credentials
                err = self._open_error(first)
                self._note_failure(err)
                raise err from first
            log.debug("chroma %s failed (%s); reconnecting once", what, first)
            self.reset_handles(generation)
            try:
                out = fn()
            except StorageError as exc:
                self._note_failure(exc)
                raise
            except Exception as exc:
                self.timeouts += _is_timeout(exc)
                err = self._open_error(exc) if _is_auth_failure(exc) else StorageError(
                    f"Chroma {what} failed: {type(exc).__name__}: {exc}")
                err.__cause__ = exc  # what _note_failure classifies
                self._note_failure(err)
                raise err from exc
        if self._down_until:
            log.info("%s reachable again", self.where)
            self._down_until = 0.0
        return out

    def _note_failure(self, exc: BaseException) -> None:
        """After a remote store failed to answer, or refused the credentials: fail calls fast
        for ``retry_interval`` (neither fixes itself within a call; each retry would cost
        a round trip on the caller's path)."""
        if not self._remote or self.retry_interval <= 0:
            return
        auth = _is_auth_failure(exc)
        if not auth and not _is_connection_failure(exc):
            return
        if not self._down_until:
            log.warning("%s %s; cache calls fail fast (as misses) and are retried every %g s: %s", self.where,
                        "refused the credentials" if auth else "unreachable", self.retry_interval, exc)
        self._down_error = StorageAuthenticationError if auth else ServerUnreachableError
        self._down_reason = ("authentication failed" if auth else "unreachable") + f": {str(exc)[:300]}"
        self._down_until = self.monotonic() + self.retry_interval

    @staticmethod
    def dummy_vector() -> list[float]:
        return list(_DUMMY_VECTOR)

    def heartbeat(self) -> bool:
        try:
            self.client.heartbeat()
            return True
        except Exception:
            return False
