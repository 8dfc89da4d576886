"""The entry store: the only module that speaks Chroma (through :class:`ChromaStore`).

It owns the schema — collections, ids, metadata keys — and the crash-safe order of
writes and deletes; policy (which tier, which threshold, what to evict) lives elsewhere.

Schema (version :data:`SCHEMA_VERSION`, metadata key ``v``):

* ``exact``: one row per entry, id = the entry id (the L0.5 key), document = the
  response as JSON, metadata = :class:`EntryMeta`.
* ``l1`` and ``l2_prompt``: one row per entry, id = the entry id, embedding = the text
  (prompt) vector, metadata = the entry's keys + ``part`` (its partition).
* ``l2_image``: one row per image of an entry, id = ``"{entry_id}#{i}"``, metadata as
  above + ``idx`` and ``entry_id``.

Writes go response first, vectors last (:data:`WRITE_ORDER`) and deletes vectors first
(:data:`DELETE_ORDER`), so an interrupted write or delete never leaves a vector whose
response is missing in a way a lookup could serve: such an orphan is a counted miss
and is removed when met.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from .stats import EngineStats
from .storage import ChromaStore

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
NO_EXPIRY = 1e18
WRITE_ORDER = ("exact", "l1", "l2_image", "l2_prompt")  # response first, vectors last
DELETE_ORDER = ("l2_image", "l2_prompt", "l1", "exact")  # vectors first, response last
TEXT_META_CHARS = 4096
ANSWER_META_CHARS = 8192
# Unfiltered ANN first (cost independent of how many entries other scopes hold), then a
# wider one, then a query filtered on the partition inside Chroma: (filtered, k).
SEARCH_STEPS: tuple[tuple[bool, int], ...] = ((False, 16), (False, 256), (True, 256))
FETCH_BATCH = 16


def answer_of(payload: Any) -> str:
    """The answer text of an engine-level payload when the caller gave none: a string
    itself, the ``"text"`` of a ``{"text": ...}`` payload, else its canonical JSON."""
    if isinstance(payload, str):
        return payload
    if isinstance(payload, dict) and isinstance(payload.get("text"), str):
        return payload["text"]
    return json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)


def image_row_id(entry_id: str, i: int) -> str:
    return f"{entry_id}#{i}"


def _clip(text: str, n: int) -> str:
    return text[:n].encode("utf-8", "replace").decode("utf-8")


@dataclass
class EntryKeys:
    """The exact keys an entry is stored under (every tier's row carries them)."""

    scope: str
    ns: str
    ctx: str
    imgs: str
    n_images: int
    expires_at: float = NO_EXPIRY

    def metadata(self, **extra: Any) -> dict[str, Any]:
        return dict(asdict(self), v=SCHEMA_VERSION, **extra)


@dataclass
class EntryMeta:
    """Metadata of an exact-tier row: keys, timestamps, the prompt and answer texts."""

    keys: EntryKeys
    created_at: float
    last_access: float
    text: Optional[str] = None  # the prompt (None when store_prompts=False)
    answer: Optional[str] = None  # the answer text the verifier compares

    def to_chroma(self) -> dict[str, Any]:
        meta = self.keys.metadata(created_at=self.created_at, last_access=self.last_access)
        if self.text is not None:
            meta["text"] = _clip(self.text, TEXT_META_CHARS)
        if self.answer is not None:
            meta["answer"] = _clip(self.answer, ANSWER_META_CHARS)
        return meta


@dataclass
class NewEntry:
    """Everything one update writes: the response and each tier's vectors (None = not indexed)."""

    entry_id: str
    document: str  # the response payload as JSON
    meta: EntryMeta
    partitions: dict[str, Any]
    text_vec: Optional[np.ndarray] = None
    text_model: str = ""
    image_vecs: Optional[np.ndarray] = None
    image_model: str = ""
    prompt_vec: Optional[np.ndarray] = None
    prompt_model: str = ""


@dataclass
class StoredEntry:
    payload: Any
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> Optional[str]:
        return self.meta.get("text")

    @property
    def answer(self) -> str:
        """The stored answer text (entries written before it was stored: derived from the payload)."""
        a = self.meta.get("answer")
        return a if isinstance(a, str) else answer_of(self.payload)


# What fetch() says of an entry it cannot serve.
Missing = str  # "absent" | "expired" | "corrupt"


class EntryStore:
    """Entries in Chroma: put, live get, neighbours, vectors, delete, clear, count."""

    def __init__(self, store: ChromaStore, stats: EngineStats,
                 on_deleted: Optional[Callable[[list[str]], None]] = None) -> None:
        self.store = store
        self._stats = stats
        self._on_deleted = on_deleted  # whatever else tracks entries forgets them (access log, verifier)

    # ------------------------------------------------------------------ writes
    def put(self, e: NewEntry) -> None:
        """Write one entry in :data:`WRITE_ORDER` (each write a labelled storage call)."""
        keys = e.meta.keys
        self.store.call("upsert exact", lambda: self.store.collection("exact").upsert(
            ids=[e.entry_id], embeddings=[ChromaStore.dummy_vector()], documents=[e.document],
            metadatas=[e.meta.to_chroma()]))
        if e.text_vec is not None:
            vec = e.text_vec
            self.store.call("upsert l1", lambda: self.store.collection("l1", dim=len(vec), model=e.text_model).upsert(
                ids=[e.entry_id], embeddings=[vec.tolist()], metadatas=[keys.metadata(part=e.partitions["l1"])]))
        if e.image_vecs is not None and e.prompt_vec is not None:
            imgs, prompt = e.image_vecs, e.prompt_vec
            n = len(imgs)
            self.store.call("upsert l2_image", lambda: self.store.collection(
                "l2_image", dim=int(imgs.shape[1]), model=e.image_model).upsert(
                ids=[image_row_id(e.entry_id, i) for i in range(n)],
                embeddings=[v.tolist() for v in imgs],
                metadatas=[keys.metadata(idx=i, entry_id=e.entry_id, part=e.partitions["l2_image"][i])
                           for i in range(n)]))
            self.store.call("upsert l2_prompt", lambda: self.store.collection(
                "l2_prompt", dim=len(prompt), model=e.prompt_model).upsert(
                ids=[e.entry_id], embeddings=[prompt.tolist()],
                metadatas=[keys.metadata(part=e.partitions["l2_prompt"])]))

    def delete(self, ids: Sequence[str]) -> None:
        """Delete entries from every tier in :data:`DELETE_ORDER`."""
        ids = list(ids)
        if not ids:
            return
        for tier in DELETE_ORDER:
            if tier == "l2_image":
                self.store.call("delete l2_image", lambda: self.store.collection("l2_image").delete(
                    where={"entry_id": {"$in": ids}}))
            else:
                self.store.call(f"delete {tier}", lambda t=tier: self.store.collection(t).delete(ids=ids))
        if self._on_deleted is not None:
            self._on_deleted(ids)

    def clear(self, scope_key: Optional[str] = None, ns_key: Optional[str] = None) -> None:
        """Delete every entry, or those of one scope and/or namespace (digests)."""
        clauses: list[dict[str, Any]] = []
        if scope_key is not None:
            clauses.append({"scope": scope_key})
        if ns_key is not None:
            clauses.append({"ns": ns_key})
        where: dict[str, Any] = ({"v": SCHEMA_VERSION} if not clauses
                                 else clauses[0] if len(clauses) == 1 else {"$and": clauses})
        for tier in DELETE_ORDER:
            self.store.call(f"clear {tier}", lambda t=tier: self.store.collection(t).delete(where=where))

    def write_last_access(self, pending: dict[str, float]) -> None:
        """Persist buffered last-access times (never moving one backwards)."""
        ids = list(pending)
        if not ids:
            return
        res = self.store.call("get", lambda: self.store.collection("exact").get(ids=ids, include=["metadatas"]))
        metas = []
        for eid, meta in zip(res["ids"], res["metadatas"]):
            m = dict(meta or {})
            m["last_access"] = max(float(m.get("last_access", 0.0)), pending[eid])
            metas.append(m)
        if res["ids"]:
            self.store.call("update", lambda: self.store.collection("exact").update(
                ids=list(res["ids"]), metadatas=metas))

    # ------------------------------------------------------------------ reads
    def fetch(self, entry_ids: Sequence[str], now: float) -> dict[str, Union[StoredEntry, Missing]]:
        """The live entries among ``entry_ids`` in one storage call; expired and unreadable
        ones are deleted on the way and reported as "expired" / "corrupt"."""
        ids = list(dict.fromkeys(entry_ids))
        res = self.store.call(
            "get", lambda: self.store.collection("exact").get(ids=ids, include=["documents", "metadatas"]))
        out: dict[str, Union[StoredEntry, Missing]] = {eid: "absent" for eid in ids}
        gone: list[str] = []
        for eid, doc, meta in zip(res["ids"], res["documents"], res["metadatas"]):
            meta = meta or {}
            if float(meta.get("expires_at", NO_EXPIRY)) <= now:
                self._stats.incr("expired")
                gone.append(eid)
                out[eid] = "expired"
                continue
            try:
                out[eid] = StoredEntry(json.loads(doc), meta)
            except (TypeError, ValueError):
                log.warning("entry %s has an unreadable response; removing it", eid[:12])
                self._stats.error("corrupt_entry")
                gone.append(eid)
                out[eid] = "corrupt"
        if gone:
            self.delete(gone)
        return out

    def exists(self, entry_id: str) -> bool:
        res = self.store.call("get", lambda: self.store.collection("exact").get(ids=[entry_id], include=[]))
        return bool(res["ids"])

    def count(self) -> int:
        return int(self.store.call("count", lambda: self.store.collection("exact").count()))

    def expired_ids(self, now: float) -> list[str]:
        res = self.store.call("get expired", lambda: self.store.collection("exact").get(
            where={"expires_at": {"$lte": now}}, include=[]))
        return list(res["ids"])

    def all_metadata(self) -> list[tuple[str, dict[str, Any]]]:
        """(entry id, metadata) of every entry: what eviction ranks."""
        res = self.store.call("get all", lambda: self.store.collection("exact").get(include=["metadatas"]))
        return [(eid, meta or {}) for eid, meta in zip(res["ids"], res["metadatas"])]

    def neighbours(self, tier: str, vec: np.ndarray, part: str, threshold: float,
                   model: str) -> tuple[list[tuple[str, float, dict[str, Any]]], bool]:
        """Rows of partition ``part`` whose similarity to ``vec`` is >= ``threshold``, best first.

        Returns (rows, complete). An unfiltered top-k whose k-th similarity is below the
        threshold already holds every row above it, so filtering it in Python is exact: a
        neighbour from another scope or tenant can neither leak (filtered out) nor hide a
        hit. When the top-k is saturated with rows above the threshold, the search widens,
        and finally runs filtered by ``part`` in Chroma. ``complete`` is False only if even
        that returned a full page above threshold.
        """
        dim = int(vec.shape[0])
        emb = [vec.tolist()]
        mine: list[tuple[str, float, dict[str, Any]]] = []
        for filtered, k in SEARCH_STEPS:
            where = {"part": part} if filtered else None

            def run(where: Any = where, k: int = k) -> Any:
                # Distances only: Chroma's metadata read costs more than the ANN search
                # (256 rows: 21 vs 2.5 ms, benchmarks/probes.py metadata), needed only above threshold.
                return self.store.collection(tier, dim=dim, model=model).query(
                    query_embeddings=emb, n_results=k, where=where, include=["distances"])

            res = self.store.call(f"query {tier}", run)
            ids = res["ids"][0] if res["ids"] else []
            rows = [(i, float(min(1.0, 1.0 - d))) for i, d in zip(ids, res["distances"][0])]
            saturated = len(rows) >= k and rows[-1][1] >= threshold
            if saturated and not filtered:
                self._stats.incr(f"search_widened_{tier}")
                continue
            above = [r for r in rows if r[1] >= threshold]
            metas = self._metadatas(tier, [i for i, _s in above]) if above else {}
            mine = [(i, s, metas[i]) for i, s in above if i in metas and metas[i].get("part") == part]
            return mine, not saturated
        return mine, False

    def _metadatas(self, tier: str, ids: list[str]) -> dict[str, dict[str, Any]]:
        res = self.store.call(f"get {tier}", lambda: self.store.collection(tier).get(ids=ids, include=["metadatas"]))
        return {i: (m or {}) for i, m in zip(res["ids"], res["metadatas"])}

    def vectors(self, tier: str, ids: list[str]) -> dict[str, np.ndarray]:
        """Stored vectors of a tier's rows (absent rows are left out)."""
        res = self.store.call(f"get {tier}", lambda: self.store.collection(tier).get(ids=ids, include=["embeddings"]))
        embs = res.get("embeddings")
        if embs is None:
            return {}
        return {i: np.asarray(e, dtype=np.float32) for i, e in zip(res["ids"], embs)}
