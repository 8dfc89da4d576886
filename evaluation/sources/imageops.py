"""Deterministic image perturbations shared by the workloads and CLIP training:
re-encoding, resizing, cropping, shifting, brightness and sensor noise."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageEnhance


def png_bytes(im: Image.Image, compress_level: int = 6) -> bytes:
    """Lossless re-save: same pixels, different bytes (a different file, same digest)."""
    buf = io.BytesIO()
    im.save(buf, "PNG", compress_level=compress_level)
    return buf.getvalue()


def jpeg(im: Image.Image, quality: int = 85) -> Image.Image:
    """Lossy JPEG round trip (pixels change slightly)."""
    buf = io.BytesIO()
    im.convert("RGB").save(buf, "JPEG", quality=int(quality))
    buf.seek(0)
    return Image.open(buf).convert("RGB")


def jpeg_bytes(im: Image.Image, quality: int = 85) -> bytes:
    buf = io.BytesIO()
    im.convert("RGB").save(buf, "JPEG", quality=int(quality))
    return buf.getvalue()


def resize(im: Image.Image, scale: float) -> Image.Image:
    w, h = im.size
    return im.resize((max(8, round(w * scale)), max(8, round(h * scale))), Image.BICUBIC)


def crop(im: Image.Image, frac: float, anchor: tuple[float, float] = (0.5, 0.5)) -> Image.Image:
    """Keep ``1 - frac`` of each side; ``anchor`` in [0, 1]^2 places the window."""
    w, h = im.size
    cw, ch = max(8, round(w * (1 - frac))), max(8, round(h * (1 - frac)))
    x0 = round((w - cw) * anchor[0])
    y0 = round((h - ch) * anchor[1])
    return im.crop((x0, y0, x0 + cw, y0 + ch))


def shift(im: Image.Image, dx: int, dy: int) -> Image.Image:
    """Translate by (dx, dy) pixels, filling the uncovered border with the edge pixels
    (a camera panning over a uniform background)."""
    a = np.asarray(im.convert("RGB"))
    a = np.pad(a, ((abs(dy), abs(dy)), (abs(dx), abs(dx)), (0, 0)), mode="edge")
    h, w = im.size[1], im.size[0]
    y0 = abs(dy) - dy
    x0 = abs(dx) - dx
    return Image.fromarray(np.ascontiguousarray(a[y0:y0 + h, x0:x0 + w]))


def brightness(im: Image.Image, factor: float) -> Image.Image:
    return ImageEnhance.Brightness(im.convert("RGB")).enhance(float(factor))


def noise(im: Image.Image, sigma: float, rng: np.random.Generator) -> Image.Image:
    a = np.asarray(im.convert("RGB")).astype(np.float32)
    a = a + rng.normal(0.0, float(sigma), size=a.shape)
    return Image.fromarray(np.clip(a, 0, 255).round().astype(np.uint8))


def random_view(im: Image.Image, rng: np.random.Generator) -> Image.Image:
    """A random mild variant of ``im`` (training augmentation): the kinds of change
    under which the same picture must still be recognized."""
    out = im.convert("RGB")
    if rng.random() < 0.5:
        out = shift(out, int(rng.integers(-4, 5)), int(rng.integers(-4, 5)))
    if rng.random() < 0.3:
        out = crop(out, float(rng.uniform(0.0, 0.12)), (float(rng.random()), float(rng.random())))
    if rng.random() < 0.3:
        out = resize(out, float(rng.uniform(0.5, 2.0)))
    if rng.random() < 0.5:
        out = brightness(out, float(rng.uniform(0.85, 1.15)))
    if rng.random() < 0.4:
        out = noise(out, float(rng.uniform(1.0, 8.0)), rng)
    if rng.random() < 0.4:
        out = jpeg(out, int(rng.integers(40, 96)))
    return out
