"""langchain-tests' standard cache suites, subclassed unmodified."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from langchain_tests.integration_tests.cache import AsyncCacheTestSuite, SyncCacheTestSuite

from mlc_integrations import MLCEngine, MultimodalSemanticCache


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
        return MultimodalSemanticCache(persist_directory=str(tmp_path / "cache"), clip_model=str(tiny_clip_dir))
