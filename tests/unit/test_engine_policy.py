"""Persistence across reopen, TTL, LRU eviction, delete, clear, async, threads."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
from PIL import Image

from mlc_integrations import CacheRequest
from mlc_integrations.embed.models import ClipEmbedder, ClipSpec
from tests.helpers import pattern, solid
from mlc_integrations import StorageOptions, WriteOptions


def req(text: str, images=(), **kw) -> CacheRequest:
    kw.setdefault("scope", "m")
    return CacheRequest(text=text, images=list(images), **kw)


def test_persistence_across_reopen(make_engine, tmp_path) -> None:
    d = str(tmp_path / "cache")
    eng = make_engine(persist_directory=d)
    img = pattern(1)
    eng.update(req("What color is the shape?", [img]), {"answer": "red", "n": [1, 2]})
    eng.update(req("What is the capital of France?"), "Paris")
    eng.close()
    del eng
    again = make_engine(persist_directory=d)
    assert again.count() == 2
    assert again.lookup(req("What color is the shape?", [img])).payload == {"answer": "red", "n": [1, 2]}
    assert again.lookup(req("What colour is the shape?", [img])).tier == "L1"
    assert again.lookup(req("What's the capital of France?")).payload == "Paris"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def test_ttl_per_engine_and_per_entry(make_engine) -> None:
    clock = FakeClock()
    eng = make_engine(ttl=30, clock=clock)
    eng.update(req("short lived"), "a")
    eng.update(req("long lived"), "b", ttl=3600)
    clock.now += 29
    assert eng.lookup(req("short lived")).payload == "a"
    clock.now += 2
    assert eng.lookup(req("short lived")) is None
    assert eng.lookup(req("short  LIVED")) is None  # L1 filters expired vectors too
    assert eng.lookup(req("long lived")).payload == "b"
    assert eng.stats()["expired"] >= 1


def test_purge_expired(make_engine) -> None:
    clock = FakeClock()
    eng = make_engine(ttl=10, clock=clock)
    for i in range(5):
        eng.update(req(f"question number {i}"), i)
    clock.now += 11
    assert eng.purge_expired() == 5
    assert eng.count() == 0


def test_lru_eviction_keeps_recently_used(make_engine) -> None:
    clock = FakeClock()
    eng = make_engine(max_entries=3, clock=clock, image_encoder=None)
    for i in range(3):
        eng.update(req(f"unrelated question {i} about topic {i * 7}"), i)
        clock.now += 1
    assert eng.lookup(req("unrelated question 0 about topic 0")).payload == 0  # touch the oldest
    clock.now += 1
    eng.update(req("a fourth and new question"), 3)
    assert eng.count() == 3
    assert eng.lookup(req("unrelated question 1 about topic 7")) is None  # least recently used went
    assert eng.lookup(req("unrelated question 0 about topic 0")).payload == 0
    assert eng.stats()["evictions"] == 1


def test_lru_order_survives_restart(make_engine, tmp_path) -> None:
    d = str(tmp_path / "lru")
    clock = FakeClock()
    eng = make_engine(persist_directory=d, max_entries=2, clock=clock, image_encoder=None)
    eng.update(req("first entry here"), 1)
    clock.now += 1
    eng.update(req("second entry here"), 2)
    clock.now += 1
    eng.lookup(req("first entry here"))
    eng.close()  # flushes last-access times
    clock.now += 1
    eng2 = make_engine(persist_directory=d, max_entries=2, clock=clock, image_encoder=None)
    eng2.update(req("third entry here"), 3)
    eng2.flush()  # eviction runs after the background write
    assert eng2.lookup(req("second entry here")) is None
    assert eng2.lookup(req("first entry here")).payload == 1


def test_delete_one_entry_from_every_tier(make_engine) -> None:
    eng = make_engine(l2_image_threshold=0.999, l2_prompt_threshold=0.5)
    img = pattern(2)
    eid = eng.update(req("What color is the shape?", [img]), "red")
    keep = eng.update(req("What shape is it?", [img]), "circle")
    assert eng.delete(eid) is True
    assert eng.delete(eid) is False
    assert eng.lookup(req("What color is the shape?", [img])) in (None,) or \
        eng.lookup(req("What color is the shape?", [img])).entry_id == keep
    for tier in ("exact", "l1", "l2_prompt"):
        assert eng.store.collection(tier).get(ids=[eid])["ids"] == []
    assert eng.store.collection("l2_image").get(where={"entry_id": eid})["ids"] == []


def test_clear_scope_namespace_and_all(make_engine) -> None:
    eng = make_engine(image_encoder=None)
    eng.update(req("q one", scope="a", namespace="t1"), 1)
    eng.update(req("q two", scope="a", namespace="t2"), 2)
    eng.update(req("q three", scope="b", namespace="t1"), 3)
    eng.clear(scope="a", namespace="t1")
    assert eng.lookup(req("q one", scope="a", namespace="t1")) is None
    assert eng.count() == 2
    eng.clear(namespace="t2")
    assert eng.lookup(req("q two", scope="a", namespace="t2")) is None
    assert eng.lookup(req("q three", scope="b", namespace="t1")).payload == 3
    eng.clear()
    assert eng.count() == 0
    assert eng.store.collection("l1").count() == 0


async def test_async_lookup_update_do_not_block_loop(make_engine) -> None:
    eng = make_engine(image_encoder=None)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    t = asyncio.create_task(ticker())
    await eng.aupdate(req("What is the capital of Italy?"), "Rome")
    hit = await eng.alookup(req("What's the capital of Italy?"))
    t.cancel()
    assert hit is not None and hit.payload == "Rome"
    assert ticks > 3  # the loop kept running while models/storage worked
    await eng.aclear()
    assert eng.count() == 0


def test_eight_threads_mixed_operations(make_engine) -> None:
    eng = make_engine(image_encoder=None)
    errors: list[BaseException] = []
    per_thread = 25

    def worker(t: int) -> None:
        try:
            for i in range(per_thread):
                r = req(f"thread {t} question {i}", scope=f"s{t % 2}")
                eng.update(r, {"t": t, "i": i})
                hit = eng.lookup(req(f"thread {t} question {i}", scope=f"s{t % 2}"))
                assert hit is not None and hit.payload == {"t": t, "i": i}
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert eng.count() == 8 * per_thread  # no lost update
    st = eng.stats()
    assert st["updates"] == 8 * per_thread and st["hits"] + st["misses"] == st["lookups"]
    assert st["errors"] == {}


def test_open_clip_loading_path_loads_the_saved_weights(tiny_clip_dir) -> None:
    """The directory checkpoint goes through open_clip's own factory and loads the
    weights that were saved (not a fresh random init)."""
    import open_clip
    import torch
    from open_clip.model import CLIP

    from tests.conftest import TINY_CLIP_CFG

    torch.manual_seed(0)
    reference = CLIP(**TINY_CLIP_CFG).eval()  # same seed as the fixture
    emb = ClipEmbedder(ClipSpec.parse(str(tiny_clip_dir)))
    model, preprocess, tokenizer = emb.load()
    for (k, a), (_, b) in zip(reference.state_dict().items(), model.state_dict().items()):
        assert torch.equal(a, b), k
    img = Image.new("RGB", (40, 30), (10, 200, 30))
    with torch.no_grad():
        ref = reference.encode_image(preprocess(img)[None]).numpy()[0]
    ref /= np.linalg.norm(ref)
    got = emb.embed_images([img], ["d1"])[0]
    assert np.allclose(ref, got, atol=1e-5)
    assert emb.embed_texts(["a red circle"]).shape == (1, TINY_CLIP_CFG["embed_dim"])
    assert open_clip.get_tokenizer  # the tokenizer came from open_clip's registry


def test_image_embeddings_memoized_by_pixel_digest(tiny_clip_dir) -> None:
    emb = ClipEmbedder(ClipSpec.parse(str(tiny_clip_dir)))
    img = pattern(3)
    emb.embed_images([img], ["same-digest"])
    calls = 0
    model, _, _ = emb.load()
    orig = model.encode_image

    def counting(x):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return orig(x)

    model.encode_image = counting
    try:
        emb.embed_images([solid((1, 2, 3))], ["same-digest"])
    finally:
        model.encode_image = orig
    assert calls == 0


def test_models_are_shared_between_engines(make_engine) -> None:
    a, b = make_engine(), make_engine()
    assert a.text_embedder is b.text_embedder
    assert a.image_tower is b.image_tower is not None


def test_store_prompts_false_keeps_no_raw_text(make_engine) -> None:
    eng = make_engine(image_encoder=None, writes=WriteOptions(store_prompts=False))
    eng.update(req("my secret medical question"), "answer")
    eng.flush()  # written (update is write-behind)
    got = eng.store.collection("exact").get(include=["metadatas", "documents"])
    assert "secret" not in repr(got["metadatas"])
    assert eng.lookup(req("my secret medical question")).matched_text is None


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nan_in_supplied_embedding_is_typed_error(make_engine, bad) -> None:
    from mlc_integrations import InvalidRequestError

    vec = [0.1] * 384
    vec[3] = bad
    strict = make_engine(strict=True)
    with pytest.raises(InvalidRequestError, match="NaN or infinite"):
        strict.lookup(CacheRequest(text="hello", text_embedding=vec))
    lax = make_engine()
    assert lax.lookup(CacheRequest(text="hello", text_embedding=vec)) is None
    assert lax.update(CacheRequest(text="hello", text_embedding=vec), "x") is None
    assert lax.count() == 0


def test_hnsw_search_ef_is_set_on_vector_collections(make_engine) -> None:
    """Chroma's default beam (10) misses true neighbours at scale (benchmarks/latency.py
    reports the recall); the engine sets its own, configurable, on every vector tier."""
    eng = make_engine(storage=StorageOptions(hnsw_search_ef=77))
    eng.update(req("What color is the shape?", [pattern(1)]), "red")
    eng.flush()  # the collections are created by the (background) write
    for tier in ("l1", "l2_image", "l2_prompt"):
        assert eng.store.collection(tier).metadata["hnsw:search_ef"] == 77
    assert "hnsw:search_ef" not in (eng.store.collection("exact").metadata or {})
    assert make_engine().store.hnsw_search_ef == 100
    with pytest.raises(ValueError):
        make_engine(storage=StorageOptions(hnsw_search_ef=0))


def test_only_served_hits_refresh_lru_access(make_engine) -> None:
    """A candidate the verifier refuses was read, not used: its last access (the LRU
    order) must not move; a served hit's does."""
    clock = FakeClock()
    eng = make_engine(clock=clock, image_encoder=None)
    eng.update(req("Is there a cat in the picture?"), "yes")
    eid = eng.key(req("Is there a cat in the picture?")).entry_id
    stored_at = eng.eviction.access[eid]
    clock.now += 100
    assert eng.lookup(req("Is there no cat in the picture?")) is None  # retrieved, refused
    assert eng.eviction.access[eid] == stored_at
    assert eng.lookup(req("is there a cat in the picture?")).tier == "L1"  # case: L1
    assert eng.eviction.access[eid] == clock.now
