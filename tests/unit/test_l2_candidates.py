"""L2 reads only the best few candidates of its image query (issue 24 follow-up).

A camera watching a static scene stores many frames that all pass a low global
threshold; a lookup must still read the metadata and descriptors of at most
``L2_QUERY_K`` rows, not of every stored frame. One picture asked about many times
still finds the entry about the same question (the prompt side bounds the search).
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mlc_integrations import CacheRequest, TierOptions
from mlc_integrations.tiers import L2_QUERY_K
from mlc_integrations.verify.image_change import ImageChangeVerifier


def _frame(i: int) -> Image.Image:
    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, (96, 96, 3), dtype=np.uint8)
    base[40:56, 40:56] = (i * 7) % 255  # every frame differs a little (another pixel digest)
    return Image.fromarray(base)


def _street(i: int) -> Image.Image:
    """One street scene (blocks of colour, 96 px) with another object in the middle for each ``i``."""
    rng = np.random.default_rng(0)
    base = np.kron(rng.integers(0, 255, (12, 12, 3), dtype=np.uint8), np.ones((8, 8, 1), dtype=np.uint8))
    base[40:56, 40:56] = (i * 37) % 255
    return Image.fromarray(base)


def _jpeg(im: Image.Image) -> Image.Image:
    import io

    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=90)
    return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")


def _engine(make_engine, l2_prescreen=None, persist_directory=None, **kw):
    # Every stored picture passes the global threshold (-1): the worst case for the read volume.
    return make_engine(durable=True, l2_image_threshold=-1.0, l2_prompt_threshold=0.9, persist_directory=persist_directory,
                       tiers=TierOptions(exact=False, l1=False, l2_prescreen=l2_prescreen, **kw))


def _count_rows_read(eng):
    seen: list[tuple[str, int]] = []
    orig = eng.store.call

    def counting(what, fn):
        out = orig(what, fn)
        if isinstance(out, dict) and what.startswith(("get", "query")):
            ids = out.get("ids") or []
            n = sum(len(x) for x in ids) if ids and isinstance(ids[0], list) else len(ids)
            if any(out.get(k) is not None for k in ("metadatas", "documents", "embeddings")):
                seen.append((what, n))
        return out

    eng.store.call = counting
    return seen


def test_the_query_size_leaves_room_for_every_local_comparison() -> None:
    assert L2_QUERY_K >= ImageChangeVerifier().comparisons_per_lookup


@pytest.mark.parametrize("verifier,fingerprints", [("default", None), (None, None), ("default", 0.5)])
def test_a_lookup_reads_at_most_the_best_few_rows_however_many_frames_pass(make_engine, tmp_path, verifier,
                                                                         fingerprints) -> None:
    # A directory another engine opened too: neither holds the store's vectors (store/resident.py), both read it.
    eng = _engine(make_engine, image_verifier=verifier, l2_prescreen=fingerprints, persist_directory=str(tmp_path))
    make_engine(persist_directory=str(tmp_path))
    for i in range(3 * L2_QUERY_K):
        eng.update(CacheRequest(text="How many people are in the street?", images=[_frame(i)]), f"{i} people")
    reads = _count_rows_read(eng)
    eng.lookup(CacheRequest(text="How many people are in the street?", images=[_frame(999)]))
    assert reads, "the lookup read nothing"
    assert all(n <= L2_QUERY_K for _what, n in reads), reads
    # image query, prompt vectors, entry (and at most one more); the fingerprint stage's query
    # and prompt vectors come first, and the encoder's only if the fingerprints cannot settle it
    assert len(reads) <= (4 if fingerprints is None else 6), reads


def test_the_only_writer_reads_its_fingerprint_and_prompt_vectors_from_memory(make_engine) -> None:
    eng = _engine(make_engine, l2_prescreen=0.5)
    for i in range(3 * L2_QUERY_K):
        eng.update(CacheRequest(text="How many people are in the street?", images=[_frame(i)]), f"{i} people")
    reads = _count_rows_read(eng)
    eng.lookup(CacheRequest(text="How many people are in the street?", images=[_frame(999)]))
    small = [what for what, _n in reads if what.split()[-1] in ("l2_fprint", "l2_prompt")]
    assert not small, reads
    assert all(n <= L2_QUERY_K for _what, n in reads), reads


QUESTIONS = [f"Is there a {thing} in the picture?" for thing in
             ("cat", "dog", "car", "tree", "house", "boat", "bird", "horse", "train", "chair", "lamp", "clock")]


def _ask_many_questions_about(eng, pic: Image.Image) -> None:
    """More entries about one picture than one L2 query reads, the answer the question's noun."""
    assert len(QUESTIONS) > L2_QUERY_K
    for q in QUESTIONS:
        eng.update(CacheRequest(text=q, images=[pic]), q.split()[3])


def test_one_picture_asked_many_questions_still_finds_the_same_question(make_engine) -> None:
    eng = _engine(make_engine, image_verifier=None)
    _ask_many_questions_about(eng, _frame(1))
    hit = eng.lookup(CacheRequest(text="Is there a cat in the picture?", images=[_frame(2)]))
    assert hit is not None and hit.tier == "L2" and hit.payload == "cat"


def test_a_copy_of_a_picture_asked_many_questions_is_decided_without_the_image_encoder(make_engine) -> None:
    # More entries of one picture than a fingerprint query reads: the prompt side names the
    # entries about this question, their fingerprints are checked, the local comparison decides.
    eng = _engine(make_engine, l2_prescreen=0.5)
    pic = _street(1)
    _ask_many_questions_about(eng, pic)
    eng.flush()
    tower = eng.encoders.image_tower
    embedded: list[int] = []
    orig = tower.embed_images
    tower.embed_images = lambda pils, digests=None: embedded.append(len(pils)) or orig(pils, digests)
    copy = _jpeg(pic)
    before = eng.stats()["l2_fingerprint_decided"]
    hit = eng.lookup(CacheRequest(text="Is there a horse in the picture?", images=[copy]))
    assert hit is not None and hit.tier == "L2" and hit.payload == "horse"
    assert "fingerprint" in hit.scores and embedded == []  # no image encoder run on the lookup
    assert eng.stats()["l2_fingerprint_decided"] == before + 1
    # a question nobody asked about it: a miss, settled without the encoder as well
    assert eng.lookup(CacheRequest(text="What is the weather like in Lisbon today?", images=[copy])) is None
    assert embedded == []




def test_candidates_are_compared_nearest_first_and_the_first_accepted_ends_the_lookup(make_engine) -> None:
    eng = _engine(make_engine, l2_prescreen=0.5)
    for i in (1, 3, 6):  # three frames, each with another object in the middle
        eng.update(CacheRequest(text="How many people are in the street?", images=[_street(i)]), f"{i} people")
    eng.flush()
    lk = eng.lookup_explained(CacheRequest(text="How many people are in the street?", images=[_jpeg(_street(3))]))
    assert lk.hit is not None and lk.hit.payload == "3 people" and "fingerprint" in lk.hit.scores
    # the copy of frame 3 is the nearest fingerprint: compared first, accepted, nothing else compared
    st = eng.stats()
    assert st["l2_image_compared"] == 1 and st["l2_image_refused"] == 0


def test_past_the_budget_candidates_are_refused_unread(make_engine) -> None:
    from mlc_integrations.verify.image_change import ImageChangeVerifier

    eng = _engine(make_engine, l2_prescreen=0.5, image_verifier=ImageChangeVerifier(comparisons_per_lookup=1))
    for i in (1, 3, 6):
        eng.update(CacheRequest(text="How many people are in the street?", images=[_street(i)]), f"{i} people")
    eng.flush()
    reads: list[int] = []
    orig = eng.entries.image_descriptors
    eng.entries.image_descriptors = lambda rows: reads.append(len(rows)) or orig(rows)
    lk = eng.lookup_explained(CacheRequest(text="How many people are in the street?", images=[_street(5)]))
    assert lk.hit is None and lk.refused is not None
    assert "changed" in lk.refused.detail, lk.refused.detail  # the compared one: the object in the middle
    st = eng.stats()
    assert st["l2_image_compared"] == 1 and st["l2_image_refused"] == 3  # two refused as "not compared" ...
    assert reads == [1]  # ... without reading their stored evidence
