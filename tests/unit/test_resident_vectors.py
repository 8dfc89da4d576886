"""L2's fingerprint and prompt vectors held in this process while it is the store's only
writer (store/resident.py): answered from memory, exactly as the store would, and never
answering once another writer may exist."""

from __future__ import annotations

import numpy as np
import pytest

from mlc_integrations import CacheRequest, MLCEngine, TierOptions
from mlc_integrations.store.resident import ResidentVectors
from mlc_integrations.store.schema import ENTRY_ID, NS, PART, RESIDENT_TIERS, SCOPE
from tests.helpers import count_store_calls, pattern

QUESTION = "What color is the shape?"
L2_READS = tuple(f"{verb} {tier}" for verb in ("query", "get") for tier in RESIDENT_TIERS)


def _unit(rng: np.random.Generator, dim: int) -> np.ndarray:
    v = rng.normal(size=dim).astype(np.float32)
    return v / np.linalg.norm(v)


def _rows(n: int, dim: int = 16, part: str = "p", seed: int = 0, name: str = "e"):
    rng = np.random.default_rng(seed)
    return [(f"{name}{i}#0", _unit(rng, dim), {PART: part, ENTRY_ID: f"{name}{i}", SCOPE: "s", NS: f"ns{i % 2}"})
            for i in range(n)]


def test_nearest_is_exact_cosine_over_the_partition_best_first() -> None:
    res = ResidentVectors(lambda: True)
    rows = _rows(40)
    res.put("l2_fprint", rows)
    res.put("l2_fprint", _rows(5, part="other", seed=1, name="o"))
    q = rows[3][1]
    got = res.nearest("l2_fprint", q, "p", -1.0, k=8)
    want = sorted(((rid, float(np.dot(q, v))) for rid, v, _m in rows), key=lambda r: -r[1])[:9]
    assert [r[0] for r in got] == [r[0] for r in want]  # one more than asked: whether more exist
    assert all(abs(a[1] - b[1]) < 1e-6 for a, b in zip(got, want))
    assert got[0][0] == "e3#0" and got[0][2][ENTRY_ID] == "e3"
    assert all(m[PART] == "p" for _r, _s, m, _d in got)
    assert res.nearest("l2_fprint", q, "p", 0.999, k=8) == [got[0]]
    assert res.nearest("l2_fprint", q, "nobody", -1.0, k=8) == []


def test_deleted_and_cleared_rows_leave_at_once() -> None:
    res = ResidentVectors(lambda: True)
    rows = _rows(10)
    res.put("l2_fprint", rows)
    res.put("l2_prompt", [(m[ENTRY_ID], v, m) for _rid, v, m in rows])
    res.forget_entries(["e1", "e2"])
    left = {r[0] for r in res.nearest("l2_fprint", rows[0][1], "p", -1.0, k=20)}
    assert "e1#0" not in left and "e2#0" not in left and len(left) == 8
    assert set(res.vectors("l2_prompt", ["e1", "e3"])) == {"e3"}


def test_entries_deleted_and_written_again_and_again_do_not_grow_the_memory() -> None:
    res = ResidentVectors(lambda: True)
    for rnd in range(50):  # a cache at its max_entries: every write evicts an older entry
        rows = _rows(8, seed=rnd, name=f"r{rnd}-")
        res.put("l2_fprint", rows)
        res.forget_entries([m[ENTRY_ID] for _rid, _v, m in rows])
    res.put("l2_fprint", _rows(8, seed=99))
    part = res._parts["l2_fprint"]["p"]
    assert len(part.ids) == 8 and part.vecs.shape[0] == 8  # the slots of the gone rows were reused
    assert len(res.nearest("l2_fprint", _rows(1, seed=99)[0][1], "p", -1.0, k=20)) == 8


def test_a_refill_answers_nothing_from_memory_until_the_store_was_read_again() -> None:
    res = ResidentVectors(lambda: True)
    rows = _rows(10)
    res.put("l2_fprint", rows)
    during: list[bool] = []

    def read() -> None:  # what the store still holds after a clear
        during.append(res.serves("l2_fprint"))
        # a lookup meanwhile is told to ask the store (None), never answered from a half-read tier
        during.append(res.nearest("l2_fprint", rows[0][1], "p", -1.0, k=8) is None)
        res.put("l2_fprint", rows[:3])

    res.refill(read)
    assert during == [False, True] and res.serves("l2_fprint")
    assert {r[0] for r in res.nearest("l2_fprint", rows[0][1], "p", -1.0, k=20)} == {"e0#0", "e1#0", "e2#0"}


def test_a_scoped_clear_leaves_the_other_scopes_entries_found_from_memory(make_engine) -> None:
    eng = make_engine(durable=True)
    for scope, answer in (("model-a", "red"), ("model-b", "blue")):
        eng.update(CacheRequest(text=QUESTION, images=[pattern(1)], scope=scope), answer)
        eng.update(CacheRequest(text="What is the capital of France?", scope=scope), f"Paris ({answer})")
    eng.clear(scope="model-a")
    seen = count_store_calls(eng)
    near = pattern(1).resize((80, 80))
    assert eng.lookup(CacheRequest(text=QUESTION, images=[near], scope="model-a")) is None
    hit = eng.lookup(CacheRequest(text=QUESTION, images=[near], scope="model-b"))
    assert hit is not None and hit.payload == "blue"
    assert eng.lookup(CacheRequest(text="What's the capital of France?", scope="model-a")) is None
    text_hit = eng.lookup(CacheRequest(text="What's the capital of France?", scope="model-b"))
    assert text_hit is not None and text_hit.tier == "L1" and text_hit.payload == "Paris (blue)"
    assert not [w for w in seen if w.split()[0] in ("query", "get") and w.split()[-1] in RESIDENT_TIERS], seen


def test_it_serves_only_while_the_census_is_complete_and_below_its_bound() -> None:
    complete = [True]
    res = ResidentVectors(lambda: complete[0], max_rows=10)
    assert res.serves("l2_fprint") and not res.serves("l2_image")  # the encoder's large vectors stay in the store
    complete[0] = False
    assert not res.serves("l2_fprint")
    complete[0] = True
    res.put("l2_fprint", _rows(11))
    assert not res.serves("l2_fprint") and res.serves("l2_prompt")  # past the bound: the store answers


def test_once_another_writer_may_exist_no_row_is_kept() -> None:
    res = ResidentVectors(lambda: False, possible=lambda: False)
    res.put("l2_fprint", _rows(3))
    assert res.nearest("l2_fprint", _rows(3)[0][1], "p", -1.0, k=8) is None  # the store answers


def test_vectors_of_another_size_in_one_partition_stop_it_serving_that_tier() -> None:
    res = ResidentVectors(lambda: True)
    res.put("l2_prompt", [("a", np.ones(4, np.float32) / 2, {PART: "p"})])
    res.put("l2_prompt", [("b", np.ones(9, np.float32) / 3, {PART: "p"})])
    assert not res.serves("l2_prompt")


def test_an_l2_hit_and_an_l2_miss_ask_the_store_nothing_of_the_small_tiers(make_engine) -> None:
    eng = make_engine(durable=True)
    eng.update(CacheRequest(text=QUESTION, images=[pattern(1)]), "red")
    eng.update(CacheRequest(text=QUESTION, images=[pattern(2)]), "blue")
    assert eng.entries.resident.serves("l2_fprint")
    seen = count_store_calls(eng)
    near = pattern(1).resize((80, 80))  # another digest: not the exact tier's, not L1's
    hit = eng.lookup(CacheRequest(text=QUESTION, images=[near]))
    assert hit is not None and hit.tier == "L2" and hit.payload == "red"
    miss = eng.lookup_explained(CacheRequest(text=QUESTION, images=[pattern(7)]))
    assert miss.hit is None
    assert not [w for w in seen if w in L2_READS], seen


def test_a_deleted_entry_is_no_candidate(make_engine) -> None:
    eng = make_engine(durable=True)
    eng.update(CacheRequest(text=QUESTION, images=[pattern(1)]), "red")
    near = CacheRequest(text=QUESTION, images=[pattern(1).resize((80, 80))])
    hit = eng.lookup(near)
    assert hit is not None
    eng.delete(hit.entry_id)
    assert eng.lookup(near) is None
    assert not eng.entries.resident.nearest("l2_fprint", np.ones(256, np.float32) / 16, "x", -1.0, 8)


def test_a_reopened_directory_holds_its_stored_vectors_after_the_warm_start(make_engine, tmp_path) -> None:
    first = make_engine(persist_directory=str(tmp_path), durable=True)
    first.update(CacheRequest(text=QUESTION, images=[pattern(1)]), "red")
    first.close()
    again = make_engine(persist_directory=str(tmp_path))
    again._warm.join(120)
    assert again.entries.resident.serves("l2_fprint")
    seen = count_store_calls(again)
    hit = again.lookup(CacheRequest(text=QUESTION, images=[pattern(1).resize((80, 80))]))
    assert hit is not None and hit.payload == "red"
    assert not [w for w in seen if w in L2_READS], seen


def test_two_engines_on_one_directory_find_each_others_pictures_through_the_store(tmp_path) -> None:
    a = MLCEngine(persist_directory=str(tmp_path), durable=True)
    b = MLCEngine(persist_directory=str(tmp_path), durable=True)
    try:
        for eng in (a, b):
            eng._warm.join(120)
        b.update(CacheRequest(text=QUESTION, images=[pattern(1)]), "written by b")
        assert not a.entries.resident.serves("l2_fprint")
        hit = a.lookup(CacheRequest(text=QUESTION, images=[pattern(1).resize((80, 80))]))
        assert hit is not None and hit.payload == "written by b"
    finally:
        a.close()
        b.close()


def test_a_text_miss_says_how_close_it_came_from_memory(make_engine) -> None:
    eng = make_engine(durable=True, image_encoder=None, tiers=TierOptions(l1_prescreen=None))
    eng.update(CacheRequest(text="What is the capital of France?"), "Paris")
    seen = count_store_calls(eng)
    lk = eng.lookup_explained(CacheRequest(text="How long do I bake sourdough bread?"))
    assert lk.hit is None and lk.notes["L1"].startswith("best cosine "), lk.notes
    assert not [w for w in seen if w.split()[-1] in RESIDENT_TIERS], seen


def test_vectors_in_memory_zero_asks_the_store_and_a_bad_value_is_refused(make_engine) -> None:
    from mlc_integrations import ConfigurationError, StorageOptions

    eng = make_engine(durable=True, image_encoder=None, storage=StorageOptions(vectors_in_memory=0))
    eng.update(CacheRequest(text="What is the capital of France?"), "Paris")
    assert not eng.entries.resident.serves("l1")
    seen = count_store_calls(eng)
    hit = eng.lookup(CacheRequest(text="What's the capital of France?"))
    assert hit is not None and hit.tier == "L1" and "query l1" in seen
    for bad in (-1, 2.5, True, "many"):
        with pytest.raises(ConfigurationError):
            StorageOptions(vectors_in_memory=bad)


def test_a_store_larger_than_the_warm_start_reads_is_always_asked(make_engine, tmp_path) -> None:
    first = make_engine(persist_directory=str(tmp_path), durable=True, image_encoder=None)
    for i in range(3):
        first.update(CacheRequest(text=f"question number {i}"), f"answer {i}")
    first.close()
    again = make_engine(persist_directory=str(tmp_path), durable=True, image_encoder=None, warm_start=False)
    assert again.entries.preload(limit=2) == 2  # the warm start's read, of a store larger than it reads
    again.update(CacheRequest(text="question number 3"), "answer 3")
    assert not again.entries.census.complete and not again.entries.resident.serves("l1")
    assert again.entries.resident.vectors("l1", [again.key(CacheRequest(text="question number 3")).entry_id]) is None
    hit = again.lookup(CacheRequest(text="question number 1, please"))
    assert hit is not None and hit.payload == "answer 1"  # the store answers
