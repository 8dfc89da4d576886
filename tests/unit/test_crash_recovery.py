"""A process killed mid-write leaves a cache that opens and answers correctly.

Two complementary checks:

* real SIGKILLs: a writer process doing mixed updates / overwrites / deletes on an
  embedded persistent Chroma is killed at random points, 20 times over; after each
  kill a fresh process reopens the directory and checks every key against the
  writer's journal (no vector without its response, no response for the wrong
  request, every acknowledged write still there);
* a deterministic in-process "crash" after every single write step of update and
  delete (the SIGKILLs land wherever the scheduler puts them; this covers each
  gap between two Chroma writes on purpose, L2 included).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from mlc_integrations import CacheRequest, MLCEngine
from tests.helpers import pattern
from tests.integration.workers import crash_verify, crash_writer, expected_states, mp_context

CI_KILLS = 20
SOAK_KILLS = 200


def _wait_for(journal: Path, pred: Callable[[list[dict[str, Any]]], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            events = [json.loads(x) for x in journal.read_text().splitlines() if x.strip()]
        except (OSError, ValueError):
            events = []
        if pred(events):
            return True
        time.sleep(0.01)
    return False


def run_kill_cycles(tmp_path: Path, kills: int, seed: int) -> dict[str, int]:
    ctx = mp_context()
    rng = random.Random(seed)
    path, journal = str(tmp_path / "cache"), tmp_path / "journal.jsonl"
    totals = {"kills": 0, "kills_before_first_ack": 0, "keys_checked": 0,
              "acked_ops": 0, "exact_hits": 0, "l1_hits": 0, "uncertain_keys": 0}
    for cycle in range(kills):
        n_before = len(journal.read_text().splitlines()) if journal.exists() else 0
        writer = ctx.Process(target=crash_writer, args=(path, str(journal), seed * 1000 + cycle, 1_000 * (cycle + 1)))
        writer.start()
        early = cycle % 5 == 0  # every fifth kill lands in the very first update (collection creation included)

        def ready(events: list[dict[str, Any]]) -> bool:
            mine = events[n_before:]
            if early:
                return any(e["ev"] == "begin" for e in mine)
            return sum(e["ev"] == "end" for e in mine) >= 1

        assert _wait_for(journal, ready, timeout=60), "writer made no progress"
        time.sleep(rng.uniform(0.0, 0.05) if early else rng.uniform(0.0, 0.6))
        os.kill(writer.pid, signal.SIGKILL)
        writer.join(30)
        assert writer.exitcode == -signal.SIGKILL
        events = [json.loads(x) for x in journal.read_text().splitlines()[n_before:] if x.strip().endswith("}")]
        acked = sum(e["ev"] == "end" for e in events)
        totals["kills"] += 1
        totals["kills_before_first_ack"] += acked == 0
        totals["acked_ops"] += acked
        assert not any(e["ev"] == "end" and not e["ok"] for e in events), "an update failed without a crash"

        report_path = tmp_path / f"verify-{cycle}.json"
        verifier = ctx.Process(target=crash_verify, args=(path, str(journal), str(report_path)))
        verifier.start()
        verifier.join(120)
        assert verifier.exitcode == 0, f"verifier exit code {verifier.exitcode}"
        report = json.loads(report_path.read_text())
        assert report["problems"] == [], f"after kill {cycle + 1}: {report['problems'][:10]}"
        checked = report["checked"]
        totals["keys_checked"] = checked["keys"]
        totals["uncertain_keys"] = checked["in_flight"]
        totals["exact_hits"] += checked["exact_hits"]
        totals["l1_hits"] += checked["l1_hits"]
    return totals


def test_sigkill_writer_20_times_reopens_and_answers_correctly(tmp_path: Path) -> None:
    totals = run_kill_cycles(tmp_path, CI_KILLS, seed=8)
    print(f"crash test: {totals}")  # shown with -s / -rA; the figures quoted in docs/operations.md
    assert totals["kills"] == CI_KILLS
    assert totals["acked_ops"] > CI_KILLS  # the writers really wrote between kills
    assert totals["exact_hits"] > 0 and totals["l1_hits"] > 0  # both tiers were checked, not just misses
    # The journal knows every key ever written; acknowledged ones were all found (checked in the verifier).
    assert totals["keys_checked"] == len(expected_states(str(tmp_path / "journal.jsonl")))


@pytest.mark.slow
def test_sigkill_writer_soak(tmp_path: Path) -> None:
    totals = run_kill_cycles(tmp_path, SOAK_KILLS, seed=88)
    print(f"crash soak: {totals}")
    assert totals["kills"] == SOAK_KILLS
    assert totals["exact_hits"] > 0 and totals["l1_hits"] > 0


# ---------------------------------------------------------------------- deterministic crash points
class _Crash(BaseException):
    """Not an Exception: the engine's fail-open handler must not swallow it (a kill)."""


def _crash_after(eng: MLCEngine, n_writes: int) -> list[str]:
    """Make the store raise _Crash on its (n_writes+1)-th write call; return the write log."""
    done: list[str] = []
    orig = eng.store.call

    def call(what: str, fn: Callable[[], Any]) -> Any:
        is_write = what.split()[0] in ("upsert", "delete", "update", "clear")
        if is_write and len(done) >= n_writes:
            vars(eng.store).pop("call", None)  # one crash only: the fixture's close() may flush later
            raise _Crash(what)
        out = orig(what, fn)
        if is_write:
            done.append(what)
        return out

    eng.store.call = call  # type: ignore[method-assign]
    return done


def _req(text: str, img: Any = None) -> CacheRequest:
    return CacheRequest(text=text, images=[img] if img is not None else [], scope="m")


@pytest.fixture
def shared_client() -> Any:
    import chromadb
    from chromadb.config import Settings

    return chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))


def _reopened(make_engine: Callable[..., MLCEngine], client: Any, prefix: str) -> MLCEngine:
    return make_engine(chroma_client=client, collection_prefix=prefix, durable=True)  # each write step on the caller's path


def _vector_ids(eng: MLCEngine) -> dict[str, set[str]]:
    out = {}
    for tier in ("exact", "l1", "l2_prompt"):
        out[tier] = set(eng.store.collection(tier).get(include=[])["ids"])
    for tier in ("l2_image", "l2_fprint"):
        metas = eng.store.collection(tier).get(include=["metadatas"])["metadatas"]
        out[tier] = {m["entry_id"] for m in metas}
    return out


def _assert_no_orphan_vectors(eng: MLCEngine) -> None:
    ids = _vector_ids(eng)
    for tier in ("l1", "l2_prompt", "l2_image", "l2_fprint"):
        assert ids[tier] <= ids["exact"], f"{tier} vector without its response"


@pytest.mark.parametrize("overwrite", [False, True])
def test_update_interrupted_after_each_write_step(make_engine, shared_client, overwrite: bool) -> None:
    img = pattern(5)
    probe_exact, probe_l1 = _req("What shape is in the picture?", img), _req("What shape is in this picture?", img)
    steps = None
    crash_point = 0
    while steps is None or crash_point <= steps:
        prefix = f"crash-upd-{int(overwrite)}-{crash_point}"
        eng = _reopened(make_engine, shared_client, prefix)
        if overwrite:
            eng.update(_req("What shape is in the picture?", img), {"v": "old"})
        log = _crash_after(eng, crash_point)
        try:
            eng.update(_req("What shape is in the picture?", img), {"v": "new"})
            completed = True
        except _Crash:
            completed = False
        vars(eng.store).pop("call", None)  # uninstall the crash hook (the fixture closes eng)
        if completed:
            steps = len(log)
        fresh = _reopened(make_engine, shared_client, prefix)
        _assert_no_orphan_vectors(fresh)
        allowed = [{"v": "new"}] if completed else ([{"v": "old"}, {"v": "new"}] if overwrite else [None, {"v": "new"}])
        for probe in (probe_exact, probe_l1):
            hit = fresh.lookup(probe)
            assert (None if hit is None else hit.payload) in allowed, (crash_point, log)
        if completed:
            assert fresh.lookup(probe_exact).tier == "L0.5" and fresh.lookup(probe_l1).tier == "L1"
        assert fresh.stats()["errors"] == {}
        crash_point += 1
    assert steps == 5  # exact, l1, l2_fprint, l2_image, l2_prompt: every gap between them was crashed into


def test_delete_interrupted_after_each_write_step(make_engine, shared_client) -> None:
    img = pattern(6)
    stored = _req("How many objects are there?", img)
    for crash_point in range(5):  # one per write of the delete
        prefix = f"crash-del-{crash_point}"
        eng = _reopened(make_engine, shared_client, prefix)
        eid = eng.update(stored, {"v": "x"})
        _crash_after(eng, crash_point)
        with pytest.raises(_Crash):
            eng.delete(eid)
        fresh = _reopened(make_engine, shared_client, prefix)
        _assert_no_orphan_vectors(fresh)
        # The response goes last, so until the delete completes the entry still answers exactly.
        assert fresh.lookup(_req("How many objects are there?", img)).payload == {"v": "x"}


def test_vector_without_response_is_a_counted_miss_and_reconciled(make_engine, shared_client) -> None:
    """What a store written in the wrong order (or by an older version) would leave."""
    eng = _reopened(make_engine, shared_client, "orphan")
    eid = eng.update(_req("Where is the cat?"), "on the mat")
    eng.store.collection("exact").delete(ids=[eid])
    fresh = _reopened(make_engine, shared_client, "orphan")
    assert fresh.lookup(_req("Where's the cat?")) is None
    st = fresh.stats()
    assert st["orphans_removed"] >= 1 and st["misses"] == 1
    assert eid not in fresh.store.collection("l1").get(include=[])["ids"]  # reconciled on read
