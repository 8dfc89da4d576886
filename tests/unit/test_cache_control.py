"""Per-call control in each framework's idiom: bypass, refresh, no-store and a TTL per
entry, for the engine (arguments), CachedChatModel (``cache_control=`` call keyword or run
metadata) and CachedMultiModalLLM (``cache_control=`` call keyword); errors and empty
answers are never stored."""

from __future__ import annotations

import itertools
from typing import Any, Optional

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from llama_index.core.llms import ChatMessage, ChatResponse
from pydantic import PrivateAttr

from mlc_integrations import CacheControl, CacheRequest, ConfigurationError
from mlc_integrations.langchain import CachedChatModel
from mlc_integrations.llamaindex import CachedMultiModalLLM
from tests.unit._fake_llms import VisionEchoLLM

Q = "Which ocean is the deepest?"


class NumberedChatModel(BaseChatModel):
    """Answers "reply N" (N counts its calls); ``reply`` overrides the text once set."""

    reply: Optional[str] = None
    _n: Any = PrivateAttr(default_factory=lambda: itertools.count(1))
    _calls: list = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "numbered-chat"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self._calls.append(kwargs)
        text = self.reply if self.reply is not None else f"reply {next(self._n)}"
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


# ---------------------------------------------------------------------------- engine
def test_engine_bypass_refresh_no_store_and_ttl(make_engine) -> None:
    now = [1000.0]
    eng = make_engine(image_encoder=None, clock=lambda: now[0], durable=True)
    req = CacheRequest(text=Q)
    assert eng.update(req, {"text": "the Pacific"}) is not None
    assert eng.lookup(req, control="bypass") is None and eng.lookup(req) is not None
    assert eng.lookup_explained(req, control="refresh").tiers == {"L0.5": "bypassed", "L1": "bypassed", "L2": "bypassed"}
    assert eng.update(req, {"text": "the Atlantic"}, control="no-store") is None
    assert eng.lookup(req).payload == {"text": "the Pacific"}  # no-store kept the old answer
    assert eng.update(req, {"text": "the Pacific Ocean"}, control=CacheControl("refresh", ttl=60)) is not None
    assert eng.lookup(req).payload == {"text": "the Pacific Ocean"}
    now[0] += 61
    assert eng.lookup(req) is None  # the entry's own TTL
    st = eng.stats()
    assert st["bypassed"] == 2 and st["not_stored"] == 1


def test_engine_never_stores_an_empty_answer(make_engine) -> None:
    eng = make_engine(image_encoder=None, durable=True)
    for empty in (None, "", "   ", {"text": ""}, {}, []):
        assert eng.update(CacheRequest(text=Q), empty) is None
    assert eng.count() == 0 and eng.stats()["not_stored_empty"] == 6


@pytest.mark.parametrize("bad", ["sometimes", {"mode": "refresh", "max_age": 3}, CacheControl.__name__, 7])
def test_a_bad_cache_control_is_a_configuration_error(bad: Any) -> None:
    with pytest.raises(ConfigurationError):
        CacheControl.of(bad if bad != "CacheControl" else object())
    with pytest.raises(ConfigurationError):
        CacheControl("refresh", ttl=-1)


# ---------------------------------------------------------------------------- LangChain
@pytest.fixture
def chat(make_engine) -> tuple[CachedChatModel, NumberedChatModel]:
    inner = NumberedChatModel()
    return CachedChatModel(inner, engine=make_engine(image_encoder=None, durable=True)), inner


def _ask(model: CachedChatModel, **kw: Any) -> str:
    return str(model.invoke([HumanMessage(content=Q)], **kw).content)


def test_chat_model_per_call_control(chat) -> None:
    model, inner = chat
    assert _ask(model) == "reply 1" and _ask(model) == "reply 1"  # stored, then served
    assert _ask(model, cache_control="bypass") == "reply 2"  # not read...
    assert _ask(model) == "reply 1"  # ... and not written
    assert _ask(model, cache_control="refresh") == "reply 3"  # not read, written over
    assert _ask(model) == "reply 3"
    assert _ask(model, cache_control="no-store") == "reply 3"  # read; a miss would not be kept
    assert all("cache_control" not in kw for kw in inner._calls)  # never passed to the model
    # the run's metadata is the other LangChain idiom
    assert str(model.invoke([HumanMessage(content=Q)], config={"metadata": {"cache_control": "refresh"}}).content) == "reply 4"


def test_chat_model_no_store_on_a_miss_keeps_nothing(chat) -> None:
    model, _inner = chat
    assert _ask(model, cache_control="no-store") == "reply 1"
    assert _ask(model) == "reply 2"  # nothing was kept


def test_chat_model_never_stores_an_empty_reply_or_an_error(chat) -> None:
    model, inner = chat
    inner.reply = ""
    assert _ask(model) == ""
    inner.reply = None
    assert _ask(model) == "reply 1"  # the empty reply was not served back
    assert model.stats()["adapter"]["empty_not_stored"] == 1


def test_chat_model_ttl_per_entry(make_engine) -> None:
    now = [5000.0]
    inner = NumberedChatModel()
    model = CachedChatModel(inner, engine=make_engine(image_encoder=None, durable=True, clock=lambda: now[0]))
    assert _ask(model, cache_control={"ttl": 30}) == "reply 1"
    assert _ask(model) == "reply 1"
    now[0] += 31
    assert _ask(model) == "reply 2"


# ---------------------------------------------------------------------------- LlamaIndex
def _chat(llm: CachedMultiModalLLM, **kw: Any) -> ChatResponse:
    return llm.chat([ChatMessage(role="user", content=Q)], **kw)


def test_llamaindex_per_call_control(make_engine) -> None:
    inner = VisionEchoLLM()
    llm = CachedMultiModalLLM(inner, engine=make_engine(image_encoder=None, durable=True))
    _chat(llm)
    _chat(llm)
    assert inner.calls == ["chat"]
    _chat(llm, cache_control="bypass")
    _chat(llm, cache_control="refresh")
    assert inner.calls == ["chat", "chat", "chat"]
    _chat(llm)
    assert inner.calls == ["chat"] * 3  # the refreshed answer is served
    llm.complete("Name a prime number.", cache_control="no-store")
    llm.complete("Name a prime number.")
    assert inner.calls[-2:] == ["complete", "complete"]  # the no-store answer was not kept


def test_llamaindex_never_stores_an_empty_answer(make_engine) -> None:
    from llama_index.core.llms import CompletionResponse

    class Silent(VisionEchoLLM):
        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            self._calls.append("complete")
            return CompletionResponse(text="")

    inner = Silent()
    llm = CachedMultiModalLLM(inner, engine=make_engine(image_encoder=None, durable=True))
    llm.complete("Say nothing.")
    llm.complete("Say nothing.")
    assert inner.calls == ["complete", "complete"] and llm.stats()["adapter"]["empty_not_stored"] == 2
