"""Quickstart demo: store and look up text and image requests, print each decision."""

from __future__ import annotations

import io
import logging
import time
from typing import Any, Optional

from PIL import Image, ImageDraw


def _picture(color: tuple[int, int, int], shape: str) -> Image.Image:
    im = Image.new("RGB", (96, 96), (255, 255, 255))
    d = ImageDraw.Draw(im)
    if shape == "circle":
        d.ellipse((20, 20, 76, 76), fill=color)
    else:
        d.rectangle((20, 20, 76, 76), fill=color)
    return im


def _resave(im: Image.Image, **kw: Any) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG", **kw)
    return buf.getvalue()


def run_quickstart(persist_directory: Optional[str] = None, clip_model: Any = "mlc-easyvqa-tiny") -> int:
    from ..engine import MLCEngine
    from ..embed.models import NAMED_CLIP_MODELS
    from ..request import CacheRequest

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if clip_model in NAMED_CLIP_MODELS and not NAMED_CLIP_MODELS[clip_model].exists():
        clip_model = None  # the offline L2 model is not built yet: L0.5 and L1 only
    t0 = time.perf_counter()
    eng = MLCEngine(persist_directory=persist_directory, image_encoder=clip_model)
    red_circle = _picture((220, 30, 30), "circle")
    blue_square = _picture((30, 30, 220), "square")
    scope = "demo-model:temperature=0"

    print("MLC quickstart: a stand-in model answers; the cache decides what can be reused.\n")
    stored = [
        (CacheRequest(text="What color is the shape?", images=[red_circle], scope=scope), "red"),
        (CacheRequest(text="What is the capital of France?", scope=scope), "Paris"),
    ]
    for req, answer in stored:
        eng.update(req, {"answer": answer})
        print(f"stored   {req.text!r:45} images={len(req.images)} -> {answer!r}")
    print()
    probes = [
        ("exact repeat, same picture", CacheRequest(text="What color is the shape?", images=[red_circle], scope=scope)),
        ("case/space change, picture re-saved as PNG", CacheRequest(text="  what COLOR is the shape? ", images=[_resave(red_circle, compress_level=1)], scope=scope)),
        ("paraphrase, same picture", CacheRequest(text="What is the color of the shape?", images=[red_circle], scope=scope)),
        ("same question, different picture", CacheRequest(text="What color is the shape?", images=[blue_square], scope=scope)),
        ("paraphrase, text only", CacheRequest(text="Which city is the capital of France?", scope=scope)),
        ("same text, another model", CacheRequest(text="What is the capital of France?", scope="other-model")),
        ("different question", CacheRequest(text="What is the capital of Spain?", scope=scope)),
    ]
    for label, req in probes:
        hit = eng.lookup(req)
        if hit:
            print(f"HIT  {label:45} -> {hit.payload['answer']!r:8} {hit.explain()} ({hit.lookup_ms:.1f} ms)")
        else:
            print(f"MISS {label:45} -> the model would be called")
    st = eng.stats()
    print(f"\nlookups={st['lookups']} hits={st['hits']} entries={st['entries']} "
          f"tiers={ {t: v.get('hit', 0) for t, v in st['tiers'].items()} } L2={st['config']['tiers']['L2']}")
    print(f"done in {time.perf_counter() - t0:.1f} s")
    eng.close()
    return 0
