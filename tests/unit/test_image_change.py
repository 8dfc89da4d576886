"""The image-change verifier: benign copies are the same content, edited pictures are not.

Pictures come from ``skimage.data`` (ship with scikit-image, offline). The rule is the
shipped one (``assets/image_change.json``); every float comparison has a tolerance.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageEnhance

from mlc_integrations import CacheRequest
from mlc_integrations.verify.image_change import (
    DESCRIPTOR_MAX_BYTES,
    DescriptorError,
    ImageChangeRule,
    ImageChangeVerifier,
    ImageDescriptor,
    align,
    compare,
    describe,
    descriptor_bytes,
)
from mlc_integrations import StorageOptions, TierOptions

skdata = pytest.importorskip("skimage.data")


def _picture(name: str, side: int = 320) -> Image.Image:
    im = Image.fromarray(np.asarray(getattr(skdata, name)())).convert("RGB")
    im.thumbnail((side, side), Image.BICUBIC)
    return im


@pytest.fixture(scope="module")
def astronaut() -> Image.Image:
    return _picture("astronaut")


@pytest.fixture(scope="module")
def coffee() -> Image.Image:
    return _picture("coffee")


@pytest.fixture(scope="module")
def verifier() -> ImageChangeVerifier:
    return ImageChangeVerifier()


def _jpeg(im: Image.Image, q: int) -> Image.Image:
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=q)
    return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")


def _shift(im: Image.Image, dx: int, dy: int) -> Image.Image:
    a = np.asarray(im)
    a = np.pad(a, ((abs(dy), abs(dy)), (abs(dx), abs(dx)), (0, 0)), mode="edge")
    return Image.fromarray(np.ascontiguousarray(a[abs(dy) - dy:abs(dy) - dy + im.height, abs(dx) - dx:abs(dx) - dx + im.width]))


def _paste(im: Image.Image, src: Image.Image, frac: float, at: tuple[float, float]) -> Image.Image:
    """An elliptic cut-out of ``src`` covering ``frac`` of ``im``, pasted at ``at`` (relative)."""
    w, h = im.size
    side = int(round((frac * w * h * 4 / np.pi) ** 0.5))
    patch = src.resize((side, side))
    mask = Image.new("L", (side, side), 0)
    ImageDraw.Draw(mask).ellipse((0, 0, side - 1, side - 1), fill=255)
    out = im.copy()
    out.paste(patch, (int(at[0] * (w - side)), int(at[1] * (h - side))), mask)
    return out


def _verdict(verifier: ImageChangeVerifier, stored: Image.Image, new: Image.Image):
    return verifier.verify(describe(stored).to_text(), describe(new))


# ---------------------------------------------------------------------------- benign copies
def test_a_jpeg_copy_shifted_2_percent_is_reused(verifier, astronaut) -> None:
    new = _jpeg(_shift(astronaut, round(0.02 * astronaut.width), -round(0.01 * astronaut.height)), 70)
    v = _verdict(verifier, astronaut, new)
    assert v.accept, v.detail


@pytest.mark.parametrize("scale", [0.5, 0.75, 1.5])
def test_a_resized_copy_is_reused(verifier, astronaut, scale) -> None:
    new = astronaut.resize((round(astronaut.width * scale), round(astronaut.height * scale)), Image.BICUBIC)
    assert _verdict(verifier, astronaut, new).accept


@pytest.mark.parametrize("factor", [0.85, 1.15])
def test_brighter_or_darker_by_15_percent_is_reused(verifier, astronaut, factor) -> None:
    assert _verdict(verifier, astronaut, ImageEnhance.Brightness(astronaut).enhance(factor)).accept


def test_a_copy_cropped_by_4_percent_is_reused_and_the_shift_is_found(verifier, coffee) -> None:
    w, h = coffee.size
    new = coffee.crop((round(0.02 * w), round(0.02 * h), w - round(0.02 * w), h - round(0.02 * h)))
    v = _verdict(verifier, coffee, new)
    assert v.accept, v.detail
    assert v.report is not None and v.report.scale == pytest.approx(1.05, abs=0.06)


def test_noise_does_not_count_as_change(verifier, coffee) -> None:
    rng = np.random.default_rng(0)
    a = np.asarray(coffee, np.float32) + rng.normal(0, 6, (coffee.height, coffee.width, 3))
    assert _verdict(verifier, coffee, Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))).accept


# ---------------------------------------------------------------------------- content edits
def test_a_pasted_object_covering_5_percent_is_refused(verifier, astronaut, coffee) -> None:
    v = _verdict(verifier, astronaut, _paste(astronaut, coffee, 0.05, (0.1, 0.1)))
    assert not v.accept
    assert "changed" in v.detail and "top-left" in v.detail


def test_a_removed_object_is_refused(verifier, astronaut, coffee) -> None:
    with_object = _paste(astronaut, coffee, 0.05, (0.8, 0.7))
    assert not _verdict(verifier, with_object, astronaut).accept


def test_a_moved_object_is_refused_even_as_a_jpeg_copy(verifier, astronaut, coffee) -> None:
    before = _paste(astronaut, coffee, 0.04, (0.1, 0.8))
    after = _jpeg(_paste(astronaut, coffee, 0.04, (0.85, 0.2)), 80)
    assert not _verdict(verifier, before, after).accept


def test_a_recoloured_region_is_refused(verifier, coffee) -> None:
    a = np.asarray(coffee).copy()
    h, w = a.shape[:2]
    y0, x0, s = h // 3, w // 3, int((0.06 * h * w) ** 0.5)
    a[y0:y0 + s, x0:x0 + s] = a[y0:y0 + s, x0:x0 + s][..., [2, 0, 1]]  # channels rotated: another hue
    assert not _verdict(verifier, coffee, Image.fromarray(a)).accept


def test_a_different_picture_is_refused(verifier, astronaut, coffee) -> None:
    v = _verdict(verifier, astronaut, coffee)
    assert not v.accept and v.reason in ("alignment", "noise", "region", "area")


# ---------------------------------------------------------------------------- alignment and descriptor
def test_phase_correlation_finds_a_known_shift() -> None:
    rng = np.random.default_rng(1)
    base = rng.random((96, 96)).astype(np.float32)
    shifted = np.roll(base, (3, -5), axis=(0, 1))
    al = align(base, shifted)
    assert al.scale == pytest.approx(1.0)
    assert (al.dx, al.dy) == (pytest.approx(-5, abs=0.3), pytest.approx(3, abs=0.3))
    assert al.peak > 0.5


def test_the_descriptor_round_trips_and_stays_small(astronaut) -> None:
    d = describe(astronaut)
    back = ImageDescriptor.from_text(d.to_text())
    assert np.array_equal(back.grey, d.grey) and np.array_equal(back.chroma, d.chroma)
    assert back.size == astronaut.size
    assert descriptor_bytes(d) <= DESCRIPTOR_MAX_BYTES + 64
    assert compare(d, back).changed_area == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("bad", ["", "not base64!", "QUJD", describe(Image.new("RGB", (32, 32))).to_text()[:40]])
def test_a_corrupt_descriptor_is_a_typed_error(bad) -> None:
    with pytest.raises(DescriptorError):
        ImageDescriptor.from_text(bad)


def test_an_entry_without_a_descriptor_is_refused_by_default(astronaut) -> None:
    d = describe(astronaut)
    assert not ImageChangeVerifier().verify(None, d).accept
    assert ImageChangeVerifier(missing="accept").verify(None, d).accept


def test_the_shipped_rule_is_calibrated() -> None:
    rule = ImageChangeRule.load()
    assert rule.source != "built-in defaults"
    assert 0 < rule.max_region <= 0.05 and 0 < rule.max_area <= 0.05


# ---------------------------------------------------------------------------- through the engine
def _req(text: str, im: Image.Image) -> CacheRequest:
    return CacheRequest(text=text, images=[im])


def _l2_engine(make_engine, evidence: str = "memory", **kw):
    # The tiny random CLIP is only plumbing: the global threshold lets every picture through,
    # so the local verifier alone decides.
    return make_engine(**kw, l2_image_threshold=-1.0, l2_prompt_threshold=0.9,
                       tiers=TierOptions(exact=False, l1=False, l2_prescreen=None, image_evidence=evidence))


def test_an_l2_hit_names_the_image_verifiers_scores(make_engine, astronaut) -> None:
    eng = _l2_engine(make_engine)
    eng.update(_req("What is in the picture?", astronaut), "an astronaut")
    hit = eng.lookup(_req("What is in the picture?", _jpeg(astronaut, 60)))
    assert hit is not None and hit.tier == "L2"
    assert {"image_align", "image_changed", "image_region"} <= set(hit.scores)
    assert "image_region=" in hit.explain()


def test_an_l2_refusal_says_where_the_picture_changed(make_engine, astronaut, coffee) -> None:
    eng = _l2_engine(make_engine)
    eng.update(_req("What is in the picture?", astronaut), "an astronaut")
    trace = eng.lookup_explained(_req("What is in the picture?", _paste(astronaut, coffee, 0.06, (0.05, 0.05))))
    assert trace.hit is None and trace.refused is not None
    assert trace.refused.reason == "image"
    assert "a region changed" in trace.refused.detail and "top-left" in trace.refused.detail
    assert eng.stats()["l2_image_refused"] == 1


def _set_descriptors(eng, text: str) -> None:
    col = eng.store.collection("l2_image")
    rows = col.get(include=["documents", "embeddings", "metadatas"])
    col.upsert(ids=rows["ids"], embeddings=rows["embeddings"], metadatas=rows["metadatas"],
               documents=[text for _ in rows["ids"]])


@pytest.mark.parametrize("strict", [False, True])
def test_a_corrupt_stored_descriptor_never_breaks_a_lookup(make_engine, astronaut, strict) -> None:
    eng = _l2_engine(make_engine, "store", strict=strict, durable=True)
    eng.update(_req("What is in the picture?", astronaut), "an astronaut")
    _set_descriptors(eng, "garbage")
    eng.entries._evidence.clear()  # as after a restart: only what is at rest
    assert eng.lookup(_req("What is in the picture?", _jpeg(astronaut, 60))) is None  # a counted miss
    assert eng.stats()["errors"].get("image_verifier") == 1


def test_an_entry_stored_without_a_descriptor_is_not_reused(make_engine, astronaut) -> None:
    eng = _l2_engine(make_engine, "store", durable=True)
    eng.update(_req("What is in the picture?", astronaut), "an astronaut")
    _set_descriptors(eng, "")  # as written before descriptors
    eng.entries._evidence.clear()  # as after a restart: only what is at rest
    trace = eng.lookup_explained(_req("What is in the picture?", _jpeg(astronaut, 60)))
    assert trace.hit is None and "has no image-change evidence" in trace.refused.detail


def test_evidence_kept_in_memory_is_never_at_rest_and_another_process_does_not_reuse(make_engine, astronaut) -> None:
    first = _l2_engine(make_engine, durable=True)
    first.update(_req("What is in the picture?", astronaut), "an astronaut")
    assert first.lookup(_req("What is in the picture?", _jpeg(astronaut, 60))) is not None  # this process: reused
    docs = first.store.collection("l2_image").get(include=["documents"])["documents"]
    assert docs and all(not d for d in docs)  # nothing of the picture in Chroma
    other = _l2_engine(make_engine, durable=True,
                       storage=StorageOptions(client=first.store.client, collection_prefix=first.store.prefix))
    trace = other.lookup_explained(_req("What is in the picture?", _jpeg(astronaut, 60)))
    assert trace.hit is None and trace.refused is not None and trace.refused.reason == "image"
    assert "image_evidence='store' keeps it at rest" in trace.refused.detail  # names the option


def test_picture_evidence_lives_where_the_cache_lives_by_default(make_engine, tmp_path) -> None:
    in_memory = make_engine(tiers=TierOptions())
    persistent = make_engine(persist_directory=str(tmp_path / "c"), tiers=TierOptions())
    assert not in_memory.entries.evidence_at_rest and persistent.entries.evidence_at_rest


def test_opting_in_keeps_the_evidence_at_rest_for_other_processes(make_engine, astronaut) -> None:
    first = _l2_engine(make_engine, "store", durable=True)
    first.update(_req("What is in the picture?", astronaut), "an astronaut")
    assert all(first.store.collection("l2_image").get(include=["documents"])["documents"])
    other = _l2_engine(make_engine, "store", durable=True,
                       storage=StorageOptions(client=first.store.client, collection_prefix=first.store.prefix))
    assert other.lookup(_req("What is in the picture?", _jpeg(astronaut, 60))) is not None


def test_a_flat_picture_with_one_odd_pixel_is_reused_and_another_flat_colour_is_not() -> None:
    from mlc_integrations.verify.image_change import ImageChangeVerifier, describe

    red = Image.new("RGB", (64, 64), (220, 30, 30))
    near = red.copy()
    near.putpixel((3, 3), (90, 90, 90))
    verifier = ImageChangeVerifier()
    assert verifier.verify(describe(red).to_text(), describe(_jpeg(near, 80))).accept
    assert not verifier.verify(describe(red).to_text(), describe(Image.new("RGB", (64, 64), (30, 30, 220)))).accept


# ---------------------------------------------------------------------------- drift, cost, explanations
def _shape(colour=(220, 30, 30), bg=(246, 236, 240), side=64, box=(18, 20, 44, 46)) -> Image.Image:
    im = Image.new("RGB", (side, side), bg)
    ImageDraw.Draw(im).ellipse(box, fill=colour)
    return im


def test_a_small_shape_compared_half_a_pixel_off_is_not_a_changed_colour_region() -> None:
    # A 64-px shape's colour edge covers a quarter of a colour-map pixel per grey pixel of
    # shift: a blend of neighbouring colours is not a change (it was: "a region changed").
    from mlc_integrations.verify.image_change import Alignment

    im = _shape()
    copy = im.resize((51, 51), Image.BICUBIC)
    for dy in (0.5, 0.77, 1.0):
        rep = compare(describe(im), describe(copy), Alignment(1.0, 0.0, dy, 0.5))
        assert rep.colour_area == pytest.approx(0.0, abs=1e-9)
        assert rep.largest_region == pytest.approx(0.0, abs=1e-9)


def test_a_resized_small_shape_is_reused_at_the_first_alignment(verifier) -> None:
    im = _shape()
    v = verifier.verify(describe(im), describe(im.resize((51, 51), Image.BICUBIC)))
    assert v.accept, v.detail
    assert v.report is not None and v.report.stage in ("scale 1", "scales")


def test_a_confident_first_alignment_needs_one_phase_correlation(verifier, astronaut) -> None:
    v = verifier.verify(describe(astronaut), describe(_jpeg(_shift(astronaut, 3, -2), 80)))
    assert v.accept, v.detail
    assert v.report is not None and v.report.stage == "scale 1" and v.report.trials == 1


def test_histograms_that_cannot_match_are_refused_before_any_alignment() -> None:
    rule = ImageChangeRule(max_grey_bound=0.2, max_colour_bound=0.2)
    ver = ImageChangeVerifier(rule)
    red = _shape(box=(4, 4, 60, 60))
    blue = _shape(colour=(30, 30, 220), box=(4, 4, 60, 60))
    v = ver.verify(describe(red), describe(blue))
    assert not v.accept and v.reason == "prescreen"
    assert v.report is not None and v.report.trials == 0
    assert "before any alignment" in v.detail and "colours" in v.detail


def test_the_early_bound_is_a_lower_bound_on_pixels_that_differ() -> None:
    # However the pixels are matched one to one, at least this share differs by more than t.
    from mlc_integrations.verify.image_change.histograms import levy_gap

    rng = np.random.default_rng(0)
    a = rng.random(500)
    b = a.copy()
    b[:100] += 0.5  # exactly 100 of 500 moved by more than t
    bound = levy_gap(np.sort(a), np.sort(b), 0.1)
    assert 0.0 < bound <= 100 / 500 + 1e-9
    assert levy_gap(np.sort(a), np.sort(a), 0.1) == 0.0


def test_an_early_refusal_spends_no_comparison_and_the_budget_refuses_past_its_limit(astronaut, coffee) -> None:
    rule = ImageChangeRule(max_grey_bound=0.2, max_colour_bound=0.2)
    ver = ImageChangeVerifier(rule, comparisons_per_lookup=1)
    budget = ver.budget()
    red, blue = _shape(box=(4, 4, 60, 60)), _shape(colour=(30, 30, 220), box=(4, 4, 60, 60))
    assert ver.verify(describe(red), describe(blue), budget=budget).reason == "prescreen"
    assert budget.used == 0
    first = ver.verify(describe(astronaut), describe(_jpeg(astronaut, 85)), budget=budget)
    assert first.accept and budget.used == 1
    late = ver.verify(describe(astronaut), describe(_jpeg(astronaut, 85)), budget=budget)
    assert not late.accept and late.reason == "budget" and "1 pictures were compared" in late.detail


def test_a_hit_says_which_alignment_it_found(verifier, astronaut) -> None:
    v = verifier.verify(describe(astronaut), describe(_shift(astronaut, 6, 0)))
    assert v.accept, v.detail
    assert "shifted" in v.detail and "peak" in v.detail and "seen again" in v.detail
    assert v.scores()["image_dx"] == pytest.approx(6 / astronaut.width, abs=0.01)


def test_a_rule_file_without_the_new_bounds_leaves_them_off(tmp_path) -> None:
    p = tmp_path / "rule.json"
    p.write_text('{"min_peak": 0.05, "min_overlap": 0.6, "max_noise": 0.07, "max_region": 0.03, "max_area": 0.005}')
    rule = ImageChangeRule.load(p)
    assert rule.max_cell > 1.0 and rule.max_grey_bound > 1.0 and rule.max_colour_bound > 1.0


def test_a_copy_rotated_3_degrees_is_reused_and_the_rotation_is_named(verifier, astronaut) -> None:
    v = verifier.verify(describe(astronaut), describe(astronaut.rotate(3.0, Image.BICUBIC, fillcolor=(128, 128, 128))))
    assert v.accept, v.detail
    assert v.report is not None and v.report.angle == pytest.approx(-3.0)
    assert "rotated +3.0 deg" in v.detail


def test_one_shape_elsewhere_on_a_flat_background_is_another_framing_not_a_drift() -> None:
    # Aligned 28 % off, the first shape leaves the compared part and what is left matches:
    # without a bound on the shift this pair of different pictures was "same content".
    left, right = _shape(box=(4, 20, 24, 40)), _shape(box=(22, 20, 42, 40))
    loose = dict(min_peak=0.05, min_overlap=0.6, max_region=0.03, max_area=0.02)
    assert ImageChangeVerifier(ImageChangeRule(**loose)).verify(describe(left), describe(right)).accept
    v = ImageChangeVerifier(ImageChangeRule(**loose, max_shift=0.1)).verify(describe(left), describe(right))
    assert not v.accept and v.reason == "alignment" and "another framing" in v.detail
    assert ImageChangeRule.load().max_shift < 0.28  # the shipped rule bounds it too


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_fast_quantile_is_numpys_linear_quantile_to_the_bit(dtype) -> None:
    from mlc_integrations.verify.image_change.maps import quantile_linear

    rng = np.random.default_rng(1)
    for n in (2, 5, 577, 96 * 96):
        x = rng.random(n).astype(dtype)
        for q in (0.1, 0.5, 0.75, 0.9):
            assert quantile_linear(x, q) == float(np.quantile(x, q))
            assert quantile_linear(np.sort(x), q, presorted=True) == float(np.quantile(x, q))


# ---------------------------------------------------------------------------- low-contrast edits
def _faint_disk(im: Image.Image, frac: float, at: tuple[float, float], delta: float) -> Image.Image:
    """A disk covering ``frac`` of ``im`` made ``delta`` grey levels brighter (a low-contrast change)."""
    w, h = im.size
    s = int(round((frac * w * h * 4 / np.pi) ** 0.5))
    x0, y0 = int(at[0] * (w - s)), int(at[1] * (h - s))
    a = np.asarray(im).astype(np.float32).copy()
    yy, xx = np.mgrid[:s, :s]
    disk = (yy - (s - 1) / 2) ** 2 + (xx - (s - 1) / 2) ** 2 <= ((s - 1) / 2) ** 2
    a[y0:y0 + s, x0:x0 + s][disk] += delta
    return Image.fromarray(np.clip(a, 0, 255).round().astype(np.uint8))


def test_a_disk_14_levels_brighter_over_3_percent_of_a_grey_picture_is_refused(verifier) -> None:
    # Under the old grey floor (0.08 of the scale, 20 levels) this change was reused.
    camera = _picture("camera")
    v = _verdict(verifier, camera, _faint_disk(camera, 0.03, (0.2, 0.8), 14))
    assert not v.accept, v.detail
    assert "bottom-left" in v.detail


@pytest.mark.parametrize("factor", [0.85, 1.12, 1.15])
def test_an_exposure_step_that_clips_the_sky_of_a_grey_picture_is_reused(verifier, factor) -> None:
    # Bright pixels keep the old grey floor: a highlight clipped at 255 is not a change.
    camera = _picture("camera")
    a = np.clip(np.asarray(camera).astype(np.float32) * factor, 0, 255).round().astype(np.uint8)
    v = _verdict(verifier, camera, Image.fromarray(a))
    assert v.accept, v.detail


def test_a_flat_grey_region_given_a_dark_saturated_hue_is_a_colour_change() -> None:
    # A grey picture whose dark half (grey 41) gets a red square of 4 % of the picture at the
    # same grey level (RGB 60/33/33: value 0.24, saturation 0.45): red-green moves 13.5 of 255
    # levels, under the old flat colour threshold of 0.06 (15.3 levels), and grey not at all.
    a = np.full((192, 192, 3), 160, np.uint8)
    a[:, :96] = 41
    b = a.copy()
    b[60:100, 20:60] = (60, 33, 33)
    rep = compare(describe(Image.fromarray(a)), describe(Image.fromarray(b)))
    assert rep.colour_area > 0.02
    assert not ImageChangeRule.load().decide(rep).accept


def test_the_fast_helpers_give_exactly_what_the_generic_ones_give() -> None:
    """The comparison's padding, median and robust fit and the pre-screen's deciles are
    hand-rolled for speed; they must be the very numbers np.pad, np.median, np.var /
    np.quantile and the one-quantile helper give (the rule was calibrated on those)."""
    from mlc_integrations.verify.image_change.descriptor import block_means
    from mlc_integrations.verify.image_change.histograms import QS, deciles
    from mlc_integrations.verify.image_change.maps import median, pad_edge, quantile_linear, robust_affine

    rng = np.random.default_rng(3)
    for shape in ((96, 96), (24, 24), (5, 7)):
        x = rng.random(shape, dtype=np.float32)
        assert np.array_equal(pad_edge(x), np.pad(x, 1, mode="edge"))
    for n in (9216, 576, 17, 2):
        s = np.sort(rng.random(n, dtype=np.float32))
        want = np.array([quantile_linear(s, q, presorted=True) for q in QS])
        assert np.array_equal(deciles(s), want)
    for _ in range(20):  # the descriptor's colour blocks: a thumbnail's whole-valued pixels
        a = rng.integers(0, 256, (96, 96, 3)).astype(np.float32)
        assert np.array_equal(block_means(a, 4), a.reshape(24, 4, 24, 4, 3).mean(axis=(1, 3)))
    for n in (9216, 9215, 576, 17, 2, 1):
        x = rng.random(n, dtype=np.float32)
        assert median(x) == float(np.median(x))
        for y in (rng.random(n, dtype=np.float32), (0.9 * x + 0.05 + 0.01 * rng.standard_normal(n)).astype(np.float32)):
            assert robust_affine(x, y) == _robust_affine_by_numpy(x, y)


def _robust_affine_by_numpy(x: np.ndarray, y: np.ndarray, gains: tuple[float, float] = (0.7, 1.4)) -> tuple[float, float]:
    """The robust fit as first written, with numpy's var and quantile (the arithmetic the rule
    was calibrated on)."""
    g, o = 1.0, 0.0
    keep = np.ones(x.shape, bool)
    for _ in range(2):
        xs, ys = x[keep], y[keep]
        if xs.size < 16:
            break
        mx, my = xs.mean(), ys.mean()
        vx = float(xs.var())
        if vx < 1e-6:
            g, o = 1.0, float(my - mx)
        else:
            g = float(np.clip(((xs - mx) * (ys - my)).mean() / vx, *gains))
            o = float(my - g * mx)
        res = np.abs(y - (g * x + o))
        keep = res <= np.quantile(res, 0.75)
    return g, o


def test_a_stored_descriptor_read_back_is_the_one_that_wrote_it_and_the_memos_are_bounded() -> None:
    """An entry's evidence, read at a later lookup, is the request's own descriptor (its
    spectrum and histograms are not computed again); a text this process did not write
    parses to an equal descriptor; however many pictures pass, each memo keeps at most
    MEMO_PICTURES of them."""
    from mlc_integrations.verify.image_change import descriptor as dm

    rng = np.random.default_rng(5)
    pics = [Image.fromarray((rng.random((40, 50, 3)) * 255).astype(np.uint8)) for _ in range(dm.MEMO_PICTURES + 20)]
    d = dm.describe_memoized(pics[0], "digest-0")
    text = dm.text_of(d)
    assert dm.read_memoized(text) is d and dm.text_of(d) is text
    foreign = dm.describe(pics[1]).to_text()
    back = dm.read_memoized(foreign)
    assert np.array_equal(back.grey, dm.describe(pics[1]).grey) and dm.read_memoized(foreign) is back
    for i, p in enumerate(pics):
        dm.text_of(dm.describe_memoized(p, f"digest-{i}"))
    assert len(dm._BY_DIGEST) <= dm.MEMO_PICTURES and len(dm._BY_FORM) <= dm.MEMO_PICTURES
    assert dm.read_memoized(dm.text_of(dm.describe_memoized(pics[-1], f"digest-{len(pics) - 1}"))) is \
        dm.describe_memoized(pics[-1], f"digest-{len(pics) - 1}")
