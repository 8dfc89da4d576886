"""The entry schema: every collection the cache keeps, what each row holds, and the order
writes and deletes go in. The one table the storage modules read (``chroma.py``,
``entries.py``, ``writebehind.py``, ``index_repair.py``, ``ops/inspection.py``): adding a
tier means adding a row to :data:`TIERS` (and the orders), nothing else in the store.

One collection per tier, ``{prefix}_{collection}`` (``{prefix}_{collection}_{version}``
for a *versioned* tier, see below):

* ``exact``: one row per entry, id = the entry id (the exact key), document = the
  response as JSON, metadata = the entry keys (:data:`ENTRY_KEYS`) and
  :data:`EXACT_KEYS`. Read by id only: its embedding is a 1-d placeholder.
* ``l1`` / ``l2_prompt``: one row per entry, id = the entry id, embedding = the text
  (prompt) vector, metadata = the entry keys + ``part`` (its partition).
* ``l1_static``: the same rows with the text's static vector (the L1 pre-screen: no
  stored static vector near a new text = no sentence-model run on the caller's path).
* ``l2_image``: one row per image, id = ``"{entry_id}#{i}"``, metadata = the entry keys
  + ``part``, ``idx`` and ``entry_id``; document = the picture's image-change evidence
  (``""`` or none = written before evidence existed).
* ``l2_fprint``: the same rows with each image's pixel fingerprint (the L2 pre-screen).

A pre-screen's vectors come from a table the embedding side builds (the static text
table); when that table changes, its vectors live in another space and must not meet
the old ones. Such a tier is ``versioned``: its collection name ends with the version
of its vector space, which the *producer* of those vectors supplies as data
(``ChromaStore(versions={"l1_static": ...})``, given by the engine through
``StorageOptions.store_arguments``, which knows the embedding side). The store never imports an embedding module, and a tool that opens a
cache without models (``mlc stats``) reads the version from the names it finds
(:func:`parse_collection`).

Crash safety (:func:`crash_safe` checks it): writes go response first, vectors last, and
a pre-screen row before the row it screens for; deletes go the other way. An interrupted
write or delete then never leaves a vector whose response is missing in a way a lookup
could serve (such an orphan is a counted miss, removed when met), nor a vector its
pre-screen hides (a screen with nothing behind it is a miss).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

SCHEMA_VERSION = 1

ROW_PER_ENTRY = "entry"
ROW_PER_IMAGE = "image"  # id "{entry_id}#{i}"
RESPONSE = "response"  # the exact tier's document
IMAGE_EVIDENCE = "image_evidence"  # the l2_image rows' document
# Tier families: an entry writes a family's tiers when it has that family's vectors.
TEXT_FAMILY, IMAGE_FAMILY = "l1", "l2"


@dataclass(frozen=True)
class Tier:
    """One row of the table: one collection and the rows each entry writes there."""

    name: str  # the tier, as the store and the engine name it
    collection: str  # collection name after the prefix
    rows: str  # ROW_PER_ENTRY or ROW_PER_IMAGE
    vector: bool  # ANN-searched (its HNSW index is checked); False: read by id only
    field: str = ""  # NewEntry attribute holding the vector (an array of rows for image tiers)
    model_field: str = ""  # NewEntry attribute naming the model of those vectors
    deferred: str = ""  # NewEntry attribute of a deferred computation of the vector (write-behind)
    partition: str = ""  # key of NewEntry.partitions whose value is this tier's ``part``
    family: str = ""  # "l1" / "l2": the tier group an entry must have for this tier to be written
    screens: Optional[str] = None  # the tier this one pre-screens for
    versioned: bool = False  # collection name carries the version of the vector space
    document: str = ""  # what the row's document holds (RESPONSE, IMAGE_EVIDENCE, or nothing)
    resident: bool = False  # vectors the only writer also holds in memory (resident.py): not the image tower's


TIERS: tuple[Tier, ...] = (
    Tier("exact", "exact", ROW_PER_ENTRY, vector=False, document=RESPONSE),
    Tier("l1", "l1", ROW_PER_ENTRY, vector=True, field="text_vec", model_field="text_model",
         deferred="embed_text", partition="l1", family=TEXT_FAMILY, resident=True),
    Tier("l1_static", "l1_static", ROW_PER_ENTRY, vector=True, field="static_vec", model_field="static_model",
         partition="l1", family=TEXT_FAMILY, screens="l1", versioned=True, resident=True),
    Tier("l2_fprint", "l2_fprint", ROW_PER_IMAGE, vector=True, field="fprint_vecs", model_field="fprint_model",
         partition="l2_image", family=IMAGE_FAMILY, screens="l2_image", resident=True),
    Tier("l2_image", "l2_image", ROW_PER_IMAGE, vector=True, field="image_vecs", model_field="image_model",
         deferred="embed_images", partition="l2_image", family=IMAGE_FAMILY, document=IMAGE_EVIDENCE),
    Tier("l2_prompt", "l2_prompt", ROW_PER_ENTRY, vector=True, field="prompt_vec", model_field="prompt_model",
         partition="l2_prompt", family=IMAGE_FAMILY, resident=True),
)
BY_NAME: Mapping[str, Tier] = {t.name: t for t in TIERS}
RESPONSE_TIER = next(t.name for t in TIERS if t.document == RESPONSE)

# Response first, vectors last; a pre-screen before the tier it screens for.
WRITE_ORDER = ("exact", "l1_static", "l1", "l2_fprint", "l2_image", "l2_prompt")
# Vectors first, response last; a pre-screen after the tier it screens for.
DELETE_ORDER = ("l2_image", "l2_fprint", "l2_prompt", "l1", "l1_static", "exact")

VECTOR_TIERS = tuple(t.name for t in TIERS if t.vector)
IMAGE_ROW_TIERS = tuple(t.name for t in TIERS if t.rows == ROW_PER_IMAGE)
RESIDENT_TIERS = tuple(t.name for t in TIERS if t.resident)

# Row metadata keys. Every row carries the entry keys (an entry's exact keys and schema
# version: clear() and the scope filters read them on every tier).
SCOPE, NS, CTX, IMGS, N_IMAGES, EXPIRES_AT = "scope", "ns", "ctx", "imgs", "n_images", "expires_at"
VERSION = "v"
ENTRY_KEYS = (SCOPE, NS, CTX, IMGS, N_IMAGES, EXPIRES_AT)  # the fields of entries.EntryKeys, in order
# The exact tier's own keys.
CREATED_AT, LAST_ACCESS, TEXT, ANSWER, MODEL = "created_at", "last_access", "text", "answer", "model"
NS_LABEL = "ns_label"  # an optional readable namespace next to its digest (inspection shows it)
EXACT_KEYS = (CREATED_AT, LAST_ACCESS, TEXT, ANSWER, MODEL)
# Vector rows' own keys.
PART = "part"  # the partition: a neighbour counts only inside it
ENTRY_ID, IDX = "entry_id", "idx"  # image rows: the entry and the image's position
VECTOR_KEYS = (PART,)
IMAGE_KEYS = (ENTRY_ID, IDX)
ROW_KEYS = ENTRY_KEYS + (VERSION,) + EXACT_KEYS + (NS_LABEL,) + VECTOR_KEYS + IMAGE_KEYS

# Traffic counters (not an entry tier): one row per engine that served from this cache,
# id = that engine's token, document = its counters as JSON (runtime/stats.py), so
# `mlc stats` shows hit rates and refusals of the processes that used the cache.
COUNTERS_COLLECTION = "counters"


def counters_name(prefix: str) -> str:
    return f"{prefix}_{COUNTERS_COLLECTION}"


# Collection metadata keys.
COLLECTION_TIER = "mlc_tier"  # which tier a collection holds (inspection finds caches by it)
COLLECTION_DIM = "dim"
COLLECTION_MODEL = "model"
COLLECTION_KEYS = (COLLECTION_TIER, COLLECTION_DIM, COLLECTION_MODEL)


def keys_of(tier: str) -> tuple[str, ...]:
    """The metadata keys a row of ``tier`` carries (optional ones included)."""
    t = BY_NAME[tier]
    if not t.vector:
        return ENTRY_KEYS + (VERSION,) + EXACT_KEYS + (NS_LABEL,)
    return ENTRY_KEYS + (VERSION,) + VECTOR_KEYS + (IMAGE_KEYS if t.rows == ROW_PER_IMAGE else ())


def image_row_id(entry_id: str, i: int) -> str:
    return f"{entry_id}#{i}"


def entry_of_row(row_id: str) -> str:
    """The entry id of a row id (an image row's ``"{entry_id}#{i}"`` or an entry row's id)."""
    return row_id.rpartition("#")[0] or row_id


def collection_name(prefix: str, tier: str, versions: Mapping[str, str]) -> str:
    """The collection of ``tier`` under ``prefix``: ``{prefix}_{collection}``, and for a
    versioned tier ``_{version}`` after it when ``versions`` gives one (the engine always
    does; a store opened without versions, as by tools and tests, uses the bare name)."""
    t = BY_NAME[tier]
    version = versions.get(tier) if t.versioned else None
    return f"{prefix}_{t.collection}_{version}" if version else f"{prefix}_{t.collection}"


def parse_collection(name: str, tier: str) -> Optional[tuple[str, str]]:
    """(prefix, version) of a collection named for ``tier`` (version ``""``: the bare
    name); None when the name is not one the tier's collections have."""
    t = BY_NAME.get(tier)
    if t is None:
        return None
    suffix = f"_{t.collection}"
    if name.endswith(suffix) and len(name) > len(suffix):
        return name[: -len(suffix)], ""
    marker = suffix + "_"
    at = name.rfind(marker)
    if not t.versioned or at <= 0 or at + len(marker) >= len(name):
        return None
    return name[:at], name[at + len(marker):]


def crash_safe(write: tuple[str, ...] = WRITE_ORDER, delete: tuple[str, ...] = DELETE_ORDER) -> list[str]:
    """What is wrong with a write and delete order (empty: nothing). Both list every tier
    once; the response tier is written first and deleted last; a pre-screen is written
    before, and deleted after, the tier it screens for."""
    problems = []
    names = {t.name for t in TIERS}
    for what, order in (("write", write), ("delete", delete)):
        if sorted(order) != sorted(names) or len(set(order)) != len(order):
            problems.append(f"{what} order {order} does not list every tier once")
            return problems
    if write[0] != RESPONSE_TIER:
        problems.append(f"writes must start with the response ({RESPONSE_TIER}), not {write[0]}")
    if delete[-1] != RESPONSE_TIER:
        problems.append(f"deletes must end with the response ({RESPONSE_TIER}), not {delete[-1]}")
    for t in TIERS:
        if t.screens is None:
            continue
        if write.index(t.name) > write.index(t.screens):
            problems.append(f"{t.name} screens for {t.screens}: it must be written before it")
        if delete.index(t.name) < delete.index(t.screens):
            problems.append(f"{t.name} screens for {t.screens}: it must be deleted after it")
    return problems


_problems = crash_safe()
if _problems:  # pragma: no cover - the table is edited with the test that checks it
    raise RuntimeError("entry schema: " + "; ".join(_problems))
