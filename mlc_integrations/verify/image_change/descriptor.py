"""The image descriptor: what the judge keeps of a picture.

The picture squashed to a ``GREY_SIDE`` x ``GREY_SIDE`` grey thumbnail (the encoder
squashes to a square too, so a resized copy maps onto the same grid) and a
``CHROMA_SIDE`` x ``CHROMA_SIDE`` map of two opponent-colour channels. Raw uint8,
zlib-compressed: at most :data:`DESCRIPTOR_MAX_BYTES` bytes (see :func:`descriptor_bytes`).
Not the picture: a 96-pixel grey thumbnail and a 24-pixel colour map of it.

A descriptor carries a memo of the arrays derived from it (its grey map in 0..1, spectrum,
sorted levels, ...): a request's picture is compared with several candidates, and a stored
picture is a candidate of many lookups. Each module that derives one owns its key.
"""

from __future__ import annotations

import base64
import struct
import zlib
from dataclasses import dataclass, field
from typing import Union

import numpy as np
from PIL import Image

from ...runtime.lru import LRU

GREY_SIDE = 96
CHROMA_SIDE = 24
CELL = 8  # grey pixels per cell side: a 12 x 12 grid of cells
DESCRIPTOR_VERSION = 1
_MAGIC = b"MLCI"
_HEADER = struct.Struct("<4sBBBHH")  # magic, version, grey side, chroma side, original width, height
DESCRIPTOR_MAX_BYTES = _HEADER.size + GREY_SIDE * GREY_SIDE + 2 * CHROMA_SIDE * CHROMA_SIDE


class DescriptorError(ValueError):
    """A stored image descriptor that cannot be read (corrupt, truncated, another version)."""


@dataclass(frozen=True)
class ImageDescriptor:
    """What the comparison needs of one picture (see module docstring)."""

    grey: np.ndarray  # (GREY_SIDE, GREY_SIDE) uint8
    chroma: np.ndarray  # (2, CHROMA_SIDE, CHROMA_SIDE) uint8, opponent colours offset by 128
    size: tuple[int, int]  # original (width, height)
    # Per-descriptor derived arrays (spectrum, sorted levels): a request's picture is compared
    # with several candidates, and its FFT and histograms are the same every time.
    _memo: dict = field(default_factory=dict, compare=False, repr=False, hash=False)

    def to_bytes(self) -> bytes:
        w, h = (min(65535, int(v)) for v in self.size)
        raw = _HEADER.pack(_MAGIC, DESCRIPTOR_VERSION, self.grey.shape[0], self.chroma.shape[1], w, h)
        return zlib.compress(raw + self.grey.tobytes() + self.chroma.tobytes(), 6)

    def to_text(self) -> str:
        """ASCII form for a metadata field (base64 of :meth:`to_bytes`)."""
        return base64.b64encode(self.to_bytes()).decode("ascii")

    @classmethod
    def from_bytes(cls, data: bytes) -> "ImageDescriptor":
        try:
            raw = zlib.decompress(data)
            magic, version, gs, cs, w, h = _HEADER.unpack_from(raw)
        except (zlib.error, struct.error, TypeError) as exc:
            raise DescriptorError(f"unreadable image descriptor: {exc}") from exc
        if magic != _MAGIC or version != DESCRIPTOR_VERSION or gs != GREY_SIDE or cs != CHROMA_SIDE:
            raise DescriptorError(f"image descriptor of another format (version {version}, sides {gs}/{cs})")
        body = raw[_HEADER.size:]
        if len(body) != gs * gs + 2 * cs * cs:
            raise DescriptorError(f"truncated image descriptor ({len(body)} bytes of pixels)")
        grey = np.frombuffer(body[:gs * gs], np.uint8).reshape(gs, gs)
        chroma = np.frombuffer(body[gs * gs:], np.uint8).reshape(2, cs, cs)
        return cls(grey, chroma, (int(w), int(h)))

    @classmethod
    def from_text(cls, text: str) -> "ImageDescriptor":
        try:
            return cls.from_bytes(base64.b64decode(text.encode("ascii"), validate=True))
        except (ValueError, UnicodeEncodeError, AttributeError) as exc:
            if isinstance(exc, DescriptorError):
                raise
            raise DescriptorError(f"unreadable image descriptor text: {exc}") from exc


def describe(img: "Image.Image") -> ImageDescriptor:
    """The descriptor of a picture (~1 ms for a 768x576 frame)."""
    rgb = img if img.mode == "RGB" else img.convert("RGB")
    small = rgb.resize((GREY_SIDE, GREY_SIDE), Image.BOX if min(rgb.size) >= GREY_SIDE else Image.BILINEAR,
                       reducing_gap=None)
    a = np.asarray(small, dtype=np.float32)
    grey = np.clip(a @ np.array([0.299, 0.587, 0.114], np.float32) + 0.5, 0, 255).astype(np.uint8)
    k = GREY_SIDE // CHROMA_SIDE
    c = block_means(a, k)
    r, g, b = c[..., 0], c[..., 1], c[..., 2]
    opp = np.stack([(r - g) / 2.0, (r + g) / 4.0 - b / 2.0])  # red-green, yellow-blue, in [-127.5, 127.5]
    chroma = np.clip(opp + 128.0 + 0.5, 0, 255).astype(np.uint8)
    return ImageDescriptor(grey, chroma, rgb.size)


def block_means(a: np.ndarray, k: int) -> np.ndarray:
    """Means of the k x k blocks of a whole-valued float32 (n, n, 3) map: what
    ``a.reshape(n/k, k, n/k, k, 3).mean(axis=(1, 3))`` gives (sums of whole numbers below 2**24
    are exact in any order, and k * k is a power of two here), at a third of its cost."""
    h = sum(a[:, j::k] for j in range(k))
    return sum(h[i::k] for i in range(k)) / np.float32(k * k)


# Descriptors remembered by pixel digest (a request's pictures) and by stored form (an
# entry's evidence), each with the arrays derived from it: ~0.13 MB per picture on the
# request's side, ~0.21 MB once it has been a stored side as well, so each memo holds at
# most ~55 MB however many pictures a long-running process sees.
MEMO_PICTURES = 256
_BY_DIGEST: "LRU[str, ImageDescriptor]" = LRU(MEMO_PICTURES)
_BY_FORM: "LRU[Union[str, bytes], ImageDescriptor]" = LRU(MEMO_PICTURES)


def describe_memoized(img: "Image.Image", digest: str) -> ImageDescriptor:
    """:func:`describe`, memoized by pixel digest (a picture seen before costs nothing)."""
    d = _BY_DIGEST.get(digest)
    if d is None:
        d = describe(img)
        _BY_DIGEST.put(digest, d)
    return d


def text_of(desc: ImageDescriptor) -> str:
    """``desc.to_text()``, remembered: reading that text back in this process (the stored
    entry's evidence, at every later lookup that meets it) gives this very descriptor, with
    the arrays its comparisons as the request's picture already derived."""
    t = desc._memo.get("text")
    if t is None:
        t = desc._memo["text"] = desc.to_text()
    _BY_FORM.put(t, desc)
    return t


def read_memoized(stored: Union[str, bytes]) -> ImageDescriptor:
    """The descriptor of a stored text or bytes form (:class:`DescriptorError` when unreadable),
    the same object while remembered: a stored picture is a candidate of many lookups (a
    camera's last frames), and its spectrum and histograms are computed once."""
    d = _BY_FORM.get(stored)
    if d is None:
        d = ImageDescriptor.from_text(stored) if isinstance(stored, str) else ImageDescriptor.from_bytes(stored)
        _BY_FORM.put(stored, d)
    return d


def descriptor_bytes(desc: ImageDescriptor) -> int:
    """Bytes this descriptor takes stored (compressed; base64 adds a third in metadata)."""
    return len(desc.to_bytes())


def grey01(desc: ImageDescriptor) -> np.ndarray:
    g = desc._memo.get("grey01")
    if g is None:
        g = desc._memo["grey01"] = desc.grey.astype(np.float32) / 255.0
    return g
