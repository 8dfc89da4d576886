"""Image, request and engine helpers shared by the tests."""

from __future__ import annotations

import io
from typing import Any, Optional

from PIL import Image


def png_bytes(img: Image.Image, **save_kw: Any) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG", **save_kw)
    return buf.getvalue()


def jpeg_bytes(img: Image.Image, quality: int = 90) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def solid(color: tuple[int, int, int], size: tuple[int, int] = (64, 64)) -> Image.Image:
    return Image.new("RGB", size, color)


def pattern(seed: int, size: tuple[int, int] = (64, 64)) -> Image.Image:
    """A deterministic picture with structure (not a flat colour)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 256, size=(size[1] // 8, size[0] // 8, 3), dtype=np.uint8)
    return Image.fromarray(arr).resize(size, Image.NEAREST)


def record_answers(engine: Any, monkeypatch: Any) -> list[Optional[str]]:
    """Every ``answer`` an adapter hands ``engine.update`` from now on (the update still
    happens): the verifier compares these, so they must be the text the user reads."""
    answers: list[Optional[str]] = []
    update = engine.update

    def spy(request: Any, payload: Any, **kw: Any) -> Any:
        answers.append(kw.get("answer"))
        return update(request, payload, **kw)

    monkeypatch.setattr(engine, "update", spy)
    return answers


def count_store_calls(engine: Any) -> list[str]:
    """The labels of every storage call ``engine`` makes from now on (``ChromaStore.call``)."""
    seen: list[str] = []
    orig = engine.store.call

    def counting(what: str, fn: Any) -> Any:
        seen.append(what)
        return orig(what, fn)

    engine.store.call = counting
    return seen
