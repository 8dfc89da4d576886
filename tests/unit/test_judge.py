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


@pytest.fixture(scope="session")
def cosine(text_embedder: Any) -> Any:
    def cos(a: str, b: str) -> float:
        va, vb = text_embedder.embed([a, b])
        return float(np.dot(va, vb))

    return cos


def p_same(judge: PairJudge, cosine: Any, stored: str, new: str) -> float:
    """The shipped (lora) judge also reads the L1 cosine; a full judge ignores it."""
    return judge.probability(stored=stored, new=new, cosine=cosine(stored, new))


# ----------------------------------------------------------------------------- what ships
def test_the_shipped_judge_carries_its_calibration_table_and_operating_point() -> None:
    """The knob max_wrong_reuse maps through this table (built on the validation split)."""
    j = read_judge(DEFAULT_JUDGE_PATH)
    meta = j["meta"]
    assert meta["kind"] in ("lora", "full") and meta["base_model"] == "all-MiniLM-L6-v2"
    assert meta["calibration"] and 0.0 < meta["threshold"] < 1.0
    assert "validation split" in meta["calibration_set"]
    assert DEFAULT_JUDGE_PATH.stat().st_size < 1_500_000  # adapters, head, table: the base weights are installed


def test_the_shipped_judge_loads_offline_and_lazily(judge: PairJudge) -> None:
    fresh = PairJudge()
    assert fresh.backend == ""  # nothing exported or run until the first pair
    assert judge.backend in ("onnx-int8", "onnx-fp32", "torch")


# ----------------------------------------------------------------------------- specifications
# Pairs from the natural validation split (whole domains held out per writer: never trained
# on, and not the blind sets): what the judge must reuse and what it must refuse, at the
# threshold of max_wrong_reuse=0.01 (0.915 for the shipped judge when measured).
REWORDINGS = [
    ("How do I reverse a list in Python?", "What's the way to reverse a list in Python?"),
    ("In JavaScript, how do I check if an array is empty?", "How to check for an empty array in JS?"),
    ("What's the difference between git fetch and git pull?", "What is the difference between git fetch and git pull?"),
    ("Hi! I'm new to coding. What's the difference between a list and a tuple in Python?", "What's the difference between a list and a tuple in Python?"),
    ("Where is the triangle?", "Where's the triangle in this picture?"),
    ("Which shape is closest to the centre?", "Which shape is closest to the center?"),
    ("I forgot my Gmail password. How do I reset it?", "How do I reset a forgotten Gmail password?"),
    ("How do I reverse a list in Python?", "python reverse list"),
]
DIFFERENT = [
    ("How do I reverse a string in Python?", "How do I reverse a string in JavaScript?"),
    ("In JavaScript, how do I check if an array is empty?", "How do I check if an array is empty?"),
    ("How do I undo the last git commit?", "How do I undo the last git commit but keep the changes?"),
    ("How do I undo the last git commit that I already pushed?", "How do I undo the last git commit that I haven't pushed yet?"),
    ("How do I convert a string to an integer in Python?", "How do I convert an integer to a string in Python?"),
    ("How do I select the first 10 rows in PostgreSQL?", "How do I select the first 100 rows in PostgreSQL?"),
    ("How do I center a div horizontally in CSS?", "How do I center a div vertically in CSS?"),
    ("Is the red square to the left of the blue circle?", "Is the blue circle to the left of the red square?"),
    ("Which bar is the tallest?", "Which bar is the shortest?"),
    ("How do I turn on two-factor authentication on Gmail?", "How do I turn off two-factor authentication on Gmail?"),
    ("How do I get the current date in JavaScript?", "How do I get yesterday's date in JavaScript?"),
    ("How do I remove an item from a list in Python?", "How do I remove all items from a list in Python?"),
]
KNOWN_MISSES = [
    ("How do I reverse a string in Python?", "How do I revrese a string in Pyhton?", True),  # P 0.886 when measured
    ("What does git reset --hard do?", "Explain what git reset --hard does.", True),  # P 0.813 when measured
    ("How do I read a CSV file in Python?", "How can I load a CSV file in Python?", True),  # P 0.891 when measured
    ("Is the red square to the left of the blue circle?", "Is the blue circle to the right of the red square?", True),  # P 0.082 when measured
    ("Which bar is the tallest?", "Which bar is the highest?", True),  # P 0.55 when measured
    ("What language do they speak in Brazil?", "What language is spoken in Brazil?", True),  # P 0.752 when measured
]


@pytest.mark.parametrize("stored,new", REWORDINGS)
def test_rewordings_are_the_same_question(judge: PairJudge, cosine: Any, stored: str, new: str) -> None:
    assert p_same(judge, cosine, stored, new) >= judge.threshold, (stored, new)


@pytest.mark.parametrize("stored,new", DIFFERENT)
def test_answer_changing_near_misses_are_refused(judge: PairJudge, cosine: Any, stored: str, new: str) -> None:
    assert p_same(judge, cosine, stored, new) < judge.threshold, (stored, new)


def test_a_swapped_object_under_a_rewording_is_refused(judge: PairJudge, cosine: Any) -> None:
    """Relations in scenes: the reworded relation hides a different object."""
    stored = "is the triangle higher up than the yellow circle?"
    assert p_same(judge, cosine, stored, "is the triangle above the orange circle?") < judge.threshold
    assert "yellow → orange" in difference(stored=stored, new="is the triangle above the orange circle?")


@pytest.mark.xfail(reason="validation pairs the shipped judge still gets wrong (docs/verification.md, Limits)",
                   strict=True)
@pytest.mark.parametrize("stored,new,same", KNOWN_MISSES)
def test_validation_pairs_the_judge_still_gets_wrong(judge: PairJudge, cosine: Any, stored: str, new: str,
                                                    same: bool) -> None:
    assert (p_same(judge, cosine, stored, new) >= judge.threshold) == same, (stored, new)


def test_a_pair_is_scored_the_same_alone_and_in_a_batch(judge: PairJudge, cosine: Any) -> None:
    """Batches pad; the int8 file scales activations per call, so the engine judges each
    pair alone: batched scores stay within a few hundredths of the served ones."""
    pairs = REWORDINGS[:3] + DIFFERENT[:3]
    cos = [cosine(a, b) for a, b in pairs]
    alone = judge.probabilities(pairs, cos)
    batched = judge.probabilities(pairs, cos, batch=len(pairs))
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
