"""The L1 judge (issue 25): a cross-encoder that reads both questions, and refusals that
name what the user changed. The judge is loaded once per session."""

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


@pytest.fixture(scope="session")
def cosine(text_embedder: Any) -> Any:
    def cos(a: str, b: str) -> float:
        va, vb = text_embedder.embed([a, b])
        return float(np.dot(va, vb))

    return cos


def p_same(judge: PairJudge, cosine: Any, stored: str, new: str) -> float:
    return judge.probability(stored=stored, new=new, cosine=cosine(stored, new))


# ----------------------------------------------------------------------------- what ships
def test_the_shipped_judge_is_adapters_and_a_head_not_a_model() -> None:
    """Only the LoRA adapters (float16) and the head ship; the base weights are the L1 model's."""
    assert DEFAULT_JUDGE_PATH.stat().st_size < 1_500_000
    j = read_judge(DEFAULT_JUDGE_PATH)
    assert j["meta"]["lora_rank"] <= 16 and 0.0 < j["meta"]["threshold"] < 1.0
    assert not any(k.endswith(".weight") for k in j)


# ----------------------------------------------------------------------------- rewordings are reused
REWORDINGS = [
    ("How do I update pip?", "How can I update pip?"),
    ("How do I delete my Instagram account?", "How can I delete my Instagram account?"),
    ("What is the capital of Kenya?", "What's the capital city of Kenya?"),
    ("Why do leaves change color in autumn?", "What makes leaves change color in autumn?"),
    ("Is it safe to drink tap water in Lisbon?", "Is drinking tap water in Lisbon safe?"),
    ("What is the capital of France?", "Which city is the capital of France?"),
    ("What is the color of the shape?", "What colour is the shape?"),
    ("what shape is in the image?", "what is the shape in the picture?"),
]
# Rewordings the shipped judge still refuses (issue 25's examples; P under its threshold
# 0.90 when measured: 0.55, 0.78, 0.07, 0.84): kept as specifications of what is missing.
KNOWN_MISSES = [
    ("What is the person in this picture holding?", "What is the person in this photo holding?"),
    ("Where is the Louvre?", "Where is the Louvre located?"),
    ("Write a limerick about cats.", "Compose a limerick about cats."),
    ("what is the color of the shape?", "what color is the shape?"),
    ("What color is the shape?", "What is the color of the shape?"),  # P 0.85; "What's the color ..." 0.92
]


def test_how_do_i_and_how_can_i_are_the_same_question(judge: PairJudge, cosine: Any) -> None:
    a, b = REWORDINGS[0]
    assert p_same(judge, cosine, a, b) >= judge.threshold


@pytest.mark.parametrize("stored,new", REWORDINGS[1:])
def test_everyday_rewordings_are_the_same_question(judge: PairJudge, cosine: Any, stored: str, new: str) -> None:
    assert p_same(judge, cosine, stored, new) >= judge.threshold, (stored, new)


@pytest.mark.xfail(reason="rewordings the shipped judge still refuses (docs/verification.md, Limits)", strict=False)
@pytest.mark.parametrize("stored,new", KNOWN_MISSES)
def test_rewordings_the_judge_still_refuses(judge: PairJudge, cosine: Any, stored: str, new: str) -> None:
    assert p_same(judge, cosine, stored, new) >= judge.threshold, (stored, new)


# ----------------------------------------------------------------------------- different questions are refused
DIFFERENT = [
    ("What is the capital of France?", "What is the capital of Italy?"),
    ("Can I take ibuprofen with coffee?", "Can't I take ibuprofen with coffee?"),
    ("How do I convert USD to EUR?", "How do I convert EUR to USD?"),
    ("Easy pasta recipe", "Easy pasta recipe without an oven for beginners"),
    ("What is 15% of 80?", "What is 25% of 80?"),
    ("Is there a cat in the picture?", "Is there no cat in the picture?"),
]


@pytest.mark.parametrize("stored,new", DIFFERENT)
def test_answer_changing_edits_are_refused(judge: PairJudge, cosine: Any, stored: str, new: str) -> None:
    assert p_same(judge, cosine, stored, new) < judge.threshold, (stored, new)


def test_a_swapped_object_under_a_rewording_is_refused(judge: PairJudge, cosine: Any) -> None:
    """Relations in scenes: the reworded relation hides a different object."""
    stored = "is the triangle higher up than the yellow circle?"
    assert p_same(judge, cosine, stored, "is the triangle above the orange circle?") < judge.threshold
    assert "yellow → orange" in difference(stored=stored, new="is the triangle above the orange circle?")


def test_a_pair_is_scored_the_same_alone_and_in_a_batch(judge: PairJudge, cosine: Any) -> None:
    pairs = REWORDINGS[:3] + DIFFERENT[:3]
    cos = [cosine(a, b) for a, b in pairs]
    alone = judge.probabilities(pairs, cos)
    batched = judge.probabilities(pairs, cos, batch=len(pairs))
    np.testing.assert_allclose(alone, batched, atol=2e-3)


# ----------------------------------------------------------------------------- refusals a user can read
@pytest.mark.parametrize("stored,new,named", [
    ("What is the capital of France?", "What is the capital of Italy?", "different: France → Italy"),
    ("Best pasta recipe", "Best pasta recipe for beginners", "added: for beginners"),
    ("Can I take ibuprofen?", "Can't I take ibuprofen?", "negation: Can → Can't"),
    ("How do I convert USD to EUR?", "How do I convert EUR to USD?", "swapped: USD ↔ EUR"),
    ("Easy vegan pasta recipe", "Easy pasta recipe", "dropped: vegan"),
])
def test_a_refusal_names_what_the_user_changed(stored: str, new: str, named: str) -> None:
    assert named in difference(stored=stored, new=new)


def test_a_different_city_is_refused_and_named(make_engine: Any) -> None:
    eng = make_engine(image_encoder=None, verifier="judge", l1_threshold=0.6)  # cosine 0.69: retrieved, then judged
    eng.update(CacheRequest(text="What is the population of Paris?"), "2.1 million")
    found = eng.lookup_explained(CacheRequest(text="What is the population of Rome?"))
    assert found.hit is None and found.refused is not None and found.refused.reason == "verifier"
    assert "Paris → Rome" in found.refused.explain(), found.refused.explain()
    assert "rewording" not in found.refused.explain()


def test_a_refusal_never_names_a_rewording_as_its_reason() -> None:
    for stored, new in DIFFERENT + REWORDINGS:
        reason = refusal_reason(stored=stored, new=new, probability=0.2, threshold=0.5)
        assert "rewording" not in reason and "synonym" not in reason and reason.strip()


def test_a_refusal_names_the_edit_the_model_read_where_a_word_diff_names_another() -> None:
    """A word diff sees two names exchanged; the edit analysis, whose features the model
    reads, sees a moved block (no directional word between them): the refusal names that."""
    from mlc_integrations.verify.text.edits import EDIT_FEATURE_NAMES, analyse

    stored, new = "Did England beat France in the last World Cup?", "Did France beat England in the last World Cup?"
    a, b = stored.split(), new.split()
    assert sorted(a) == sorted(b) and [i for i in range(len(a)) if a[i] != b[i]] == [1, 3]  # "swapped: England ↔ France"
    e = analyse(stored=stored, new=new)
    f = dict(zip(EDIT_FEATURE_NAMES, e.features))
    assert e.kind == "reordering" and f["edit_moved"] > 0 and f["edit_swap_directional"] == 0
    reason = refusal_reason(stored=stored, new=new, probability=0.2, threshold=0.5)
    assert reason.startswith(e.changes[0].text + " (")
    assert reason.startswith("reordered: England beat France → France beat England")


def test_the_refusal_lists_the_analysed_edits_most_answer_changing_first() -> None:
    from mlc_integrations.verify.text.edits import analyse

    stored, new = "Is the red cup on the left?", "Is the blue cup on the right?"
    e = analyse(stored=stored, new=new)
    named = [c for c in e.changes if c.text]
    assert [c.rank for c in named] == sorted(c.rank for c in named)
    assert difference(stored=stored, new=new) == "; ".join(c.text for c in named)
    assert difference(stored=stored, new=new).startswith({"antonym": "different: left → right",
                                                           "co-hyponym": "different: red → blue"}[e.kind])


def test_the_policy_refusal_detail_is_the_analysis_text() -> None:
    from mlc_integrations.verify import make_policy
    from mlc_integrations.verify.text.edits import analyse

    pol = make_policy()
    assert pol is not None and pol.judge is None
    stored, new = "How long is the drive from New York to Florida?", "How long is the drive from Florida to New York?"
    d = pol.decide(new, stored, 0.97)
    assert not d.accept and d.detail.startswith(analyse(stored=stored, new=new).what_changed())


def test_case_and_punctuation_alone_are_not_named_as_a_difference() -> None:
    assert difference(stored="how do i reset my router", new="How do I reset my router?") == ""


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
