"""Why did this miss? A lookup reports the best refused candidate and each tier's outcome."""

from __future__ import annotations

import logging

from mlc_integrations import CacheRequest, Lookup


def req(text: str) -> CacheRequest:
    return CacheRequest(text=text, scope="m")


def test_refused_candidate_is_reported_with_scores_and_reason(make_engine, caplog) -> None:
    eng = make_engine(image_encoder=None)
    eng.update(req("Is there a cat in the picture?"), "yes")
    with caplog.at_level(logging.DEBUG, logger="mlc_integrations.engine"):
        trace = eng.lookup_explained(req("Is there no cat in the picture?"))
    assert isinstance(trace, Lookup) and trace.hit is None
    assert trace.tiers == {"L0.5": "miss", "L1": "refused", "L2": "skipped"}
    r = trace.refused
    assert r is not None and r.tier == "L1" and r.reason == "verifier"
    assert r.scores["text"] >= r.thresholds["text"] and r.scores["verifier"] < r.thresholds["verifier"]
    assert r.matched_text == "Is there a cat in the picture?"
    assert "refused tier=L1" in trace.explain() and "verifier=" in trace.explain()
    assert any("cache miss" in m and "refused" in m for m in caplog.messages)


def test_hit_and_plain_miss_are_explained_too(make_engine) -> None:
    eng = make_engine(image_encoder=None)
    eng.update(req("What is the capital of France?"), "Paris")
    hit = eng.lookup_explained(req("What is the capital of France?"))
    assert hit.hit is not None and hit.tiers == {"L0.5": "hit"} and hit.explain().startswith("tier=L0.5")
    miss = eng.lookup_explained(req("How far away is the moon?"))
    assert miss.hit is None and miss.refused is None and miss.tiers["L1"] == "miss"
    assert miss.explain().startswith("miss [")
