"""Exact repeats are answered from memory, and memory never outlives the store: this
process's writes, deletes, expiry and clears keep it right; where other processes write
(a Chroma server, a shared client), a remembered entry is re-read after a bound."""

from __future__ import annotations

from typing import Any

from mlc_integrations import CacheRequest, MLCEngine, StorageOptions
from mlc_integrations.store.exact_index import ExactIndex
from tests.helpers import count_store_calls


def ask(text: str) -> CacheRequest:
    return CacheRequest(text=text, scope="m")


def _gets(eng: MLCEngine) -> list[str]:
    return count_store_calls(eng)


def test_an_exact_repeat_costs_no_storage_call() -> None:
    eng = MLCEngine(image_encoder=None, durable=True)
    eng.update(ask("Who wrote Hamlet?"), "Shakespeare")
    calls = _gets(eng)
    assert eng.lookup(ask("Who wrote Hamlet?")).payload == "Shakespeare"
    assert calls == []


def test_a_deleted_or_cleared_entry_is_never_served_from_memory() -> None:
    eng = MLCEngine(image_encoder=None, durable=True)
    eid = eng.update(ask("Who wrote Hamlet?"), "Shakespeare")
    assert eng.delete(eid) and eng.lookup(ask("Who wrote Hamlet?")) is None
    eng.update(ask("Who wrote Hamlet?"), "Shakespeare")
    eng.clear(scope="m")
    assert eng.lookup(ask("Who wrote Hamlet?")) is None


def test_an_expired_entry_is_not_served_from_memory() -> None:
    now = [1000.0]
    eng = MLCEngine(image_encoder=None, durable=True, ttl=10, clock=lambda: now[0])
    eng.update(ask("Who wrote Hamlet?"), "Shakespeare")
    now[0] += 11
    assert eng.lookup(ask("Who wrote Hamlet?")) is None


def test_another_writers_delete_is_seen_within_the_bound() -> None:
    first = MLCEngine(image_encoder=None, durable=True)
    shared = StorageOptions(client=first.store.client, collection_prefix=first.store.prefix)
    second = MLCEngine(image_encoder=None, durable=True, storage=shared)
    clock = [0.0]
    second.entries.hot = ExactIndex(revalidate_s=1.0, monotonic=lambda: clock[0])
    eid = first.update(ask("Who wrote Hamlet?"), "Shakespeare")
    assert second.lookup(ask("Who wrote Hamlet?")).payload == "Shakespeare"  # read once, remembered
    first.delete(eid)
    clock[0] += 1.01  # past the bound: re-read from the store
    assert second.lookup(ask("Who wrote Hamlet?")) is None


def test_the_index_is_bounded_by_entries_and_bytes() -> None:
    idx = ExactIndex(max_items=3, max_bytes=10_000)
    for i in range(5):
        idx.put(f"e{i}", "x" * 100, {})
    assert len(idx) == 3 and idx.get("e0") is None and idx.get("e4") is not None
    idx.put("big", "y" * 20_000, {})  # larger than the whole budget: not remembered
    assert idx.get("big") is None and idx.bytes <= 10_000


def test_warm_start_loads_the_stored_entries(tmp_path: Any) -> None:
    d = str(tmp_path / "c")
    with MLCEngine(persist_directory=d, image_encoder=None, durable=True) as eng:
        eng.update(ask("Who wrote Hamlet?"), "Shakespeare")
    reopened = MLCEngine(persist_directory=d, image_encoder=None, durable=True, warm_start=False)
    assert reopened.entries.preload() == 1 and len(reopened.entries.hot) == 1
    reopened.close()
