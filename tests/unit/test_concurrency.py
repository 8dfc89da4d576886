"""Many threads and asyncio tasks on one engine: no error, no lost update, stats add up.

Each thread owns a namespace (tenant) and keeps a model of what its own keys must hold,
so every read of its own data is checked exactly (read-your-writes), every write must
survive to the end, and ``clear(namespace=...)`` runs concurrently with other tenants'
traffic. Shared, never-modified entries must hit for everyone all the time.

CI runs 8 threads x 100 operations; the soak (``-m slow``) runs 8 x 2,000 and 2,000 tasks.
Embeddings are supplied (see ``tests/integration/workers.py``) so the run measures the
engine and Chroma, not the sentence model; ``test_real_model_under_threads`` covers the
model path.
"""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any, Optional

import pytest

from mlc_integrations import CacheRequest, MLCEngine
from tests.integration.workers import question

N_THREADS = 8
SHARED_KEYS = range(0, 20)


def _engine(make_engine: Any) -> MLCEngine:
    eng = make_engine(image_encoder=None)
    for k in SHARED_KEYS:
        assert eng.update(question(k, namespace="shared"), {"key": k, "shared": True}) is not None
    eng.reset_stats()
    return eng


def _thread_body(eng: MLCEngine, t: int, n_ops: int, counts: dict[str, int], failures: list[str]) -> None:
    rng = random.Random(t)
    ns = f"tenant-{t}"
    model: dict[int, Optional[dict[str, Any]]] = {}  # my keys -> what they must hold now
    base = 1_000 * (t + 1)
    version = 0

    def check(k: int, got: Any, how: str) -> None:
        if got != model.get(k):
            failures.append(f"thread {t} key {k} {how}: got {got}, expected {model.get(k)}")

    for _ in range(n_ops):
        r = rng.random()
        k = base + rng.randrange(60)
        if r < 0.30:
            counts["lookups"] += 1
            hit = eng.lookup(question(k, namespace=ns))
            check(k, None if hit is None else hit.payload, "exact lookup")
        elif r < 0.45:
            counts["lookups"] += 1
            hit = eng.lookup(question(k, paraphrase=1 + rng.randrange(3), namespace=ns))
            check(k, None if hit is None else hit.payload, "paraphrase lookup")
            if hit is not None and hit.tier != "L1":
                failures.append(f"paraphrase served by {hit.tier}")
        elif r < 0.60:
            counts["lookups"] += 1
            s = rng.choice(SHARED_KEYS)
            hit = eng.lookup(question(s, paraphrase=rng.randrange(2), namespace="shared"))
            if hit is None or hit.payload != {"key": s, "shared": True}:
                failures.append(f"thread {t} shared key {s}: {None if hit is None else hit.payload}")
        elif r < 0.90:
            version += 1
            payload = {"key": k, "t": t, "v": version}
            counts["updates"] += 1
            if eng.update(question(k, namespace=ns), payload) is None:
                failures.append(f"thread {t} update of {k} failed")
            model[k] = payload
        elif r < 0.97:
            eng.delete(eng.key(question(k, namespace=ns)).entry_id)
            model[k] = None
        elif r < 0.99:
            st = eng.stats()
            if st["hits"] + st["misses"] > st["lookups"]:
                failures.append(f"stats snapshot inconsistent: {st['hits']}+{st['misses']}>{st['lookups']}")
        else:
            eng.clear(namespace=ns)
            model = {kk: None for kk in model}
    # No lost update: the final state of every key I own is exactly my last write (or absence).
    for k in model:
        hit = eng.lookup(question(k, namespace=ns))
        counts["lookups"] += 1
        check(k, None if hit is None else hit.payload, "final check")
    counts["final_entries"] = sum(v is not None for v in model.values())


def run_threads(make_engine: Any, n_ops: int) -> None:
    eng = _engine(make_engine)
    per_thread = [{"lookups": 0, "updates": 0, "final_entries": 0} for _ in range(N_THREADS)]
    failures: list[str] = []
    errors: list[BaseException] = []

    def body(t: int) -> None:
        try:
            _thread_body(eng, t, n_ops, per_thread[t], failures)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(t,)) for t in range(N_THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    assert not failures, failures[:10]
    st = eng.stats()
    assert st["lookups"] == sum(c["lookups"] for c in per_thread)
    assert st["hits"] + st["misses"] == st["lookups"]
    assert st["updates"] == sum(c["updates"] for c in per_thread) and st["updates_failed"] == 0
    assert st["errors"] == {}
    assert eng.count() == len(SHARED_KEYS) + sum(c["final_entries"] for c in per_thread)


def test_eight_threads_mixed_operations(make_engine: Any) -> None:
    run_threads(make_engine, n_ops=100)


@pytest.mark.slow
def test_eight_threads_2000_operations_each(make_engine: Any) -> None:
    run_threads(make_engine, n_ops=2_000)


async def run_tasks(eng: MLCEngine, n_tasks: int) -> None:
    async def task(i: int) -> list[str]:
        bad = []
        ns = f"task-{i % 10}"  # tasks share tenants, each task its own key
        k = 50_000 + i
        if await eng.alookup(question(k, namespace=ns)) is not None:
            bad.append(f"{k} hit before it was stored")
        if await eng.aupdate(question(k, namespace=ns), {"key": k}) is None:
            bad.append(f"{k} update failed")
        for para in (0, 1):
            hit = await eng.alookup(question(k, paraphrase=para, namespace=ns))
            if hit is None or hit.payload != {"key": k}:
                bad.append(f"{k} read back {None if hit is None else hit.payload}")
        s = i % len(SHARED_KEYS)
        hit = await eng.alookup(question(s, namespace="shared"))
        if hit is None or hit.payload != {"key": s, "shared": True}:
            bad.append(f"shared {s}: {hit}")
        return bad

    results = await asyncio.gather(*(task(i) for i in range(n_tasks)), return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:3]
    bad = [b for r in results for b in r]  # type: ignore[union-attr]
    assert not bad, bad[:10]
    st = eng.stats()
    assert st["lookups"] == 4 * n_tasks and st["hits"] + st["misses"] == st["lookups"]
    assert st["misses"] == n_tasks and st["updates"] == n_tasks and st["errors"] == {}
    assert eng.count() == len(SHARED_KEYS) + n_tasks


async def test_200_concurrent_asyncio_tasks(make_engine: Any) -> None:
    await run_tasks(_engine(make_engine), 200)


@pytest.mark.slow
async def test_2000_concurrent_asyncio_tasks(make_engine: Any) -> None:
    await run_tasks(_engine(make_engine), 2_000)


def test_real_model_under_threads(make_engine: Any) -> None:
    """The sentence model (not supplied vectors) shared by 8 threads: exact reads and
    paraphrases from every thread, and each thread's writes read back by the others."""
    eng = make_engine(image_encoder=None)
    facts = [f"What is the boiling point of substance number {i} in kelvin?" for i in range(40)]
    errors: list[str] = []
    barrier = threading.Barrier(N_THREADS)

    def body(t: int) -> None:
        try:
            mine = range(t * 5, t * 5 + 5)
            for i in mine:
                eng.update(CacheRequest(text=facts[i], scope="m"), {"fact": i})
            barrier.wait(timeout=120)
            for i in range(40):
                hit = eng.lookup(CacheRequest(text=f"  {facts[i]}\n", scope="m"))
                if hit is None or hit.payload != {"fact": i} or hit.tier != "L0.5":
                    errors.append(f"thread {t} fact {i}: {hit}")
        except BaseException as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=body, args=(t,)) for t in range(N_THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:5]
    st = eng.stats()
    assert st["hits"] == st["lookups"] == N_THREADS * 40 and st["errors"] == {}
