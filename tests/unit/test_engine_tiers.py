"""Each tier's hit and refusal, scope/namespace isolation, context, thresholds."""

from __future__ import annotations

import base64

import pytest

from mlc_integrations import CacheRequest, ImageRef, MLCEngine, image_digest
from tests.helpers import jpeg_bytes, pattern, png_bytes, solid
from mlc_integrations import TierOptions

RED = solid((220, 30, 30))
BLUE = solid((30, 30, 220))


def req(text: str, images=(), **kw) -> CacheRequest:
    kw.setdefault("scope", "model-a")
    return CacheRequest(text=text, images=list(images), **kw)


def test_exact_hit_normalizes_text_and_ignores_png_encoding(make_engine) -> None:
    eng = make_engine(image_encoder=None, tiers=TierOptions(l1=False))
    img = pattern(1)
    eng.update(req("What color is the shape?", [img]), {"a": "red"})
    # Same pixels saved with different compression and metadata, text with outer spaces and
    # another Unicode composition (NFC): the same request.
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", "re-saved")
    resaved = png_bytes(img, compress_level=0, pnginfo=info)
    assert resaved != png_bytes(img, compress_level=9)
    hit = eng.lookup(req("  What color is the shape?\n", [resaved]))
    assert hit is not None and hit.tier == "L0.5" and hit.payload == {"a": "red"}
    data_url = "data:image/png;base64," + base64.b64encode(resaved).decode()
    assert eng.lookup(req("What color is the shape?", [data_url])).tier == "L0.5"
    assert eng.lookup(req("What color is the shape?", [pattern(2)])) is None


def test_exact_key_uses_pixels_not_file_names(make_engine, tmp_path) -> None:
    eng = make_engine(image_encoder=None, tiers=TierOptions(l1=False))
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    a.write_bytes(png_bytes(pattern(3)))
    b.write_bytes(png_bytes(pattern(3), compress_level=1))
    eng.update(req("describe", [str(a)]), "x")
    assert eng.lookup(req("describe", [b])).tier == "L0.5"
    # same file name, different picture: no hit
    a.write_bytes(png_bytes(pattern(4)))
    assert eng.lookup(req("describe", [str(a)])) is None
    assert image_digest(str(b)) == image_digest(pattern(3))


def test_l1_paraphrase_same_picture_hits_different_picture_refused(make_engine) -> None:
    eng = make_engine(image_encoder=None)
    eng.update(req("What color is the shape?", [RED]), "red")
    hit = eng.lookup(req("What's the color of the shape?", [png_bytes(RED)]))
    assert hit is not None and hit.tier == "L1"
    assert hit.scores["text"] >= hit.thresholds["text"] == eng.l1_threshold
    assert hit.matched_text == "What color is the shape?"
    assert eng.lookup(req("What's the color of the shape?", [BLUE])) is None
    assert eng.lookup(req("What's the color of the shape?")) is None  # no image vs image


def test_l1_threshold_and_switch_off(make_engine) -> None:
    strict_t = make_engine(l1_threshold=0.999, image_encoder=None)
    strict_t.update(req("What color is the shape?"), "red")
    assert strict_t.lookup(req("What is the color of the shape?")) is None
    off = make_engine(image_encoder=None, tiers=TierOptions(l1=False))
    off.update(req("What color is the shape?"), "red")
    assert off.lookup(req("What's the color of the shape?")) is None
    assert off.stats()["tiers"]["L1"]["skipped"] == 1


def test_l2_requires_both_image_and_prompt(make_engine) -> None:
    # The tiny random CLIP is only plumbing: thresholds are set so that identical
    # pictures pass and the test controls the prompt side.
    eng = make_engine(l2_image_threshold=0.999, l2_prompt_threshold=0.9, tiers=TierOptions(exact=False, l1=False))
    img = pattern(5)
    eng.update(req("What color is the shape?", [img]), "red")
    hit = eng.lookup(req("What's the color of the shape?", [img]))
    assert hit is not None and hit.tier == "L2"
    # the same pixels: found by their fingerprint (no image encoder run), compared locally
    assert {"fingerprint", "prompt", "image_changed"} <= set(hit.scores) and hit.scores["fingerprint"] >= 0.999
    assert all(hit.scores[k] >= t for k, t in hit.thresholds.items())
    # same wording, different picture: image side fails on its own
    assert eng.lookup(req("What color is the shape?", [pattern(6)])) is None
    # same picture, unrelated wording: prompt side fails on its own
    assert eng.lookup(req("How many legs does a spider have?", [img])) is None


def test_without_an_image_verifier_the_encoder_finds_the_picture(make_engine) -> None:
    eng = make_engine(l2_image_threshold=0.999, l2_prompt_threshold=0.9,
                      tiers=TierOptions(exact=False, l1=False, image_verifier=None))
    img = pattern(5)
    eng.update(req("What color is the shape?", [img]), "red")
    hit = eng.lookup(req("What's the color of the shape?", [img]))
    assert hit is not None and hit.tier == "L2"
    assert {"image", "prompt"} <= set(hit.thresholds) and "fingerprint" not in hit.scores and hit.scores["image"] >= 0.999
    assert eng.lookup(req("What color is the shape?", [pattern(6)])) is None


def test_l2_several_images_each_must_match(make_engine) -> None:
    eng = make_engine(l2_image_threshold=0.999, l2_prompt_threshold=0.9, tiers=TierOptions(exact=False, l1=False))
    a, b, c = pattern(7), pattern(8), pattern(9)
    eng.update(req("Are these the same?", [a, b]), "no")
    assert eng.lookup(req("Are these the same?", [a, b])).tier == "L2"
    assert eng.lookup(req("Are these the same?", [a, c])) is None
    assert eng.lookup(req("Are these the same?", [a])) is None


def test_l2_off_when_clip_cannot_load_keeps_serving(make_engine, tmp_path, caplog) -> None:
    eng = make_engine(image_encoder=str(tmp_path / "missing-clip-dir"))
    eng.update(req("What color is the shape?", [RED]), "red")
    assert eng.lookup(req("What's the color of the shape?", [RED])).tier == "L1"
    assert eng.stats()["config"]["tiers"]["L2"].startswith("off")


def test_cheapest_first_and_stats_add_up(make_engine) -> None:
    eng = make_engine()
    eng.update(req("What color is the shape?", [RED]), "red")
    assert eng.lookup(req("What color is the shape?", [RED])).tier == "L0.5"
    assert eng.lookup(req("What's the color of the shape?", [RED])).tier == "L1"
    assert eng.lookup(req("Name the capital of Peru", [RED])) is None
    st = eng.stats()
    assert st["lookups"] == 3 and st["hits"] == 2 and st["misses"] == 1
    assert st["tiers"]["L0.5"] == {"hit": 1, "miss": 2}
    assert st["tiers"]["L1"]["hit"] == 1
    assert {"p50", "p90", "p99"} <= set(st["latency_ms"]["lookup"])
    assert eng.count() == 1 and st["entries"] in (0, 1)  # stats() never waits for the writer; count() does


@pytest.mark.parametrize("field,other", [("scope", {"scope": "model-b"}), ("namespace", {"namespace": "tenant-b"})])
def test_scope_and_namespace_isolation(make_engine, field, other) -> None:
    eng = make_engine(l2_image_threshold=0.5, l2_prompt_threshold=0.5)
    eng.update(req("What color is the shape?", [RED], namespace="tenant-a"), "red")
    probe = dict(scope="model-a", namespace="tenant-a")
    probe.update(other)
    for text in ("What color is the shape?", "What's the color of the shape?"):
        assert eng.lookup(CacheRequest(text=text, images=[RED], **probe)) is None


def test_neighbour_from_other_scope_never_hides_a_hit(make_engine) -> None:
    eng = make_engine(image_encoder=None)
    # Many near-identical entries in other scopes, one valid entry in ours.
    for i in range(40):
        eng.update(req("What color is the shape?", scope=f"other-{i}"), f"wrong-{i}")
    eng.update(req("What's the color of the shape?", scope="mine"), "right")
    hit = eng.lookup(req("What color is the shape?", scope="mine"))
    assert hit is not None and hit.payload == "right"


def test_context_is_compared_exactly(make_engine) -> None:
    eng = make_engine()
    ctx1 = [{"role": "user", "content": [{"type": "text", "text": "Look at this"}, {"type": "image", "image": RED}]},
            {"role": "assistant", "content": "A red square."}]
    eng.update(req("Is it round?", context=ctx1), "no")
    same_ctx = [{"role": "user", "content": [{"type": "text", "text": "Look at this"}, {"type": "image", "image": png_bytes(RED)}]},
                {"role": "assistant", "content": "A red square."}]
    assert eng.lookup(req("Is it round?", context=same_ctx)).tier == "L0.5"
    other_img = [{"role": "user", "content": [{"type": "text", "text": "Look at this"}, {"type": "image", "image": BLUE}]},
                 {"role": "assistant", "content": "A red square."}]
    assert eng.lookup(req("Is it round?", context=other_img)) is None
    assert eng.lookup(req("Is it round?")) is None


@pytest.mark.parametrize("stored, asked", [
    ("Is the word 'Apple' capitalized?", "Is the word 'apple' capitalized?"),  # case inside quotes
    ("Does the regex [A-Z]+ match 'abc'?", "Does the regex [a-z]+ match 'abc'?"),
    ("Count the spaces in 'a b'", "Count the spaces in 'a    b'"),  # inner spacing
    ("Is this YAML valid?\na:\n  b: 1", "Is this YAML valid?\na:\nb: 1"),  # indentation
    ("what COLOR is the shape?", "what color is the shape?"),
    ("What is the shape？", "What is the shape?"),  # full-width: NFKC would fold it, NFC does not
])
def test_exact_tier_is_exact_case_and_inner_spacing_are_not_folded(make_engine, stored: str, asked: str) -> None:
    eng = make_engine(image_encoder=None, tiers=TierOptions(l1=False))
    eng.update(req(stored), "stored answer")
    assert eng.lookup(req(asked)) is None
    assert eng.lookup(req(stored)).tier == "L0.5"


def test_exact_tier_folds_only_unicode_composition_and_outer_whitespace(make_engine) -> None:
    eng = make_engine(image_encoder=None, tiers=TierOptions(l1=False))
    composed = "Qu'est-ce qu'un caf\u00e9 ?"
    eng.update(req(composed), "a coffee")
    assert eng.lookup(req("Qu'est-ce qu'un cafe\u0301 ?")).tier == "L0.5"  # e + combining accent: NFC-equal
    assert eng.lookup(req(f"\t {composed}  \n")).tier == "L0.5"


def test_remote_url_keyed_by_string_not_fetched(make_engine) -> None:
    eng = make_engine()
    url = "https://example.invalid/cat.png"
    eng.update(req("What is this?", [url]), "a cat")
    assert eng.lookup(req("What is this?", [ImageRef(url)])).tier == "L0.5"
    assert eng.lookup(req("What is this?", ["https://example.invalid/dog.png"])) is None
    # L2 is never attempted for a remote image (nothing to embed); L1 still applies
    hit = eng.lookup(req("What's this?", [url]))
    assert hit is None or hit.tier == "L1"


def test_jpeg_reencode_is_not_an_exact_match(make_engine) -> None:
    """JPEG changes pixels: exact tier refuses; L2 is where near-duplicates are found."""
    eng = make_engine(image_encoder=None, tiers=TierOptions(l1=False))
    img = pattern(10, (128, 128))
    eng.update(req("describe", [img]), "x")
    assert eng.lookup(req("describe", [jpeg_bytes(img, 75)])) is None


def test_invalid_thresholds_rejected() -> None:
    with pytest.raises(ValueError):
        MLCEngine(l1_threshold=1.5, image_encoder=None)
    with pytest.raises(ValueError):
        MLCEngine(image_encoder=None, tiers=TierOptions(l2_prompt_encoder="bogus"))


def test_hit_found_when_other_scopes_saturate_the_neighbourhood(make_engine) -> None:
    """More near-identical entries in other scopes than any unfiltered page holds:
    the search falls back to a query filtered on the partition inside Chroma."""
    import numpy as np

    eng = make_engine(image_encoder=None)
    rng = np.random.default_rng(0)
    base = rng.normal(size=384)
    base /= np.linalg.norm(base)
    for i in range(270):
        eng.update(CacheRequest(text=f"q{i}", scope=f"other-{i}", text_embedding=base.tolist()), f"wrong-{i}")
    near = base + 0.01 * rng.normal(size=384)  # cosine ~0.98
    # the texts are a contraction apart, so the verifier accepts what retrieval finds
    eng.update(CacheRequest(text="What's the capital of France?", scope="mine", text_embedding=near.tolist()), "right")
    hit = eng.lookup(CacheRequest(text="What is the capital of France?", scope="mine", text_embedding=base.tolist()))
    assert hit is not None and hit.payload == "right" and hit.tier == "L1"
    assert eng.stats()["tiers"]["L1"]["hit"] == 1
    assert eng._stats.snapshot()  # counters readable
    assert eng.lookup(CacheRequest(text="What is the capital of France?", scope="nobody",
                                   text_embedding=base.tolist())) is None
