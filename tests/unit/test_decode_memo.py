"""The decode memo: a picture re-sent each turn is decoded once, large ones included;
a file is re-read when it changes; the exact key is always the full pixels' digest."""

from __future__ import annotations

import io
import os

import numpy as np
from PIL import Image

from mlc_integrations.images import PREVIEW_SIDE, DecodeMemo, decode_image


def photo(w: int, h: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, size=(h, w, 3), dtype=np.uint8))


def png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def test_large_picture_is_memoized_as_digest_and_preview() -> None:
    memo = DecodeMemo(max_pixels=4_000_000)  # a quarter of it: 1 MP
    big = photo(1600, 1000)
    data = png(big)
    key = memo.key(data)
    full = decode_image(data)
    memo.put(key, full)
    kept = memo.get(key)
    assert kept is not None and kept.digest == full.digest  # the exact key is the full pixels'
    assert max(kept.pil.size) == PREVIEW_SIDE and kept.pil.size[0] / kept.pil.size[1] == 1.6


def test_path_is_memoized_until_the_file_changes(tmp_path) -> None:
    memo = DecodeMemo()
    f = tmp_path / "pic.png"
    f.write_bytes(png(photo(64, 64, seed=1)))
    k1 = memo.key(str(f))
    assert k1 is not None and memo.key(f) == k1 and memo.key(f"file://{f}") == k1
    memo.put(k1, decode_image(str(f)))
    f.write_bytes(png(photo(64, 64, seed=2)))  # same size on disk is possible; mtime moves
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    k2 = memo.key(str(f))
    assert k2 != k1 and memo.get(k2) is None
    assert memo.key(str(tmp_path / "missing.png")) is None  # the decoder reports it, by name


def test_pixel_bound_evicts_least_recent() -> None:
    memo = DecodeMemo(max_pixels=16 * 64 * 64)  # room for 16 of them
    keys = []
    for i in range(20):
        data = png(photo(64, 64, seed=i))
        keys.append(memo.key(data))
        memo.put(keys[-1], decode_image(data))
    assert all(memo.get(k) is None for k in keys[:4]) and all(memo.get(k) is not None for k in keys[4:])
