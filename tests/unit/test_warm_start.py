"""Warm start: a long-lived cache loads its models at construction, in the background."""

from __future__ import annotations

from mlc_integrations import CacheRequest


def test_persistent_store_warms_up_in_the_background(make_engine, tmp_path) -> None:
    eng = make_engine(persist_directory=str(tmp_path / "c"), image_encoder=None)
    assert eng.stats()["config"]["warm_start"]
    eng._warm.join(60)
    assert not eng._warm.is_alive()
    eng.update(CacheRequest(text="What is the capital of France?", scope="m"), "Paris")
    assert eng.lookup(CacheRequest(text="What's the capital of France?", scope="m")).tier == "L1"


def test_in_memory_engine_does_not_unless_asked(make_engine) -> None:
    assert not make_engine(image_encoder=None).stats()["config"]["warm_start"]
    eng = make_engine(warm_start=True, image_encoder=None)
    assert eng.stats()["config"]["warm_start"]


def test_warmup_reports_what_it_loaded_and_never_raises(make_engine) -> None:
    took = make_engine().warmup()
    assert set(took) == {"text", "static", "image", "lexicon"} and all(t >= 0 for t in took.values())
    assert make_engine(verifier="off", l1_threshold=0.95).warmup().keys() == {"text", "static", "image"}
    broken = make_engine(image_encoder="/nonexistent/checkpoint")
    took = broken.warmup()  # the image model cannot be had: L2 off, warm-up goes on
    assert "text" in took and broken.l2_status.startswith("off")


def test_warm_start_of_a_cache_without_pictures_loads_no_image_tower(make_engine, tmp_path, monkeypatch) -> None:
    from mlc_integrations.embed.image_towers import EfficientNetLiteEncoder

    loads: list[str] = []
    monkeypatch.setattr(EfficientNetLiteEncoder, "load", lambda self: loads.append(self.name))
    eng = make_engine(persist_directory=str(tmp_path / "c"), image_encoder="efficientnet-lite0")
    eng._warm.join(60)
    assert loads == []  # text-only so far: no image tower (and no torch for it) until a picture comes
