"""Read-only views of a persisted cache directory: what ``mlc stats``, ``mlc scopes`` and
``mlc clear`` show.

It opens an embedded Chroma directory without loading any model, through the public
methods of :class:`~mlc_integrations.store.chroma.ChromaStore` and
:class:`~mlc_integrations.store.entries.EntryStore`, and finds the caches a directory holds
from the entry schema (:mod:`~mlc_integrations.store.schema`): collection names and their
tier metadata, the version of a versioned tier read from its name (no embedding module).
It never creates a directory: a path that does not exist, or holds no Chroma database,
is a :class:`CacheDirectoryError`, so a mistyped ``--dir`` cannot become an empty cache.
It takes the directory's lock (:mod:`.dirlock`) like an engine does, so it never reads a
cache another process is writing, and it leaves the directory as it found it: no open
marker, no index check (those are an engine's business). A directory that ``mlc serve``
holds is read through that server instead (``--host/--port``), and the error says so.

Scopes and namespaces are stored as digests (``keys.scope_digest``), never as the raw
strings, so that is what these views show, next to a ``scope_label`` / ``ns_label``
metadata value when an entry carries one. Prompt texts are never shown.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from ..store.dirlock import DirectoryLock, served_at
from ..errors import DirectoryInUseError
from ..store.entries import NO_EXPIRY, EntryStore
from ..keys import scope_digest
from ..request import DEFAULT_NAMESPACE
from ..runtime.stats import EngineStats
from ..store import schema
from ..store.chroma import ChromaStore
from ..store.schema import CREATED_AT, EXPIRES_AT, MODEL, N_IMAGES, NS, NS_LABEL, SCOPE

CHROMA_DB_FILE = "chroma.sqlite3"
TIERS = tuple(t.name for t in schema.TIERS)  # the response tier, then the vector tiers


class CacheDirectoryError(ValueError):
    """The path is not a cache directory (missing, not a directory, no Chroma database,
    no cache collections) or a digest matches nothing in it."""


def check_cache_directory(directory: str) -> Path:
    """``directory`` as a path when it exists and holds a Chroma database; else raise."""
    path = Path(directory).expanduser()
    if not path.exists():
        raise CacheDirectoryError(f"{directory!r} does not exist (no cache there; check --dir)")
    if not path.is_dir():
        raise CacheDirectoryError(f"{directory!r} is not a directory")
    if not (path / CHROMA_DB_FILE).is_file():
        raise CacheDirectoryError(f"{directory!r} is not a cache directory: it has no {CHROMA_DB_FILE}")
    return path


def size_on_disk(path: Path) -> int:
    """Bytes of every file under ``path`` (the SQLite database, its WAL, HNSW segments)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # a file removed while walking: it no longer takes space
                continue
    return total


@dataclass
class ScopeSummary:
    """Entries of one (scope, namespace) pair."""

    scope: str  # digest, 32 hex
    ns: str  # digest, 32 hex
    entries: int = 0
    expired: int = 0  # still stored, never served; removed on read or by purge_expired()
    with_images: int = 0
    oldest: Optional[float] = None  # created_at, seconds since the epoch
    newest: Optional[float] = None
    model: Optional[str] = None  # the model the scope names (keys.model_label), when stored
    ns_label: Optional[str] = None

    def add(self, meta: dict[str, Any], now: float) -> None:
        self.entries += 1
        if float(meta.get(EXPIRES_AT, NO_EXPIRY)) <= now:
            self.expired += 1
        if int(meta.get(N_IMAGES, 0) or 0) > 0:
            self.with_images += 1
        created = meta.get(CREATED_AT)
        if isinstance(created, (int, float)):
            self.oldest = created if self.oldest is None else min(self.oldest, created)
            self.newest = created if self.newest is None else max(self.newest, created)
        self.model = self.model or _label(meta, MODEL)
        self.ns_label = self.ns_label or _label(meta, NS_LABEL) or KNOWN_NAMESPACES.get(self.ns)


# The one namespace string every adapter and CacheRequest use unless told otherwise: its
# digest is recognized exactly (a hash match, not a guess at a secret).
KNOWN_NAMESPACES = {scope_digest(DEFAULT_NAMESPACE): DEFAULT_NAMESPACE}


def _label(meta: dict[str, Any], key: str) -> Optional[str]:
    value = meta.get(key)
    return value if isinstance(value, str) and value else None


@dataclass
class PrefixSummary:
    """One cache (one collection prefix) in a directory."""

    prefix: str
    tiers: dict[str, int]  # rows per tier collection (schema.IMAGE_ROW_TIERS: one row per image)
    scopes: list[ScopeSummary] = field(default_factory=list)
    traffic: dict[str, Any] = field(default_factory=dict)  # what the engines that used it counted (traffic())

    @property
    def entries(self) -> int:
        return sum(s.entries for s in self.scopes)

    @property
    def expired(self) -> int:
        return sum(s.expired for s in self.scopes)

    def per_scope(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.scopes:
            out[s.scope] = out.get(s.scope, 0) + s.entries
        return out

    def per_namespace(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.scopes:
            out[s.ns] = out.get(s.ns, 0) + s.entries
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "entries": self.entries, "expired": self.expired, "tiers": self.tiers,
                "entries_per_scope": self.per_scope(), "entries_per_namespace": self.per_namespace(),
                "scopes": [asdict(s) for s in self.scopes], "traffic": self.traffic}


class CacheDirectory:
    """A persisted cache opened for inspection (and, on request, clearing): an embedded
    directory (``directory``) or the Chroma server that serves one (``host``/``port``).

    Use as a context manager; :meth:`close` releases the directory lock.
    """

    def __init__(self, directory: Optional[str] = None, *, host: Optional[str] = None, port: int = 8000) -> None:
        self.host, self.port = host, port
        self.path = None if host else check_cache_directory(directory or ".")
        self._lock = None
        if self.path is not None:
            try:
                self._lock = DirectoryLock.acquire(str(self.path))
            except DirectoryInUseError as exc:
                served = served_at(self.path)
                if served is None:
                    raise
                raise DirectoryInUseError(
                    f"{str(self.path)!r} is served by `mlc serve` at {served['host']}:{served['port']} "
                    f"(pid {served['pid']}): read it through the server with "
                    f"--host {served['host']} --port {served['port']} instead of --dir") from exc
        self._stores: dict[str, tuple[ChromaStore, EntryStore]] = {}
        self.versions: dict[str, dict[str, str]] = {}  # prefix -> versioned tier -> version found
        try:
            # Only to list collections. "never": a read-only view leaves no open marker and checks nothing.
            self._lister = self._store("mlc")
            self.prefixes = self._find_prefixes()
        except BaseException:
            self.close()
            raise

    @property
    def where(self) -> str:
        return f"the server at {self.host}:{self.port}" if self.host else str(self.path)

    def _store(self, prefix: str) -> ChromaStore:
        versions = self.versions.get(prefix, {})
        if self.host:
            return ChromaStore(chroma_host=self.host, chroma_port=self.port, collection_prefix=prefix,
                               check_index="never", versions=versions)
        return ChromaStore(persist_directory=str(self.path), collection_prefix=prefix, check_index="never",
                           versions=versions)

    def __enter__(self) -> "CacheDirectory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        for store, _entries in self._stores.values():
            store.close()
        if getattr(self, "_lister", None) is not None:
            self._lister.close()
        if self._lock is not None:
            self._lock.release()

    def _find_prefixes(self) -> dict[str, set[str]]:
        """Collection prefix -> the tiers it has, from collection names and their ``mlc_tier`` metadata."""
        found: dict[str, set[str]] = {}
        for col in self._lister.call("list collections", lambda: self._lister.client.list_collections()):
            tier = (col.metadata or {}).get(schema.COLLECTION_TIER)
            parsed = schema.parse_collection(col.name, tier) if isinstance(tier, str) else None
            if parsed is None:
                continue
            prefix, version = parsed
            if version:
                # Several versions of a tier under one prefix: the newest collection name is
                # shown (versions sort as the library bumps them: s1 < s2 ...).
                known = self.versions.setdefault(prefix, {})
                known[tier] = max(known.get(tier, version), version)
            found.setdefault(prefix, set()).add(tier)
        if not found:
            raise CacheDirectoryError(f"{self.where} holds a Chroma database but no cache collections")
        return found

    def prefix(self, wanted: Optional[str]) -> str:
        """``wanted``, or the only prefix there is; an error names the choices otherwise."""
        if wanted is not None:
            if wanted not in self.prefixes:
                raise CacheDirectoryError(f"no cache with prefix {wanted!r} in {self.where} "
                                          f"(found: {', '.join(sorted(self.prefixes))})")
            return wanted
        if len(self.prefixes) > 1:
            raise CacheDirectoryError(f"{self.where} holds several caches; choose one with --prefix "
                                      f"({', '.join(sorted(self.prefixes))})")
        return next(iter(self.prefixes))

    def _open(self, prefix: str) -> tuple[ChromaStore, EntryStore]:
        if prefix not in self._stores:
            store = self._store(prefix)
            self._stores[prefix] = (store, EntryStore(store, EngineStats()))
        return self._stores[prefix]

    def summary(self, prefix: str, now: Optional[float] = None) -> PrefixSummary:
        """Rows per tier and entries per (scope, namespace) of one cache."""
        now = time.time() if now is None else now
        store, entries = self._open(prefix)
        tiers = {t: 0 for t in TIERS}
        for t in self.prefixes[prefix]:
            tiers[t] = int(store.call(f"count {t}", lambda t=t: store.collection(t).count()))
        pairs: dict[tuple[str, str], ScopeSummary] = {}
        if schema.RESPONSE_TIER in self.prefixes[prefix]:
            for _eid, meta in entries.all_metadata():
                key = (str(meta.get(SCOPE, "?")), str(meta.get(NS, "?")))
                pairs.setdefault(key, ScopeSummary(*key)).add(meta, now)
        scopes = sorted(pairs.values(), key=lambda s: (-s.entries, s.scope, s.ns))
        return PrefixSummary(prefix, tiers, scopes, traffic(entries.read_counters()))

    def resolve_digest(self, prefix: str, what: str, value: str) -> str:
        """A stored scope or namespace digest from its full form or a unique prefix of it."""
        value = value.strip().lower()
        if len(value) < 6 or any(c not in "0123456789abcdef" for c in value):
            raise CacheDirectoryError(f"{what} digest {value!r}: give at least 6 hex digits, as `mlc scopes` shows")
        stored = {getattr(s, what) for s in self.summary(prefix).scopes}
        matches = sorted(d for d in stored if d.startswith(value))
        if len(matches) != 1:
            why = "matches no stored" if not matches else f"matches {len(matches)} stored"
            raise CacheDirectoryError(f"{what} digest {value!r} {why} {what}s in prefix {prefix!r}")
        return matches[0]

    def scopes_of_model(self, prefix: str, model: str) -> list[str]:
        """Scope digests whose entries name ``model`` (keys.model_label of the raw scope,
        stored with each entry; entries stored without it match no model)."""
        return sorted({s.scope for s in self.summary(prefix).scopes if s.model == model})

    def matching(self, prefix: str, scope_keys: Optional[Sequence[str]], ns_key: Optional[str]) -> int:
        """Entries of ``prefix`` a clear of these scope digests (None: all) and namespace would delete."""
        return sum(s.entries for s in self.summary(prefix).scopes
                   if (scope_keys is None or s.scope in scope_keys) and ns_key in (None, s.ns))

    def clear(self, prefix: str, scope_keys: Optional[Sequence[str]], ns_key: Optional[str]) -> int:
        """Delete the matching entries from every tier; returns how many entries went."""
        before = self.matching(prefix, scope_keys, ns_key)
        _store, entries = self._open(prefix)
        for scope_key in (None,) if scope_keys is None else scope_keys:
            entries.clear(scope_key, ns_key)
        return before - self.matching(prefix, scope_keys, ns_key)


def traffic(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The traffic counters every engine kept for a cache, added up: lookups, hits and
    misses, outcomes per tier, refusals by reason, errors, hit rate (one row per engine;
    written at its release and every 1,000 lookups)."""
    out: dict[str, Any] = {"engines": len(rows), "lookups": 0, "hits": 0, "misses": 0, "updates": 0, "bypassed": 0,
                           "tiers": {}, "refusals": {}, "errors": {}}
    for row in rows:
        for k in ("lookups", "hits", "misses", "updates", "bypassed"):
            out[k] += int(row.get(k, 0) or 0)
        for tier, outcomes in (row.get("tiers") or {}).items():
            mine = out["tiers"].setdefault(tier, {})
            for outcome, n in outcomes.items():
                mine[outcome] = mine.get(outcome, 0) + int(n)
        for group in ("refusals", "errors"):
            for k, n in (row.get(group) or {}).items():
                out[group][k] = out[group].get(k, 0) + int(n)
    out["hit_rate"] = out["hits"] / out["lookups"] if out["lookups"] else None
    return out


def digest_of(raw: Optional[str]) -> Optional[str]:
    """How a raw scope or namespace string is stored (None stays None)."""
    return None if raw is None else scope_digest(raw)


def bytes_human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


def when(ts: Optional[float]) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


__all__ = ["CacheDirectory", "CacheDirectoryError", "PrefixSummary", "ScopeSummary", "check_cache_directory",
           "size_on_disk", "digest_of", "KNOWN_NAMESPACES", "bytes_human", "when"]
