"""The caches compared side by side, all as LangChain :class:`BaseCache` objects.

* no cache;
* exact-only: LangChain's own :class:`langchain_core.caches.InMemoryCache` (key = the
  exact prompt string, base64 images included, plus ``llm_string``);
* GPTCache: the real ``gptcache`` package (sqlite + faiss, ``SearchDistanceEvaluation``,
  the whole prompt string embedded), mounted the way ``langchain_community.cache.GPTCache``
  mounts it (one GPTCache per ``llm_string``; generations stored as JSON). Its embedding
  is the same offline all-MiniLM-L6-v2 that MLC's L1 uses, so the comparison is about
  the caching method, not the embedding model. GPTCache's ``similarity_threshold`` is
  not a cosine: with faiss' squared-L2 distance on unit vectors and ``max_distance=4``,
  a hit needs ``4 - (2 - 2 cos) >= 4 t``, i.e. ``cos >= 2 t - 1`` (default t=0.8 is
  cosine 0.6; t=0.9 is cosine 0.8, the default of LangChain's Redis/Chroma-style
  semantic caches, distance 0.2);
* MLC: :class:`mlc_integrations.langchain.MultimodalSemanticCache`.

:class:`TimedCache` wraps any of them to measure lookup and update overhead.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import warnings
from typing import Any, Callable, Optional

import numpy as np
from langchain_core.caches import RETURN_VAL_TYPE, BaseCache, InMemoryCache
from langchain_core.load import dumps, loads

log = logging.getLogger(__name__)


class TimedCache(BaseCache):
    """Delegates to ``inner`` and records how long each lookup and update took (ms)."""

    def __init__(self, inner: BaseCache) -> None:
        self.inner = inner
        self.lookup_ms: list[float] = []
        self.update_ms: list[float] = []

    def lookup(self, prompt: str, llm_string: str) -> Optional[RETURN_VAL_TYPE]:
        t0 = time.perf_counter()
        try:
            return self.inner.lookup(prompt, llm_string)
        finally:
            self.lookup_ms.append((time.perf_counter() - t0) * 1000.0)

    def update(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        t0 = time.perf_counter()
        try:
            self.inner.update(prompt, llm_string, return_val)
        finally:
            self.update_ms.append((time.perf_counter() - t0) * 1000.0)

    def clear(self, **kwargs: Any) -> None:
        self.inner.clear(**kwargs)


def gptcache_cosine(similarity_threshold: float) -> float:
    """The cosine a GPTCache ``similarity_threshold`` amounts to (faiss L2, unit vectors)."""
    return 2.0 * similarity_threshold - 1.0


def gptcache_threshold_for_cosine(cosine: float) -> float:
    return (cosine + 1.0) / 2.0


class _MiniLMForGPTCache:
    """GPTCache ``BaseEmbedding`` protocol (``to_embeddings``, ``dimension``) over the
    offline sentence-transformers model MLC's L1 also uses."""

    def __init__(self) -> None:
        from mlc_integrations.embed.models import TextEmbedder

        self._emb = TextEmbedder.shared(None)

    @property
    def dimension(self) -> int:
        return self._emb.dim

    def to_embeddings(self, data: Any, **_: Any) -> np.ndarray:
        return self._emb.embed([str(data)])[0]


class GPTCacheLangChain(BaseCache):
    """The real GPTCache behind LangChain's cache interface, as
    ``langchain_community.cache.GPTCache`` does it (that package is not a dependency
    here): one GPTCache object per ``llm_string``, ``init_similar_cache`` with sqlite +
    faiss and ``SearchDistanceEvaluation``; ``get``/``put`` on the whole prompt string."""

    def __init__(self, similarity_threshold: float = 0.8, data_dir: Optional[str] = None) -> None:
        import gptcache  # noqa: F401  (fail early when not installed)

        self.similarity_threshold = similarity_threshold
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="mlc-gptcache-")
        self._caches: dict[str, Any] = {}
        self._generation = 0
        self._lock = threading.Lock()
        self._embedding = _MiniLMForGPTCache()
        if self._own_dir:
            atexit.register(shutil.rmtree, self.data_dir, True)

    @property
    def label(self) -> str:
        return (f"GPTCache 0.1.44 (real package, whole prompt, similarity_threshold={self.similarity_threshold:g} "
                f"= cosine >= {gptcache_cosine(self.similarity_threshold):.2f})")

    def _cache_for(self, llm_string: str) -> Any:
        with self._lock:
            obj = self._caches.get(llm_string)
            if obj is None:
                import hashlib

                from gptcache import Cache, Config
                from gptcache.adapter.api import init_similar_cache

                obj = Cache()
                sub = os.path.join(self.data_dir, f"{self._generation}-" + hashlib.sha256(llm_string.encode()).hexdigest()[:16])
                os.makedirs(sub, exist_ok=True)
                init_similar_cache(
                    data_dir=sub,
                    cache_obj=obj,
                    embedding=self._embedding,  # type: ignore[arg-type]
                    config=Config(similarity_threshold=self.similarity_threshold),
                )
                self._caches[llm_string] = obj
            return obj

    def lookup(self, prompt: str, llm_string: str) -> Optional[RETURN_VAL_TYPE]:
        from gptcache.adapter.api import get

        res = get(prompt, cache_obj=self._cache_for(llm_string))
        if res is None:
            return None
        try:
            with warnings.catch_warnings():  # langchain's loads is beta; same call as langchain_community
                warnings.simplefilter("ignore")
                return [loads(g) for g in json.loads(res)]
        except Exception:  # as langchain_community does: an unreadable entry is a miss
            return None

    def update(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        from gptcache.adapter.api import put

        put(prompt, json.dumps([dumps(g) for g in return_val]), cache_obj=self._cache_for(llm_string))

    def clear(self, **kwargs: Any) -> None:
        """Forget every entry: close (flush) the GPTCache objects and start new ones in
        fresh sub-directories (the data directory is removed at interpreter exit, after
        GPTCache's own exit hooks have flushed into it)."""
        with self._lock:
            for obj in self._caches.values():
                try:
                    obj.data_manager.close()
                except Exception as exc:  # closing a throwaway cache must not fail the run
                    log.debug("gptcache close: %s", exc)
            self._caches.clear()
            self._generation += 1


# The sweeps' and the bench's MLC row: the engine's defaults with a tiny CLIP trained on the
# stream's own kind of picture on L2 (mlc-easyvqa-tiny, or mlc-scenes-tiny on the scenes) --
# not what MLCEngine() ships (EfficientNet-Lite0 and the image-change verifier: the rows
# labelled "MLC as shipped"). The name says so wherever its figures appear.
TINY_CLIP_CONFIG = "MLC defaults, L2 on a tiny CLIP"
SWEEP_IMAGE_ENCODER = "mlc-easyvqa-tiny"


def mlc_cache(**engine_options: Any) -> BaseCache:
    """An in-memory :class:`MultimodalSemanticCache` with the offline models and the
    given engine options: L2 on ``image_encoder`` when given (a name or an encoder,
    its calibrated threshold unless one is passed), else on ``mlc-easyvqa-tiny``."""
    from mlc_integrations.langchain import MultimodalSemanticCache

    engine_options = engine_options_of(engine_options)
    engine_options.setdefault("image_encoder", SWEEP_IMAGE_ENCODER)
    engine_options.setdefault("persist_directory", None)
    return MultimodalSemanticCache(**engine_options)


def engine_options_of(recipe: dict[str, Any]) -> dict[str, Any]:
    """The engine keywords for a sweep recipe. Recipes stay flat, JSON-friendly dicts
    (they are recorded in every report's params): ``enable_exact``/``enable_l1`` become
    :class:`TierOptions`, ``enable_l2=False`` is ``image_encoder=None``, ``l2_threshold``
    sets both L2 thresholds, ``l2_prompt_encoder`` goes to the tier options."""
    from mlc_integrations import TierOptions

    out = dict(recipe)
    tiers = {"exact": out.pop("enable_exact", True), "l1": out.pop("enable_l1", True)}
    if "l2_prompt_encoder" in out:
        tiers["l2_prompt_encoder"] = out.pop("l2_prompt_encoder")
    if tiers != {"exact": True, "l1": True}:
        out["tiers"] = TierOptions(**tiers)
    if out.pop("enable_l2", True) is False:
        out["image_encoder"] = None
    if "l2_threshold" in out:
        out["l2_image_threshold"] = out["l2_prompt_threshold"] = out.pop("l2_threshold")
    return out


def configurations(gptcache_thresholds: tuple[float, ...] = (0.8, 0.9)) -> dict[str, tuple[str, Callable[[], Optional[BaseCache]]]]:
    out: dict[str, tuple[str, Callable[[], Optional[BaseCache]]]] = {
        "no cache": ("no cache (every request calls the backend)", lambda: None),
        "exact-only": ("LangChain InMemoryCache (exact prompt string match)", InMemoryCache),
    }
    for t in gptcache_thresholds:
        out[f"GPTCache t={t:g}"] = (
            f"GPTCache (real package) similarity_threshold={t:g} (cosine >= {gptcache_cosine(t):.2f}), whole prompt",
            lambda t=t: GPTCacheLangChain(similarity_threshold=t),
        )
    out[TINY_CLIP_CONFIG] = (f"MLC MultimodalSemanticCache, engine defaults, L2 on {SWEEP_IMAGE_ENCODER}", mlc_cache)
    return out
