"""Edit-aware alignment: each kind of edit between two requests, and its features."""

from __future__ import annotations

import numpy as np
import pytest

from mlc_integrations.verify.text.edits import EDIT_FEATURE_NAMES, EditAnalysis, analyse, edit_features, tokenize


def kind(stored: str, new: str) -> str:
    return analyse(stored=stored, new=new).kind


def feat(stored: str, new: str) -> dict[str, float]:
    return analyse(stored=stored, new=new).as_dict()


# ----------------------------------------------------------------------------- surface
def test_identical() -> None:
    e = analyse(stored="Where is Rome?", new="Where is Rome?")
    assert e.kind == "identical" and e.as_dict()["edit_identical"] == 1


@pytest.mark.parametrize("a,b,expected", [
    ("How do I boil an egg?", "How  do I boil an egg? ", "whitespace-only"),
    ("how do i boil an egg?", "How do I boil an egg?", "case-only"),
    ("How do I boil an egg", "How do I boil an egg?!", "punctuation-only"),
    ("How do I boil an egg?", "How do I boil an \uff45gg?", "unicode-only"),  # full-width e
    ("What's the time?", "What is the time?", "contraction or spelling"),
])
def test_surface_only_edits(a: str, b: str, expected: str) -> None:
    e = analyse(stored=a, new=b)
    assert e.kind == expected
    assert e.as_dict()["edit_surface_only"] == 1
    assert e.as_dict()["edit_protected_changed"] == 0


# ----------------------------------------------------------------------------- quotes, code, structure
@pytest.mark.parametrize("a,b", [
    ("Does the word 'Berlin' start with a capital?", "Does the word 'berlin' start with a capital?"),
    ("What does `x.Lower()` do?", "What does `x.lower()` do?"),
    ('How many spaces are in "a b"?', 'How many spaces are in "a   b"?'),
    ("Does ^\\d+$ match it?", "Does ^\\D+$ match it?"),  # an unquoted regex is code too
])
def test_case_or_space_inside_quotes_or_code_is_a_change(a: str, b: str) -> None:
    e = analyse(stored=a, new=b)
    assert e.kind == "quoted/code change"
    f = e.as_dict()
    assert f["edit_protected_changed"] == 1 and f["edit_protected_case_space"] == 1
    assert f["edit_surface_only"] == 0


def test_other_change_inside_quotes() -> None:
    f = feat("Translate 'good morning' to Italian.", "Translate 'good night' to Italian.")
    assert f["edit_protected_changed"] == 1 and f["edit_protected_case_space"] == 0


def test_indentation_of_structured_text() -> None:
    a = "Is this valid?\nitems:\n  - a\n  - b"
    e = analyse(stored=a, new="Is this valid?\nitems:\n  - a\n    - b")
    assert e.kind == "structure change"
    assert e.as_dict()["edit_structure_changed"] == 1


# ----------------------------------------------------------------------------- order
def test_directional_argument_swap() -> None:
    e = analyse(stored="How far is it from Lyon to Nice by train?", new="How far is it from Nice to Lyon by train?")
    assert e.kind == "argument swap"
    assert e.as_dict()["edit_swap_directional"] >= 1
    assert kind("Is a horse heavier than a cow?", "Is a cow heavier than a horse?") == "argument swap"
    assert kind("How do I turn a dict into a list?", "How do I turn a list into a dict?") == "argument swap"


def test_swapped_numbers_are_arguments() -> None:
    """Operands swapped around a directional word change the answer; around a
    coordinator, or moved with no shared word between them, they do not."""
    e = analyse(stored="What is 18 divided by 6?", new="What is 6 divided by 18?")
    assert e.kind == "argument swap" and e.as_dict()["edit_swap_directional"] >= 1
    assert e.as_dict()["edit_number_changed"] == 0  # the same numbers, in another order
    assert kind("Take 3 away from 11.", "Take 11 away from 3.") == "argument swap"
    assert kind("Is 40 more than 25?", "Is 25 more than 40?") == "argument swap"
    assert kind("Add 8 and 5.", "Add 5 and 8.") == "symmetric swap"
    assert analyse(stored="In 1999, how many of 4 teams won?", new="How many of 4 teams won in 1999?").as_dict()[
        "edit_swap_directional"] == 0


def test_symmetric_swap_and_moved_block() -> None:
    e = analyse(stored="What do lions and tigers eat?", new="What do tigers and lions eat?")
    assert e.kind == "symmetric swap" and e.as_dict()["edit_swap_directional"] == 0
    e = analyse(stored="In Excel, how do I freeze a row?", new="How do I freeze a row in Excel?")
    assert e.kind == "reordering" and e.as_dict()["edit_moved"] >= 1
    assert e.as_dict()["edit_swap_directional"] == 0


# ----------------------------------------------------------------------------- substitutions
@pytest.mark.parametrize("a,b,expected,feature", [
    ("Is the water hot?", "Is the water cold?", "antonym", "edit_sub_antonym"),
    ("How do I lock the door?", "How do I unlock the door?", "antonym", "edit_sub_antonym"),
    ("Is there a horse in the field?", "Is there a donkey in the field?", "co-hyponym", "edit_sub_cohyponym"),
    ("Is the shop open on Monday?", "Is the shop open on Friday?", "co-hyponym", "edit_sub_cohyponym"),
    ("Where is the best pizza in Rome?", "Where is the best pizza in Madrid?", "different entity", "edit_sub_entity"),
    ("How fast is a car?", "How fast is an automobile?", "synonym", "edit_sub_synonym"),
    ("Is my dog hungry?", "Is my animal hungry?", "hypernym", "edit_sub_hypernym"),
    ("Is the blorf working?", "Is the zarquon working?", "unknown word change", "edit_sub_unknown"),
    ("What colour is the sky?", "What color is the sky?", "spelling variant", "edit_sub_synonym"),
])
def test_word_substitutions(a: str, b: str, expected: str, feature: str) -> None:
    e = analyse(stored=a, new=b)
    assert e.kind == expected, e.explain()
    assert e.as_dict()[feature] >= 1


def test_substitution_detail_names_the_words() -> None:
    assert analyse(stored="Is the light on?", new="Is the light off?").detail == "on -> off"


def test_multiword_entity_is_one_unit() -> None:
    e = analyse(stored="Flights to New York?", new="Flights to Boston?")
    assert e.kind == "different entity" and "new york" in e.detail


# ----------------------------------------------------------------------------- insertions (constraints)
@pytest.mark.parametrize("a,b,feature", [
    ("What was the score?", "What was the score last night?", "edit_constraint_time"),
    ("Explain gravity.", "Explain gravity to a toddler.", "edit_constraint_person"),
    ("Summarize the plot.", "Summarize the plot in one paragraph.", "edit_constraint_format"),
    ("Where can I park?", "Where can I park in the city?", "edit_constraint_place"),
    ("Describe the house.", "Describe the old house.", "edit_constraint_modifier"),
    ("How do I install it?", "How do I install it on Fedora?", "edit_constraint_entity"),
])
def test_inserted_constraint_is_classified_by_its_content(a: str, b: str, feature: str) -> None:
    f = feat(a, b)
    assert f[feature] >= 1 and f["edit_ins_content"] >= 1
    assert analyse(stored=b, new=a).as_dict()[feature] >= 1  # a deleted constraint counts too


# ----------------------------------------------------------------------------- closed classes
@pytest.mark.parametrize("a,b,expected,feature", [
    ("Can birds swim?", "Can't birds swim?", "negation", "edit_negation"),
    ("Is there a key in the drawer?", "Is there no key in the drawer?", "negation", "edit_negation"),
    ("What is 12 times 4?", "What is 12 times 5?", "number change", "edit_number_changed"),
    ("Book a table for two.", "Book a table for three.", "number change", "edit_number_changed"),
    ("Are all swans white?", "Are some swans white?", "quantifier change", "edit_quantifier"),
    ("Can I water the plant daily?", "Should I water the plant daily?", "modality change", "edit_modal"),
    ("Why did the bridge collapse?", "When did the bridge collapse?", "question-word change", "edit_wh"),
    ("Is the key on the table?", "Is the key under the table?", "preposition change", "edit_preposition"),
    ("What is his name?", "What is her name?", "pronoun change", "edit_pronoun"),
    ("Who was the coach?", "Who is the coach?", "tense change", "edit_tense"),
    ("Is the tower tall?", "Is the tower taller?", "degree change", "edit_degree"),
    ("Which car is more reliable?", "Which car is less reliable?", "degree change", "edit_degree"),
])
def test_closed_class_edits(a: str, b: str, expected: str, feature: str) -> None:
    e = analyse(stored=a, new=b)
    assert e.kind == expected, e.explain()
    assert e.as_dict()[feature] >= 1


def test_ambiguous_number_word_is_not_a_number_alone() -> None:
    assert feat("Which one is cheaper?", "Which is cheaper?")["edit_number_changed"] == 0
    assert feat("1,000 euros", "1000 euros")["edit_number_changed"] == 0


def test_request_frame_is_not_modality() -> None:
    e = analyse(stored="What is the capital of Chile?", new="Could you tell me the capital of Chile?")
    assert e.kind == "request form"
    f = e.as_dict()
    assert f["edit_request_form"] > 0 and f["edit_modal"] == 0 and f["edit_wh"] == 0 and f["edit_ins_content"] == 0
    assert kind("Explain tides.", "Please explain tides.") == "request form"


@pytest.mark.parametrize("a,b", [
    ("When was the bridge built?", "In what year was the bridge built?"),
    ("Who designed the logo?", "Which designer created the logo?"),
    ("How tall is the tower?", "What is the height of the tower?"),
])
def test_question_word_asked_another_way_is_not_a_change(a: str, b: str) -> None:
    f = feat(a, b)
    assert f["edit_wh"] == 0 and f["edit_constraint_time"] == 0 and f["edit_constraint_person"] == 0


def test_greeting_and_thanks_are_request_frame() -> None:
    e = analyse(stored="How do I reset my router?", new="Hello, how do I reset my router? Thank you in advance.")
    assert e.kind == "request form"
    assert e.as_dict()["edit_ins_content"] == 0
    assert kind("I cannot log in.", "I can't log in.") == "contraction or spelling"


def test_future_tense() -> None:
    assert feat("Was it raining in Oslo?", "Will it rain in Oslo?")["edit_tense"] == 1


def test_paraphrase_with_synonym_and_inflection_names_no_content_change() -> None:
    f = feat("What is shown in this photograph?", "What does this photo show?")
    assert f["edit_sub_antonym"] == f["edit_sub_cohyponym"] == f["edit_negation"] == 0
    assert f["edit_ins_content"] == 0


# ----------------------------------------------------------------------------- output contract
def test_feature_vector_is_fixed_length_and_deterministic() -> None:
    pairs = [("a", "b"), ("How are you?", "How are you?"), ("x = 1", "x =  1"), ("", "something")]
    for a, b in pairs:
        v = edit_features(stored=a, new=b)
        assert v.shape == (len(EDIT_FEATURE_NAMES),)
        assert np.isfinite(v).all()
        assert np.array_equal(v, edit_features(stored=a, new=b))
    assert len(set(EDIT_FEATURE_NAMES)) == len(EDIT_FEATURE_NAMES)


def test_explanation_and_secondary_notes() -> None:
    e = analyse(stored="Is the red cup on the left?", new="Is the blue cup on the right?")
    assert isinstance(e, EditAnalysis)
    assert e.kind in ("antonym", "co-hyponym")
    assert any("co-hyponym" in n or "antonym" in n for n in e.notes)
    assert e.explain().startswith(e.kind)


def test_tokenizer_expands_contractions_and_marks_quotes() -> None:
    toks = tokenize("Isn't 'Ab' here?")
    assert [t.low for t in toks if t.low[0].isalnum()] == ["is", "not", "ab", "here"]
    assert [t.protected for t in toks if t.low == "ab"] == [True]


def test_a_pasted_document_is_analysed_like_a_short_request() -> None:
    # thousands of repetitive words (their cost: benchmarks/edit_analysis.py)
    stored, new = "lorem ipsum dolor " * 800 + "is it red?", "lorem ipsum dolor " * 800 + "is it blue?"
    assert analyse(stored=stored, new=new).kind == "co-hyponym"
