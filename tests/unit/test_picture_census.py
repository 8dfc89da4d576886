"""The store's picture census: where this process is the only writer, a lookup with pictures
nobody stored asks neither the exact tier's storage nor L1's (store/census.py)."""

from __future__ import annotations

from mlc_integrations import CacheRequest, MLCEngine, TierOptions
from mlc_integrations.store.dirlock import DirectoryLock
from mlc_integrations.tiers.base import NO_ENTRY_WITH_THESE_PICTURES
from tests.helpers import count_store_calls as _calls, pattern

QUESTION = "What color is the shape?"


def test_new_pictures_cost_the_exact_tier_and_l1_no_storage_call(make_engine) -> None:
    eng = make_engine(durable=True, tiers=TierOptions(l2_prescreen=None), image_encoder=None)
    eng.update(CacheRequest(text=QUESTION, images=[pattern(1)]), "red")
    seen = _calls(eng)
    lk = eng.lookup_explained(CacheRequest(text=QUESTION, images=[pattern(2)]))
    assert lk.hit is None and not seen, seen
    assert lk.notes["L0.5"] == NO_ENTRY_WITH_THESE_PICTURES and lk.notes["L1"] == NO_ENTRY_WITH_THESE_PICTURES
    # the stored picture is still found by both tiers
    assert eng.lookup(CacheRequest(text=QUESTION, images=[pattern(1)])).tier == "L0.5"
    hit = eng.lookup(CacheRequest(text="What colour is the shape?", images=[pattern(1)]))
    assert hit is not None and hit.tier == "L1"


def test_a_reopened_directory_knows_its_pictures_after_the_warm_start(make_engine, tmp_path) -> None:
    first = make_engine(persist_directory=str(tmp_path), durable=True, image_encoder=None)
    first.update(CacheRequest(text=QUESTION, images=[pattern(1)]), "red")
    first.close()
    again = make_engine(persist_directory=str(tmp_path), image_encoder=None)
    assert again._warm is not None
    again._warm.join(120)
    assert again.entries.census.complete
    assert again.lookup(CacheRequest(text=QUESTION, images=[pattern(1)])).payload == "red"
    seen = _calls(again)
    lk = again.lookup_explained(CacheRequest(text=QUESTION, images=[pattern(3)]))
    assert lk.hit is None and lk.notes["L0.5"] == NO_ENTRY_WITH_THESE_PICTURES and not seen, seen


def test_two_engines_on_one_directory_ask_the_store(tmp_path) -> None:
    # Both write the directory's collections: neither knows all the pictures stored.
    a = MLCEngine(persist_directory=str(tmp_path), durable=True, image_encoder=None)
    b = MLCEngine(persist_directory=str(tmp_path), durable=True, image_encoder=None)
    try:
        for eng in (a, b):
            eng._warm.join(120)  # each read the (empty) store whole at its warm start
        b.update(CacheRequest(text=QUESTION, images=[pattern(1)]), "written by b")
        assert not a.entries.census.complete and not b.entries.census.complete
        hit = a.lookup(CacheRequest(text=QUESTION, images=[pattern(1)]))
        assert hit is not None and hit.payload == "written by b"
    finally:
        a.close()
        b.close()


def test_a_directory_is_shared_from_the_second_holder_until_the_last_lets_go(tmp_path) -> None:
    one = DirectoryLock.acquire(str(tmp_path))
    assert one.sole_holder()
    two = DirectoryLock.acquire(str(tmp_path))
    assert not one.sole_holder() and not two.sole_holder()
    two.release()
    assert not one.sole_holder()  # what the other engine wrote meanwhile is not in one's census
    one.release()
    three = DirectoryLock.acquire(str(tmp_path))
    try:
        assert three.sole_holder()  # a fresh holder reads the whole store at its warm start
    finally:
        three.release()
