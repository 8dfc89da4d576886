"""Identical requests in flight: the second waits for the first's answer (inflight.py).

No timing assertions: a gate holds the first model call until every identical call is
known to wait (the engine's own ``inflight.stats()``), then lets it answer or fail.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

import pytest
from langchain_core.globals import get_llm_cache, set_llm_cache
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr

from mlc_integrations import CacheRequest, MLCEngine
from mlc_integrations.runtime.inflight import InFlight, InFlightWait, coalesced_in_thread
from mlc_integrations.langchain import CachedChatModel, MultimodalSemanticCache

N = 5


class ModelDown(RuntimeError):
    pass


class GatedChatModel(BaseChatModel):
    """Numbers its replies; the first call waits for ``gate`` and, with ``fail_first``, raises."""

    fail_first: bool = False
    _calls: list[str] = PrivateAttr(default_factory=list)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)
    _gate: Any = PrivateAttr(default_factory=threading.Event)

    @property
    def _llm_type(self) -> str:
        return "gated-fake"

    @property
    def calls(self) -> int:
        return len(self._calls)

    def open_gate(self) -> None:
        self._gate.set()

    def _answer(self, messages: list[BaseMessage]) -> ChatResult:
        with self._lock:
            self._calls.append(str(messages[-1].content))
            n = len(self._calls)
        if n == 1:
            assert self._gate.wait(60), "the test never opened the gate"
            if self.fail_first:
                raise ModelDown("the first call fails")
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=f"Answer {n}"))])

    def _generate(self, messages: list[BaseMessage], stop: Optional[list[str]] = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        return self._answer(messages)

    async def _agenerate(self, messages: list[BaseMessage], stop: Optional[list[str]] = None, run_manager: Any = None,
                         **kwargs: Any) -> ChatResult:
        with self._lock:
            first = not self._calls
        if first:  # the first call's wait must not hold the event loop
            while not self._gate.is_set():
                await asyncio.sleep(0.005)
        return self._answer(messages)


async def until(cond: Any, what: str) -> None:
    """Poll (the loop keeps running) until ``cond()``; a bound only against hanging forever."""
    for _ in range(6000):
        if cond():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


def wait_until(cond: Any, what: str) -> None:
    for _ in range(6000):
        if cond():
            return
        time.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


@pytest.fixture
def engine(make_engine: Any) -> MLCEngine:
    eng = make_engine(image_encoder=None)
    eng.warmup()  # model loads are not what these tests are about
    return eng


@pytest.fixture
def global_cache() -> Any:
    before = get_llm_cache()
    yield
    set_llm_cache(before)


async def test_five_identical_concurrent_ainvoke_through_set_llm_cache_make_one_model_call_and_one_answer(
        engine: MLCEngine, global_cache: Any) -> None:
    set_llm_cache(MultimodalSemanticCache(engine=engine))
    model = GatedChatModel()
    calls = [asyncio.create_task(model.ainvoke("What is the capital of France?")) for _ in range(N)]
    await until(lambda: engine.inflight.stats()["waited"] == N - 1, "four calls wait for the first")
    model.open_gate()
    answers = [m.content for m in await asyncio.gather(*calls)]
    assert model.calls == 1
    assert answers == ["Answer 1"] * N
    assert engine.inflight.stats()["answered"] == N - 1 and len(engine.inflight) == 0


async def test_five_identical_concurrent_ainvoke_of_cached_chat_model_make_one_model_call(engine: MLCEngine) -> None:
    inner = GatedChatModel()
    model = CachedChatModel(inner, engine)
    calls = [asyncio.create_task(model.ainvoke("Name a prime number")) for _ in range(N)]
    await until(lambda: engine.inflight.stats()["waited"] == N - 1, "four calls wait for the first")
    inner.open_gate()
    answers = {m.content for m in await asyncio.gather(*calls)}
    assert inner.calls == 1 and answers == {"Answer 1"}


def test_five_identical_calls_from_threads_make_one_model_call(engine: MLCEngine) -> None:
    inner = GatedChatModel()
    model = CachedChatModel(inner, engine)
    with ThreadPoolExecutor(N) as pool:
        futures = [pool.submit(model.invoke, "Name a prime number") for _ in range(N)]
        wait_until(lambda: engine.inflight.stats()["waited"] == N - 1, "four calls wait for the first")
        inner.open_gate()
        answers = {f.result().content for f in futures}
    assert inner.calls == 1 and answers == {"Answer 1"}


async def test_a_failing_first_call_releases_the_waiters_to_call_the_model_themselves(engine: MLCEngine) -> None:
    inner = GatedChatModel(fail_first=True)
    model = CachedChatModel(inner, engine)
    calls = [asyncio.create_task(model.ainvoke("Name a prime number")) for _ in range(N)]
    await until(lambda: engine.inflight.stats()["waited"] == N - 1, "four calls wait for the first")
    inner.open_gate()
    results = await asyncio.gather(*calls, return_exceptions=True)
    failed = [r for r in results if isinstance(r, ModelDown)]
    answered = sorted(r.content for r in results if not isinstance(r, BaseException))
    assert len(failed) == 1 and len(answered) == N - 1
    # The failed call, then the released waiters' own -- one of which may already be stored
    # (and served from memory) when another waiter looks up again.
    assert 2 <= inner.calls <= N
    stats = engine.inflight.stats()
    assert stats["released"] == 1 and stats["timed_out"] == 0 and stats["answered"] == 0


async def test_llamaindex_wrapper_collapses_identical_achat_calls(engine: MLCEngine) -> None:
    from llama_index.core.base.llms.types import ChatMessage

    from mlc_integrations.llamaindex import CachedMultiModalLLM
    from tests.unit._fake_llms import VisionEchoLLM

    inner = VisionEchoLLM()
    gate = asyncio.Event()
    real_achat = inner.achat

    async def gated_achat(messages: Any, **kw: Any) -> Any:
        await gate.wait()
        return await real_achat(messages, **kw)

    object.__setattr__(inner, "achat", gated_achat)
    llm = CachedMultiModalLLM(llm=inner, engine=engine)
    msgs = [ChatMessage(role="user", content="Is the sky blue?")]
    calls = [asyncio.create_task(llm.achat(msgs)) for _ in range(N)]
    await until(lambda: engine.inflight.stats()["waited"] == N - 1, "four calls wait for the first")
    gate.set()
    answers = {str(r.message.content) for r in await asyncio.gather(*calls)}
    assert len(answers) == 1 and engine.inflight.stats()["answered"] == N - 1


async def test_waiting_calls_hold_no_worker_thread_so_twenty_share_a_two_thread_pool(
        engine: MLCEngine, global_cache: Any) -> None:
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(2))
    set_llm_cache(MultimodalSemanticCache(engine=engine))
    model = GatedChatModel()
    calls = [asyncio.create_task(model.ainvoke("What is 2 + 2?")) for _ in range(20)]
    await until(lambda: engine.inflight.stats()["waited"] == 19, "nineteen calls wait for the first")
    model.open_gate()
    answers = {m.content for m in await asyncio.gather(*calls)}
    assert model.calls == 1 and answers == {"Answer 1"}


def test_different_requests_never_wait_on_each_other(engine: MLCEngine) -> None:
    a, b = CacheRequest(text="first question", scope="m"), CacheRequest(text="second question", scope="m")
    assert engine.lookup(a) is None  # a's lookup leads a flight and never stores
    other = threading.Thread(target=engine.lookup, args=(b,))
    other.start()
    other.join()
    assert engine.inflight.stats()["waited"] == 0 and len(engine.inflight) == 2


def test_the_same_caller_never_waits_for_its_own_flight(engine: MLCEngine) -> None:
    req = CacheRequest(text="asked twice in a row", scope="m")
    assert engine.lookup(req) is None and engine.lookup(req) is None
    assert engine.inflight.stats()["waited"] == 0


def test_an_update_answers_a_thread_waiting_for_it(engine: MLCEngine) -> None:
    req = CacheRequest(text="What is the boiling point of water?", scope="m")
    assert engine.lookup(req) is None
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(engine.lookup(req)))
    waiter.start()
    wait_until(lambda: engine.inflight.stats()["waited"] == 1, "the second lookup waits")
    engine.update(req, "100 degrees Celsius")
    waiter.join()
    assert got[0] is not None and got[0].payload == "100 degrees Celsius"


def test_a_leader_that_never_reports_back_holds_its_followers_only_until_the_deadline() -> None:
    flights = InFlight(wait_s=0.05)
    leader = flights.enter("k")
    assert leader.leader
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(flights.enter("k")))
    t.start()
    t.join()
    assert not got[0].leader and not got[0].answered and flights.stats()["timed_out"] == 1
    assert flights.enter("k").leader  # the expired flight is replaced by a new leader


def test_wait_s_zero_turns_coalescing_off() -> None:
    flights = InFlight(wait_s=0)
    assert flights.enter("k").flight is None and len(flights) == 0


async def test_a_follower_in_a_worker_thread_waits_on_the_event_loop_instead() -> None:
    from mlc_integrations.runtime import inflight

    flights = InFlight()

    def as_caller(n: int, no_block: bool = False) -> Any:
        def enter() -> Any:
            inflight._CALLER.set(("test-caller", n))
            inflight._NO_BLOCK.set(no_block)
            return flights.enter("k")
        return contextvars.copy_context().run(enter)

    assert as_caller(1).leader
    with pytest.raises(InFlightWait):  # what coalesced_in_thread catches: no worker thread waits
        await asyncio.to_thread(as_caller, 2, True)
    waiting = asyncio.create_task(coalesced_in_thread(flights.enter, "k"))
    await until(lambda: flights.stats()["waited"] == 2, "the follower waits")
    flights.stored("k")
    ticket = await waiting
    assert not ticket.leader and ticket.answered


def test_flights_of_lookups_that_never_store_are_swept_so_the_table_stays_bounded(monkeypatch: Any) -> None:
    from mlc_integrations.runtime import inflight

    monkeypatch.setattr(inflight, "_SWEEP_AT", 8)
    flights = InFlight(wait_s=0.0001)
    flights._sweep_at = 8
    for i in range(100):
        flights.enter(f"key-{i}")
        time.sleep(0.0002)  # every flight is past its deadline before the next lookup
    assert len(flights) <= 8
