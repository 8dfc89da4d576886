"""Vectors Chroma stores but its HNSW index cannot return: finding them, and serving them anyway.

Why this exists (issue 14, measured with chromadb 1.5.9; benchmarks/crash_repro.py):
an HNSW graph can hold a vector that no search reaches -- it has outgoing links but
every node that linked to it pruned that link when its own list filled up (hnswlib
issues #352 and #522). Chroma then reports the row in ``count()`` and ``get()`` (the
SQLite store) while ``query()`` never returns it, not even for its own vector or with
``ids=[it]``: the entry is lost to semantic lookup. It is not a durability bug (the
vector is there: ``get(include=["embeddings"])`` reads it from the index), and not tied
to SIGKILL: an embedded Chroma rebuilds the graph from its SQLite log on every open
until ``hnsw:sync_threshold`` (1000) writes in one process persist it, so each open,
clean or not, draws a new graph -- which is why a check after a kill sometimes failed
and a rerun passed. Once persisted, an unreachable vector stays unreachable.

Re-inserting such a vector is not enough in general: the same geometry prunes it
again (the deterministic case in tests/unit/test_crash_recovery.py stays unreachable
after an upsert and after a delete + upsert). So a vector still unreachable after one
re-insert is *pinned*: :class:`PinnedCollection` scores the pinned rows exactly on every
query and merges them into the index's answer. There are a handful at most, so this
costs one small ``get`` per query while any exist.

A vector can also lose its last inbound link later, when other vectors are inserted
near it (the deterministic case is reachable right after its own insert): checking a
write when it happens is not enough, only re-checking the collection is.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from .schema import COLLECTION_DIM, VECTOR_TIERS

log = logging.getLogger(__name__)

__all__ = ["VECTOR_TIERS", "INDEX_CHECK_MODES", "IndexCheck", "OpenMarkers", "PinnedCollection", "PinnedIds",
           "default_check_index", "finds_own_vector", "repair", "unreachable_ids"]

_BATCH = 256  # rows per get/upsert while repairing
_PROCESS_TOKEN = uuid.uuid4().hex  # tells this process from an earlier one that had the same pid

# When to check the vector indexes on open: "after_crash" (a marker outlived its process;
# persistent stores only), "always" (every open, any mode) or "never".
INDEX_CHECK_MODES = ("after_crash", "always", "never")


def default_check_index(mode: str) -> str:
    """``"always"`` for a persistent or server store: vectors are lost without a crash too
    (by the batch that built the store, later inserts, the log replay of a clean open). With
    "after_crash", 8 of 40 opens served a lost vector, each an open with no crash to detect;
    with "always" 0 of 40, for a check of 0.011 s at 1k entries and 0.65 s at 100k
    (docs/operations.md, "What `after_crash` does not cover"). ``"after_crash"`` otherwise:
    an in-memory store starts empty, a client passed in may be either kind, and Chroma
    Cloud runs its own index (for these "after_crash" checks nothing: no marker)."""
    return "always" if mode in ("persistent", "server") else "after_crash"


@dataclass
class IndexCheck:
    """What checking one vector collection found and did."""

    tier: str
    rows: int = 0  # rows the store holds (count)
    unreachable: list[str] = field(default_factory=list)  # rows an exhaustive query did not return
    reinserted: list[str] = field(default_factory=list)  # found again after one re-insert
    pinned: list[str] = field(default_factory=list)  # still unreachable: served by exact scoring (all, old too)
    unreadable: list[str] = field(default_factory=list)  # no vector to re-insert (not in the index at all)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------- finding unreachable rows
def _probe_vector(col: Any) -> Optional[list[float]]:
    dim = (col.metadata or {}).get(COLLECTION_DIM)
    if dim:
        return [1.0 / float(dim) ** 0.5] * int(dim)
    got = col.get(limit=1, include=["embeddings"])
    emb = got.get("embeddings")
    return None if emb is None or len(emb) == 0 else [float(x) for x in emb[0]]


def unreachable_ids(col: Any) -> tuple[int, list[str]]:
    """(rows stored, ids an exhaustive query does not return).

    A query with ``n_results`` = row count makes HNSW's beam as wide as the collection,
    so the search visits every node linked from where it lands: what it leaves out has
    no path to it. One count and one query; the ids are listed only when some are missing.
    """
    rows = int(col.count())
    if not rows:
        return 0, []
    probe = _probe_vector(col)
    if probe is None:
        return rows, []
    found = col.query(query_embeddings=[probe], n_results=rows, include=[])["ids"][0]
    if len(found) >= rows:
        return rows, []
    seen = set(found)
    return rows, [i for i in col.get(include=[])["ids"] if i not in seen]


def finds_own_vector(col: Any, row_id: str, embedding: Any) -> bool:
    """True when a query for the row's own vector, restricted to that id, returns it."""
    res = col.query(query_embeddings=[list(map(float, embedding))], n_results=1, ids=[row_id], include=[])
    return bool(res["ids"] and row_id in res["ids"][0])


def _read_rows(col: Any, ids: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Embedding, metadata and document of each id; ids whose vector cannot be read."""
    rows: dict[str, Any] = {}
    unreadable: list[str] = []
    for s in range(0, len(ids), _BATCH):
        part = ids[s:s + _BATCH]
        try:
            got = col.get(ids=part, include=["embeddings", "metadatas", "documents"])
        except Exception:  # one id missing from the index fails the whole batch: go one by one
            got = None
        if got is None:
            for i in part:
                try:
                    one = col.get(ids=[i], include=["embeddings", "metadatas", "documents"])
                except Exception as exc:
                    log.debug("vector of %s unreadable: %s", i, exc)
                    unreadable.append(i)
                    continue
                for j, r in _rows_of(one).items():
                    rows[j] = r
            continue
        rows.update(_rows_of(got))
    return rows, unreadable


def _rows_of(got: Any) -> dict[str, Any]:
    out = {}
    embs = got.get("embeddings")
    metas = got.get("metadatas") or [None] * len(got["ids"])
    docs = got.get("documents") or [None] * len(got["ids"])
    for k, i in enumerate(got["ids"]):
        if embs is not None and len(embs) > k and embs[k] is not None:
            out[i] = (list(map(float, embs[k])), metas[k], docs[k])
    return out


def repair(col: Any, tier: str, pinned: frozenset[str] = frozenset()) -> IndexCheck:
    """Check one collection; re-insert each newly unreachable row once (an upsert of what
    is stored: crash-safe, the row exists before and after), check again, and pin what an
    exhaustive query still does not return. Rows already ``pinned`` are not re-inserted."""
    t0 = time.perf_counter()
    report = IndexCheck(tier)
    report.rows, report.unreachable = unreachable_ids(col)
    still = report.unreachable
    fresh = [i for i in report.unreachable if i not in pinned]
    if fresh:
        rows, _failed = _read_rows(col, fresh)
        report.unreadable = [i for i in fresh if i not in rows]  # failed, or returned without a vector
        ids = [i for i in fresh if i in rows]
        for s in range(0, len(ids), _BATCH):
            part = ids[s:s + _BATCH]
            metas = [rows[i][1] for i in part]
            docs = [rows[i][2] for i in part]
            col.upsert(ids=part, embeddings=[rows[i][0] for i in part],
                       metadatas=metas if any(m for m in metas) else None,
                       documents=docs if any(d is not None for d in docs) else None)
        if ids:
            _rows, still = unreachable_ids(col)  # the same test as the detection, not a narrower one
            # A re-insert changes the graph and can orphan another row: that one is pinned too.
            report.unreachable += [i for i in still if i not in report.unreachable]
        report.reinserted = [i for i in ids if i not in still]
    # Only rows whose vector can be read are pinned: serving them reads it.
    report.pinned = [i for i in still if i not in report.unreadable]
    report.seconds = round(time.perf_counter() - t0, 4)
    return report


# ---------------------------------------------------------------------- serving pinned rows
class PinnedIds:
    """The pinned ids of one collection: read lock-free as an immutable snapshot by
    queries, changed under a lock by checks."""

    def __init__(self) -> None:
        self._ids: frozenset[str] = frozenset()
        self._lock = threading.Lock()

    def snapshot(self) -> frozenset[str]:
        return self._ids

    def replace(self, ids: Any) -> None:
        with self._lock:
            self._ids = frozenset(ids)

    def __len__(self) -> int:
        return len(self._ids)


def _distances(space: str, q: np.ndarray, embs: np.ndarray) -> np.ndarray:
    """Chroma's (hnswlib's) distance for each row: cosine 1-cos, l2 squared, ip 1-dot."""
    if space == "cosine":
        qn = q / (np.linalg.norm(q) or 1.0)
        en = embs / np.maximum(np.linalg.norm(embs, axis=1, keepdims=True), 1e-30)
        return 1.0 - en @ qn
    if space == "ip":
        return 1.0 - embs @ q
    return ((embs - q) ** 2).sum(axis=1)


class PinnedCollection:
    """A Chroma collection whose ``query`` also scores its pinned rows exactly.

    Everything else is the collection itself. Pinned rows obey the same ``where``,
    ``where_document`` and ``ids`` filters (Chroma evaluates them in a ``get``), are
    merged by distance and cut to ``n_results``; a row the index returned is not
    returned twice.
    """

    def __init__(self, collection: Any, pinned: PinnedIds,
                 on_write: Optional[Callable[[], None]] = None) -> None:
        self._col = collection
        self.pinned = pinned  # shared with the store: a later check updates it
        self._on_write = on_write  # the store's periodic re-check (check_every_writes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._col, name)

    def upsert(self, *args: Any, **kw: Any) -> Any:
        out = self._col.upsert(*args, **kw)
        if self._on_write is not None:
            self._on_write()
        return out

    def add(self, *args: Any, **kw: Any) -> Any:
        out = self._col.add(*args, **kw)
        if self._on_write is not None:
            self._on_write()
        return out

    def query(self, query_embeddings: Any = None, *, n_results: int = 10, where: Any = None,
              where_document: Any = None, ids: Any = None,
              include: Any = ("metadatas", "documents", "distances"), **kw: Any) -> Any:
        asked = list(include)
        inner = asked if "distances" in asked else [*asked, "distances"]  # merging needs them
        res = self._col.query(query_embeddings=query_embeddings, n_results=n_results, where=where,
                              where_document=where_document, ids=ids, include=inner, **kw)
        out = {k: (list(v) if isinstance(v, (list, tuple, np.ndarray)) else v) for k, v in dict(res).items()}
        pinned = self.pinned.snapshot()
        candidates = sorted(pinned if ids is None else pinned & set(ids))
        side = None
        if candidates and query_embeddings is not None:
            extra = [x for x in ("metadatas", "documents") if x in asked]
            side = self._col.get(ids=candidates, where=where, where_document=where_document,
                                 include=["embeddings", *extra])
        if side is not None and side["ids"]:
            self._merge(out, query_embeddings, side, inner, n_results)
        if "distances" not in asked:
            out["distances"] = None
        if "included" in out:
            out["included"] = asked
        return out

    def _merge(self, out: dict[str, Any], queries: Any, side: Any, fields_in: list[str], n_results: int) -> None:
        space = str((self._col.metadata or {}).get("hnsw:space", "l2"))
        embs = np.asarray(side["embeddings"], dtype=np.float64)
        fields = [f for f in ("distances", "metadatas", "documents", "embeddings", "uris")
                  if f in fields_in and out.get(f) is not None]
        none = [None] * len(side["ids"])
        side_metas, side_docs = side.get("metadatas") or none, side.get("documents") or none
        for qi, q in enumerate(queries):
            dist = _distances(space, np.asarray(q, dtype=np.float64), embs)
            got = out["ids"][qi]
            rows = [(float(out["distances"][qi][k]), i, {f: out[f][qi][k] for f in fields})
                    for k, i in enumerate(got)]
            have = set(got)
            for k, i in enumerate(side["ids"]):
                if i not in have:
                    vals = {"distances": float(dist[k]), "embeddings": side["embeddings"][k], "uris": None,
                            "metadatas": side_metas[k], "documents": side_docs[k]}
                    rows.append((float(dist[k]), i, {f: vals[f] for f in fields}))
            rows.sort(key=lambda r: r[0])
            rows = rows[:n_results]
            out["ids"][qi] = [r[1] for r in rows]
            for f in fields:
                out[f][qi] = [r[2][f] for r in rows]


# ---------------------------------------------------------------------- unclean-shutdown markers
def _start_time(pid: int) -> Optional[str]:
    """The kernel's start time of a process (Linux), to tell a reused pid from the original."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]  # field 22 counted from the pid


def _alive(owner: dict[str, Any]) -> bool:
    pid = int(owner.get("pid", 0))
    if pid <= 0:  # unreadable marker: its writer died while writing it
        return False
    if pid == os.getpid():
        return owner.get("token") == _PROCESS_TOKEN  # another store in this very process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    except (OSError, ValueError):
        return False
    started = owner.get("start")
    return started is None or _start_time(pid) in (None, started)


class OpenMarkers:
    """One file per open store in its persist directory, removed by a clean close.

    A marker whose process is gone means that process did not close its store: the
    next open checks the index. Markers are per collection prefix, so stores with other
    prefixes in the same directory are not checked for each other.
    """

    def __init__(self, directory: str, prefix: str) -> None:
        self.directory = Path(directory)
        self.stem = f".mlc-open-{prefix}-"
        self.path: Optional[Path] = None

    def left_behind(self) -> list[Path]:
        out = []
        for p in self.directory.glob(self.stem + "*"):
            if p == self.path:
                continue
            try:
                owner = json.loads(p.read_text() or "{}")
            except (OSError, ValueError):
                owner = {}  # cut short by the crash it records
            if not _alive(owner):
                out.append(p)
        return out

    def create(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()
        path = self.directory / f"{self.stem}{pid}-{uuid.uuid4().hex[:8]}"
        with open(path, "w") as f:
            json.dump({"pid": pid, "start": _start_time(pid), "token": _PROCESS_TOKEN}, f)
            f.flush()
            os.fsync(f.fileno())  # a marker lost to a power cut would skip the check it asks for
        self.path = path

    @staticmethod
    def discard(paths: list[Path]) -> None:
        for p in paths:
            try:
                p.unlink()
            except FileNotFoundError:
                pass

    def remove(self) -> None:
        if self.path is not None:
            self.discard([self.path])
            self.path = None
