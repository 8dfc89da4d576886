"""Every resource limit has a safe default, is configurable, holds at its exact boundary,
applies wherever an image can appear (last turn or context), and fails open by default.

Limits: ``max_image_pixels`` (decompression bombs), ``max_image_bytes``,
``max_prompt_chars`` (longer prompts are keyed exactly, never embedded) and
``max_response_bytes``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from mlc_integrations import CacheRequest, ImageTooLargeError, MLCEngine, PayloadError
from mlc_integrations.images import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_MAX_IMAGE_PIXELS
from tests.helpers import png_bytes
from tests.unit.test_fuzz_engine import bomb_png
from mlc_integrations import Limits


def test_safe_defaults() -> None:
    eng = MLCEngine(image_encoder=None)
    # Bounded, and far below what would exhaust a small server's memory (PIL's own bomb error is at 179 Mpx).
    assert eng.max_image_pixels == DEFAULT_MAX_IMAGE_PIXELS <= 50_000_000
    assert eng.max_image_bytes == DEFAULT_MAX_IMAGE_BYTES <= 32 * 1024 * 1024
    assert 0 < eng.max_prompt_chars <= 16_384
    assert 0 < eng.max_response_bytes <= 16 * 1024 * 1024
    assert eng.store.timeout is None or 0 < eng.store.timeout <= 30


@pytest.mark.parametrize("side", [8_000, 50_000])  # 64 Mpx: over our default; 2.5 Gpx: over PIL's own guard too
def test_default_engine_refuses_a_decompression_bomb_without_decoding_it(make_engine: Any, side: int) -> None:
    strict, lax = make_engine(strict=True), make_engine()
    bomb = bomb_png(side, side)  # a ~100-byte file claiming a huge canvas
    from PIL import ImageFile

    def never(*_a: Any, **_k: Any) -> None:
        raise AssertionError("the bomb's pixels were decoded")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ImageFile.ImageFile, "load", never)  # refused from the header: nothing decoded or allocated
        with pytest.raises(ImageTooLargeError, match="max_image_pixels|decompression bomb"):
            strict.lookup(CacheRequest(text="what is this?", images=[bomb]))
        assert lax.lookup(CacheRequest(text="what is this?", images=[bomb])) is None
        assert lax.update(CacheRequest(text="what is this?", images=[bomb]), "x") is None
    st = lax.stats()
    assert st["errors"] == {"lookup:ImageTooLargeError": 1, "update:ImageTooLargeError": 1}


@pytest.mark.parametrize("where", ["images", "context"])
def test_pixel_limit_boundary(make_engine: Any, where: str) -> None:
    limit = 64 * 64
    strict = make_engine(strict=True, image_encoder=None, limits=Limits(max_image_pixels=limit))

    def req(img: Image.Image) -> CacheRequest:
        if where == "images":
            return CacheRequest(text="describe", images=[png_bytes(img)])
        return CacheRequest(text="describe", context=[{"role": "user", "content": [{"type": "image", "image": img}]}])

    assert strict.update(req(Image.new("RGB", (64, 64))), "at the limit") is not None
    with pytest.raises(ImageTooLargeError):
        strict.lookup(req(Image.new("RGB", (65, 64))))
    lax = make_engine(image_encoder=None, limits=Limits(max_image_pixels=limit))
    assert lax.lookup(req(Image.new("RGB", (65, 64)))) is None
    assert lax.stats()["errors"] == {"lookup:ImageTooLargeError": 1}


def test_byte_limit_boundary_for_bytes_and_files(make_engine: Any, tmp_path: Path) -> None:
    data = png_bytes(Image.new("RGB", (32, 32), (1, 2, 3)))
    exact = make_engine(strict=True, image_encoder=None, limits=Limits(max_image_bytes=len(data)))
    assert exact.update(CacheRequest(text="q", images=[data]), "ok") is not None
    smaller = make_engine(strict=True, image_encoder=None, limits=Limits(max_image_bytes=len(data) - 1))
    with pytest.raises(ImageTooLargeError, match="max_image_bytes"):
        smaller.lookup(CacheRequest(text="q", images=[data]))
    path = tmp_path / "pic.png"
    path.write_bytes(data)
    with pytest.raises(ImageTooLargeError, match="max_image_bytes"):  # checked from the file size, before reading
        smaller.lookup(CacheRequest(text="q", images=[path]))


def test_prompt_char_limit_boundary(make_engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    eng = make_engine(strict=True, image_encoder=None, limits=Limits(max_prompt_chars=100))
    at_limit, over = "a" * 99 + "?", "b" * 100 + "?"
    eng.update(CacheRequest(text=at_limit), "embedded")
    assert eng.store.collection("l1").count() == 1

    def no_embedding(texts: Any) -> Any:
        raise AssertionError(f"embedded a prompt over max_prompt_chars ({len(texts[0])} chars)")

    monkeypatch.setattr(eng.text_embedder, "embed", no_embedding)
    eng.update(CacheRequest(text=over), "keyed exactly")
    assert eng.lookup(CacheRequest(text=f" {over}\n")).payload == "keyed exactly"  # exact key still works
    assert eng.lookup(CacheRequest(text="b" * 100 + "!")) is None  # and nothing semantic is tried
    assert eng.store.collection("l1").count() == 1


def test_response_size_limit_boundary(make_engine: Any) -> None:
    strict = make_engine(strict=True, image_encoder=None, limits=Limits(max_response_bytes=100))
    fits = "x" * 98  # JSON adds the two quotes: exactly 100 bytes
    assert strict.update(CacheRequest(text="q1"), fits) is not None
    with pytest.raises(PayloadError, match="max_response_bytes"):
        strict.update(CacheRequest(text="q2"), fits + "x")
    with pytest.raises(PayloadError):  # multi-byte characters count as bytes, not characters
        strict.update(CacheRequest(text="q3"), "é" * 60)
    lax = make_engine(image_encoder=None, limits=Limits(max_response_bytes=100))
    assert lax.update(CacheRequest(text="q2"), fits + "x") is None
    st = lax.stats()
    assert st["updates_failed"] == 1 and st["errors"] == {"update:PayloadError": 1} and lax.count() == 0


@pytest.mark.parametrize("value", [1e300, 1e308, 0.0])
def test_supplied_embedding_that_cannot_be_normalized_is_a_typed_error(make_engine: Any, value: float) -> None:
    """Huge finite values overflowed the float32 cast to inf/NaN, which Chroma then
    rejected only after the response had been written."""
    from mlc_integrations import InvalidRequestError

    strict = make_engine(strict=True, image_encoder=None)
    with pytest.raises(InvalidRequestError, match="zero vector|too large"):
        strict.update(CacheRequest(text="q", text_embedding=[value] * 384), "x")
    lax = make_engine(image_encoder=None)
    assert lax.update(CacheRequest(text="q", text_embedding=[value] * 384), "x") is None
    assert lax.count() == 0 and lax.stats()["errors"] == {"update:InvalidRequestError": 1}
    big_but_fine = [1e30] * 384
    assert strict.update(CacheRequest(text="q2", text_embedding=big_but_fine), "ok") is not None
