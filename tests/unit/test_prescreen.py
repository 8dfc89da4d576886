"""The L2 pre-screen: a new picture with no stored fingerprint near it costs no image-
encoder run on the caller's path; a near-duplicate still reaches the encoder and hits."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from PIL import Image

from mlc_integrations import CacheRequest
from evaluation.sources import imageops
from mlc_integrations.images import fingerprint
from tests.conftest import REPO_DATA
from mlc_integrations import StorageOptions, TierOptions


def photo(name: str) -> Image.Image:
    with Image.open(REPO_DATA / "photos" / name) as f:
        return f.convert("RGB")


def req(im: Any, text: str = "What is in this picture?") -> CacheRequest:
    return CacheRequest(text=text, images=[im], scope="m")


class EncoderCalls:
    """Counts image-encoder runs by thread (the caller's vs the background writer's)."""

    def __init__(self, eng: Any) -> None:
        self.threads: list[str] = []
        enc = eng.encoders.image_encoder
        orig = enc.embed_images

        def counting(images: Any, digests: Any) -> Any:
            self.threads.append(threading.current_thread().name)
            return orig(images, digests)

        enc.embed_images = counting  # instance attribute: this engine's encoder object only
        self._enc, self._orig = enc, orig

    def restore(self) -> None:
        del self._enc.embed_images

    def on_caller(self) -> int:
        return sum(t == threading.current_thread().name for t in self.threads)


@pytest.fixture
def engine(make_engine: Any) -> Any:
    eng = make_engine(image_encoder="efficientnet-lite0")
    eng.warmup()
    calls = EncoderCalls(eng)
    yield eng, calls
    calls.restore()


def test_new_picture_among_unrelated_ones_runs_no_encoder_on_the_callers_path(engine: Any) -> None:
    eng, calls = engine
    squirrel, orange = photo("squirrel_cls.jpg"), photo("orange.jpg")
    assert eng.lookup(req(squirrel)) is None  # empty cache
    eng.update(req(squirrel), "a squirrel")
    assert calls.on_caller() == 0  # the encoding was deferred to the background writer
    eng.flush()
    assert eng.lookup(req(orange)) is None and calls.on_caller() == 0
    assert eng.stats()["l2_prescreened"] == 2


def test_near_duplicate_passes_the_prescreen_and_hits(engine: Any) -> None:
    eng, calls = engine
    squirrel = photo("squirrel_cls.jpg")
    eng.update(req(squirrel), "a squirrel")
    hit = eng.lookup(req(imageops.jpeg(squirrel, 70)))  # pending entry: its encoding runs now, once
    assert hit is not None and hit.tier == "L2" and hit.payload == "a squirrel"
    eng.flush()
    hit = eng.lookup(req(imageops.resize(squirrel, 0.5)))
    assert hit is not None and hit.tier == "L2"


def test_cache_without_fingerprints_turns_the_prescreen_off(make_engine: Any) -> None:
    at_rest = TierOptions(image_evidence="store")  # the second engine reads what the first stored
    eng = make_engine(image_encoder="efficientnet-lite0", durable=True, tiers=at_rest)
    squirrel = photo("squirrel_cls.jpg")
    eng.update(req(squirrel), "a squirrel")
    eng.store.collection("l2_fprint").delete(where={"idx": 0})  # as an older version wrote it
    again = make_engine(image_encoder="efficientnet-lite0", tiers=at_rest,
                        storage=StorageOptions(client=eng.store.client, collection_prefix=eng.store.prefix))
    assert again.lookup(req(imageops.jpeg(squirrel, 70))).tier == "L2"
    assert again.stats()["l2_prescreened"] == 0


def test_fingerprint_is_unit_and_flat_pictures_match() -> None:
    a = fingerprint(photo("orange.jpg"))
    assert a.shape == (256,) and a.dtype == np.float32 and abs(float(np.linalg.norm(a)) - 1) < 1e-5
    flat1, flat2 = fingerprint(Image.new("RGB", (50, 50), (10, 10, 10))), fingerprint(Image.new("RGB", (9, 9), "white"))
    assert float(flat1 @ flat2) == 1.0
