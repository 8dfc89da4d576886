"""langchain-tests' standard suites, subclassed unmodified: the cache suites around
``MultimodalSemanticCache``, the chat-model unit suite around ``CachedChatModel``."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest
from langchain_tests.integration_tests.cache import AsyncCacheTestSuite, SyncCacheTestSuite
from langchain_tests.unit_tests import ChatModelUnitTests

from mlc_integrations import CachedChatModel, MLCEngine, MultimodalSemanticCache
from tests.unit._fake_chat import FakeToolChatModel


class TestMultimodalSemanticCacheSync(SyncCacheTestSuite):
    @pytest.fixture
    def cache(self, make_engine: Callable[..., MLCEngine]) -> MultimodalSemanticCache:
        return MultimodalSemanticCache(make_engine())


class TestMultimodalSemanticCacheAsync(AsyncCacheTestSuite):
    @pytest.fixture
    async def cache(self, make_engine: Callable[..., MLCEngine]) -> Any:
        return MultimodalSemanticCache(make_engine())


class TestPersistentCacheSync(SyncCacheTestSuite):
    """The zero-argument style default: an embedded persistent Chroma directory."""

    @pytest.fixture
    def cache(self, tmp_path: Any, tiny_clip_dir: Any) -> MultimodalSemanticCache:
        return MultimodalSemanticCache(persist_directory=str(tmp_path / "cache"), image_encoder=str(tiny_clip_dir))


# ---------------------------------------------------------------------------- the chat-model wrapper
_ENGINE: list[MLCEngine] = []


def _shared_engine() -> MLCEngine:
    """One in-memory engine for every wrapper the suite builds (it builds hundreds in
    ``test_init_time``); nothing here looks anything up."""
    if not _ENGINE:
        _ENGINE.append(MLCEngine(warm_start=False, image_encoder=None))
    return _ENGINE[0]


@pytest.fixture(scope="module", autouse=True)
def _close_shared_engine() -> Iterator[None]:
    yield
    while _ENGINE:
        _ENGINE.pop().close()


class CachedFakeToolChat(CachedChatModel):
    """``CachedChatModel`` as the standard suite builds a chat model: from provider
    parameters (model, temperature, max_tokens, timeout, stop, api_key, streaming...).
    A wrapper takes a model instance instead, so this constructor builds the fake inner
    model from them; every method under test is ``CachedChatModel``'s own."""

    def __init__(self, **params: Any) -> None:
        cache = params.pop("cache", None)
        super().__init__(FakeToolChatModel(**params), cache)


class TestCachedChatModelUnit(ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[CachedFakeToolChat]:
        return CachedFakeToolChat

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"cache": _shared_engine(), "model": "fake-tool-model"}
