"""easy-vqa evidence: which question pairs the verifier refuses (negations, changed
colour or shape words, changed numbers) and what an easy-vqa stream through
:class:`~mlc_integrations.engine.MLCEngine` scores against ground truth."""

from __future__ import annotations

import argparse
import random
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from mlc_integrations.verify import DEFAULT_MIN_PRECISION, Verifier
from ...sources.easyvqa import COLORS, SHAPES, load_split, questions_for
from .data import SEED, EmbeddingCache, load_qqp

_NEG_RE = re.compile(r"\b(not|no)\b")


def vqa_question_kind(q: str) -> tuple[str, str, bool]:
    """(asks, attribute word, negated) of an easy-vqa template question."""
    low = q.lower()
    neg = bool(_NEG_RE.search(low))
    attr = next((w for w in COLORS + SHAPES if re.search(rf"\b{w}\b", low)), "")
    if low.startswith("what"):
        asks = "what-color" if "color" in low else "what-shape"
    else:
        asks = "has-color" if attr in COLORS else "has-shape"
    return asks, attr, neg


def vqa_pair_category(stored: str, new: str) -> str:
    ka, kb = vqa_question_kind(stored), vqa_question_kind(new)
    if ka == kb:
        return "paraphrase"
    if ka[0] == kb[0] and ka[1] == kb[1]:
        return "negation"
    if ka[0] == kb[0] and ka[2] == kb[2]:
        return "changed colour/shape word"
    if ka[0] == kb[0]:
        return "changed word and negation"
    return "different question"


def _engine_verdicts(verifier: Verifier, pairs: Sequence[tuple[str, str]], cos: np.ndarray,
                     retrieval: float, precision: float, emb: Optional[EmbeddingCache] = None) -> np.ndarray:
    """True where the engine at these settings would reuse (retrieved and accepted):
    with the "vectors" model when the verifier has one (the engine hands it both
    embeddings of an L1 candidate), else "full"."""
    if "vectors" in verifier.models and emb is not None:
        uv = (emb.vectors([a for a, _ in pairs]), emb.vectors([b for _, b in pairs]))
        p = verifier.probabilities(list(pairs), cos, "vectors", uv)
    else:
        p = verifier.probabilities(list(pairs), cos)
    return (cos >= retrieval) & (p >= verifier.models["full"].threshold_for_precision(precision))


def number_variants(texts: Iterable[str], limit: int) -> list[tuple[str, str]]:
    """(question, the same question with one number changed) for questions with numbers."""
    out = []
    for t in texts:
        m = re.search(r"\b\d+\b", t)
        if not m:
            continue
        n = int(m.group(0))
        changed = t[:m.start()] + str(n + 1 if n < 10 else n * 2) + t[m.end():]
        out.append((t, changed))
        if len(out) >= limit:
            break
    return out


def cmd_vqa(args: argparse.Namespace) -> None:
    import easy_vqa

    from mlc_integrations.engine import DEFAULT_L1_THRESHOLD

    verifier = Verifier.load(args.verifier) if args.verifier else Verifier.default()
    emb = EmbeddingCache(args.text_model, Path(args.cache_dir))
    qs, _ans, ids = easy_vqa.get_test_questions()
    by_img: dict[int, list[str]] = defaultdict(list)
    for q, i in zip(qs, ids):
        by_img[int(i)].append(q)
    seen: set[tuple[str, str]] = set()
    pairs: list[tuple[str, str]] = []
    for questions in by_img.values():  # ordered pairs (stored, new) asked about one test image
        for a in questions:
            for b in questions:
                if a != b and (a, b) not in seen:
                    seen.add((a, b))
                    pairs.append((a, b))
    cos = emb.cosines([a for a, _ in pairs], [b for _, b in pairs])
    cats = np.asarray([vqa_pair_category(a, b) for a, b in pairs])
    settings = [("raw cosine, old default (τ=0.95, no verifier)", None, 0.95)]
    settings.append((f"verifier, engine defaults (retrieval τ={DEFAULT_L1_THRESHOLD}, "
                     f"precision {DEFAULT_MIN_PRECISION})", DEFAULT_MIN_PRECISION, DEFAULT_L1_THRESHOLD))
    print("## easy-vqa test split: distinct question pairs asked about the same image\n")
    print("| pair kind | pairs | " + " | ".join(f"reused: {n}" for n, _, _ in settings) + " |")
    print("|---|---|" + "---|" * len(settings))
    verdicts = {}
    for name, prec, ret in settings:
        verdicts[name] = (cos >= ret) if prec is None else _engine_verdicts(verifier, pairs, cos, ret, prec, emb)
    for cat in ("paraphrase", "negation", "changed colour/shape word", "changed word and negation", "different question"):
        m = cats == cat
        cells = [f"{int(verdicts[n][m].sum())} ({verdicts[n][m].mean():.1%})" for n, _, _ in settings]
        print(f"| {cat} | {int(m.sum())} | " + " | ".join(cells) + " |")
    nums = number_variants(load_qqp(Path(args.data_dir)).a, args.number_pairs)
    ncos = emb.cosines([a for a, _ in nums], [b for _, b in nums])
    print(f"\n## Changed numbers: {len(nums)} qqp_val questions with one number changed\n")
    print("| setting | reused |")
    print("|---|---|")
    for name, prec, ret in settings:
        v = (ncos >= ret) if prec is None else _engine_verdicts(verifier, nums, ncos, ret, prec, emb)
        print(f"| {name} | {int(v.sum())} of {len(nums)} (cosine median {np.median(ncos):.3f}) |")
    print("\n## VQA stream through MLCEngine (L1 on the image pixels), oracle backend\n")
    print("| setting | lookups | hit rate | hits wrong | answer accuracy |")
    print("|---|---|---|---|---|")
    for name, kw in (("raw cosine, old default (τ=0.95, no verifier)", {"verifier": "off", "l1_threshold": 0.95}),
                     ("verifier at engine defaults", {"verifier": args.verifier} if args.verifier else {})):
        r = score_engine_on_vqa_stream(kw, args.images, args.questions_per_image)
        print(f"| {name} | {r['lookups']} | {r['hit_rate']:.3f} | {r['wrong_hits']} of {r['hits']} | {r['accuracy']:.3f} |")


def score_engine_on_vqa_stream(engine_kw: dict[str, Any], n_images: int, per_image: int) -> dict[str, Any]:
    """Each easy-vqa test image asked ``per_image`` of its template questions (paraphrases,
    negations, other colours and shapes) in random order; a miss calls an oracle that
    answers with the ground truth and stores it. A hit is right if its answer equals
    the new question's ground truth."""
    from mlc_integrations.engine import MLCEngine
    from mlc_integrations.request import CacheRequest

    rng = random.Random(SEED)
    images = list(load_split("test"))
    rng.shuffle(images)
    eng = MLCEngine(**engine_kw, image_encoder=None)
    hits = wrong = correct = lookups = 0
    try:
        for img in images[:n_images]:
            pool = sorted({q for qs in questions_for(img.color, img.shape).values() for q in qs})
            for q in rng.sample(pool, min(per_image, len(pool))):
                req = CacheRequest(text=q, images=[img.path], scope="vqa")
                truth = img.answer(q)
                lookups += 1
                hit = eng.lookup(req)
                if hit is None:
                    eng.update(req, truth)
                    correct += 1
                    continue
                hits += 1
                if hit.payload == truth:
                    correct += 1
                else:
                    wrong += 1
    finally:
        eng.close()
    return {"lookups": lookups, "hits": hits, "wrong_hits": wrong, "hit_rate": hits / max(lookups, 1),
            "accuracy": correct / max(lookups, 1)}
