"""Everyday options are keywords; expert knobs are small typed objects; the text model
can be the application's own embedding object (LangChain, LlamaIndex) or a callable."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest

from mlc_integrations import CacheRequest, Limits, MLCEngine, StorageOptions, TierOptions, WriteOptions
from mlc_integrations.errors import InvalidRequestError


def _bag_of_words(texts: list[str]) -> list[list[float]]:
    """A deterministic toy embedding: word counts hashed into 64 buckets."""
    out = []
    for t in texts:
        v = np.zeros(64)
        for w in t.lower().strip("?!. ").split():
            v[sum(map(ord, w)) % 64] += 1.0
        out.append(v.tolist())
    return out


class LangChainStyle:
    model = "bag-of-words-lc"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return _bag_of_words(texts)


class LlamaIndexStyle:
    model_name = "bag-of-words-li"

    def get_text_embedding_batch(self, texts: list[str]) -> list[list[float]]:
        return _bag_of_words(texts)


def test_the_engine_takes_at_most_twenty_options() -> None:
    assert len(inspect.signature(MLCEngine.__init__).parameters) - 1 <= 20


@pytest.mark.parametrize("model", [LangChainStyle(), LlamaIndexStyle(), _bag_of_words],
                         ids=["langchain", "llamaindex", "callable"])
def test_an_application_embedding_serves_l1(model: Any) -> None:
    eng = MLCEngine(text_model=model, image_encoder=None, verifier="off", l1_threshold=0.9)
    eng.update(CacheRequest(text="Who wrote the play Hamlet?", scope="m"), "Shakespeare")
    hit = eng.lookup(CacheRequest(text="who wrote the play hamlet", scope="m"))
    assert hit is not None and hit.tier == "L1" and hit.payload == "Shakespeare"
    assert eng.encoders.text_model.startswith("external:")
    assert eng.lookup(CacheRequest(text="Who painted the Mona Lisa?", scope="m")) is None


def test_an_embedding_that_returns_the_wrong_shape_is_a_counted_miss() -> None:
    eng = MLCEngine(text_model=lambda texts: [[1.0, 0.0]] * (len(texts) + 1), image_encoder=None, verifier="off")
    eng.update(CacheRequest(text="a", scope="m"), "x")  # acknowledged; the text is encoded by the writer
    eng.flush()
    assert eng.lookup(CacheRequest(text="a", scope="m")) is None  # the model broke: nothing was stored
    st = eng.stats()
    assert st["updates_failed"] == 1 and "update:ModelUnavailableError" in st["errors"]


def test_option_objects_are_typed() -> None:
    with pytest.raises(TypeError, match=r"storage= takes a StorageOptions"):
        MLCEngine(storage={"collection_prefix": "x"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="text_model must be"):
        MLCEngine(text_model=42, image_encoder=None)


def test_option_objects_reach_their_owners() -> None:
    eng = MLCEngine(image_encoder=None, storage=StorageOptions(collection_prefix="shop"),
                    writes=WriteOptions(store_prompts=False), limits=Limits(max_prompt_chars=10),
                    tiers=TierOptions(l1=False), strict=True)
    assert eng.store.prefix.startswith("shop") and not eng.store_prompts and not eng.enable_l1
    assert eng.max_prompt_chars == 10
    with pytest.raises(InvalidRequestError):
        eng.lookup(CacheRequest(text="", scope="m"))


# ---------------------------------------------------------------------------- names that name nothing
def test_a_mistyped_image_encoder_is_refused_at_construction_with_the_close_names() -> None:
    from mlc_integrations import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"did you mean 'efficientnet-lite[012]'"):
        MLCEngine(image_encoder="efficientnet-lite9")
    with pytest.raises(ConfigurationError, match=r"did you mean 'ViT-B-32'"):
        MLCEngine(image_encoder="ViT-B-33")


def test_a_mistyped_verifier_lists_the_accepted_names() -> None:
    from mlc_integrations import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"the names are 'default', 'judge', 'off'"):
        MLCEngine(verifier="strict", image_encoder=None)
