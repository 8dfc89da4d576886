"""The entry schema is one table: no storage module spells a collection or a metadata key
of its own, the write and delete orders keep their crash-safety property, and the rows
the store writes are the ones the table lists."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np

from mlc_integrations.runtime.stats import EngineStats
from mlc_integrations.store import schema
from mlc_integrations.store.chroma import ChromaStore
from mlc_integrations.store.entries import EntryKeys, EntryMeta, EntryStore, NewEntry

ROOT = Path(__file__).resolve().parents[2] / "mlc_integrations"
# Every module that reads or writes the stored rows.
STORAGE_MODULES = sorted(p for p in (ROOT / "store").glob("*.py") if p.name != "schema.py") + [
    ROOT / "ops" / "inspection.py"]
# The schema's words used in another sense, each with the reason.
ALLOWED = {
    ("entries.py", "text"): "the response payload's {'text': ...} field, not row metadata",
}


def _schema_words() -> set[str]:
    words = {t.name for t in schema.TIERS} | {t.collection for t in schema.TIERS}
    return words | set(schema.ROW_KEYS) | set(schema.COLLECTION_KEYS)


def _string_literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def test_no_storage_module_spells_a_collection_or_a_metadata_key_of_the_table() -> None:
    words = _schema_words()
    found = [f"{p.relative_to(ROOT)}:{line}: {value!r}" for p in STORAGE_MODULES
             for line, value in _string_literals(p)
             if value in words and (p.name, value) not in ALLOWED]
    assert found == [], "spelled outside store/schema.py (use its constants):\n" + "\n".join(found)


def test_the_scan_sees_a_spelled_key() -> None:
    """The scan above is not vacuous: a literal metadata key in code is reported."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write('"""doc: part"""\nwhere = {"part": 1}\n')
    assert (2, "part") in _string_literals(Path(f.name))
    assert all(v != "doc: part" for _l, v in _string_literals(Path(f.name)))


def test_write_and_delete_orders_keep_crash_safety() -> None:
    assert schema.crash_safe() == []
    assert schema.WRITE_ORDER[0] == schema.RESPONSE_TIER == schema.DELETE_ORDER[-1]  # response first, vectors last
    for t in schema.TIERS:
        if t.screens:  # a pre-screen row goes before what it screens (deleted after it)
            assert schema.WRITE_ORDER.index(t.name) < schema.WRITE_ORDER.index(t.screens)
            assert schema.DELETE_ORDER.index(t.name) > schema.DELETE_ORDER.index(t.screens)


def test_an_order_that_breaks_crash_safety_is_named() -> None:
    w, d = list(schema.WRITE_ORDER), list(schema.DELETE_ORDER)
    assert schema.crash_safe(tuple(w[1:] + w[:1]), tuple(d)) != []  # a vector before its response
    assert schema.crash_safe(tuple(w), tuple(d[-1:] + d[:-1])) != []  # the response deleted first
    swapped = list(w)
    i, j = swapped.index("l1_static"), swapped.index("l1")
    swapped[i], swapped[j] = swapped[j], swapped[i]
    assert any("l1_static screens for l1" in p for p in schema.crash_safe(tuple(swapped), tuple(d)))
    assert schema.crash_safe(tuple(w[:-1]), tuple(d)) != []  # a tier left out


def test_entry_keys_are_the_tables_entry_keys() -> None:
    assert tuple(f.name for f in dataclasses.fields(EntryKeys)) == schema.ENTRY_KEYS


def test_derived_tier_lists_come_from_the_table() -> None:
    assert schema.VECTOR_TIERS == ("l1", "l1_static", "l2_fprint", "l2_image", "l2_prompt")
    assert schema.IMAGE_ROW_TIERS == ("l2_fprint", "l2_image")
    for t in schema.TIERS:
        if t.vector:
            assert {t.field, t.model_field} <= {f.name for f in dataclasses.fields(NewEntry)}


def test_a_versioned_collection_name_round_trips_and_needs_no_embedding_module() -> None:
    name = schema.collection_name("shop", "l1_static", {"l1_static": "s1"})
    assert name == "shop_l1_static_s1"
    assert schema.parse_collection(name, "l1_static") == ("shop", "s1")
    assert schema.parse_collection("shop_l1", "l1") == ("shop", "")
    assert schema.parse_collection("shop_l1", "l2_image") is None
    for path in (ROOT / "store").glob("*.py"):  # the store imports no embedding module
        tree = ast.parse(path.read_text())
        modules = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        modules += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [m for m in modules if "embed" in m.split(".")], path.name


def test_every_row_the_store_writes_is_in_the_table() -> None:
    """An entry with every tier writes one row per entry or per image where the table says,
    each with exactly the table's metadata keys for its tier."""
    store = ChromaStore(versions={"l1_static": "s-test"})
    entries = EntryStore(store, EngineStats())
    v = np.ones(8, dtype=np.float32) / np.sqrt(8)
    e = NewEntry(entry_id="e1", document='"answer"', partitions={"l1": "p1", "l2_prompt": "p2", "l2_image": ["i0", "i1"]},
                 meta=EntryMeta(EntryKeys("s", "n", "c", "i", 2), created_at=1.0, last_access=1.0, text="q",
                                answer="a", model="m"),
                 text_vec=v, static_vec=v, prompt_vec=v, image_vecs=np.stack([v, v]), fprint_vecs=np.stack([v, v]),
                 image_descs=["d0", "d1"])
    entries.put(e)
    names = {c.name for c in store.client.list_collections() if c.name.startswith(store.prefix + "_")}
    assert names == {store.name(t.name) for t in schema.TIERS}
    assert store.name("l1_static").endswith("_l1_static_s-test")
    for t in schema.TIERS:
        got = store.collection(t.name).get(include=["metadatas"])
        n = 2 if t.rows == schema.ROW_PER_IMAGE else 1
        assert len(got["ids"]) == n, t.name
        for meta in got["metadatas"]:
            assert set(meta) <= set(schema.keys_of(t.name)), (t.name, set(meta) - set(schema.keys_of(t.name)))
    entries.delete(["e1"])
    assert all(store.collection(t.name).count() == 0 for t in schema.TIERS)
