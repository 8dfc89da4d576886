"""The L1 pre-screen: a new text with no stored static vector near it costs no sentence-model
run on the caller's path; a rewording still reaches the sentence model and hits."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from mlc_integrations import CacheRequest
from mlc_integrations.embed import static_text
from mlc_integrations.tiers import DEFAULT_L1_PRESCREEN
from mlc_integrations import StorageOptions
from tests.helpers import count_store_calls


def req(text: str, scope: str = "m") -> CacheRequest:
    return CacheRequest(text=text, scope=scope)


class EncoderCalls:
    """Counts sentence-model runs by thread (the caller's vs the background writer's)."""

    def __init__(self, eng: Any) -> None:
        self.threads: list[str] = []
        self._emb = eng.encoders.text_embedder
        orig = self._emb.embed

        def counting(texts: Any) -> Any:
            fresh = [t for t in texts if self._emb._memo.get(t) is None]
            if fresh:
                self.threads.append(threading.current_thread().name)
            return orig(texts)

        self._emb.embed = counting  # instance attribute: restored below

    def restore(self) -> None:
        del self._emb.embed

    def on_caller(self) -> int:
        return sum(t == threading.current_thread().name for t in self.threads)


@pytest.fixture
def engine(make_engine: Any) -> Any:
    eng = make_engine(image_encoder=None)
    eng.warmup()
    eng.encoders.text_embedder._memo.clear()  # every text below is new to the sentence model
    calls = EncoderCalls(eng)
    yield eng, calls
    calls.restore()


def test_new_question_among_unrelated_ones_runs_no_sentence_model_on_the_callers_path(engine: Any) -> None:
    eng, calls = engine
    eng.update(req("How do I bake sourdough bread at home?"), "a recipe")
    assert calls.on_caller() == 0  # its text vector is computed by the background writer
    eng.flush()
    assert eng.lookup(req("Which planet has the most moons?")) is None
    assert calls.on_caller() == 0 and eng.stats()["l1_prescreened"] == 1
    assert eng.lookup(req("How do I bake sourdough bread at home?")).tier == "L0.5"


def test_rewording_passes_the_prescreen_and_hits_l1(engine: Any) -> None:
    eng, calls = engine
    eng.update(req("What is the capital of France?"), "Paris")
    eng.flush()
    hit = eng.lookup(req("What's the capital of France?"))
    assert hit is not None and hit.tier == "L1" and hit.payload == "Paris"
    assert eng.stats()["l1_prescreened"] == 0


def test_pending_entry_with_a_deferred_text_vector_is_found_by_a_rewording(make_engine: Any) -> None:
    eng = make_engine(image_encoder=None)
    gate = threading.Event()
    real_put = eng.entries.put_many
    eng.pending._write = lambda batch: (gate.wait(30), real_put(batch))  # the writer waits: the entry stays pending
    try:
        eng.update(req("What is the capital of France?"), "Paris")
        hit = eng.lookup(req("What's the capital of France?"))
        assert hit is not None and hit.tier == "L1" and hit.payload == "Paris"
    finally:
        gate.set()
    eng.flush()


def test_texts_in_another_partition_do_not_open_the_screen(engine: Any) -> None:
    eng, calls = engine
    eng.update(req("What is the capital of France?", scope="other-model"), "Paris")
    eng.flush()
    assert eng.lookup(req("What's the capital of France?")) is None
    assert calls.on_caller() == 0 and eng.stats()["l1_prescreened"] == 1


def test_prescreen_off_runs_the_sentence_model_for_every_new_question(engine: Any) -> None:
    eng, calls = engine
    eng.text_tier.prescreen_threshold = None
    assert eng.lookup(req("Which planet has the most moons?")) is None
    assert calls.on_caller() == 1 and eng.stats()["l1_prescreened"] == 0


def test_cache_without_static_rows_turns_the_prescreen_off(make_engine: Any) -> None:
    eng = make_engine(durable=True, image_encoder=None)
    eng.update(req("What is the capital of France?"), "Paris")
    eng.store.collection("l1_static").delete(where={"v": 1})  # as an older version wrote it
    again = make_engine(image_encoder=None, storage=StorageOptions(client=eng.store.client, collection_prefix=eng.store.prefix))
    hit = again.lookup(req("What's the capital of France?"))
    assert hit is not None and hit.tier == "L1" and again.stats()["l1_prescreened"] == 0


def test_static_rows_are_written_before_the_l1_rows_they_screen(make_engine: Any) -> None:
    eng = make_engine(durable=True, image_encoder=None)
    writes = count_store_calls(eng)
    eng.update(req("What is the capital of France?"), "Paris")
    del eng.store.call
    upserts = [w for w in writes if w.startswith("upsert")]
    assert upserts == ["upsert exact", "upsert l1_static", "upsert l1"]


def test_static_vectors_are_unit_deterministic_and_close_for_rewordings(engine: Any) -> None:
    eng, _calls = engine
    static = eng.encoders.static_embedder
    a, b, c = static.embed(["What is the capital of France?", "What's the capital of France?",
                            "How many legs does a spider have?"])
    assert a.dtype == np.float32 and abs(float(np.linalg.norm(a)) - 1.0) < 1e-5
    assert np.array_equal(a, static.embed(["What is the capital of France?"])[0])
    assert float(a @ b) >= DEFAULT_L1_PRESCREEN > float(a @ c)
    assert not static.embed([""]).any()  # no tokens: the zero vector (near nothing)


def test_static_table_is_built_once_per_machine_and_reused(engine: Any, monkeypatch: Any) -> None:
    from mlc_integrations.embed.models import resolve_text_model

    path = static_text.build(resolve_text_model(None))  # the engine above built it
    assert path.exists() and path.parent.name == "text-static"
    monkeypatch.setattr(static_text, "distill", lambda *a, **k: pytest.fail("distilled again"))
    assert static_text.build(resolve_text_model(None)) == path
    assert static_text.StaticTextEmbedder.open(resolve_text_model(None)).dim == static_text.DIM


def test_a_screen_that_rarely_settles_runs_only_on_a_sample_of_new_texts(engine: Any, monkeypatch: Any) -> None:
    from mlc_integrations import tiers

    eng, _calls = engine
    asked: list[str] = []
    real = eng.entries.any_within
    monkeypatch.setattr(eng.entries, "any_within", lambda *a, **k: asked.append("q") or real(*a, **k))
    eng.text_tier._screened.extend([False] * tiers.SCREEN_WINDOW)  # lately it settled nothing
    for i in range(2 * tiers.SCREEN_RESAMPLE):
        eng.lookup(req(f"an unrelated new question number {i}"))
    assert len(asked) == 2  # one new text in SCREEN_RESAMPLE still asks, to notice a change
