"""Eviction policies are a table: each ranks entries, the lowest go first."""

from __future__ import annotations

import pytest

from mlc_integrations import CacheRequest
from mlc_integrations.store.eviction import EVICTION_POLICIES, AccessLog, EntryAge
from mlc_integrations import StorageOptions


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def req(text: str) -> CacheRequest:
    return CacheRequest(text=text, scope="m")


QUESTIONS = ["how tall is the eiffel tower", "who painted the mona lisa", "what is the boiling point of water"]


@pytest.mark.parametrize("policy, survivor, evicted", [
    ("lru", 0, 1),   # the oldest entry was read, so the next oldest goes
    ("fifo", 1, 0),  # reads do not matter: the first stored goes
])
def test_policy_decides_which_entry_leaves(make_engine, policy: str, survivor: int, evicted: int) -> None:
    clock = Clock()
    eng = make_engine(max_entries=3, clock=clock, image_encoder=None, storage=StorageOptions(eviction_policy=policy))
    for i, q in enumerate(QUESTIONS):
        eng.update(req(q), i)
        clock.now += 1
    assert eng.lookup(req(QUESTIONS[0])).payload == 0  # read the oldest
    clock.now += 1
    eng.update(req("name a prime number larger than ten"), 3)
    assert eng.count() == 3 and eng.stats()["evictions"] == 1
    assert eng.lookup(req(QUESTIONS[survivor])) is not None
    assert eng.lookup(req(QUESTIONS[evicted])) is None
    assert eng.stats()["config"]["eviction_policy"] == policy


def test_unknown_policy_is_refused_with_the_choices(make_engine) -> None:
    with pytest.raises(ValueError, match="fifo"):
        make_engine(storage=StorageOptions(eviction_policy="random"))


def test_policy_ranks_by_its_own_clock() -> None:
    old_used, new_idle = EntryAge("a", created_at=1.0, last_access=9.0), EntryAge("b", created_at=5.0, last_access=5.0)
    assert min([old_used, new_idle], key=EVICTION_POLICIES["lru"]) is new_idle
    assert min([old_used, new_idle], key=EVICTION_POLICIES["fifo"]) is old_used


def test_deleted_entries_leave_the_access_log(make_engine) -> None:
    eng = make_engine(image_encoder=None)
    eid = eng.update(req(QUESTIONS[0]), 0)
    assert eng.eviction.access.get(eid) is not None
    eng.delete(eid)
    assert eng.eviction.access.get(eid) is None
    log = AccessLog()
    log.touch("x", 1.0)
    log.discard(["x", "never-there"])
    assert log.snapshot() == {}
