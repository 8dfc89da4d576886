"""Write-behind: update() returns before Chroma is written, lookups see pending entries,
the queue is bounded, flush/close drain it, a failed write is counted, never raised."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import pytest

from mlc_integrations import CacheRequest, MLCEngine
from tests.helpers import pattern
from mlc_integrations import TierOptions, WriteOptions


def req(text: str, images: Any = (), **kw: Any) -> CacheRequest:
    kw.setdefault("scope", "m")
    return CacheRequest(text=text, images=list(images), **kw)


class Gate:
    """Holds every storage write until opened (the store's labelled call hook)."""

    def __init__(self, eng: MLCEngine) -> None:
        self.open = threading.Event()
        self.writes: list[str] = []
        orig = eng.store.call

        def call(what: str, fn: Callable[[], Any]) -> Any:
            if what.split()[0] in ("upsert", "update"):
                assert self.open.wait(30), "gate never opened"
                self.writes.append(what)
            return orig(what, fn)

        eng.store.call = call  # type: ignore[method-assign]


def stored_count(eng: MLCEngine) -> int:
    return eng.entries.count()  # the store's own count, without draining pending writes


def test_update_returns_before_the_write_and_lookups_see_the_pending_entry(make_engine) -> None:
    eng = make_engine(image_encoder=None)
    gate = Gate(eng)
    eng.update(req("What is the capital of France?"), "Paris")  # returns with the writer held
    assert stored_count(eng) == 0 and len(eng.pending) == 1
    hit = eng.lookup(req("What is the capital of France?"))
    assert hit is not None and hit.tier == "L0.5" and hit.payload == "Paris"
    hit = eng.lookup(req("What's the capital of France?"))
    assert hit is not None and hit.tier == "L1" and hit.payload == "Paris"
    gate.open.set()
    eng.flush()
    assert stored_count(eng) == 1 and len(eng.pending) == 0
    assert gate.writes[:3] == ["upsert exact", "upsert l1_static", "upsert l1"]  # response first, vectors last


def test_pending_l2_entry_is_found_by_its_picture(make_engine) -> None:
    eng = make_engine(l2_image_threshold=0.99, l2_prompt_threshold=0.8, tiers=TierOptions(exact=False, l1=False), verifier="off")
    gate = Gate(eng)
    img = pattern(3)
    try:
        eng.update(req("What shape is in this picture?", [img]), "a circle")
        hit = eng.lookup(req("What shape is in the picture?", [img]))
        assert hit is not None and hit.tier == "L2" and hit.payload == "a circle"
        assert eng.lookup(req("What shape is in the picture?", [img], scope="other")) is None  # another partition
    finally:
        gate.open.set()
    eng.flush()
    assert gate.writes[:4] == ["upsert exact", "upsert l2_fprint", "upsert l2_image", "upsert l2_prompt"]


def test_queue_is_bounded_update_waits_for_the_writer(make_engine) -> None:
    eng = make_engine(image_encoder=None, writes=WriteOptions(max_pending=2))
    gate = Gate(eng)
    eng.update(req("first question here"), 1)
    eng.update(req("second question here"), 2)
    done = threading.Event()

    def third() -> None:
        eng.update(req("third question here"), 3)
        done.set()

    t = threading.Thread(target=third)
    t.start()
    assert not done.wait(0.3)  # back-pressure: two entries wait, the third update waits
    gate.open.set()
    assert done.wait(30)
    t.join()
    eng.flush()
    assert stored_count(eng) == 3


def test_close_drains_and_a_reopened_cache_has_everything(make_engine, tmp_path) -> None:
    d = str(tmp_path / "wb")
    eng = make_engine(persist_directory=d, image_encoder=None)
    for i in range(40):
        eng.update(req(f"question number {i} about item {i * 13}"), i)
    eng.close()
    again = make_engine(persist_directory=d, image_encoder=None)
    assert again.count() == 40
    assert again.lookup(req("question number 17 about item 221")).payload == 17


def test_a_failed_background_write_is_counted_never_raised(make_engine) -> None:
    eng = make_engine(image_encoder=None)
    orig = eng.store.call

    def failing(what: str, fn: Callable[[], Any]) -> Any:
        if what.startswith("upsert"):
            raise RuntimeError("disk full")
        return orig(what, fn)

    eng.store.call = failing  # type: ignore[method-assign]
    assert eng.update(req("Who wrote Hamlet?"), "Shakespeare") is not None
    eng.flush()
    st = eng.stats()
    assert st["updates_failed"] == 1 and st["errors"].get("update:RuntimeError") == 1
    assert eng.lookup(req("Who wrote Hamlet?")) is None  # dropped, not half-stored
    eng.store.call = orig  # type: ignore[method-assign]
    eng.update(req("Who wrote Hamlet?"), "Shakespeare")
    assert eng.lookup(req("Who wrote Hamlet?")).payload == "Shakespeare"


def test_durable_and_strict_write_on_the_callers_path(make_engine) -> None:
    for eng in (make_engine(durable=True, image_encoder=None), make_engine(strict=True, image_encoder=None)):
        assert eng.pending is None and eng.durable
        eng.update(req("How many legs does a spider have?"), "eight")
        assert stored_count(eng) == 1
    assert make_engine(strict=True, durable=False, image_encoder=None).pending is not None


def test_delete_and_clear_see_pending_entries(make_engine) -> None:
    eng = make_engine(image_encoder=None)
    gate = Gate(eng)
    eid = eng.update(req("What is two plus two?"), "4")
    gate.open.set()
    assert eng.delete(eid)  # waits for the write, then deletes: nothing comes back later
    assert eng.lookup(req("What is two plus two?")) is None and eng.count() == 0
    eng.update(req("What is three plus three?"), "6")
    eng.clear()
    assert eng.count() == 0


def test_a_newer_version_written_while_the_older_is_in_flight_wins(make_engine) -> None:
    eng = make_engine(image_encoder=None)
    gate = Gate(eng)
    eng.update(req("Which version is current?"), "old")
    eng.update(req("Which version is current?"), "new")
    assert eng.lookup(req("Which version is current?")).payload == "new"
    gate.open.set()
    eng.flush()
    assert eng.lookup(req("Which version is current?")).payload == "new" and eng.count() == 1


@pytest.mark.parametrize("n_threads", [4])
def test_concurrent_updates_and_lookups_lose_nothing(make_engine, n_threads: int) -> None:
    eng = make_engine(image_encoder=None, writes=WriteOptions(max_pending=8))
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(25):
                eng.update(req(f"thread {t} question {i} on subject {t * 100 + i}"), [t, i])
                hit = eng.lookup(req(f"thread {t} question {i} on subject {t * 100 + i}"))
                assert hit is not None and hit.payload == [t, i]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert eng.count() == n_threads * 25 and eng.stats()["updates_failed"] == 0


def test_stats_read_and_never_wait_for_the_writer(make_engine) -> None:
    import threading

    from mlc_integrations import CacheRequest

    eng = make_engine(image_encoder=None)
    gate, entered = threading.Event(), threading.Event()
    real = eng.entries.put_many

    def held(batch):  # the writer blocks inside its storage write until the test lets it go
        entered.set()
        gate.wait(30)
        return real(batch)

    eng.pending._write = held  # noqa: SLF001 - the test holds the writer mid-write
    eng.update(CacheRequest(text="Which planet has the most moons?"), {"text": "Saturn"})
    assert entered.wait(30)
    done = threading.Event()
    result = {}
    threading.Thread(target=lambda: (result.update(eng.stats()), done.set()), daemon=True).start()
    assert done.wait(10), "stats() waited for the write-behind queue"
    gate.set()
    assert result["write_behind_depth"] >= 0 and result["entries"] == 0
    eng.flush()
    assert eng.stats()["entries"] == 1 and eng.stats()["write_behind_depth"] == 0

# ---------------------------------------------------------------------- deferred vectors of pending entries
def _pending_entry(eid: str, part: str, calls: dict[str, int], *, images: int = 0) -> Any:
    """A pending entry whose text (and image) vectors are deferred; ``calls`` counts the encoder runs."""
    import numpy as np

    from mlc_integrations.store.entries import EntryKeys, EntryMeta, NewEntry

    vec = np.ones(4, dtype=np.float32) / 2.0

    def embed_text() -> Any:
        calls[f"text:{eid}"] = calls.get(f"text:{eid}", 0) + 1
        return vec

    def embed_images() -> Any:
        calls[f"images:{eid}"] = calls.get(f"images:{eid}", 0) + 1
        return np.stack([vec] * images)

    keys = EntryKeys(scope="s", ns="n", ctx="c", imgs="i", n_images=images)
    return NewEntry(entry_id=eid, document='"x"', meta=EntryMeta(keys, created_at=0.0, last_access=0.0),
                    partitions={"l1": part, "l2_prompt": part, "l2_image": [part] * images},
                    embed_text=embed_text, text_model="t",
                    prompt_vec=vec if images else None, embed_images=embed_images if images else None)


def _held_queue() -> Any:
    """PendingEntries whose writer never finishes a write while the test runs."""
    from mlc_integrations.store.writebehind import PendingEntries

    release = threading.Event()
    pending = PendingEntries(lambda batch: release.wait(30), after_write=lambda: None, on_error=lambda e, n: None)
    return pending, release


def test_a_lookup_never_encodes_the_pending_entries_of_another_partition() -> None:
    import numpy as np

    calls: dict[str, int] = {}
    pending, release = _held_queue()
    try:
        pending.submit(_pending_entry("held", "tenant-b", calls))  # taken by the (held) writer
        for i in range(3):
            pending.submit(_pending_entry(f"b{i}", "tenant-b", calls, images=2))
        pending.submit(_pending_entry("a0", "tenant-a", calls, images=2))
        q = np.ones(4, dtype=np.float32) / 2.0
        assert [r[0] for r in pending.neighbours("l1", q, "tenant-a", 0.9)] == ["a0"]
        assert [r[0] for r in pending.neighbours("l2_image", q, "tenant-a", 0.9)] == ["a0#0", "a0#1"]
        assert set(pending.vectors("l1", ["a0"])) == {"a0"}
        assert set(pending.vectors("l2_image", ["a0#1"])) == {"a0#1"}
        assert calls == {"text:a0": 1, "images:a0": 1}  # the other tenant's entries: no model work
    finally:
        release.set()
        pending.close()


def test_two_threads_asking_for_one_deferred_vector_run_the_encoder_once() -> None:
    import numpy as np

    from mlc_integrations.store.entries import EntryKeys, EntryMeta, NewEntry

    runs = []
    inside, release, second_run = threading.Event(), threading.Event(), threading.Event()

    def embed_text() -> Any:
        runs.append(threading.current_thread().name)
        if len(runs) > 1:
            second_run.set()
        inside.set()
        assert release.wait(30)
        return np.full(4, float(len(runs)), dtype=np.float32)

    e = NewEntry(entry_id="e", document='"x"', partitions={"l1": "p"}, embed_text=embed_text,
                 meta=EntryMeta(EntryKeys("s", "n", "c", "i", 0), created_at=0.0, last_access=0.0))
    got: dict[str, Any] = {}
    first = threading.Thread(target=lambda: got.setdefault("writer", e.text_vector()), name="writer")
    first.start()
    assert inside.wait(30)  # the writer is inside the encoder
    second = threading.Thread(target=lambda: got.setdefault("lookup", e.text_vector()), name="lookup")
    second.start()
    second_run.wait(1.0)  # an unlocked second computation would start the encoder again by now
    release.set()
    first.join(30)
    second.join(30)
    assert runs == ["writer"]
    assert got["writer"] is got["lookup"]


def test_a_pending_pictures_descriptor_does_not_wait_for_its_image_vectors() -> None:
    # The writer runs the image tower for a pending entry (slow); a lookup that found the
    # entry by fingerprint needs only its descriptor, computed on its own.
    import numpy as np

    from mlc_integrations.store.entries import EntryKeys, EntryMeta, NewEntry

    inside, release = threading.Event(), threading.Event()

    def embed_images() -> Any:
        inside.set()
        assert release.wait(30)
        return np.ones((1, 4), dtype=np.float32)

    e = NewEntry(entry_id="e", document='"x"', partitions={"l2_image": ["p"]}, embed_images=embed_images,
                 describe_images=lambda: ["descriptor"],
                 meta=EntryMeta(EntryKeys("s", "n", "c", "i", 0), created_at=0.0, last_access=0.0))
    writer = threading.Thread(target=e.image_vectors, name="writer")
    writer.start()
    try:
        assert inside.wait(30)  # the writer is inside the image tower
        got: list[Any] = []
        lookup = threading.Thread(target=lambda: got.append(e.image_descriptors()), name="lookup")
        lookup.start()
        lookup.join(5)
        assert got == [["descriptor"]], "the descriptor waited for the image tower"
    finally:
        release.set()
        writer.join(30)
    assert e.image_vecs is not None and e.embed_images is None


# ---------------------------------------------------------------------- the writer yields to lookups
def _recording_queue(**kw: Any) -> Any:
    from mlc_integrations.store.writebehind import PendingEntries

    written = threading.Event()
    pending = PendingEntries(lambda batch: written.set(), after_write=lambda: None, on_error=lambda e, n: None, **kw)
    return pending, written


def test_the_writer_waits_for_the_running_lookup_then_writes() -> None:
    pending, written = _recording_queue(max_delay_s=30.0)
    try:
        pending.lookup_started()
        pending.submit(_pending_entry("e1", "p", {}))
        assert not written.wait(0.3), "wrote while a lookup was reading the store"
        assert pending.get("e1") is not None  # ... and the entry stays visible meanwhile
        pending.lookup_ended(missed=False)
        assert written.wait(10), "the write did not follow the lookup"
    finally:
        pending.close()


def test_a_miss_lets_the_writer_write_while_its_caller_calls_the_model() -> None:
    pending, written = _recording_queue(max_delay_s=30.0, quiet_s=30.0)
    try:
        pending.submit(_pending_entry("e1", "p", {}))
        pending.lookup_started()  # the next request's lookup, right after the update
        pending.lookup_ended(missed=False)  # a hit: the caller goes on at once
        assert not written.wait(0.3), "wrote between two lookups of a busy caller"
        pending.lookup_started()
        pending.lookup_ended(missed=True)  # a miss: the caller now waits for its model
        assert written.wait(10)
    finally:
        pending.close()


def test_no_entry_waits_longer_than_the_delay_bound_for_a_quiet_moment() -> None:
    pending, written = _recording_queue(max_delay_s=0.2)
    try:
        pending.lookup_started()  # a lookup that never ends (or lookups back to back)
        pending.submit(_pending_entry("e1", "p", {}))
        assert written.wait(10)
    finally:
        pending.lookup_ended(missed=False)
        pending.close()


def test_drain_writes_at_once_even_during_a_lookup() -> None:
    pending, written = _recording_queue(max_delay_s=30.0)
    try:
        pending.lookup_started()
        pending.submit(_pending_entry("e1", "p", {}))
        assert pending.drain(10) and written.is_set()
    finally:
        pending.lookup_ended(missed=False)
        pending.close()


def test_an_update_after_a_long_model_call_is_not_written_into_the_next_lookup() -> None:
    """A streaming caller: lookup, miss, a model call far longer than ``quiet_s``, update,
    and its next lookup at once. The store was quiet during the model call, but the update is
    not a quiet moment: the writer waits ``quiet_s`` from it (a write started at the update
    ran beside the next lookup and made it wait)."""
    pending, written = _recording_queue(max_delay_s=30.0, quiet_s=1.0)
    try:
        pending.lookup_started()
        pending.lookup_ended(missed=False)
        time.sleep(1.2)  # the caller's model call
        pending.submit(_pending_entry("e1", "p", {}))
        assert not written.wait(0.5), "the write started at the update, beside the caller's next lookup"
        assert written.wait(10), "no write after a quiet moment"
    finally:
        pending.close()
