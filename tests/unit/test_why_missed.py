"""Why did this miss? ``last_lookup`` of the LangChain cache and of the LlamaIndex wrapper
shows the best refused candidate (its scores, the reason), DEBUG logs say the same, and
``stats()`` counts lookups per scope and namespace. (The chat-model wrapper's are in
``test_langchain_chat_model.py``.)"""

from __future__ import annotations

import logging
from typing import Callable

import pytest
from langchain_core.messages import HumanMessage
from llama_index.core.base.llms.types import ChatMessage

from mlc_integrations import MLCEngine, MultimodalSemanticCache
from mlc_integrations.llamaindex import CachedMultiModalLLM
from tests.unit._fake_llms import VisionEchoLLM
from tests.unit.test_langchain_cache import CountingChatModel

STORED, NEGATED = "Is there a cat in the picture?", "Is there no cat in the picture?"


def test_langchain_cache_last_lookup_shows_the_refused_candidate(make_engine: Callable[..., MLCEngine],
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    cache = MultimodalSemanticCache(make_engine(image_encoder=None))
    model = CountingChatModel(cache=cache)
    model.invoke([HumanMessage(STORED)])
    with caplog.at_level(logging.DEBUG, logger="mlc_integrations.langchain"):
        model.invoke([HumanMessage(NEGATED)])
    record = cache.last_lookup
    assert model.calls == 2 and record.hit is None and record.text == NEGATED
    refused = record.refused
    assert refused is not None and refused.tier == "L1" and refused.reason == "verifier"
    assert refused.matched_text == STORED and refused.scores["text"] >= refused.thresholds["text"]
    assert record.tiers == {"L0.5": "miss", "L1": "refused", "L2": "skipped"}
    assert record.reason == refused.explain() and record.explain() == f"miss: {refused.explain()}"
    miss_logs = [r for r in caplog.records if r.name == "mlc_integrations.langchain.cache"]
    assert len(miss_logs) == 1 and miss_logs[0].levelno == logging.DEBUG
    assert NEGATED in miss_logs[0].getMessage() and "refused tier=L1" in miss_logs[0].getMessage()
    model.invoke([HumanMessage(STORED)])
    assert cache.last_lookup.hit is not None and cache.last_lookup.reason == ""


def test_langchain_cache_stats_per_scope_and_namespace(make_engine: Callable[..., MLCEngine]) -> None:
    engine = make_engine(image_encoder=None)
    tenant_a, tenant_b = MultimodalSemanticCache(engine, namespace="a"), MultimodalSemanticCache(engine, namespace="b")
    cold, warm = CountingChatModel(cache=tenant_a, temperature=0.0), CountingChatModel(cache=tenant_a, temperature=0.7)
    for m in (cold, cold, warm):
        m.invoke([HumanMessage(STORED)])
    CountingChatModel(cache=tenant_b).invoke([HumanMessage(STORED)])
    by_scope = tenant_a.stats()["adapter"]["by_scope"]
    assert len(by_scope) == 2 and all(set(v) == {"a"} for v in by_scope.values())
    rows = sorted(v["a"]["lookups"] for v in by_scope.values())
    assert rows == [1, 2]
    cold_row = next(v["a"] for k, v in by_scope.items() if "0.7" not in k)
    assert cold_row == {"lookups": 2, "hits": 1, "misses": 1}
    assert list(tenant_b.stats()["adapter"]["by_scope"].values()) == [{"b": {"lookups": 1, "hits": 0, "misses": 1}}]


def test_llamaindex_last_lookup_shows_the_refused_candidate(make_engine: Callable[..., MLCEngine],
                                                            caplog: pytest.LogCaptureFixture) -> None:
    inner = VisionEchoLLM()
    llm = CachedMultiModalLLM(llm=inner, engine=make_engine(image_encoder=None), namespace="t1")
    llm.chat([ChatMessage(role="user", content=STORED)])
    with caplog.at_level(logging.DEBUG, logger="mlc_integrations.llamaindex"):
        llm.chat([ChatMessage(role="user", content=NEGATED)])
    record = llm.last_lookup
    assert inner.calls == ["chat", "chat"] and record.hit is None
    assert record.refused is not None and record.refused.reason == "verifier" and record.refused.matched_text == STORED
    assert record.tiers["L1"] == "refused" and record.namespace == "t1"
    assert any("cache miss" in m and "refused tier=L1" in m for m in caplog.messages)
    llm.chat([ChatMessage(role="user", content="How far away is the moon?")])
    assert llm.last_lookup.reason.startswith("no stored entry cleared the similarity thresholds [L0.5:miss L1:miss")
    by_scope = llm.stats()["adapter"]["by_scope"]
    assert by_scope == {llm.scope: {"t1": {"lookups": 3, "hits": 0, "misses": 3}}}
