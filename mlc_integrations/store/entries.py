"""The entry store: the only module that speaks Chroma (through :class:`ChromaStore`).

It writes and reads the rows the entry schema (:mod:`.schema`: collections, ids,
metadata keys) lays out, in the schema's crash-safe order of writes and deletes; policy
(which tier, which threshold, what to evict) lives elsewhere.

Writes go response first, vectors last (:data:`WRITE_ORDER`) and deletes vectors first
(:data:`DELETE_ORDER`), so an interrupted write or delete never leaves a vector whose
response is missing in a way a lookup could serve: such an orphan is a counted miss
and is removed when met.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

import numpy as np

from ..runtime.lru import LRU
from .exact_index import DEFAULT_REVALIDATE_S, ExactIndex
from ..errors import PayloadError
from ..runtime.stats import EngineStats
from . import schema
from .census import PictureCensus
from .resident import MAX_RESIDENT_ROWS, ResidentVectors
from .crowding import Crowding
from .chroma import ChromaStore
from .schema import (ANSWER, CREATED_AT, DELETE_ORDER, ENTRY_ID, EXPIRES_AT, IDX, IMAGE_ROW_TIERS, IMGS, LAST_ACCESS, N_IMAGES, RESIDENT_TIERS,
                     MODEL, NS, PART, SCHEMA_VERSION, SCOPE, TEXT, VERSION, WRITE_ORDER, image_row_id, COLLECTION_TIER, COUNTERS_COLLECTION, counters_name)

if TYPE_CHECKING:
    from .writebehind import PendingEntries

log = logging.getLogger(__name__)

__all__ = ["DELETE_ORDER", "IMAGE_ROW_TIERS", "SCHEMA_VERSION", "WRITE_ORDER", "EntryKeys", "EntryMeta",
           "EntryStore", "NewEntry", "StoredEntry", "answer_of", "image_row_id", "serialize_payload"]

EXACT = schema.RESPONSE_TIER  # the response rows
EVIDENCE_TIER = next(t.name for t in schema.TIERS if t.document == schema.IMAGE_EVIDENCE)
NO_EXPIRY = 1e18
TEXT_META_CHARS = 4096
ANSWER_META_CHARS = 8192
# Unfiltered ANN first (cost independent of how many entries other scopes hold), then a
# wider one, then a query filtered on the partition inside Chroma: (filtered, k).
SEARCH_STEPS: tuple[tuple[bool, int], ...] = ((False, 16), (False, 256), (True, 256))
FETCH_BATCH = 16
EXPLAIN_ROWS = 3  # rows under the floor read to say how close a miss came
def answer_of(payload: Any) -> str:
    """The answer text of an engine-level payload when the caller gave none: a string
    itself, the ``"text"`` of a ``{"text": ...}`` payload, else its canonical JSON."""
    if isinstance(payload, str):
        return payload
    if isinstance(payload, dict) and isinstance(payload.get("text"), str):
        return payload["text"]
    return json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)


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

    def metadata(self, extra: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        return {**asdict(self), VERSION: SCHEMA_VERSION, **(extra or {})}


@dataclass
class EntryMeta:
    """Metadata of an exact-tier row: keys, timestamps, the prompt and answer texts."""

    keys: EntryKeys
    created_at: float
    last_access: float
    text: Optional[str] = None  # the prompt (None when store_prompts=False)
    answer: Optional[str] = None  # the answer text the verifier compares
    model: str = ""  # the model the scope names (keys.model_label): `mlc clear --model`, `mlc scopes`

    def to_chroma(self) -> dict[str, Any]:
        meta = self.keys.metadata({CREATED_AT: self.created_at, LAST_ACCESS: self.last_access})
        if self.model:
            meta[MODEL] = self.model
        if self.text is not None:
            meta[TEXT] = _clip(self.text, TEXT_META_CHARS)
        if self.answer is not None:
            meta[ANSWER] = _clip(self.answer, ANSWER_META_CHARS)
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
    static_vec: Optional[np.ndarray] = None  # the L1 pre-screen's vector (static_text.py)
    static_model: str = ""
    # Write-behind: the sentence model runs in the writer when the lookup was pre-screened.
    embed_text: Optional[Callable[[], np.ndarray]] = None
    image_vecs: Optional[np.ndarray] = None
    image_model: str = ""
    prompt_vec: Optional[np.ndarray] = None
    prompt_model: str = ""
    fprint_vecs: Optional[np.ndarray] = None
    fprint_model: str = ""
    # Write-behind: the image encoder runs in the writer (or when a lookup needs the vectors).
    embed_images: Optional[Callable[[], np.ndarray]] = None
    # Image-change descriptors (one text per image), computed with the image vectors when deferred.
    image_descs: Optional[list[str]] = None
    describe_images: Optional[Callable[[], list[str]]] = None

    # Deferred values are computed once, by whichever thread asks first (the writer, or a
    # lookup that found this pending entry near its request); the others wait for it. One
    # lock per value: a lookup that needs a pending picture's descriptor (~1 ms) must not wait
    # for the writer's image tower run (10-20 ms) on the same entry.
    _compute_locks: dict[str, threading.Lock] = field(
        default_factory=lambda: {"embed_text": threading.Lock(), "embed_images": threading.Lock(),
                                 "describe_images": threading.Lock()}, repr=False, compare=False)

    @property
    def has_l1(self) -> bool:
        return self.text_vec is not None or self.embed_text is not None

    @property
    def has_l2(self) -> bool:
        return self.prompt_vec is not None and (self.image_vecs is not None or self.embed_images is not None)

    def has(self, family: str) -> bool:
        """Whether this entry writes the tiers of ``family`` (text, or image + prompt)."""
        return self.has_l1 if family == schema.TEXT_FAMILY else self.has_l2

    def _computed(self, value_attr: str, deferred_attr: str) -> Any:
        if getattr(self, value_attr) is None and getattr(self, deferred_attr) is not None:
            with self._compute_locks[deferred_attr]:
                compute = getattr(self, deferred_attr)
                if getattr(self, value_attr) is None and compute is not None:
                    setattr(self, value_attr, compute())
                    setattr(self, deferred_attr, None)
        return getattr(self, value_attr)

    def text_vector(self) -> Optional[np.ndarray]:
        """The text vector, computed now if it was deferred (once, whoever asks)."""
        return self._computed("text_vec", "embed_text")

    def image_vectors(self) -> Optional[np.ndarray]:
        """The image vectors, computed now if they were deferred (once, whoever asks)."""
        return self._computed("image_vecs", "embed_images")

    def vector_of(self, tier: str) -> Any:
        """This entry's vector (image tiers: its array of per-image vectors) in ``tier``, or
        None when the entry writes no row there; a deferred one is computed now."""
        t = schema.BY_NAME[tier]
        if not self.has(t.family):
            return None
        return self._computed(t.field, t.deferred) if t.deferred else getattr(self, t.field)

    def partition_of(self, tier: str) -> Any:
        """The partition key(s) of this entry's rows in ``tier`` (a list for image tiers)."""
        return self.partitions[schema.BY_NAME[tier].partition]

    def in_partition(self, tier: str, part: str) -> bool:
        """Whether some row of this entry in ``tier`` belongs to partition ``part`` -- known
        without computing any vector."""
        p = self.partition_of(tier)
        return part in p if isinstance(p, list) else p == part

    def image_descriptors(self) -> Optional[list[str]]:
        """The image-change descriptors, computed now if they were deferred (a failure
        stores none: the entry is then verified as one written before descriptors)."""
        if self.image_descs is None and self.describe_images is not None:
            with self._compute_locks["describe_images"]:
                if self.image_descs is None and self.describe_images is not None:
                    try:
                        self.image_descs = self.describe_images()
                    except Exception as exc:  # never lose the entry over its descriptor
                        log.warning("image descriptor of %s not computed: %s", self.entry_id[:12], exc)
                    self.describe_images = None
        return self.image_descs

    def rows(self, tier: str) -> list[tuple[str, np.ndarray, dict[str, Any]]]:
        """(row id, vector, row metadata beyond the entry keys) of this entry in ``tier``."""
        t = schema.BY_NAME[tier]
        vec = self.vector_of(tier)
        if vec is None:
            return []
        part = self.partition_of(tier)
        if t.rows == schema.ROW_PER_IMAGE:
            return [(image_row_id(self.entry_id, i), v, {PART: part[i], ENTRY_ID: self.entry_id, IDX: i})
                    for i, v in enumerate(vec)]
        return [(self.entry_id, vec, {PART: part})]


@dataclass
class StoredEntry:
    payload: Any
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> Optional[str]:
        return self.meta.get(TEXT)

    @property
    def answer(self) -> str:
        """The stored answer text (entries written before it was stored: derived from the payload)."""
        a = self.meta.get(ANSWER)
        return a if isinstance(a, str) else answer_of(self.payload)


def _rows(group: Sequence[NewEntry], tier: str) -> tuple[list[str], list[list[float]], list[dict[str, Any]], list[str]]:
    """A vector tier's rows of several entries: ids, embeddings, metadata, documents
    (the image-change descriptors of the evidence tier's rows, ``""`` where there is none)."""
    ids: list[str] = []
    vecs: list[list[float]] = []
    metas: list[dict[str, Any]] = []
    docs: list[str] = []
    evidence = tier == EVIDENCE_TIER
    for e in group:
        descs = (e.image_descriptors() if evidence else None) or []
        for i, (rid, v, extra) in enumerate(e.rows(tier)):
            ids.append(rid)
            vecs.append(v.tolist())
            metas.append(e.meta.keys.metadata(extra))
            docs.append(descs[i] if i < len(descs) else "")
    return ids, vecs, metas, docs


def _with_pending(rows: list[tuple[str, float, dict[str, Any], Optional[str]]],
                  pending: list[tuple[str, float, dict[str, Any]]]) -> list[tuple[str, float, dict[str, Any], Optional[str]]]:
    """Stored rows (id, similarity, metadata, document) plus pending ones, best first (a
    pending row is the newer version of a stored one with its id)."""
    if not pending:
        return rows
    newer = {rid for rid, _s, _m in pending}
    return sorted([r for r in rows if r[0] not in newer] + [(rid, s, m, None) for rid, s, m in pending],
                  key=lambda r: -r[1])


def _newest(rows: list[tuple[str, float, dict[str, Any]]],
            pending: list[tuple[str, float, dict[str, Any]]]) -> list[tuple[str, float, dict[str, Any]]]:
    """Stored rows plus pending ones (a pending row is the newer version), best first."""
    if not pending:
        return rows
    newer = {rid for rid, _s, _m in pending}
    return sorted([r for r in rows if r[0] not in newer] + pending, key=lambda r: -r[1])


# What fetch() says of an entry it cannot serve.
Missing = str  # "absent" | "expired" | "corrupt"


# Entries the warm start reads into the exact index (the rest are found in the store on first use).
PRELOAD_ENTRIES = 10_000


class EntryStore:
    """Entries in Chroma: put, live get, neighbours, vectors, delete, clear, count."""

    def __init__(self, store: ChromaStore, stats: EngineStats,
                 on_deleted: Optional[Callable[[list[str]], None]] = None, *,
                 image_evidence: str = "memory", evidence_memo_items: int = 4096,
                 sole_writer: Optional[Callable[[], bool]] = None, vectors_in_memory: int = MAX_RESIDENT_ROWS) -> None:
        """``image_evidence``: where the image-change descriptors live (a 96-px grey
        picture and a 24-px colour map: verify/image_change/descriptor.py). ``"memory"`` (default):
        in this process only, bounded (``evidence_memo_items`` pictures, ~10 kB each),
        never at rest -- an entry whose descriptor is not here (another process's, from
        before a restart, or evicted) is not reused through L2 (a counted refusal).
        ``"store"``: also in the l2_image rows' documents, at rest in Chroma (the engine's
        default for persistent and shared caches)."""
        if image_evidence not in ("memory", "store"):
            raise ValueError(f"image_evidence must be 'memory' or 'store', not {image_evidence!r}")
        self.store = store
        self._stats = stats
        self.crowding = Crowding()
        self._on_deleted = on_deleted  # whatever else tracks entries forgets them (access log, verifier)
        # Write-behind (writebehind.py): entries accepted but not yet written; reads see them first.
        self.pending: "Optional[PendingEntries]" = None  # entries accepted, not yet written (attach_pending)
        self.evidence_at_rest = image_evidence == "store"
        self._evidence: "LRU[str, str]" = LRU(evidence_memo_items)  # l2_image row id -> descriptor text
        # Exact hits from memory (exact_index.py); re-read after a bound where others may write.
        shared = store.mode in ("server", "client")
        self.hot = ExactIndex(revalidate_s=DEFAULT_REVALIDATE_S if shared else None)
        # Which picture sets are stored, where this process is the only writer (census.py).
        self.census = PictureCensus(sole_writer if sole_writer is not None else (lambda: False))
        if store.mode == "ephemeral":  # collections of its own, created empty (chroma.py)
            self.census.start_empty()
        # The small vector tiers, answered from memory while the census is complete (resident.py).
        self.resident = ResidentVectors(lambda: self.census.complete, max_rows=vectors_in_memory,
                                        possible=lambda: vectors_in_memory > 0 and self.census.may_complete)

    def attach_pending(self, pending: "PendingEntries") -> None:
        """Serve lookups from the write-behind queue too (its entries are the newest)."""
        self.pending = pending

    # ------------------------------------------------------------------ writes
    def put(self, e: NewEntry) -> None:
        """Write one entry now (see :meth:`put_many`)."""
        self.put_many([e])

    def put_many(self, batch: Sequence[NewEntry]) -> None:
        """Write entries in :data:`WRITE_ORDER`: every response row first, then each vector
        tier once for the whole batch (one labelled storage call per tier and model)."""
        batch = list({e.entry_id: e for e in batch}.values())  # one row per id and call
        if not batch:
            return
        for e in batch:
            for tier in WRITE_ORDER:
                t = schema.BY_NAME[tier]
                if t.deferred:
                    e.vector_of(tier)  # a deferred encoding runs before anything is written
        metas = [e.meta.to_chroma() for e in batch]
        self.store.call(f"upsert {EXACT}", lambda: self.store.collection(EXACT).upsert(
            ids=[e.entry_id for e in batch], embeddings=[ChromaStore.dummy_vector()] * len(batch),
            documents=[e.document for e in batch], metadatas=metas))
        for e, meta in zip(batch, metas):
            self.hot.put(e.entry_id, e.document, meta)
        for tier in WRITE_ORDER:
            t = schema.BY_NAME[tier]
            if not t.vector:
                continue
            rows = [e for e in batch if e.vector_of(tier) is not None]
            for model in dict.fromkeys(getattr(e, t.model_field) for e in rows):
                group = [e for e in rows if getattr(e, t.model_field) == model]
                ids, vecs, metas, docs = _rows(group, tier)
                if not ids:
                    continue
                extra = {}
                if t.document == schema.IMAGE_EVIDENCE:
                    for rid, doc in zip(ids, docs):
                        if doc:
                            self._evidence.put(rid, doc)
                    extra = {"documents": docs if self.evidence_at_rest else [""] * len(docs)}
                self.store.call(f"upsert {tier}", lambda t=tier, m=model, i=ids, v=vecs, md=metas, x=extra: self.store.collection(
                    t, dim=len(v[0]), model=m).upsert(ids=i, embeddings=v, metadatas=md, **x))
                self.resident.put(tier, zip(ids, vecs, metas))  # before the write-behind queue lets the entry go

    def delete(self, ids: Sequence[str]) -> None:
        """Delete entries from every tier in :data:`DELETE_ORDER`."""
        ids = list(ids)
        if not ids:
            return
        self.hot.forget(ids)
        self.resident.forget_entries(ids)
        gone = set(ids)
        for rid in [r for r, _d in self._evidence.items() if schema.entry_of_row(r) in gone]:
            self._evidence.pop(rid)
        for tier in DELETE_ORDER:
            if tier in IMAGE_ROW_TIERS:
                self.store.call(f"delete {tier}", lambda t=tier: self.store.collection(t).delete(
                    where={ENTRY_ID: {"$in": ids}}))
            else:
                self.store.call(f"delete {tier}", lambda t=tier: self.store.collection(t).delete(ids=ids))
        if self._on_deleted is not None:
            self._on_deleted(ids)

    def clear(self, scope_key: Optional[str] = None, ns_key: Optional[str] = None) -> None:
        """Delete every entry, or those of one scope and/or namespace (digests)."""
        clauses: list[dict[str, Any]] = []
        if scope_key is not None:
            clauses.append({SCOPE: scope_key})
        if ns_key is not None:
            clauses.append({NS: ns_key})
        where: dict[str, Any] = ({VERSION: SCHEMA_VERSION} if not clauses
                                 else clauses[0] if len(clauses) == 1 else {"$and": clauses})
        for tier in DELETE_ORDER:
            self.store.call(f"clear {tier}", lambda t=tier: self.store.collection(t).delete(where=where))
        if not clauses:
            self._evidence.clear()
            self.hot.clear()
        else:
            self.hot.forget_where(lambda m: not ((scope_key is None or m.get(SCOPE) == scope_key)
                                                 and (ns_key is None or m.get(NS) == ns_key)))
        # It keeps no keys: what the store still holds (and what is written meanwhile) is read again.
        self.resident.refill(lambda: self._load_resident(pictures=True))

    def write_last_access(self, pending: dict[str, float]) -> None:
        """Persist buffered last-access times (never moving one backwards)."""
        ids = list(pending)
        if not ids:
            return
        res = self.store.call("get", lambda: self.store.collection(EXACT).get(ids=ids, include=["metadatas"]))
        metas = []
        for eid, meta in zip(res["ids"], res["metadatas"]):
            m = dict(meta or {})
            m[LAST_ACCESS] = max(float(m.get(LAST_ACCESS, 0.0)), pending[eid])
            metas.append(m)
        if res["ids"]:
            self.store.call("update", lambda: self.store.collection(EXACT).update(
                ids=list(res["ids"]), metadatas=metas))
            for eid, m in zip(res["ids"], metas):
                self.hot.update_meta(eid, m)

    # ------------------------------------------------------------------ reads
    def preload(self, limit: int = PRELOAD_ENTRIES) -> int:
        """Fill the exact index from the store (warm start), at most ``limit`` entries; how
        many. When that was every entry, the picture census is complete too."""
        res = self.store.call("get", lambda: self.store.collection(EXACT).get(
            limit=limit, include=["documents", "metadatas"]))
        for eid, doc, meta in zip(res["ids"], res["documents"], res["metadatas"]):
            if isinstance(doc, str):
                self.hot.put(eid, doc, meta or {})
        if len(res["ids"]) < limit:
            if res["ids"]:  # stored before this process: read once, held here (resident.py)
                self._load_resident(any(int((m or {}).get(N_IMAGES, 0) or 0) for m in res["metadatas"]))
            self.census.load(str((m or {}).get(IMGS, "")) for m in res["metadatas"])
        else:
            self.resident.stop()  # the census will not be complete: rows kept here would never answer
        return len(res["ids"])

    def _load_resident(self, pictures: bool) -> None:
        """Read every row of the resident tiers (the image ones only when entries have pictures)."""
        for tier in RESIDENT_TIERS:
            if schema.BY_NAME[tier].family == schema.IMAGE_FAMILY and not pictures:
                continue
            rows = self.store.call(f"get {tier}", lambda t=tier: self.store.collection(t).get(
                include=["embeddings", "metadatas"]))
            embs = rows.get("embeddings")
            if embs is not None:
                self.resident.put(tier, zip(rows["ids"], embs, [m or {} for m in rows["metadatas"]]))

    def fetch(self, entry_ids: Sequence[str], now: float) -> dict[str, Union[StoredEntry, Missing]]:
        """The live entries among ``entry_ids`` in one storage call; expired and unreadable
        ones are deleted on the way and reported as "expired" / "corrupt"."""
        out: dict[str, Union[StoredEntry, Missing]] = {}
        ids = []
        rows: list[tuple[str, Any, Any]] = []
        for eid in dict.fromkeys(entry_ids):
            p = self.pending.get(eid) if self.pending is not None else None
            if p is not None:
                if p.meta.keys.expires_at <= now:  # counted as a stored one is (the writer may not have run yet)
                    self._stats.incr("expired")
                    out[eid] = "expired"
                else:
                    out[eid] = StoredEntry(json.loads(p.document), p.meta.to_chroma())
                continue
            remembered = self.hot.get(eid)
            if remembered is not None:
                rows.append((eid, remembered[0], remembered[1]))
            else:
                ids.append(eid)
        if ids:
            res = self.store.call(
                "get", lambda: self.store.collection(EXACT).get(ids=ids, include=["documents", "metadatas"]))
            out.update({eid: "absent" for eid in ids})
            self.hot.forget(ids)  # due for a re-read: what the store says now replaces it
            for eid, doc, meta in zip(res["ids"], res["documents"], res["metadatas"]):
                rows.append((eid, doc, meta))
                if isinstance(doc, str):
                    self.hot.put(eid, doc, meta or {})
        gone: list[str] = []
        for eid, doc, meta in rows:
            meta = meta or {}
            if float(meta.get(EXPIRES_AT, NO_EXPIRY)) <= now:
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
        if self.pending is not None and self.pending.get(entry_id) is not None:
            return True
        res = self.store.call("get", lambda: self.store.collection(EXACT).get(ids=[entry_id], include=[]))
        return bool(res["ids"])

    def count(self, tier: str = EXACT) -> int:
        return int(self.store.call("count", lambda: self.store.collection(tier).count()))

    def expired_ids(self, now: float) -> list[str]:
        res = self.store.call("get expired", lambda: self.store.collection(EXACT).get(
            where={EXPIRES_AT: {"$lte": now}}, include=[]))
        return list(res["ids"])

    def write_counters(self, token: str, counters: dict[str, Any]) -> None:
        """Keep this engine's traffic counters at rest (one row per engine token)."""
        doc = json.dumps(counters, sort_keys=True)

        def run() -> Any:
            col = self.store.client.get_or_create_collection(counters_name(self.store.prefix), embedding_function=None,
                                                             metadata={COLLECTION_TIER: COUNTERS_COLLECTION})
            return col.upsert(ids=[token], embeddings=[ChromaStore.dummy_vector()], documents=[doc])

        self.store.call("write counters", run)

    def read_counters(self) -> list[dict[str, Any]]:
        """Every engine's counters kept at rest for this cache (none: an empty list)."""
        def run() -> Any:
            names = {c.name if hasattr(c, "name") else str(c) for c in self.store.client.list_collections()}
            if counters_name(self.store.prefix) not in names:
                return {"documents": []}
            return self.store.client.get_collection(counters_name(self.store.prefix), embedding_function=None).get(
                include=["documents"])

        out = []
        for doc in self.store.call("read counters", run).get("documents") or []:
            try:
                out.append(json.loads(doc))
            except (TypeError, ValueError):
                continue
        return out

    def all_metadata(self) -> list[tuple[str, dict[str, Any]]]:
        """(entry id, metadata) of every entry: what eviction ranks."""
        res = self.store.call("get all", lambda: self.store.collection(EXACT).get(include=["metadatas"]))
        return [(eid, meta or {}) for eid, meta in zip(res["ids"], res["metadatas"])]

    def neighbours(self, tier: str, vec: np.ndarray, part: str, threshold: float, model: str,
                   best_below: Optional[list[float]] = None) -> tuple[list[tuple[str, float, dict[str, Any]]], bool]:
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
        # Pending rows are read before the store: an entry the writer moves from one to the
        # other meanwhile is then seen in at least one of them.
        pending = self.pending.neighbours(tier, vec, part, threshold) if self.pending is not None else []
        k = SEARCH_STEPS[-1][1]
        held = self.resident.nearest(tier, vec, part, threshold, k)
        if held is not None:  # every row is held here (resident.py): exact, no round trip
            if best_below is not None and not held and not pending:
                best_below.extend(s for _i, s, _m, _d in self.resident.nearest(tier, vec, part, -2.0, 0) or [])
            return _newest([(i, s, m) for i, s, m, _d in held[:k]], pending), len(held) <= k
        steps = SEARCH_STEPS[-1:] if self.crowding.filtered_first(tier) else SEARCH_STEPS
        for filtered, k in steps:
            where = {PART: part} if filtered else None

            def run(where: Any = where, k: int = k) -> Any:
                # Distances only: Chroma's metadata read costs more than the ANN search
                # (256 rows: 21 vs 2.5 ms, benchmarks/probes.py metadata), needed only above threshold.
                return self.store.collection(tier, dim=dim, model=model).query(
                    query_embeddings=emb, n_results=k, where=where, include=["distances"])

            res = self.store.call(f"query {tier}", run)
            ids = res["ids"][0] if res["ids"] else []
            rows = [(i, float(min(1.0, 1.0 - d))) for i, d in zip(ids, res["distances"][0])]
            saturated = len(rows) >= k and rows[-1][1] >= threshold
            if not filtered and k == SEARCH_STEPS[0][1]:
                self.crowding.record(tier, saturated)
            if saturated and not filtered:
                self._stats.incr(f"search_widened_{tier}")
                continue
            above = [r for r in rows if r[1] >= threshold]
            metas = self._metadatas(tier, [i for i, _s in above]) if above else {}
            mine = [(i, s, metas[i]) for i, s in above if i in metas and metas[i].get(PART) == part]
            if best_below is not None and not mine and not pending and rows:
                near = rows[:EXPLAIN_ROWS]
                near_meta = self._metadatas(tier, [i for i, _s in near])
                best_below.extend(s for i, s in near if near_meta.get(i, {}).get(PART) == part)
                del best_below[1:]
            return _newest(mine, pending), not saturated
        return _newest(mine, pending), False

    def nearest(self, tier: str, vec: np.ndarray, part: str, threshold: float, model: str, k: int,
                documents: bool = False) -> tuple[list[tuple[str, float, dict[str, Any], Optional[str]]], bool]:
        """The best ``k`` rows of partition ``part`` at or above ``threshold``, best first, as
        (id, similarity, metadata, document): one ANN query that reads the metadata (and
        documents) of those ``k`` rows only, never of every row over the threshold (L2: at
        most a few candidates are ever examined). An unfiltered top-k first (its cost does
        not grow with other scopes' rows); only when that top-k is full of rows above the
        threshold from *other* partitions, one query filtered on ``part`` in Chroma.
        Returns (rows, saturated): saturated = ``k`` rows of the partition passed, so more may exist."""
        dim = int(vec.shape[0])
        emb = [vec.tolist()]
        include = ["distances", "metadatas"] + (["documents"] if documents else [])
        pending = self.pending.neighbours(tier, vec, part, threshold) if self.pending is not None else []
        mine: list[tuple[str, float, dict[str, Any], Optional[str]]] = []
        held = None if documents else self.resident.nearest(tier, vec, part, threshold, k)
        if held is not None:
            # Every row of the tier is held here: exact, and one more than asked says whether more exist.
            mine = _with_pending(held, pending)
            return mine[:k], len(mine) > k
        filtered_first = self.crowding.filtered_first(tier)
        for where in (({PART: part},) if filtered_first else (None, {PART: part})):
            def run(where: Any = where) -> Any:
                return self.store.collection(tier, dim=dim, model=model).query(
                    query_embeddings=emb, n_results=k, where=where, include=include)

            res = self.store.call(f"query {tier}", run)
            ids = res["ids"][0] if res["ids"] else []
            metas = (res.get("metadatas") or [[None] * len(ids)])[0] or [None] * len(ids)
            docs = (res.get("documents") or [[None] * len(ids)])[0] if documents else [None] * len(ids)
            # A stored row without a document reads as "" (written before descriptors); None = not read.
            rows = [(i, float(min(1.0, 1.0 - d)), m or {}, (doc if isinstance(doc, str) else "") if documents else None)
                    for i, d, m, doc in zip(ids, res["distances"][0], metas, docs or [None] * len(ids))]
            above = [r for r in rows if r[1] >= threshold]
            mine = [r for r in above if r[2].get(PART) == part]
            if where is None:
                crowded = len(above) >= k and len(mine) < k
                self.crowding.record(tier, crowded)
                if crowded:
                    self._stats.incr(f"search_filtered_{tier}")  # other partitions crowd the top-k
                    continue
            break
        mine = _with_pending(mine, pending)
        return mine[:k], len(mine) >= k

    def any_within(self, tier: str, vec: np.ndarray, part: str, threshold: float, model: str) -> bool:
        """Whether some row of partition ``part`` has similarity >= ``threshold`` to ``vec``
        (a pre-screen's question), in one round trip as a rule: pending rows first; then the
        unfiltered top 16 with their metadata -- any of them above the threshold in the
        partition answers yes, and when not all 16 are above it no other row is; only a
        top 16 saturated with other partitions' rows asks Chroma for the partition's nearest
        row (filtered, k=1: its cost grows with the partition's size, so it is the fallback)."""
        if self.pending is not None and self.pending.neighbours(tier, vec, part, threshold):
            return True
        held = self.resident.nearest(tier, vec, part, threshold, 0)
        if held is not None:
            return bool(held)
        emb = [vec.tolist()]
        col = self.store.collection(tier, dim=int(vec.shape[0]), model=model)
        if not self.crowding.filtered_first(tier):
            k = SEARCH_STEPS[0][1]
            res = self.store.call(f"query {tier}", lambda: col.query(query_embeddings=emb, n_results=k,
                                                                     include=["distances", "metadatas"]))
            dists = res["distances"][0] if res.get("distances") else []
            metas = res["metadatas"][0] if res.get("metadatas") else []
            above = [m or {} for d, m in zip(dists, metas) if 1.0 - float(d) >= threshold]
            if any(m.get(PART) == part for m in above):
                self.crowding.record(tier, False)
                return True
            crowded = len(dists) >= k and len(above) == len(dists)
            self.crowding.record(tier, crowded)
            if not crowded:
                return False  # the top k is not saturated: it holds every row above the threshold
            self._stats.incr(f"search_widened_{tier}")
        res = self.store.call(f"query {tier}", lambda: col.query(query_embeddings=emb, n_results=1,
                                                                 where={PART: part}, include=["distances"]))
        dists = res["distances"][0] if res.get("distances") else []
        return bool(dists) and 1.0 - float(dists[0]) >= threshold

    def _metadatas(self, tier: str, ids: list[str]) -> dict[str, dict[str, Any]]:
        res = self.store.call(f"get {tier}", lambda: self.store.collection(tier).get(ids=ids, include=["metadatas"]))
        return {i: (m or {}) for i, m in zip(res["ids"], res["metadatas"])}

    def missing_evidence(self) -> str:
        """Why a stored picture has no image-change evidence here, in the user's terms."""
        if not self.evidence_at_rest:
            return ("its image-change evidence is kept only in the memory of the process that stored it "
                    "(TierOptions(image_evidence='memory')) and this process does not have it; "
                    "image_evidence='store' keeps it at rest, for restarts and other workers")
        return "the stored picture has no image-change evidence (it could not be computed when it was stored)"

    def image_descriptors(self, row_ids: list[str]) -> dict[str, Optional[str]]:
        """The image-change descriptor (text) of ``l2_image`` rows ``"{entry_id}#{i}"``;
        None for a row stored without one, absent rows left out."""
        out: dict[str, Optional[str]] = {}
        rest = []
        for rid in row_ids:
            eid, _, idx = rid.rpartition("#")
            p = self.pending.get(eid) if self.pending is not None else None
            if p is None:
                remembered = self._evidence.get(rid)
                if remembered is not None:
                    out[rid] = remembered
                else:
                    rest.append(rid)
                continue
            descs = p.image_descriptors() or []
            out[rid] = descs[int(idx)] if int(idx) < len(descs) and descs[int(idx)] else None
        if rest and not self.evidence_at_rest:
            out.update({rid: None for rid in rest})  # never stored at rest: not this process's picture
            rest = []
        if rest:
            res = self.store.call(f"get {EVIDENCE_TIER}", lambda: self.store.collection(EVIDENCE_TIER).get(
                ids=rest, include=["documents"]))
            for rid, doc in zip(res["ids"], res.get("documents") or [None] * len(res["ids"])):
                out[rid] = doc if isinstance(doc, str) and doc else None
        return out

    def vectors(self, tier: str, ids: list[str]) -> dict[str, np.ndarray]:
        """Stored (or pending) vectors of a tier's rows; absent rows are left out."""
        out = self.pending.vectors(tier, ids) if self.pending is not None and len(self.pending) else {}
        rest = [i for i in ids if i not in out]
        if not rest:
            return out
        held = self.resident.vectors(tier, rest)
        if held is not None:  # every row is held here: one not here is not stored
            out.update(held)
            return out
        res = self.store.call(f"get {tier}", lambda: self.store.collection(tier).get(ids=rest, include=["embeddings"]))
        embs = res.get("embeddings")
        if embs is not None:
            out.update({i: np.asarray(e, dtype=np.float32) for i, e in zip(res["ids"], embs)})
        return out


def serialize_payload(payload: Any, max_bytes: int) -> str:
    """The stored document of a response: JSON, at most ``max_bytes`` (PayloadError else)."""
    try:
        doc = json.dumps(payload, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"response payload is not JSON-serializable: {exc}") from exc
    if len(doc.encode("utf-8", "surrogatepass")) > max_bytes:
        raise PayloadError(f"response is larger than max_response_bytes={max_bytes}")
    return doc
