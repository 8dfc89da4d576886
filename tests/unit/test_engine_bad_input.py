"""Bad inputs: each gets a typed error in strict mode and a counted miss by default,
and none corrupts or loses what is stored."""

from __future__ import annotations

import base64
import io
import struct
import zlib

import pytest
from PIL import Image

from mlc_integrations import (
    CacheRequest,
    ImageDecodeError,
    ImageTooLargeError,
    InvalidRequestError,
    PayloadError,
)
from tests.helpers import jpeg_bytes, pattern, png_bytes
from mlc_integrations import Limits, StorageOptions


def _bomb_png(width: int, height: int) -> bytes:
    """A tiny PNG header claiming a huge canvas (a decompression bomb's signature)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    row = b"\x00" + b"\x00" * (3 * width)
    idat = zlib.compress(row * 4, 9)  # truncated: only 4 rows of data
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


GOOD = png_bytes(pattern(1))

BAD_IMAGES = {
    "corrupt_png": (GOOD[:20] + b"\x00garbage" * 50, ImageDecodeError),
    "truncated_png": (GOOD[: len(GOOD) // 2], ImageDecodeError),
    "truncated_jpeg": (jpeg_bytes(pattern(2, (128, 128)))[:300], ImageDecodeError),
    "zero_bytes": (b"", ImageDecodeError),
    "not_image_data_url": ("data:text/plain;base64," + base64.b64encode(b"hello").decode(), ImageDecodeError),
    "data_url_bad_base64": ("data:image/png;base64,@@@not-base64@@@", ImageDecodeError),
    "data_url_random_bytes": ("data:image/png;base64," + base64.b64encode(b"\x01\x02" * 40).decode(), ImageDecodeError),
    "decompression_bomb": (_bomb_png(30_000, 30_000), ImageTooLargeError),
    "missing_path": ("/nonexistent/dir/picture.png", ImageDecodeError),
    "wrong_type": (12345, ImageDecodeError),
}


@pytest.fixture
def stored(make_engine):
    """A default (fail-open) engine and a strict one on the same storage, with one entry each."""
    lax = make_engine()
    strict = make_engine(strict=True, storage=StorageOptions(client=lax.store.client, collection_prefix=lax.store.prefix))
    good = CacheRequest(text="What color is the shape?", images=[GOOD], scope="m")
    lax.update(good, {"answer": "red"})
    return lax, strict, good


@pytest.mark.parametrize("name", sorted(BAD_IMAGES))
def test_bad_image_typed_error_or_counted_miss(stored, name) -> None:
    lax, strict, good = stored
    value, err = BAD_IMAGES[name]
    bad = CacheRequest(text="What color is the shape?", images=[value], scope="m")
    with pytest.raises(err):
        strict.lookup(CacheRequest(text="What color is the shape?", images=[value], scope="m"))
    with pytest.raises(err):
        strict.update(CacheRequest(text="What color is the shape?", images=[value], scope="m"), "x")
    assert lax.lookup(bad) is None
    assert lax.update(bad, {"answer": "corrupted?"}) is None
    st = lax.stats()
    assert st["misses"] >= 1 and st["updates_failed"] == 1
    assert any(k.startswith("lookup:") for k in st["errors"])
    # nothing stored was lost or changed
    assert lax.count() == 1
    assert lax.lookup(good).payload == {"answer": "red"}


def test_image_pixel_limit_is_configurable(make_engine) -> None:
    big = Image.new("RGB", (300, 300))
    eng = make_engine(strict=True, limits=Limits(max_image_pixels=50_000))
    with pytest.raises(ImageTooLargeError, match="max_image_pixels"):
        eng.lookup(CacheRequest(text="x", images=[png_bytes(big)]))
    with pytest.raises(ImageTooLargeError):
        eng.lookup(CacheRequest(text="x", images=[big]))
    ok = make_engine(strict=True, limits=Limits(max_image_pixels=100_000))
    assert ok.lookup(CacheRequest(text="x", images=[png_bytes(big)])) is None


def test_image_byte_limit(make_engine) -> None:
    eng = make_engine(strict=True, limits=Limits(max_image_bytes=100))
    with pytest.raises(ImageTooLargeError, match="max_image_bytes"):
        eng.lookup(CacheRequest(text="x", images=[GOOD]))


def test_empty_prompt(make_engine) -> None:
    strict = make_engine(strict=True)
    with pytest.raises(InvalidRequestError, match="empty prompt"):
        strict.lookup(CacheRequest(text="   "))
    lax = make_engine()
    assert lax.lookup(CacheRequest(text="")) is None
    assert lax.update(CacheRequest(text=""), "x") is None
    # an image with no text is a valid request
    assert strict.update(CacheRequest(text="", images=[GOOD]), "ok") is not None
    assert strict.lookup(CacheRequest(text="", images=[png_bytes(pattern(1), compress_level=1)])).payload == "ok"


def test_megabyte_prompt_is_keyed_exactly_not_embedded(make_engine) -> None:
    eng = make_engine(strict=True)
    huge = "lorem ipsum " * 90_000  # ~1 MB
    eng.update(CacheRequest(text=huge), "long answer")
    assert eng.lookup(CacheRequest(text=huge)).tier == "L0.5"
    assert eng.lookup(CacheRequest(text=huge + " dolor")) is None
    assert eng.store.collection("l1").count() == 0
    assert eng.stats()["tiers"]["L1"].get("skipped", 0) == 1  # the first lookup hit L0.5


def test_non_utf8_bytes_prompt(make_engine) -> None:
    strict = make_engine(strict=True)
    with pytest.raises(InvalidRequestError, match="UTF-8"):
        strict.lookup(CacheRequest(text=b"\xff\xfe caf\xe9"))  # type: ignore[arg-type]
    assert make_engine().lookup(CacheRequest(text=b"\xff\xfe"))  is None  # type: ignore[arg-type]
    # valid UTF-8 bytes are accepted as text
    assert strict.lookup(CacheRequest(text="café".encode())) is None


def test_non_json_payload_and_oversized_payload(make_engine) -> None:
    strict = make_engine(strict=True, limits=Limits(max_response_bytes=1000))
    with pytest.raises(PayloadError):
        strict.update(CacheRequest(text="q"), {"x": object()})
    with pytest.raises(PayloadError):
        strict.update(CacheRequest(text="q"), {"x": float("nan")})
    with pytest.raises(PayloadError, match="max_response_bytes"):
        strict.update(CacheRequest(text="q"), "y" * 2000)
    assert strict.count() == 0


def test_wrong_request_type_and_context(make_engine) -> None:
    strict = make_engine(strict=True)
    with pytest.raises(InvalidRequestError):
        strict.lookup({"text": "hi"})  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError):
        strict.lookup(CacheRequest(text="hi", context="not a list"))  # type: ignore[arg-type]
    with pytest.raises(ImageDecodeError):
        strict.lookup(CacheRequest(text="hi", context=[{"role": "user", "content": [{"type": "image", "image": b"junk"}]}]))
    deep: list = []
    cur = deep
    for _ in range(200):
        nxt: list = []
        cur.append(nxt)
        cur = nxt
    with pytest.raises(InvalidRequestError, match="nested"):
        strict.lookup(CacheRequest(text="hi", context=deep))
    assert make_engine().lookup(CacheRequest(text="hi", context=deep)) is None


def test_corrupt_stored_response_is_a_miss_and_removed(make_engine) -> None:
    eng = make_engine(image_encoder=None)
    r = CacheRequest(text="some question here")
    eid = eng.update(r, "fine")
    eng.flush()  # written (update is write-behind)
    eng.store.collection("exact").update(ids=[eid], embeddings=[[1.0]], documents=["{not json"])
    eng.entries.hot.clear()  # as a restarted process finds the store: nothing remembered
    assert eng.lookup(CacheRequest(text="some question here")) is None
    assert eng.count() == 0 and eng.stats()["errors"].get("corrupt_entry") == 1


def test_orphan_vector_without_response_is_a_miss(make_engine) -> None:
    """What a crash between the response write and the vector write could leave."""
    eng = make_engine(image_encoder=None)
    eid = eng.update(CacheRequest(text="What is the capital of France?"), "Paris")
    eng.flush()  # written (update is write-behind)
    eng.store.collection("exact").delete(ids=[eid])
    eng.entries.hot.clear()  # as a restarted process finds the store: nothing remembered
    assert eng.lookup(CacheRequest(text="what's the capital of France?")) is None
    assert eng.stats()["orphans_removed"] == 1
    assert eng.store.collection("l1").count() == 0
