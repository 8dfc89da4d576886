"""The three adapters share one convention (diskcache's Cache/FanoutCache/DjangoCache
agree the same way): ``engine=`` shares an engine whose settings are its own, ``strict``
follows that engine (giving it as well is a TypeError), ``clear()`` empties the adapter's
namespace, ``close()`` closes only an engine the adapter built, stats under "adapter"."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from mlc_integrations import CachedChatModel, CachedMultiModalLLM, MLCEngine, MultimodalSemanticCache
from tests.unit._fake_chat import FakeToolChatModel
from tests.unit._fake_llms import VisionEchoLLM

QUESTION = "Who wrote Hamlet?"

ADAPTERS: dict[str, Callable[..., Any]] = {
    "MultimodalSemanticCache": lambda **kw: MultimodalSemanticCache(**kw),
    "CachedChatModel": lambda **kw: CachedChatModel(FakeToolChatModel(), **kw),
    "CachedMultiModalLLM": lambda **kw: CachedMultiModalLLM(VisionEchoLLM(), **kw),
}


def ask(adapter: Any) -> bool:
    """Send QUESTION through the adapter; True when the cache answered it."""
    if isinstance(adapter, MultimodalSemanticCache):
        hit = adapter.lookup(QUESTION, "llm")
        if hit is None:
            from langchain_core.outputs import Generation

            adapter.update(QUESTION, "llm", [Generation(text="Shakespeare")])
        return hit is not None
    if isinstance(adapter, CachedChatModel):
        adapter.invoke(QUESTION)
    else:
        adapter.complete(QUESTION)
    return adapter.last_hit is not None


@pytest.fixture
def engine() -> MLCEngine:
    return MLCEngine(image_encoder=None, durable=True)


@pytest.mark.parametrize("name", ADAPTERS)
def test_engine_is_shared_and_its_strictness_is_the_adapters(name: str, engine: MLCEngine) -> None:
    adapter = ADAPTERS[name](engine=engine)
    assert adapter.engine is engine and adapter.strict is False
    strict_engine = MLCEngine(image_encoder=None, strict=True)
    assert ADAPTERS[name](engine=strict_engine).strict is True


@pytest.mark.parametrize("name", ADAPTERS)
@pytest.mark.parametrize("extra", [{"strict": True}, {"strict": False}, {"l1_threshold": 0.9}])
def test_settings_beside_a_shared_engine_are_a_type_error(name: str, extra: dict[str, Any],
                                                         engine: MLCEngine) -> None:
    with pytest.raises(TypeError, match="uses that engine's settings"):
        ADAPTERS[name](engine=engine, **extra)


@pytest.mark.parametrize("name", ADAPTERS)
def test_an_adapter_built_engine_takes_strict(name: str) -> None:
    adapter = ADAPTERS[name](strict=True, persist_directory=None, image_encoder=None)
    assert adapter.strict is True and adapter.engine.strict is True
    adapter.close()


@pytest.mark.parametrize("name", ADAPTERS)
def test_clear_empties_the_adapters_namespace_only(name: str, engine: MLCEngine) -> None:
    mine = ADAPTERS[name](engine=engine, namespace="mine")
    other = ADAPTERS[name](engine=engine, namespace="other")
    assert not ask(mine) and not ask(other)
    assert ask(mine) and ask(other)
    mine.clear()
    assert not ask(mine)  # stored again by this call
    assert ask(other)


@pytest.mark.parametrize("name", ADAPTERS)
def test_close_closes_only_an_engine_the_adapter_built(name: str, engine: MLCEngine, tmp_path: Any) -> None:
    ADAPTERS[name](engine=engine).close()
    assert engine.count() == 0  # still open: the engine is its owner's
    directory = str(tmp_path / "own")
    built = ADAPTERS[name](persist_directory=directory, image_encoder=None)
    ask(built)
    built.close()  # releases the directory: another engine may open it now
    with MLCEngine(persist_directory=directory, image_encoder=None) as reopened:
        assert reopened.count() == 1


@pytest.mark.parametrize("name", ADAPTERS)
def test_stats_of_every_adapter_sit_under_adapter(name: str, engine: MLCEngine) -> None:
    adapter = ADAPTERS[name](engine=engine)
    ask(adapter)
    st = adapter.stats()["adapter"]
    assert st["type"] == name and st["misses"] == 1 and st["lookups"] == 1
