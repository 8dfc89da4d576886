"""The L1 judge: a fully fine-tuned cross-encoder that reads both questions, and refusals
that name what the user changed. The judge is loaded once per session."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mlc_integrations import CacheRequest
from mlc_integrations.verify.explain import difference, refusal_reason
from mlc_integrations.verify.text.judge import DEFAULT_JUDGE_PATH, PairJudge, read_judge


@pytest.fixture(scope="session")
def judge(text_embedder: Any) -> PairJudge:
    j = PairJudge()
    j.warmup()
    return j


# ----------------------------------------------------------------------------- what ships
def test_the_shipped_judge_is_its_fine_tuned_layers_as_differences_to_the_installed_model() -> None:
    """Every transformer layer was trained; only their differences to the installed
    all-MiniLM-L6-v2 ship (integers with one scale per row), never the embeddings."""
    j = read_judge(DEFAULT_JUDGE_PATH)
    meta = j["meta"]
    assert meta["kind"] == "full" and meta["base_model"] == "all-MiniLM-L6-v2"
    layers = {int(n.split(".")[2]) for n in meta["tuned"]}
    assert layers == set(range(6))
    assert not any("embeddings" in k for k in j)
    weights = [k for k in j if k.startswith("q:")]
    assert weights and all(j[k].dtype == np.int8 for k in weights)
    assert 0.0 < meta["threshold"] < 1.0 and meta["calibration"]


def test_the_shipped_judge_loads_offline_and_lazily(judge: PairJudge) -> None:
    fresh = PairJudge()
    assert fresh.backend == ""  # nothing exported or run until the first pair
    assert judge.backend in ("onnx-int8", "onnx-fp32", "torch")


# ----------------------------------------------------------------------------- specifications
# Pairs from the natural validation split (whole domains held out per writer: never trained
# on, and not the blind sets): what the judge must reuse and what it must refuse.
REWORDINGS = [
SPEC_REWORDINGS
]
DIFFERENT = [
SPEC_DIFFERENT
]
KNOWN_MISSES = [
SPEC_MISSES
]


@pytest.mark.parametrize("stored,new", REWORDINGS)
def test_rewordings_are_the_same_question(judge: PairJudge, stored: str, new: str) -> None:
    assert judge.probability(stored, new) >= judge.threshold, (stored, new)


@pytest.mark.parametrize("stored,new", DIFFERENT)
def test_answer_changing_near_misses_are_refused(judge: PairJudge, stored: str, new: str) -> None:
    assert judge.probability(stored, new) < judge.threshold, (stored, new)


@pytest.mark.xfail(reason="validation pairs the shipped judge still gets wrong (docs/verification.md, Limits)",
                   strict=True)
@pytest.mark.parametrize("stored,new,same", KNOWN_MISSES)
def test_validation_pairs_the_judge_still_gets_wrong(judge: PairJudge, stored: str, new: str, same: bool) -> None:
    assert (judge.probability(stored, new) >= judge.threshold) == same, (stored, new)


def test_a_pair_is_scored_the_same_alone_and_in_a_batch(judge: PairJudge) -> None:
    """Batches pad; the int8 file scales activations per call, so the engine judges each
    pair alone: batched scores stay within a few hundredths of the served ones."""
    pairs = REWORDINGS[:3] + DIFFERENT[:3]
    alone = judge.probabilities(pairs)
    batched = judge.probabilities(pairs, batch=len(pairs))
    np.testing.assert_allclose(alone, batched, atol=0.05)


# ----------------------------------------------------------------------------- refusals a user can read
@pytest.mark.parametrize("stored,new,named", [
    ("What is the capital of France?", "What is the capital of Italy?", "different: France → Italy"),
    ("Best pasta recipe", "Best pasta recipe for beginners", "added: for beginners"),
    ("Can I take ibuprofen?", "Can't I take ibuprofen?", "negation: Can → Can't"),
    ("How do I convert USD to EUR?", "How do I convert EUR to USD?", "swapped: USD ↔ EUR"),
    ("Easy vegan pasta recipe", "Easy pasta recipe", "dropped: vegan"),
])
def test_a_refusal_names_what_the_user_changed(stored: str, new: str, named: str) -> None:
    assert named in difference(stored, new)


def test_a_different_city_is_refused_and_named(make_engine: Any) -> None:
    eng = make_engine(image_encoder=None, verifier="judge", l1_threshold=0.6)  # cosine 0.69: retrieved, then judged
    eng.update(CacheRequest(text="What is the population of Paris?"), "2.1 million")
    found = eng.lookup_explained(CacheRequest(text="What is the population of Rome?"))
    assert found.hit is None and found.refused is not None and found.refused.reason == "verifier"
    assert "Paris → Rome" in found.refused.explain(), found.refused.explain()
    assert "rewording" not in found.refused.explain()


def test_a_refusal_never_names_a_rewording_as_its_reason() -> None:
    for stored, new in DIFFERENT + REWORDINGS:
        reason = refusal_reason(stored, new, 0.2, 0.5)
        assert "rewording" not in reason and "synonym" not in reason and reason.strip()


def test_case_and_punctuation_alone_are_not_named_as_a_difference() -> None:
    assert difference("how do i reset my router", "How do I reset my router?") == ""


# ----------------------------------------------------------------------------- through the engine
def test_the_engine_reuses_how_can_i_for_how_do_i(make_engine: Any) -> None:
    eng = make_engine(image_encoder=None, verifier="judge")
    eng.update(CacheRequest(text="How do I update pip?"), "python -m pip install -U pip")
    hit = eng.lookup(CacheRequest(text="How can I update pip?"))
    assert hit is not None and hit.payload == "python -m pip install -U pip"
    assert hit.scores["verifier"] >= hit.thresholds["verifier"]


def test_case_and_spacing_alone_are_the_same_request_but_not_inside_quotes() -> None:
    from mlc_integrations.verify.text.judge import surface_same

    assert surface_same("Capital of France?", "capital of  FRANCE?")
    assert not surface_same("Is the word 'Apple' capitalized?", "Is the word 'apple' capitalized?")
    assert not surface_same("What does =ROUND(A1, -1) return?", "What does =ROUND(A1, 1) return?")
    assert not surface_same("Count the spaces in 'a b'", "Count the spaces in 'a    b'")
