"""The entry store: the only module that speaks Chroma (through :class:`ChromaStore`).

It owns the schema — collections, ids, metadata keys — and the crash-safe order of
writes and deletes; policy (which tier, which threshold, what to evict) lives elsewhere.

Schema (version :data:`SCHEMA_VERSION`, metadata key ``v``):

* ``exact``: one row per entry, id = the entry id (the L0.5 key), document = the
  response as JSON, metadata = :class:`EntryMeta`.
* ``l1`` and ``l2_prompt``: one row per entry, id = the entry id, embedding = the text
  (prompt) vector, metadata = the entry's keys + ``part`` (its partition).
* ``l1_static``: the same rows with the text's static vector (the L1 pre-screen:
  no stored static vector near a new text = no sentence-model run on the caller's path).
* ``l2_image``: one row per image of an entry, id = ``"{entry_id}#{i}"``, metadata as
  above + ``idx`` and ``entry_id``; document = the picture's image-change descriptor
  (``verify/image_change.py``: base64 of at most ~10 kB, read only for an L2 candidate;
  ``""`` or no document = written before descriptors existed).
* ``l2_fprint``: the same rows with each image's pixel fingerprint (the L2 pre-screen:
  no stored fingerprint near a new picture = no image-encoder run on the caller's path).

Writes go response first, vectors last (:data:`WRITE_ORDER`) and deletes vectors first
(:data:`DELETE_ORDER`), so an interrupted write or delete never leaves a vector whose
response is missing in a way a lookup could serve: such an orphan is a counted miss
and is removed when met.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

import numpy as np

from ..runtime.lru import LRU
from .exact_index import DEFAULT_REVALIDATE_S, ExactIndex
from ..errors import PayloadError
from ..runtime.stats import EngineStats
from .chroma import ChromaStore

if TYPE_CHECKING:
    from .writebehind import PendingEntries

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
NO_EXPIRY = 1e18
# A pre-screen row goes before the row it screens for (and is deleted after it): a crash in
# between leaves a screen with nothing behind it (a miss), never a vector the screen hides.
WRITE_ORDER = ("exact", "l1_static", "l1", "l2_fprint", "l2_image", "l2_prompt")  # response first, vectors last
DELETE_ORDER = ("l2_image", "l2_fprint", "l2_prompt", "l1", "l1_static", "exact")  # vectors first, response last
IMAGE_ROW_TIERS = ("l2_image", "l2_fprint")  # one row per image, id "{entry_id}#{i}"
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
    model: str = ""  # the model the scope names (keys.model_label): `mlc clear --model`, `mlc scopes`

    def to_chroma(self) -> dict[str, Any]:
        meta = self.keys.metadata(created_at=self.created_at, last_access=self.last_access)
        if self.model:
            meta["model"] = self.model
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

    @property
    def has_l1(self) -> bool:
        return self.text_vec is not None or self.embed_text is not None

    def text_vector(self) -> Optional[np.ndarray]:
        """The text vector, computed now if it was deferred."""
        if self.text_vec is None and self.embed_text is not None:
            self.text_vec = self.embed_text()
            self.embed_text = None
        return self.text_vec

    @property
    def has_l2(self) -> bool:
        return self.prompt_vec is not None and (self.image_vecs is not None or self.embed_images is not None)

    def image_vectors(self) -> Optional[np.ndarray]:
        """The image vectors, computed now if they were deferred."""
        if self.image_vecs is None and self.embed_images is not None:
            self.image_vecs = self.embed_images()
            self.embed_images = None
        return self.image_vecs

    def image_descriptors(self) -> Optional[list[str]]:
        """The image-change descriptors, computed now if they were deferred (a failure
        stores none: the entry is then verified as one written before descriptors)."""
        if self.image_descs is None and self.describe_images is not None:
            try:
                self.image_descs = self.describe_images()
            except Exception as exc:  # never lose the entry over its descriptor
                log.warning("image descriptor of %s not computed: %s", self.entry_id[:12], exc)
            self.describe_images = None
        return self.image_descs


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


def _model_of(e: NewEntry, tier: str) -> str:
    return {"l1": e.text_model, "l1_static": e.static_model, "l2_image": e.image_model, "l2_prompt": e.prompt_model,
            "l2_fprint": e.fprint_model}[tier]


def _rows(group: Sequence[NewEntry], tier: str) -> tuple[list[str], list[list[float]], list[dict[str, Any]], list[str]]:
    """A vector tier's rows of several entries: ids, embeddings, metadata, documents
    (the image-change descriptors of ``l2_image`` rows, ``""`` where there is none)."""
    ids: list[str] = []
    vecs: list[list[float]] = []
    metas: list[dict[str, Any]] = []
    docs: list[str] = []
    for e in group:
        keys = e.meta.keys
        if tier in IMAGE_ROW_TIERS:
            rows = e.image_vectors() if tier == "l2_image" else e.fprint_vecs
            descs = (e.image_descriptors() if tier == "l2_image" else None) or []
            for i, v in enumerate(rows):  # type: ignore[arg-type]
                ids.append(image_row_id(e.entry_id, i))
                vecs.append(v.tolist())
                metas.append(keys.metadata(idx=i, entry_id=e.entry_id, part=e.partitions["l2_image"][i]))
                docs.append(descs[i] if i < len(descs) else "")
        else:
            vec = {"l1": e.text_vec, "l1_static": e.static_vec}.get(tier, e.prompt_vec)
            ids.append(e.entry_id)
            vecs.append(vec.tolist())  # type: ignore[union-attr]
            metas.append(keys.metadata(part=e.partitions["l1" if tier == "l1_static" else tier]))
    return ids, vecs, metas, docs


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
                 image_evidence: str = "memory", evidence_memo_items: int = 4096) -> None:
        """``image_evidence``: where the image-change descriptors live (a 96-px grey
        picture and a 24-px colour map: verify/image_change.py). ``"memory"`` (default):
        in this process only, bounded (``evidence_memo_items`` pictures, ~10 kB each),
        never at rest -- an entry whose descriptor is not here (another process's, from
        before a restart, or evicted) is not reused through L2 (a counted refusal).
        ``"store"``: also in the l2_image rows' documents, at rest in Chroma (the engine's
        default for persistent and shared caches)."""
        if image_evidence not in ("memory", "store"):
            raise ValueError(f"image_evidence must be 'memory' or 'store', not {image_evidence!r}")
        self.store = store
        self._stats = stats
        self._on_deleted = on_deleted  # whatever else tracks entries forgets them (access log, verifier)
        # Write-behind (writebehind.py): entries accepted but not yet written; reads see them first.
        self.pending: "Optional[PendingEntries]" = None  # entries accepted, not yet written (attach_pending)
        self.evidence_at_rest = image_evidence == "store"
        self._evidence: "LRU[str, str]" = LRU(evidence_memo_items)  # l2_image row id -> descriptor text
        # Exact hits from memory (exact_index.py); re-read after a bound where others may write.
        shared = store.mode in ("server", "client")
        self.hot = ExactIndex(revalidate_s=DEFAULT_REVALIDATE_S if shared else None)

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
            if e.has_l1:
                e.text_vector()  # a deferred text encoding runs before anything is written
            if e.has_l2:
                e.image_vectors()  # a deferred image encoding runs before anything is written
        metas = [e.meta.to_chroma() for e in batch]
        self.store.call("upsert exact", lambda: self.store.collection("exact").upsert(
            ids=[e.entry_id for e in batch], embeddings=[ChromaStore.dummy_vector()] * len(batch),
            documents=[e.document for e in batch], metadatas=metas))
        for e, meta in zip(batch, metas):
            self.hot.put(e.entry_id, e.document, meta)
        l2 = [e for e in batch if e.has_l2]
        for tier, rows in (("l1_static", [e for e in batch if e.static_vec is not None and e.has_l1]),
                           ("l1", [e for e in batch if e.has_l1]),
                           ("l2_fprint", [e for e in l2 if e.fprint_vecs is not None]),
                           ("l2_image", l2), ("l2_prompt", l2)):
            for model in dict.fromkeys(_model_of(e, tier) for e in rows):
                group = [e for e in rows if _model_of(e, tier) == model]
                ids, vecs, metas, docs = _rows(group, tier)
                if tier == "l2_image":
                    for rid, doc in zip(ids, docs):
                        if doc:
                            self._evidence.put(rid, doc)
                extra = {"documents": docs if self.evidence_at_rest else [""] * len(docs)} if tier == "l2_image" else {}
                self.store.call(f"upsert {tier}", lambda t=tier, m=model, i=ids, v=vecs, md=metas, x=extra: self.store.collection(
                    t, dim=len(v[0]), model=m).upsert(ids=i, embeddings=v, metadatas=md, **x))

    def delete(self, ids: Sequence[str]) -> None:
        """Delete entries from every tier in :data:`DELETE_ORDER`."""
        ids = list(ids)
        if not ids:
            return
        self.hot.forget(ids)
        gone = set(ids)
        for rid in [r for r, _d in self._evidence.items() if r.rpartition("#")[0] in gone]:
            self._evidence.pop(rid)
        for tier in DELETE_ORDER:
            if tier in IMAGE_ROW_TIERS:
                self.store.call(f"delete {tier}", lambda t=tier: self.store.collection(t).delete(
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
        if not clauses:
            self._evidence.clear()
            self.hot.clear()
        else:
            self.hot.forget_where(lambda m: not ((scope_key is None or m.get("scope") == scope_key)
                                                 and (ns_key is None or m.get("ns") == ns_key)))

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
            for eid, m in zip(res["ids"], metas):
                self.hot.update_meta(eid, m)

    # ------------------------------------------------------------------ reads
    def preload(self, limit: int = PRELOAD_ENTRIES) -> int:
        """Fill the exact index from the store (warm start), at most ``limit`` entries; how many."""
        res = self.store.call("get", lambda: self.store.collection("exact").get(
            limit=limit, include=["documents", "metadatas"]))
        for eid, doc, meta in zip(res["ids"], res["documents"], res["metadatas"]):
            if isinstance(doc, str):
                self.hot.put(eid, doc, meta or {})
        return len(res["ids"])

    def fetch(self, entry_ids: Sequence[str], now: float) -> dict[str, Union[StoredEntry, Missing]]:
        """The live entries among ``entry_ids`` in one storage call; expired and unreadable
        ones are deleted on the way and reported as "expired" / "corrupt"."""
        out: dict[str, Union[StoredEntry, Missing]] = {}
        ids = []
        rows: list[tuple[str, Any, Any]] = []
        for eid in dict.fromkeys(entry_ids):
            p = self.pending.get(eid) if self.pending is not None else None
            if p is not None:
                out[eid] = "expired" if p.meta.keys.expires_at <= now else StoredEntry(
                    json.loads(p.document), p.meta.to_chroma())
                continue
            remembered = self.hot.get(eid)
            if remembered is not None:
                rows.append((eid, remembered[0], remembered[1]))
            else:
                ids.append(eid)
        if ids:
            res = self.store.call(
                "get", lambda: self.store.collection("exact").get(ids=ids, include=["documents", "metadatas"]))
            out.update({eid: "absent" for eid in ids})
            self.hot.forget(ids)  # due for a re-read: what the store says now replaces it
            for eid, doc, meta in zip(res["ids"], res["documents"], res["metadatas"]):
                rows.append((eid, doc, meta))
                if isinstance(doc, str):
                    self.hot.put(eid, doc, meta or {})
        gone: list[str] = []
        for eid, doc, meta in rows:
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
        if self.pending is not None and self.pending.get(entry_id) is not None:
            return True
        res = self.store.call("get", lambda: self.store.collection("exact").get(ids=[entry_id], include=[]))
        return bool(res["ids"])

    def count(self, tier: str = "exact") -> int:
        return int(self.store.call("count", lambda: self.store.collection(tier).count()))

    def expired_ids(self, now: float) -> list[str]:
        res = self.store.call("get expired", lambda: self.store.collection("exact").get(
            where={"expires_at": {"$lte": now}}, include=[]))
        return list(res["ids"])

    def all_metadata(self) -> list[tuple[str, dict[str, Any]]]:
        """(entry id, metadata) of every entry: what eviction ranks."""
        res = self.store.call("get all", lambda: self.store.collection("exact").get(include=["metadatas"]))
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
            if best_below is not None and not mine and not pending and rows:
                near = rows[:EXPLAIN_ROWS]
                near_meta = self._metadatas(tier, [i for i, _s in near])
                best_below.extend(s for i, s in near if near_meta.get(i, {}).get("part") == part)
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
        for where in (None, {"part": part}):
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
            mine = [r for r in above if r[2].get("part") == part]
            if where is None and len(above) >= k and len(mine) < k:
                self._stats.incr(f"search_filtered_{tier}")  # other partitions crowd the top-k
                continue
            break
        if pending:
            newer = {rid for rid, _s, _m in pending}
            mine = [r for r in mine if r[0] not in newer] + [(rid, s, m, None) for rid, s, m in pending]
            mine.sort(key=lambda r: -r[1])
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
        emb = [vec.tolist()]
        col = self.store.collection(tier, dim=int(vec.shape[0]), model=model)
        k = SEARCH_STEPS[0][1]
        res = self.store.call(f"query {tier}", lambda: col.query(query_embeddings=emb, n_results=k,
                                                                 include=["distances", "metadatas"]))
        dists = res["distances"][0] if res.get("distances") else []
        metas = res["metadatas"][0] if res.get("metadatas") else []
        above = [m or {} for d, m in zip(dists, metas) if 1.0 - float(d) >= threshold]
        if any(m.get("part") == part for m in above):
            return True
        if len(dists) < k or len(above) < len(dists):
            return False  # the top k is not saturated: it holds every row above the threshold
        self._stats.incr(f"search_widened_{tier}")
        res = self.store.call(f"query {tier}", lambda: col.query(query_embeddings=emb, n_results=1,
                                                                 where={"part": part}, include=["distances"]))
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
            res = self.store.call("get l2_image", lambda: self.store.collection("l2_image").get(
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
