"""What reaches the engine is a value, and what cannot be a value is refused at the
boundary: a request cannot change after its lookup, a picture changed in place is
keyed by its new pixels, text a tokenizer cannot take and files that are not regular
files are a counted miss (strict: a typed error), and a failed lookup says why."""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from mlc_integrations import CacheRequest, ImageDecodeError, ImageTooLargeError, InvalidRequestError, MLCEngine
from tests.helpers import jpeg_bytes, pattern
from mlc_integrations import Limits, TierOptions


def _engine(**kw: Any) -> MLCEngine:
    return MLCEngine(**kw, image_encoder=None, tiers=TierOptions(l1=False))


def test_a_request_cannot_be_changed_after_its_lookup() -> None:
    r = CacheRequest(text="What is the capital of France?", scope="m", images=[], context=[])
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.text = "What is the capital of Spain?"  # type: ignore[misc]
    assert r.images == () and r.context == ()  # sequences are stored as tuples


def test_a_new_question_built_from_an_old_request_is_stored_under_its_own_key() -> None:
    e = _engine()
    r = CacheRequest(text="What is the capital of France?", scope="m")
    assert e.lookup(r) is None
    e.update(dataclasses.replace(r, text="What is the capital of Spain?"), {"text": "Madrid"})
    assert e.lookup(CacheRequest(text="What is the capital of France?", scope="m")) is None
    assert e.lookup(CacheRequest(text="What is the capital of Spain?", scope="m")).payload == {"text": "Madrid"}


def test_a_picture_changed_in_place_after_the_lookup_is_keyed_by_its_new_pixels() -> None:
    e = _engine()
    picture = pattern(1, (48, 48))
    r = CacheRequest(text="What is in the picture?", images=[picture], scope="m")
    assert e.lookup(r) is None
    picture.paste((255, 0, 0), (0, 0, 24, 24))  # the caller edits its image object
    e.update(r, {"text": "a red square"})
    assert e.lookup(CacheRequest(text="What is in the picture?", images=[pattern(1, (48, 48))], scope="m")) is None
    assert e.lookup(CacheRequest(text="What is in the picture?", images=[picture.copy()], scope="m")) is not None


@pytest.mark.parametrize("field_name", ["text", "scope", "namespace"])
def test_lone_surrogates_are_a_counted_miss_and_a_typed_error_in_strict_mode(field_name: str) -> None:
    values = {"text": "What is this?", "scope": "m", "namespace": "default"}
    values[field_name] = "bad \udcff text"
    bad = CacheRequest(**values)
    e = _engine()
    trace = e.lookup_explained(bad)
    assert trace.hit is None and "InvalidRequestError" in trace.error and "surrogate" in trace.error
    assert e.update(bad, {"text": "x"}) is None
    errors = e.stats()["errors"]
    assert errors.get("lookup:InvalidRequestError") == 1 and errors.get("update:InvalidRequestError") == 1
    strict = _engine(strict=True)
    with pytest.raises(InvalidRequestError, match="not valid Unicode"):
        strict.lookup(bad)
    with pytest.raises(InvalidRequestError, match="not valid Unicode"):
        strict.update(bad, {"text": "x"})


def test_a_surrogate_inside_the_context_is_refused_too() -> None:
    bad = CacheRequest(text="And then?", context=[{"role": "user", "content": "hi \ud800"}], scope="m")
    with pytest.raises(InvalidRequestError, match="context is not valid Unicode"):
        _engine(strict=True).lookup(bad)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_given_as_a_picture_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "picture.png"
    os.mkfifo(fifo)  # nobody writes it: reading would block forever
    e = _engine()
    assert e.lookup(CacheRequest(text="What is this?", images=[fifo], scope="m")) is None
    with pytest.raises(ImageDecodeError, match="not a regular file"):
        _engine(strict=True).lookup(CacheRequest(text="What is this?", images=[str(fifo)], scope="m"))


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_dev_zero_given_as_a_picture_is_refused_without_reading_it() -> None:
    with pytest.raises(ImageDecodeError, match="not a regular file"):
        _engine(strict=True).lookup(CacheRequest(text="What is this?", images=["/dev/zero"], scope="m"))


def test_a_file_over_the_byte_limit_is_refused_by_what_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.jpg"
    big.write_bytes(jpeg_bytes(pattern(3, (256, 256))))
    e = _engine(strict=True, limits=Limits(max_image_bytes=1000))
    with pytest.raises(ImageTooLargeError, match="max_image_bytes=1,000"):
        e.lookup(CacheRequest(text="What is this?", images=[big], scope="m"))


def _png_claiming(width: int, height: int) -> bytes:
    """A small PNG whose header claims ``width`` x ``height`` (a decompression bomb's shape)."""
    buf = io.BytesIO()
    Image.new("L", (8, 8)).save(buf, format="PNG")
    data = bytearray(buf.getvalue())
    ihdr = data.index(b"IHDR")
    data[ihdr + 4:ihdr + 12] = struct.pack(">II", width, height)
    data[ihdr + 17:ihdr + 21] = struct.pack(">I", zlib.crc32(bytes(data[ihdr:ihdr + 17])))
    return bytes(data)


def test_an_oversized_picture_quotes_the_packages_limit_not_pillows(tmp_path: Path) -> None:
    path = tmp_path / "huge.png"
    path.write_bytes(_png_claiming(12_000, 12_000))  # 144 megapixels, over Pillow's own 89,478,485
    with pytest.raises(ImageTooLargeError) as info:
        _engine(strict=True).lookup(CacheRequest(text="What is this?", images=[path], scope="m"))
    assert "max_image_pixels=40,000,000" in str(info.value) and "89478485" not in str(info.value)


def test_a_failed_lookup_explains_its_cause_and_warns_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    broken = jpeg_bytes(pattern(4, (64, 64)))[:200]  # a truncated JPEG
    e = _engine()
    with caplog.at_level(logging.INFO, logger="mlc_integrations"):
        first = e.lookup_explained(CacheRequest(text="What is this?", images=[broken], scope="m"))
        e.lookup_explained(CacheRequest(text="What is this?", images=[broken], scope="m"))
    assert first.explain().startswith("miss: the lookup failed: ImageDecodeError: images[0]: cannot decode image")
    bad_input = [r for r in caplog.records if "bad input" in r.getMessage()]
    assert [r.levelno for r in bad_input][:2] in ([logging.WARNING, logging.INFO], [logging.INFO, logging.INFO])
    assert len(bad_input) == 2


def test_strict_mode_last_lookup_describes_the_call_that_failed() -> None:
    pytest.importorskip("langchain_core")
    from mlc_integrations import MultimodalSemanticCache

    cache = MultimodalSemanticCache(engine=_engine(strict=True))
    cache.lookup("What is the capital of France?", "model-a")
    assert cache.last_lookup is not None and cache.last_lookup.text == "What is the capital of France?"
    with pytest.raises(InvalidRequestError):
        cache.lookup("What is \udcff?", "model-a")
    assert cache.last_lookup is not None and "not valid Unicode" in cache.last_lookup.reason
