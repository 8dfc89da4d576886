"""A tier whose unfiltered queries keep coming back full of other partitions' rows (one
question asked in many namespaces, or about many pictures) queries its own partition first.

The answer is the same either way (the filtered query was already the fallback); what
changes is one storage round trip per lookup. (The engines here ask Chroma on every query:
the only writer's in-memory copy of the vectors, store/resident.py, asks it nothing.)"""

from __future__ import annotations

from mlc_integrations import CacheRequest, StorageOptions, TierOptions
from mlc_integrations.store.crowding import CROWD_RESAMPLE, CROWD_WINDOW

QUESTION = "How do I cancel my subscription?"


def _queries(eng, tier: str) -> list[str]:
    seen: list[str] = []
    orig = eng.store.call

    def counting(what, fn):
        if what == f"query {tier}":
            seen.append(what)
        return orig(what, fn)

    eng.store.call = counting
    return seen


def test_crowded_l1_queries_go_to_the_partition_first_and_find_the_same_entry(make_engine) -> None:
    eng = make_engine(durable=True, tiers=TierOptions(exact=False, l1_prescreen=None),
                      storage=StorageOptions(vectors_in_memory=0))
    for i in range(40):  # the same question in 40 tenants: the unfiltered top 16 is all other tenants (exact tier off: L1 answers the repeat)
        eng.update(CacheRequest(text=QUESTION, namespace=f"tenant-{i}"), f"answer for tenant {i}")
    seen = _queries(eng, "l1")
    per_lookup = []
    for i in range(CROWD_WINDOW + CROWD_RESAMPLE):
        before = len(seen)
        hit = eng.lookup(CacheRequest(text=QUESTION, namespace=f"tenant-{i}"))
        assert hit is not None and hit.tier == "L1" and hit.payload == f"answer for tenant {i}"
        per_lookup.append(len(seen) - before)
    assert all(n >= 2 for n in per_lookup[:CROWD_WINDOW]), per_lookup  # unfiltered, then the partition
    later = per_lookup[CROWD_WINDOW:]
    assert later.count(1) == CROWD_RESAMPLE - 1, per_lookup  # straight to the partition ...
    assert any(n >= 2 for n in later), per_lookup  # ... and now and then the unfiltered query again


def test_uncrowded_queries_stay_unfiltered(make_engine) -> None:
    eng = make_engine(durable=True, tiers=TierOptions(exact=False, l1_prescreen=None),
                      storage=StorageOptions(vectors_in_memory=0))
    eng.update(CacheRequest(text=QUESTION), "Settings > Billing > Cancel.")
    seen = _queries(eng, "l1")
    for _ in range(CROWD_WINDOW + CROWD_RESAMPLE):
        before = len(seen)
        assert eng.lookup(CacheRequest(text=QUESTION)) is not None
        assert len(seen) - before == 1
    assert eng.stats()["hits"] == CROWD_WINDOW + CROWD_RESAMPLE
