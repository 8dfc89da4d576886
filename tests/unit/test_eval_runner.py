"""The measurement path: oracle backend, LangChain caches, judging against ground truth."""

from __future__ import annotations

from typing import Any, Optional

import pytest

pytest.importorskip("easy_vqa")

from langchain_core.caches import BaseCache, InMemoryCache  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402

from evaluation.harness.backends import GroundTruthOracle  # noqa: E402
from evaluation.harness.baselines import gptcache_cosine, gptcache_threshold_for_cosine  # noqa: E402
from evaluation.harness.runner import RunResult, attach_speedups, run_workload, to_messages  # noqa: E402
from evaluation.harness.workloads import WorkItem, Workload  # noqa: E402
from tests.helpers import png_bytes, solid  # noqa: E402
from evaluation.harness.baselines import TINY_CLIP_CONFIG


def _text_workload() -> Workload:
    items = [
        WorkItem("what is the capital of france?", "paris", "new"),
        WorkItem("what is the capital of spain?", "madrid", "new"),
        WorkItem("what is the capital of france?", "paris", "repeat"),
        WorkItem("what is the capital of italy?", "rome", "new"),
        WorkItem("what is the capital of spain?", "madrid", "repeat"),
    ]
    return Workload("t", "test", items, multimodal=False)


class _AlwaysAnswers(BaseCache):
    """A broken cache that returns one fixed answer for everything: every hit after
    the first differing truth is wrong."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def lookup(self, prompt: str, llm_string: str) -> Any:
        return [ChatGeneration(message=AIMessage(content=self.answer))]

    def update(self, prompt: str, llm_string: str, return_val: Any) -> None:
        return None

    def clear(self, **kwargs: Any) -> None:
        return None


def test_oracle_is_labelled_and_counts_calls() -> None:
    o = GroundTruthOracle(latency_s=0.0)
    assert "not a real model" in o.label
    o.expect("yes")
    assert o.invoke([HumanMessage("q")]).content == "yes"
    assert o.calls == 1
    with pytest.raises(RuntimeError):
        GroundTruthOracle(latency_s=0.0).invoke([HumanMessage("q")])


def test_no_cache_and_exact_only_are_always_right() -> None:
    wl = _text_workload()
    o = GroundTruthOracle(latency_s=0.0)
    base = run_workload(wl, None, o, config="no cache")
    exact = run_workload(wl, InMemoryCache(), o, config="exact-only")
    assert (base.hits, base.accuracy, base.backend_calls) == (0, 1.0, 5)
    assert (exact.hits, exact.wrong_hits, exact.accuracy) == (2, 0, 1.0)
    assert exact.by_kind["repeat"] == {"n": 2, "hits": 2, "wrong": 0}
    assert len(exact.lookup_ms) == 5 and len(exact.update_ms) == 3


def test_wrong_reuse_is_counted_against_the_new_requests_truth() -> None:
    wl = _text_workload()
    r = run_workload(wl, _AlwaysAnswers("paris"), GroundTruthOracle(latency_s=0.0), config="broken")
    # "paris" was never produced by the backend in this run, so no hit can be credited.
    assert r.hits == 5 and r.wrong_hits == 5 and r.accuracy == 0.0 and r.false_hit_rate == 1.0


def test_speedup_is_measured_against_the_no_cache_run() -> None:
    a = RunResult("w", "no cache", "", "b", wall_s=2.0)
    b = RunResult("w", "x", "", "b", wall_s=0.5)
    c = RunResult("w2", "x", "", "b", wall_s=1.0)
    attach_speedups([a, b, c])
    assert a.speedup == 1.0 and b.speedup == 4.0 and c.speedup is None


def test_images_travel_as_langchain_image_blocks() -> None:
    item = WorkItem("what color is the shape?", "red", "new", image=png_bytes(solid((255, 0, 0))))
    msgs = to_messages(item)
    assert msgs[-1].content[1]["image_url"]["url"].startswith("data:image/png;base64,")
    ctx = WorkItem("follow", "t", "k", context=(("human", "main"), ("ai", "answer")))
    assert [m.type for m in to_messages(ctx)] == ["human", "ai", "human"]


def test_gptcache_threshold_is_converted_to_cosine() -> None:
    assert gptcache_cosine(0.8) == pytest.approx(0.6)
    assert gptcache_cosine(0.9) == pytest.approx(0.8)
    assert gptcache_threshold_for_cosine(0.8) == pytest.approx(0.9)


def test_real_gptcache_hits_whole_prompt_neighbours(text_embedder: Any) -> None:
    pytest.importorskip("gptcache")
    pytest.importorskip("faiss")
    from evaluation.harness.baselines import GPTCacheLangChain

    wl = _text_workload()
    cache = GPTCacheLangChain(similarity_threshold=0.8)  # cosine >= 0.6
    r = run_workload(wl, cache, GroundTruthOracle(latency_s=0.0), config="gptcache")
    # "capital of spain" lands on "capital of france" at cosine >= 0.6: a wrong hit.
    assert r.hits >= 2 and r.wrong_hits >= 1


def test_mlc_cache_through_langchain_reports_tiers(text_embedder: Any) -> None:
    from evaluation.harness.baselines import mlc_cache

    img = png_bytes(solid((200, 10, 10)))
    items = [WorkItem("what color is the shape?", "red", "new", image=img),
             WorkItem("what color is the shape?", "red", "repeat", image=img),
             WorkItem("what shape is in the image?", "rectangle", "new", image=img)]
    wl = Workload("m", "t", items, multimodal=True)
    r = run_workload(wl, mlc_cache(), GroundTruthOracle(latency_s=0.0), config=TINY_CLIP_CONFIG)
    assert r.tier_hits == {"L0.5": 1} and r.wrong_hits == 0 and r.backend_calls == 2
