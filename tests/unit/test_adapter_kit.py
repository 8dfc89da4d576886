"""The kit both adapters share: counters, the fail-open/strict policy, and per-call
lookup tracking across threads and asyncio tasks (no engine, no framework here; the
adapters' own tests drive the same code through LangChain and LlamaIndex)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from typing import Any, Optional

import pytest

from mlc_integrations import Hit, ImageDecodeError, InvalidRequestError, PayloadError, StorageError
from mlc_integrations.adapters.kit import Counters, FailOpen, LookupRecord, LookupTracking

log = logging.getLogger("mlc_integrations.test_kit")


def hit(entry_id: str) -> Hit:
    return Hit(payload={"answer": entry_id}, tier="L0.5", entry_id=entry_id)


def record(entry_id: Optional[str]) -> LookupRecord:
    return LookupRecord(hit(entry_id) if entry_id else None, "chat", f"question for {entry_id}", 0, "scope")


# ---------------------------------------------------------------------------- counters
def test_counters_report_every_name_and_lookups_is_hits_plus_misses() -> None:
    counters = Counters(("hits", "misses", "bad_input"))
    counters.incr("hits")
    counters.incr("misses")
    counters.incr("misses")
    counters.incr("unexpected")  # a name not declared up front is still counted
    merged = counters.merged({"hits": 7}, "adapter", namespace="t1")
    assert merged["hits"] == 7  # the engine's own numbers are left alone
    assert merged["adapter"] == {"hits": 1, "misses": 2, "bad_input": 0, "unexpected": 1, "lookups": 3,
                                 "by_scope": {}, "namespace": "t1"}


def test_lookups_are_counted_per_scope_and_namespace_and_bounded() -> None:
    counters = Counters(("hits", "misses"))
    counters.lookup("model-a", "t1", True)
    counters.lookup("model-a", "t1", False)
    counters.lookup("model-a", "t2", False)
    counters.lookup("model-b", "t1", True)
    assert counters.snapshot() == {"hits": 2, "misses": 2}
    assert counters.by_scope() == {
        "model-a": {"t1": {"lookups": 2, "hits": 1, "misses": 1}, "t2": {"lookups": 1, "hits": 0, "misses": 1}},
        "model-b": {"t1": {"lookups": 1, "hits": 1, "misses": 0}},
    }
    for i in range(Counters.MAX_SCOPES):  # a per-call value in the scope must not grow the table forever
        counters.lookup(f"scope-{i}", "t1", False)
    table = counters.by_scope()
    pairs = sum(len(per_namespace) for per_namespace in table.values())
    assert pairs == Counters.MAX_SCOPES + 1 and "scope-252" in table and "scope-253" not in table
    assert table[Counters.OTHER_SCOPES]["t1"]["lookups"] == 3  # the three pairs that came after the bound


def test_counters_are_exact_under_threads() -> None:
    counters = Counters(("hits",))

    def work() -> None:
        for _ in range(2000):
            counters.incr("hits")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counters.snapshot()["hits"] == 8000


# ---------------------------------------------------------------------------- fail-open / strict
@pytest.fixture
def policy() -> tuple[FailOpen, list[bool]]:
    strict = [False]
    return FailOpen(Counters(("bad_input",)), lambda: strict[0], log), strict


def test_fail_open_counts_logs_and_returns_none(policy: Any, caplog: pytest.LogCaptureFixture) -> None:
    guard, _ = policy

    def broken_image() -> None:
        raise ImageDecodeError("messages[0].content[1]: invalid base64")

    def bug() -> None:
        raise KeyError("kwargs")

    with caplog.at_level(logging.DEBUG, logger="mlc_integrations"):
        assert guard.attempt("prompt cannot be keyed", broken_image, counter="bad_input", outcome="lookup skipped") is None
        assert guard.attempt("prompt cannot be keyed", bug, counter="bad_input") is None
        assert guard.attempt("fine", lambda: 42) == 42
    assert guard.counters.snapshot()["bad_input"] == 2
    expected, unexpected = caplog.records
    assert expected.levelno == logging.INFO and unexpected.levelno == logging.WARNING  # a bug is louder
    assert expected.getMessage() == ("prompt cannot be keyed (lookup skipped): ImageDecodeError: "
                                     "messages[0].content[1]: invalid base64")
    assert "KeyError" in unexpected.getMessage()


def test_strict_raises_typed_errors_and_still_counts(policy: Any) -> None:
    guard, strict = policy
    strict[0] = True  # read at each failure, not when the guard was built
    original = ImageDecodeError("messages[1].content[0] (image_url): invalid base64")
    with pytest.raises(ImageDecodeError) as err:
        guard.fail("prompt cannot be keyed", original, counter="bad_input")
    assert err.value is original  # an MLCError is raised unchanged: it already names the block
    with pytest.raises(PayloadError, match=r"^response cannot be stored: TypeError: no JSON for set") as wrapped:
        guard.attempt("response cannot be stored", lambda: (_ for _ in ()).throw(TypeError("no JSON for set")),
                      counter="bad_input", error=PayloadError)
    assert isinstance(wrapped.value.__cause__, TypeError)
    with pytest.raises(InvalidRequestError):  # the default wrapper type
        guard.fail("cannot key", ValueError("x"))
    assert guard.counters.snapshot()["bad_input"] == 2


class _Engine:
    """The one engine method an unreadable entry needs."""

    def __init__(self, fails: bool = False) -> None:
        self.deleted: list[str] = []
        self.fails = fails

    def delete(self, entry_id: str) -> bool:
        if self.fails:
            raise StorageError("store unreachable")
        self.deleted.append(entry_id)
        return True


def test_unreadable_entry_is_deleted_then_counted(policy: Any) -> None:
    guard, strict = policy
    engine = _Engine()
    guard.unreadable_entry(engine, hit("e1"), ValueError("not a stored chat response"))
    assert engine.deleted == ["e1"] and guard.counters.snapshot()["unreadable_entries"] == 1
    guard.unreadable_entry(_Engine(fails=True), hit("e2"), ValueError("x"))  # fail-open: a failed delete too
    assert guard.counters.snapshot()["unreadable_entries"] == 2
    strict[0] = True
    engine = _Engine()
    with pytest.raises(PayloadError, match="cache entry e3 is unreadable"):
        guard.unreadable_entry(engine, hit("e3"), ValueError("x"))
    assert engine.deleted == ["e3"]  # removed before raising: the next call stores a fresh answer


# ---------------------------------------------------------------------------- lookup tracking
def test_a_new_call_replaces_the_previous_outcome() -> None:
    tracking = LookupTracking()
    assert tracking.last_hit is None and tracking.last_lookup is None
    tracking.record(record("a"))
    assert tracking.last_hit is not None and tracking.last_hit.entry_id == "a"
    tracking.record(record(None))
    assert tracking.last_hit is None and tracking.last_lookup.text == "question for None"


def test_instances_do_not_see_each_other() -> None:
    one, two = LookupTracking(), LookupTracking()
    one.record(record("a"))
    assert two.last_lookup is None


async def test_a_lookup_in_a_child_task_replaces_the_callers_previous_outcome() -> None:
    """LangChain's ``ainvoke`` looks up in a task it creates (``asyncio.gather``); agents
    call a LlamaIndex LLM in theirs. The caller must see that call's outcome, not the
    outcome of its own previous (sync) call."""
    tracking = LookupTracking()
    tracking.record(record("sync-hit"))

    async def child(entry_id: Optional[str]) -> None:
        tracking.record(record(entry_id))

    await asyncio.gather(child(None))
    assert tracking.last_lookup is not None and tracking.last_hit is None
    await asyncio.create_task(child("async-hit"))
    assert tracking.last_hit is not None and tracking.last_hit.entry_id == "async-hit"

    async def grandchild_via_child() -> None:
        await asyncio.gather(child("deep"))

    await asyncio.create_task(grandchild_via_child())
    assert tracking.last_hit.entry_id == "deep"


async def test_sibling_tasks_each_read_their_own_lookup() -> None:
    tracking = LookupTracking()
    tracking.record(record("before"))
    both_recorded = asyncio.Barrier(2)
    seen: dict[str, Optional[str]] = {}

    async def call(name: str, entry_id: Optional[str]) -> None:
        tracking.record(record(entry_id))
        await both_recorded.wait()  # the other sibling has recorded too
        got = tracking.last_hit
        seen[name] = got.entry_id if got is not None else None

    await asyncio.gather(call("hit", "h"), call("miss", None))
    assert seen == {"hit": "h", "miss": None}


def test_plain_threads_are_isolated_and_copied_contexts_report_back() -> None:
    tracking = LookupTracking()
    tracking.record(record("main"))
    results: dict[str, Optional[str]] = {}

    def plain(entry_id: str) -> None:  # a new thread starts with an empty context
        tracking.record(record(entry_id))
        results[entry_id] = tracking.last_hit.entry_id

    t = threading.Thread(target=plain, args=("worker",))
    t.start()
    t.join()
    assert results == {"worker": "worker"} and tracking.last_hit.entry_id == "main"

    # LangChain's batch runs each input in a worker thread with a copy of the caller's context
    ctx = contextvars.copy_context()
    t = threading.Thread(target=ctx.run, args=(plain, "batch-item"))
    t.start()
    t.join()
    assert tracking.last_hit.entry_id == "batch-item"


def test_track_collects_lookups_of_child_threads() -> None:
    tracking, other = LookupTracking(), LookupTracking()
    with tracking.track() as seen:
        tracking.record(record("a"))
        other.record(record("not mine"))
        ctx = contextvars.copy_context()
        t = threading.Thread(target=ctx.run, args=(tracking.record, record(None)))
        t.start()
        t.join()
    tracking.record(record("after the block"))
    assert [r.hit.entry_id if r.hit else None for r in seen.records] == ["a", None]
    assert seen.misses == 1 and [h.entry_id for h in seen.hits] == ["a"] and seen.last_hit is None


def test_open_lets_a_caller_that_never_looked_up_see_its_child_tasks_lookup() -> None:
    """An adapter that owns the entry point (CachedChatModel.ainvoke) opens the caller's
    slot first; without it a first-ever ``ainvoke`` has nothing to report back to."""
    tracking = LookupTracking()

    async def child() -> None:
        tracking.record(record("child-hit"))

    async def caller(open_first: bool) -> Optional[str]:
        if open_first:
            tracking.open()
        await asyncio.gather(child())
        return tracking.last_hit.entry_id if tracking.last_hit is not None else None

    # each caller runs in an empty context, as a fresh program's first call does
    assert contextvars.Context().run(asyncio.run, caller(False)) is None
    assert contextvars.Context().run(asyncio.run, caller(True)) == "child-hit"


def test_record_reason_says_why_a_lookup_missed() -> None:
    from mlc_integrations import Lookup, Refusal

    refusal = Refusal(tier="L1", entry_id="e" * 16, scores={"text": 0.93, "verifier": 0.2},
                      thresholds={"text": 0.8, "verifier": 0.5}, reason="verifier", detail="negation")
    refused = LookupRecord.of(None, "chat", "s", Lookup(hit=None, refused=refusal, tiers={"L0.5": "miss", "L1": "refused"}))
    assert refused.reason.startswith("refused tier=L1") and "verifier=0.200<0.500" in refused.reason
    plain = LookupRecord.of(None, "chat", "s", Lookup(hit=None, tiers={"L0.5": "miss", "L1": "miss"}))
    assert plain.reason == "no stored entry cleared the similarity thresholds [L0.5:miss L1:miss]"
    assert "could not be keyed" in LookupRecord.of(None, "invalid", "s").reason
    assert "lookup failed" in LookupRecord.of(None, "chat", "s", Lookup(hit=None)).reason
    found = Lookup(hit=hit("e1"), tiers={"L0.5": "hit"})
    assert LookupRecord.of(None, "chat", "s", found).reason == "" and LookupRecord.of(None, "chat", "s", found).hit
    dropped = LookupRecord.of(None, "chat", "s", found, note="entry e1 was unreadable")
    assert dropped.hit is None and dropped.explain() == "miss: entry e1 was unreadable"
