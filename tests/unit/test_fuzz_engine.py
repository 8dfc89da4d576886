"""Property-based tests (hypothesis) of the engine against hostile and broken requests.

Properties:

1. the default (fail-open) engine never raises out of ``lookup``/``update``, whatever
   the request: random structures, wrong types, huge strings, deep nesting, invalid
   base64, truncated and mislabeled images, wrong-MIME data URLs, images over the
   pixel limit, bad supplied embeddings;
2. a hit is never for a request that differs from the stored one in scope, tenant
   (namespace), context or image pixels. "Differs" is judged by a reference identity
   written here independently of the engine's keying (JSON semantics; images by
   decoded pixels); L2 is the similar-picture tier by design, so for it the images
   must only be as many, not identical;
3. ``strict=True`` raises only the typed :class:`~mlc_integrations.MLCError` family.

Budgets: CI runs :data:`CI_EXAMPLES` examples per property, deterministic
(``derandomize``); the soak (``-m slow``) runs :data:`SOAK_EXAMPLES`, random.
"""

from __future__ import annotations

import base64
import io
import json
import unicodedata
import math
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from mlc_integrations import CacheRequest, ImageRef, MLCEngine, MLCError
from mlc_integrations.images import decode_image
from tests.helpers import jpeg_bytes, pattern, png_bytes
from mlc_integrations import Limits, StorageOptions

CI_EXAMPLES = 150
SOAK_EXAMPLES = 3_000
MAX_PIXELS = 200_000  # small limit so "over the pixel limit" images are cheap to build
MAX_BYTES = 2_000_000

CI = settings(max_examples=CI_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
SOAK = settings(max_examples=SOAK_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))


# ---------------------------------------------------------------------- hostile inputs

def exact_text(text: str) -> str:
    """The reference rule of "the same text" (DESIGN.md): Unicode NFC, outer whitespace
    trimmed, nothing else (case and inner spacing can change an answer)."""
    return unicodedata.normalize("NFC", text).strip()

def bomb_png(width: int, height: int) -> bytes:
    """A valid PNG header claiming a huge canvas, with almost no pixel data."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")


PICS = [pattern(i, (48, 48)) for i in range(3)]
ONE_PIXEL_OFF = PICS[0].copy()
ONE_PIXEL_OFF.putpixel((5, 5), tuple((c + 1) % 256 for c in PICS[0].getpixel((5, 5))))
PNGS = [png_bytes(p) for p in PICS]
B64 = [base64.b64encode(b).decode() for b in PNGS]

valid_image = st.one_of(
    st.sampled_from(PICS + [ONE_PIXEL_OFF]),
    st.sampled_from(PNGS),
    st.sampled_from([png_bytes(PICS[0], compress_level=1), png_bytes(PICS[1], optimize=True)]),  # same pixels, other bytes
    st.sampled_from([f"data:image/png;base64,{b}" for b in B64]),
    st.sampled_from([f"data:image/jpeg;base64,{b}" for b in B64]),  # mislabeled image type: decoded by content
    st.sampled_from(B64),
    st.just(jpeg_bytes(PICS[2])),
    st.sampled_from([ImageRef("https://example.com/a.png"), "https://example.com/b.jpg"]),
)
broken_image = st.one_of(
    st.builds(lambda b, n: b[:n], st.sampled_from(PNGS + [jpeg_bytes(PICS[1])]), st.integers(0, 400)),  # truncated
    st.sampled_from([f"data:text/plain;base64,{B64[0]}", f"data:application/pdf;base64,{B64[1]}",
                     f"data:;base64,{B64[0][:50]}", "data:image/png,not-base64-flag", "data:image/png;base64,"]),
    st.builds(lambda s: "data:image/png;base64," + s, st.text(max_size=60)),  # invalid base64
    st.builds(lambda s: base64.b64encode(s).decode(), st.binary(min_size=12, max_size=120)),  # base64 of non-images
    st.binary(max_size=200),
    st.sampled_from([bomb_png(30_000, 30_000), bomb_png(2**31 - 1, 1), bomb_png(0, 0)]),
    st.builds(lambda w, h: Image.new("RGB", (w, h)), st.integers(450, 700), st.integers(450, 700)),  # over MAX_PIXELS
    st.integers(MAX_BYTES + 1, MAX_BYTES + 16).map(lambda n: b"x" * n),  # over the byte limit
    st.sampled_from(["/nonexistent/picture.png", "picture.png", "file:///nonexistent.png", "s3://bucket/k.png"]),
    st.one_of(st.integers(), st.floats(), st.none(), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3)),
)
image_input = st.one_of(valid_image, valid_image, broken_image)

junk = st.one_of(st.none(), st.integers(), st.floats(allow_nan=True), st.booleans(), st.binary(max_size=40),
                 st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
huge_text = st.builds(lambda ch, n: ch * n, st.sampled_from(["a", "é ", "😀", " ", "\x00", "\ud800", "word "]),
                      st.integers(1, 20_000))
texts = st.sampled_from(["What color is the shape?", "what  COLOR is the shape?", "Which colour is the shape?",
                         "How many objects are there?", "Is there a circle?"])
prompt_text = st.one_of(texts, texts, st.text(max_size=120), huge_text, st.binary(max_size=60), junk)

json_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20))
context_leaf = st.one_of(json_scalar, st.builds(lambda i: {"type": "image", "image": i}, image_input))
context_value = st.recursive(
    context_leaf,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers(0, 3)), children, max_size=4),
    ),
    max_leaves=12,
)


def nested(depth: int) -> Any:
    v: Any = "bottom"
    for _ in range(depth):
        v = [v]
    return v


fixed_contexts = st.sampled_from([
    [],
    [{"role": "user", "content": "Look at this."}, {"role": "assistant", "content": "I see a shape."}],
    [{"role": "user", "content": [{"type": "image", "image": PNGS[1]}, "What is it?"]}],
    [{"role": "user", "content": [{"type": "image", "image": ONE_PIXEL_OFF}, "What is it?"]}],
])
context = st.one_of(fixed_contexts, fixed_contexts, st.lists(context_value, max_size=4),
                    st.builds(lambda d: [nested(d)], st.integers(1, 300)), junk)
scope = st.one_of(st.sampled_from(["gpt-x;t=0", "gpt-x;t=1", ""]), st.text(max_size=30), junk)
namespace = st.one_of(st.sampled_from(["default", "tenant-a", "tenant-b"]), st.text(max_size=20), junk)
embedding = st.one_of(
    st.none(), st.none(), st.none(),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=8),
    st.lists(st.floats(-1, 1), min_size=384, max_size=384),
    junk,
)
images = st.one_of(st.lists(image_input, max_size=3), image_input, junk)


@st.composite
def requests(draw: st.DrawFn) -> CacheRequest:
    return CacheRequest(
        text=draw(prompt_text),
        images=draw(images),
        context=draw(context),
        scope=draw(scope),
        namespace=draw(namespace),
        text_embedding=draw(embedding),
    )


# ---------------------------------------------------------------------- reference identity
@dataclass(frozen=True)
class Identity:
    scope: str
    namespace: str
    context: str
    pixels: tuple[str, ...]
    text: str


class _Unkeyable(Exception):
    pass


def _img(value: Any) -> str:
    try:
        return decode_image(value, max_pixels=MAX_PIXELS, max_bytes=MAX_BYTES).digest
    except MLCError as exc:
        raise _Unkeyable(str(exc)) from exc


def _ref(value: Any, depth: int = 0) -> Any:
    """JSON semantics (tuples are lists, keys are strings); images by decoded pixels;
    anything JSON cannot tell apart but Python can is tagged so a collision shows."""
    if isinstance(value, dict):
        if value.get("type") == "image" and "image" in value:
            return {"$image": _img(value["image"])}
        keys = [str(k) for k in value]
        if len(set(keys)) != len(keys):  # {1: ..., "1": ...}: two entries, one JSON key
            return {"$dup-keys": sorted(([type(k).__name__, str(k), _ref(v, depth + 1)] for k, v in value.items()), key=repr)}
        return {str(k): _ref(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_ref(v, depth + 1) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    if isinstance(value, (bytes, bytearray, Image.Image, ImageRef)):
        return {"$image": _img(value)}
    return value


def identity(req: CacheRequest) -> Identity:
    """What a request *is*, independently of the engine's keys."""
    text = req.text.decode("utf-8") if isinstance(req.text, (bytes, bytearray)) else req.text
    imgs = req.images if isinstance(req.images, (list, tuple)) else [] if req.images is None else [req.images]
    return Identity(
        scope=req.scope,
        namespace=req.namespace,
        context=json.dumps(_ref(list(req.context or [])), sort_keys=True, default=repr),
        pixels=tuple(_img(i) for i in imgs),
        text=exact_text(text),
    )


def copy(req: CacheRequest) -> CacheRequest:
    """The same request without the engine's memoized keys."""
    return CacheRequest(text=req.text, images=req.images, context=req.context, scope=req.scope,
                        namespace=req.namespace, text_embedding=req.text_embedding)


class Recorder:
    """Stores responses whose payload points at the identity of the request stored.

    Every attempt is recorded, not only the acknowledged ones: an update that fails
    part-way (say on the L1 write) may already have written its response, by design
    (response first, vectors last), and that response may be served later.
    """

    def __init__(self, engine: MLCEngine) -> None:
        self.engine = engine
        self.attempts: list[Optional[Identity]] = []

    def update(self, req: CacheRequest) -> None:
        try:
            ident: Optional[Identity] = identity(req)
        except Exception:
            ident = None
        i = len(self.attempts)
        self.attempts.append(ident)
        if self.engine.update(copy(req), {"i": i}) is not None:
            assert ident is not None, f"the engine stored a request the reference cannot key: {req!r:.300}"

    def lookup_and_check(self, req: CacheRequest) -> Optional[str]:
        hit = self.engine.lookup(copy(req))
        if hit is None:
            return None
        probe = identity(req)
        ref = self.attempts[hit.payload["i"]]
        assert ref is not None, f"served a response stored for an unkeyable request: {req!r:.300}"
        where = f"{hit.tier} hit {hit.explain()} for {req!r:.300}"
        assert (probe.scope, probe.namespace) == (ref.scope, ref.namespace), "other scope/tenant: " + where
        assert probe.context == ref.context, "other context: " + where
        if hit.tier in ("L0.5", "L1"):
            assert probe.pixels == ref.pixels, "other image pixels: " + where
        else:
            assert len(probe.pixels) == len(ref.pixels), where
        if hit.tier == "L0.5":
            assert probe.text == ref.text, where
        return hit.tier


@pytest.fixture(scope="module")
def fuzz_engine(text_embedder: Any, tiny_clip_dir: Path) -> Iterator[Recorder]:
    eng = MLCEngine(l2_image_threshold=0.995, l2_prompt_threshold=0.9, image_encoder=str(tiny_clip_dir), limits=Limits(max_image_pixels=MAX_PIXELS, max_image_bytes=MAX_BYTES))  # random-weight CLIP: see test_isolation
    rec = Recorder(eng)
    # Seed entries that the mutated probes are near to, so hits (and near misses) happen.
    for ctx in ([], [{"role": "user", "content": "Look at this."}, {"role": "assistant", "content": "I see a shape."}]):
        for sc in ("gpt-x;t=0", "gpt-x;t=1"):
            for ns in ("default", "tenant-a"):
                for pic in (PICS[0], PNGS[1]):
                    rec.update(CacheRequest(text="What color is the shape?", images=[pic], context=ctx, scope=sc,
                                            namespace=ns))
    yield rec
    eng.close()


def _exercise(rec: Recorder, store: CacheRequest, probe: CacheRequest) -> None:
    rec.update(store)
    rec.lookup_and_check(store)
    rec.lookup_and_check(probe)
    st_ = rec.engine.stats()
    assert st_["hits"] + st_["misses"] == st_["lookups"]


@CI
@given(store=requests(), probe=requests())
def test_fail_open_never_raises_and_never_hits_another_request(fuzz_engine: Recorder, store: CacheRequest,
                                                               probe: CacheRequest) -> None:
    _exercise(fuzz_engine, store, probe)


@pytest.mark.slow
@SOAK
@given(store=requests(), probe=requests())
def test_fail_open_soak(fuzz_engine: Recorder, store: CacheRequest, probe: CacheRequest) -> None:
    _exercise(fuzz_engine, store, probe)


@pytest.fixture(scope="module")
def strict_engine(fuzz_engine: Recorder, tiny_clip_dir: Path) -> MLCEngine:
    return MLCEngine(strict=True, image_encoder=str(tiny_clip_dir), storage=StorageOptions(client=fuzz_engine.engine.store.client, collection_prefix=fuzz_engine.engine.store.prefix), limits=Limits(max_image_pixels=MAX_PIXELS, max_image_bytes=MAX_BYTES))


@CI
@given(req=requests())
def test_strict_mode_raises_only_typed_errors(strict_engine: MLCEngine, req: CacheRequest) -> None:
    for op in (lambda: strict_engine.lookup(copy(req)), lambda: strict_engine.update(copy(req), {"i": -1})):
        try:
            op()
        except MLCError:
            pass


def test_hits_do_happen_in_the_fuzzed_neighbourhood(fuzz_engine: Recorder) -> None:
    """The no-wrong-hit property is not vacuous: near probes of the seeded entries hit, on every tier."""
    ctx = [{"role": "user", "content": "Look at this."}, {"role": "assistant", "content": "I see a shape."}]
    base = dict(context=ctx, scope="gpt-x;t=0", namespace="tenant-a")
    assert fuzz_engine.lookup_and_check(CacheRequest(text=" What color is the shape?\n", images=[PNGS[0]], **base)) == "L0.5"
    assert fuzz_engine.lookup_and_check(CacheRequest(text="what  COLOR is the shape?", images=[PNGS[0]], **base)) == "L1"
    assert fuzz_engine.lookup_and_check(CacheRequest(text="Which colour is the shape?", images=[PICS[0]], **base)) == "L1"
    assert fuzz_engine.lookup_and_check(CacheRequest(text="What color is the shape?", images=[ONE_PIXEL_OFF], **base)) == "L2"
    assert fuzz_engine.lookup_and_check(CacheRequest(text="What color is the shape?", images=[PICS[0]],
                                                     **dict(base, namespace="tenant-b"))) is None
