"""Several application processes sharing one Chroma server."""

from __future__ import annotations

import queue
from collections import Counter
from typing import Any

import pytest

from mlc_integrations import CacheRequest
from mlc_integrations.ops.server import ChromaServer
from tests.helpers import pattern
from tests.integration.workers import engine, mp_context, question, same_key_worker, share_worker
from mlc_integrations import StorageOptions, TierOptions


def _collect(out: Any, procs: list[Any], timeout: float = 180) -> list[dict[str, Any]]:
    results = []
    try:
        for _ in procs:
            results.append(out.get(timeout=timeout))
    except queue.Empty:
        pytest.fail(f"only {len(results)} of {len(procs)} workers reported")
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    errors = [r["error"] for r in results if "error" in r]
    assert not errors, errors
    return sorted(results, key=lambda r: r["worker"])


@pytest.mark.parametrize("n_workers", [2, 4])
def test_what_one_process_stores_the_others_hit(chroma_server: ChromaServer, prefix: str, n_workers: int) -> None:
    ctx = mp_context()
    keys_per_worker = 6
    barrier, out = ctx.Barrier(n_workers), ctx.Queue()
    procs = [
        ctx.Process(target=share_worker, args=(chroma_server.host, chroma_server.port, prefix, w, n_workers,
                                               keys_per_worker, barrier, out))
        for w in range(n_workers)
    ]
    for p in procs:
        p.start()
    results = _collect(out, procs)
    for r in results:
        assert all(r["stored"]), r["worker"]
        for key, para, tier, payload in r["results"]:
            # Every question, whoever stored it, is a hit in every process: exactly when
            # asked the same way, through L1 when reworded; always with the right answer.
            assert payload == {"key": key, "writer": key // keys_per_worker}, (r["worker"], key, para)
            assert tier == ("L1" if para else "L0.5")
        st = r["stats"]
        assert st["lookups"] == st["hits"] + st["misses"] and st["misses"] == 0 and st["errors"] == {}
    fresh = engine(chroma_host=chroma_server.host, chroma_port=chroma_server.port, storage=StorageOptions(collection_prefix=prefix))
    assert fresh.count() == n_workers * keys_per_worker


def test_concurrent_updates_of_one_request_leave_one_consistent_entry(chroma_server: ChromaServer, prefix: str) -> None:
    ctx = mp_context()
    n_workers, rounds, keys = 4, 8, [1, 2, 3]
    barrier, out = ctx.Barrier(n_workers), ctx.Queue()
    procs = [
        ctx.Process(target=same_key_worker, args=(chroma_server.host, chroma_server.port, prefix, w, rounds, keys,
                                                  barrier, out))
        for w in range(n_workers)
    ]
    for p in procs:
        p.start()
    results = _collect(out, procs)
    written = [tuple(sorted(p.items())) for r in results for p in r["written"]]
    assert len(written) == n_workers * rounds * len(keys) and all(r["updates_failed"] == 0 for r in results)

    eng = engine(chroma_host=chroma_server.host, chroma_port=chroma_server.port, storage=StorageOptions(collection_prefix=prefix))
    ids = {k: eng.key(question(k)).entry_id for k in keys}
    exact = eng.store.collection("exact").get(include=["documents"])
    l1 = eng.store.collection("l1").get(include=[])
    # One entry per request in the response store and one vector per entry: last writer wins, no duplicates.
    assert Counter(exact["ids"]) == Counter(ids.values())
    assert Counter(l1["ids"]) == Counter(ids.values())
    for k in keys:
        final = [r["seen"][k] for r in results]
        # Every process, and both tiers, see the same answer; it is one that was written for this request.
        assert all(pair == final[0] for pair in final) and final[0][0] == final[0][1]
        payload = final[0][0]
        assert payload["key"] == k and tuple(sorted(payload.items())) in written
        assert eng.lookup(question(k)).payload == payload


def test_all_three_tiers_on_the_server(chroma_server: ChromaServer, prefix: str, make_engine: Any) -> None:
    """The same engine code, real models included, against the server instead of embedded Chroma."""
    # b reads what a acknowledged; L2 across engines needs the image evidence at rest (opt-in)
    shared = dict(chroma_host=chroma_server.host, chroma_port=chroma_server.port, l2_image_threshold=0.9,
                  l2_prompt_threshold=0.8, storage=StorageOptions(collection_prefix=prefix),
                  tiers=TierOptions(image_evidence="store"))
    a = make_engine(durable=True, **shared)
    b = make_engine(**shared)
    assert a.stats()["config"]["storage"] == "server"
    img = pattern(11)
    a.update(CacheRequest(text="What color is the square?", images=[img], scope="m"), "blue")
    assert b.lookup(CacheRequest(text=" What color is the square?\n", images=[img], scope="m")).tier == "L0.5"
    assert b.lookup(CacheRequest(text="What colour is the square?", images=[img], scope="m")).tier == "L1"
    near = img.resize((63, 63)).resize((64, 64))
    hit = b.lookup(CacheRequest(text="What color is the square?", images=[near], scope="m"))
    assert hit is not None and hit.tier == "L2" and hit.payload == "blue"
    assert b.lookup(CacheRequest(text="What color is the square?", images=[img], scope="other")) is None
