"""Keying is owned by each engine: its limits, its memo; and the shared bounded LRU."""

from __future__ import annotations

import gc

import pytest

from mlc_integrations import CacheRequest, MLCEngine
from mlc_integrations.runtime.lru import LRU
from mlc_integrations.keys import Keyer, scope_digest
from mlc_integrations import TierOptions


def keyer(**kw: int) -> Keyer:
    kw.setdefault("max_image_pixels", 10_000_000)
    kw.setdefault("max_image_bytes", 10_000_000)
    kw.setdefault("max_prompt_chars", 8192)
    return Keyer(**kw)


def test_second_engine_with_other_limits_keys_the_same_request_under_its_own() -> None:
    r = CacheRequest(text="x" * 100, scope="m")
    long_ok, short_only = keyer(max_prompt_chars=1000), keyer(max_prompt_chars=10)
    assert long_ok.key(r).embeddable
    assert not short_only.key(r).embeddable  # not the first keyer's memoized verdict
    assert long_ok.key(r).features is long_ok.key(r).features  # embeddings memoized by content
    assert long_ok.key(r).features is long_ok.key(CacheRequest(text="x" * 100, scope="m")).features
    assert long_ok.key(r).entry_id == short_only.key(r).entry_id  # the exact key does not depend on limits


def test_memo_never_serves_a_collected_request_s_keys_to_another() -> None:
    k = keyer()
    seen = set()
    for i in range(200):  # ids of collected objects are recycled: nothing is keyed by them
        r = CacheRequest(text=f"question {i}", scope="m")
        kr = k.key(r)
        assert kr.request is r and kr.text == f"question {i}" and kr.entry_id not in seen
        seen.add(kr.entry_id)
        del r, kr
        gc.collect()


def test_equal_content_with_another_supplied_embedding_gets_its_own_features() -> None:
    k = keyer()
    a = k.key(CacheRequest(text="q", scope="m", text_embedding=[1.0, 0.0]))
    b = k.key(CacheRequest(text="q", scope="m", text_embedding=[0.0, 1.0]))
    assert a.entry_id == b.entry_id and a.features is not b.features
    assert float(a.features["text"][0]) == pytest.approx(1.0) and float(b.features["text"][1]) == pytest.approx(1.0)


def test_scope_and_namespace_share_one_digest_rule() -> None:
    eng = MLCEngine(l1_threshold=0.95, image_encoder=None, tiers=TierOptions(l1=False), verifier="off")
    kr = eng.key(CacheRequest(text="q", scope="gpt-4o|t=0", namespace="tenant-a"))
    assert kr.scope_key == scope_digest("gpt-4o|t=0") and kr.namespace == scope_digest("tenant-a")


def test_lru_bounds_by_count_and_weight() -> None:
    lru: LRU[str, int] = LRU(3)
    for k in "abcd":
        lru.put(k, 1)
    assert list(lru) == ["b", "c", "d"]
    assert lru.get("b") == 1 and list(lru) == ["c", "d", "b"]  # get refreshes
    heavy: LRU[str, str] = LRU(100, max_weight=10, weigh=len, max_item_weight=6)
    heavy.put("x", "aaaaa")
    heavy.put("y", "bbbbb")
    heavy.put("z", "c")  # 11 > 10: the least recent goes
    assert "x" not in heavy and "y" in heavy and "z" in heavy
    heavy.put("big", "ddddddd")  # heavier than one item may be: never kept
    assert "big" not in heavy
    assert heavy.pop("y") == "bbbbb" and len(heavy) == 1
    with pytest.raises(ValueError):
        LRU(0)


def test_a_collection_never_mixes_two_models_of_the_same_size() -> None:
    """EfficientNet-Lite0, -1 and -2 all give 1280-d vectors: the size check alone would mix them."""
    import chromadb
    from chromadb.config import Settings

    from mlc_integrations.errors import StorageError
    from mlc_integrations.store.chroma import ChromaStore

    client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    ChromaStore(client=client, collection_prefix="mix").collection("l2_image", dim=4, model="efficientnet-lite0")
    again = ChromaStore(client=client, collection_prefix="mix")
    assert again.collection("l2_image", dim=4, model="efficientnet-lite0") is not None
    with pytest.raises(StorageError, match="efficientnet-lite1"):
        ChromaStore(client=client, collection_prefix="mix").collection("l2_image", dim=4, model="efficientnet-lite1")
