"""Image inputs: decode from any supported form and key by *decoded pixels*.

A picture saved as PNG with other metadata or compression, or passed as a path,
raw bytes, base64 text or a data URL, has one digest: the digest of its RGB pixels
and size. Remote URLs are never fetched; they are keyed by the URL string.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import re
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from PIL import Image

from .errors import ImageDecodeError, ImageTooLargeError

DEFAULT_MAX_IMAGE_PIXELS = 40_000_000  # ~ 6300 x 6300; PIL warns at 89M, errors at 179M
DEFAULT_MAX_IMAGE_BYTES = 20 * 1024 * 1024


ImageInput = Union["Image.Image", bytes, bytearray, str, os.PathLike, "ImageRef"]


@dataclass(frozen=True)
class ImageRef:
    """An image that is known only by reference (a remote URL): keyed by its string.

    Two requests with the same URL match exactly; an URL is never embedded for L2,
    because the engine never fetches remote content.
    """

    url: str


@dataclass
class DecodedImage:
    """A decoded image (``pil`` is RGB) or a remote reference (``pil`` is None)."""

    digest: str
    pil: "Image.Image | None"
    source: str  # "pixels" or "url"

    @property
    def is_remote(self) -> bool:
        return self.pil is None


FINGERPRINT_SIDE = 16
FINGERPRINT_MODEL = f"gray{FINGERPRINT_SIDE}-centered"  # recorded on the fingerprint collection


def fingerprint(img: "Image.Image") -> "np.ndarray":
    """A cheap picture fingerprint: the grey levels of a 16x16 thumbnail, mean-centred and
    unit-normalized (256-d; ~1 ms). Pictures an image encoder finds near (re-encoded, resized,
    slightly cropped, brighter, the next video frame) keep a high fingerprint cosine, so a
    new picture with no stored fingerprint near it needs no encoder run (the L2 pre-screen)."""
    import numpy as np

    g = img.convert("L").resize((FINGERPRINT_SIDE, FINGERPRINT_SIDE), Image.BILINEAR, reducing_gap=2.0)
    v = np.asarray(g, dtype=np.float32).ravel()
    v -= v.mean()
    n = float(np.linalg.norm(v))
    if n == 0.0:  # a flat picture: one fixed direction, so flat pictures match each other
        out = np.zeros_like(v)
        out[0] = 1.0
        return out
    return (v / n).astype(np.float32)


def pixel_digest(img: "Image.Image") -> str:
    """SHA-256 over mode-normalized RGB pixels and size: equal pictures, equal digest."""
    rgb = img if img.mode == "RGB" else img.convert("RGB")
    h = hashlib.sha256()
    h.update(f"{rgb.width}x{rgb.height}:".encode())
    h.update(rgb.tobytes())
    return "px:" + h.hexdigest()


def _decode_bytes(data: bytes, *, max_pixels: int, max_bytes: int, what: str) -> "Image.Image":
    if len(data) == 0:
        raise ImageDecodeError(f"{what}: empty image data (0 bytes)")
    if len(data) > max_bytes:
        raise ImageTooLargeError(
            f"{what}: {len(data)} bytes exceeds max_image_bytes={max_bytes}; raise the limit to accept it"
        )
    try:
        with warnings.catch_warnings():
            # Our limit decides, not Pillow's global one (its warning would quote its own number).
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(data))
            w, h = im.size
            if w * h > max_pixels:
                raise ImageTooLargeError(
                    f"{what}: {w}x{h} = {w * h:,} pixels exceeds max_image_pixels={max_pixels:,} "
                    "(decompression-bomb guard); raise the limit to accept it"
                )
            im.load()
    except ImageTooLargeError:
        raise
    except Image.DecompressionBombError as exc:  # over twice Pillow's own limit: refused while opening
        raise ImageTooLargeError(
            f"{what}: exceeds max_image_pixels={max_pixels:,} (decompression-bomb guard; {exc})") from exc
    except Exception as exc:  # PIL raises many types for corrupt / truncated data
        raise ImageDecodeError(f"{what}: cannot decode image ({type(exc).__name__}: {exc})") from exc
    if im.mode != "RGB":
        im = im.convert("RGB")
    return im


def decode_base64(text: str, *, what: str) -> bytes:
    """Strict base64 decode (standard or URL-safe alphabet, padding optional)."""
    # `in` scans at C speed; a regex search over a megabyte of base64 costs ~30 ms
    s = _WS.sub("", text) if any(c in text for c in " \n\r\t\f\v") else text
    s += "=" * (-len(s) % 4)
    try:
        if "-" in s or "_" in s:
            return base64.urlsafe_b64decode(s)
        return base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageDecodeError(f"{what}: invalid base64 data ({exc})") from exc


def parse_data_url(url: str, *, what: str = "data URL") -> bytes:
    url = url.strip()
    comma = url.find(",")
    if not url.startswith("data:") or comma < 0:
        raise ImageDecodeError(f"{what}: malformed data URL")
    header = url[5:comma].split(";")
    mime = header[0].strip().lower()
    if mime and not mime.startswith("image/"):
        raise ImageDecodeError(f"{what}: data URL has MIME type {mime!r}, not an image/* type")
    if "base64" not in (h.strip().lower() for h in header[1:]):
        raise ImageDecodeError(f"{what}: only base64 data URLs are supported for images")
    return decode_base64(url[comma + 1:], what=what)


def is_remote_url(s: str) -> bool:
    return s.startswith(("http://", "https://", "gs://", "s3://"))


def decode_image(
    value: Any,
    *,
    max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    max_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
    what: str = "image",
) -> DecodedImage:
    """Decode one image input into pixels and a digest.

    Accepts a PIL image, raw bytes, a filesystem path (str or PathLike), a data URL,
    bare base64 text, or a remote URL / :class:`ImageRef` (keyed by string, never fetched).
    """
    if isinstance(value, DecodedImage):
        return value
    if isinstance(value, ImageRef):
        return DecodedImage(digest="url:" + hashlib.sha256(value.url.encode()).hexdigest(), pil=None, source="url")
    if isinstance(value, Image.Image):
        w, h = value.size
        if w * h > max_pixels:
            raise ImageTooLargeError(f"{what}: {w}x{h} pixels exceeds max_image_pixels={max_pixels}")
        im = value if value.mode == "RGB" else value.convert("RGB")
        return DecodedImage(digest=pixel_digest(im), pil=im, source="pixels")
    if isinstance(value, (bytes, bytearray, memoryview)):
        im = _decode_bytes(bytes(value), max_pixels=max_pixels, max_bytes=max_bytes, what=what)
        return DecodedImage(digest=pixel_digest(im), pil=im, source="pixels")
    if isinstance(value, os.PathLike):
        return _decode_path(Path(value), max_pixels=max_pixels, max_bytes=max_bytes, what=what)
    if isinstance(value, str):
        s = value.strip()
        if not s:
            raise ImageDecodeError(f"{what}: empty string is not an image")
        if s.startswith("data:"):
            data = parse_data_url(s, what=what)
            im = _decode_bytes(data, max_pixels=max_pixels, max_bytes=max_bytes, what=what)
            return DecodedImage(digest=pixel_digest(im), pil=im, source="pixels")
        if is_remote_url(s):
            return decode_image(ImageRef(s), what=what)
        if s.startswith("file://"):
            return _decode_path(Path(s[len("file://"):]), max_pixels=max_pixels, max_bytes=max_bytes, what=what)
        if len(s) < 4096 and ("/" in s or "\\" in s or "." in s[-6:]) and not _looks_base64(s):
            return _decode_path(Path(s), max_pixels=max_pixels, max_bytes=max_bytes, what=what)
        if _looks_base64(s):
            data = decode_base64(s, what=what)
            im = _decode_bytes(data, max_pixels=max_pixels, max_bytes=max_bytes, what=what)
            return DecodedImage(digest=pixel_digest(im), pil=im, source="pixels")
        return _decode_path(Path(s), max_pixels=max_pixels, max_bytes=max_bytes, what=what)
    raise ImageDecodeError(
        f"{what}: unsupported image type {type(value).__name__}; pass a PIL image, bytes, a path, "
        "a data URL, base64 text or a remote URL"
    )


_WS = re.compile(r"\s")
_B64_CHARS = re.compile(r"^[A-Za-z0-9+/=\s_-]+$")


def _looks_base64(s: str) -> bool:
    return len(s) >= 16 and bool(_B64_CHARS.match(s)) and "/" not in s[:1]


def read_image_file(path: Path, *, max_bytes: int, what: str) -> bytes:
    """The bytes of a regular file, never more than ``max_bytes`` (+1 to detect the excess).

    Only regular files: a FIFO would block, ``/dev/zero`` never ends, a directory fails
    late. The size is checked on what is read, not on ``stat()``, which a growing or
    special file can contradict."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer must not hang before fstat refuses it.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise ImageDecodeError(f"{what}: cannot read image file {str(path)!r} ({exc.strerror or exc})") from exc
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ImageDecodeError(f"{what}: {str(path)!r} is not a regular file (a device, FIFO or directory)")
        try:
            data = f.read(max_bytes + 1)
        except OSError as exc:
            raise ImageDecodeError(f"{what}: cannot read image file {str(path)!r} ({exc})") from exc
    if len(data) > max_bytes:
        raise ImageTooLargeError(f"{what}: file {str(path)!r} is over max_image_bytes={max_bytes:,} bytes")
    return data


def _decode_path(path: Path, *, max_pixels: int, max_bytes: int, what: str) -> DecodedImage:
    data = read_image_file(path, max_bytes=max_bytes, what=what)
    im = _decode_bytes(data, max_pixels=max_pixels, max_bytes=max_bytes, what=f"{what} ({path})")
    return DecodedImage(digest=pixel_digest(im), pil=im, source="pixels")


def image_digest(value: Any, *, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, max_bytes: int = DEFAULT_MAX_IMAGE_BYTES) -> str:
    """The key of an image as the exact tier sees it (pixel digest, or URL digest)."""
    return decode_image(value, max_pixels=max_pixels, max_bytes=max_bytes).digest


def _pixels_held(img: DecodedImage) -> int:
    return img.pil.width * img.pil.height if img.pil is not None else 0


PREVIEW_SIDE = 1024  # longest side of what the memo keeps of a picture too large to keep whole


class DecodeMemo:
    """Remembers decoded images by a hash of their encoded form (bytes, data URL, base64
    text) or, for a file path, by (path, size, modification time), so a picture re-sent in
    every turn of a conversation is decoded and digested once.

    Bounded by total pixels held. A picture larger than a quarter of that bound is kept as
    its digest (of the full pixels: the exact key does not change) plus a preview of at
    most :data:`PREVIEW_SIDE` pixels for the image encoder, which resizes far below that
    anyway; so a 36 MP photo costs one decode, not one per request."""

    def __init__(self, max_pixels: int = 64_000_000, min_len: int = 32, max_items: int = 4096) -> None:
        from .runtime.lru import LRU

        self.max_pixels = max_pixels
        self.min_len = min_len
        self._d: "LRU[bytes, DecodedImage]" = LRU(max_items, max_weight=max_pixels, weigh=_pixels_held)

    def key(self, value: Any) -> "bytes | None":
        if isinstance(value, (bytes, bytearray, memoryview)):
            raw = bytes(value)
        elif isinstance(value, os.PathLike) or (isinstance(value, str) and _is_path_like(value)):
            return self._path_key(value)
        elif isinstance(value, str) and len(value) >= self.min_len and (
            value.startswith("data:") or (_looks_base64(value[:64]) and "." not in value[-8:])):
            raw = value.encode("utf-8", "surrogatepass")
        else:
            return None
        if len(raw) < self.min_len:
            return None
        return hashlib.blake2b(raw, digest_size=20).digest()

    @staticmethod
    def _path_key(value: Any) -> "bytes | None":
        """A file is the same picture while its size and modification time are (a rewrite changes them)."""
        text = str(value)
        path = Path(text[len("file://"):] if text.startswith("file://") else text)
        try:
            st = path.stat()
            real = str(path.resolve())
        except (OSError, ValueError):
            return None  # let the decoder report the bad path
        return hashlib.blake2b(f"path:{real}:{st.st_size}:{st.st_mtime_ns}".encode("utf-8", "surrogatepass"),
                               digest_size=20).digest()

    def get(self, key: bytes) -> "DecodedImage | None":
        return self._d.get(key)

    def put(self, key: bytes, img: DecodedImage) -> None:
        if key in self._d:  # the first decode of a picture stays (same pixels either way)
            return
        if img.pil is not None and _pixels_held(img) > self.max_pixels // 4:
            preview = img.pil.copy()
            preview.thumbnail((PREVIEW_SIDE, PREVIEW_SIDE))
            img = DecodedImage(digest=img.digest, pil=preview, source=img.source)
            if _pixels_held(img) > self.max_pixels // 4:  # a tiny budget: never flush the memo for one picture
                return
        self._d.put(key, img)


def _is_path_like(s: str) -> bool:
    """The same test decode_image applies before reading a string as a file path."""
    s = s.strip()
    if s.startswith("file://"):
        return True
    if not s or s.startswith("data:") or is_remote_url(s):
        return False
    return len(s) < 4096 and ("/" in s or "\\" in s or "." in s[-6:]) and not _looks_base64(s)
