"""The files the library ships (the verifier, the judge, the lexicon, the image-change rule,
the small packaged CLIP): :data:`ASSETS_DIR` is the one place that knows where they are."""

from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent
