"""The WordNet-derived lexicon: ships in the package, loads offline, answers relations."""

from __future__ import annotations

import gzip
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

import mlc_integrations
from mlc_integrations.verify.text.lexicon import (
    DEFAULT_LEXICON_PATH,
    RELATIONS,
    Lexicon,
    LexiconFormatError,
    relation,
)


@pytest.fixture(scope="module")
def lex() -> Lexicon:
    return Lexicon.default()


# ----------------------------------------------------------------------------- shipping
def test_lexicon_ships_inside_the_package_with_its_licence() -> None:
    pkg = Path(mlc_integrations.__file__).parent
    assert DEFAULT_LEXICON_PATH.is_file()
    assert pkg in DEFAULT_LEXICON_PATH.parents
    licence = (DEFAULT_LEXICON_PATH.parent / "LICENSE-WordNet.txt").read_text(encoding="utf-8")
    assert "WordNet 3.0 Copyright 2006 by Princeton University" in licence
    assert DEFAULT_LEXICON_PATH.stat().st_size < 5_000_000  # compact: a few MB at most


def test_lexicon_loads_without_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the lexicon tried to open a network connection")

    monkeypatch.setattr(socket, "socket", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    fresh = Lexicon.load()  # not the cached default: really read the file
    assert fresh.relation("hot", "cold") == "antonym"


def test_file_of_another_format_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "x.json.gz"
    with gzip.open(bad, "wt", encoding="utf-8") as fh:
        json.dump({"format": "something-else"}, fh)
    with pytest.raises(LexiconFormatError):
        Lexicon.load(bad)
    with pytest.raises(LexiconFormatError):
        Lexicon.load(tmp_path / "missing.json.gz")


# ----------------------------------------------------------------------------- lemmatization
def test_lemmatizer_uses_wordnet_exception_lists(lex: Lexicon) -> None:
    assert ("n", "child") in lex.lemmatize("children")
    assert ("n", "mouse") in lex.lemmatize("mice")
    assert ("a", "good") in lex.lemmatize("better")
    assert ("a", "big") in lex.lemmatize("bigger")
    assert ("v", "show") in lex.lemmatize("shown")
    assert ("v", "run") in lex.lemmatize("running")


def test_lemmatizer_uses_detachment_rules_and_multiword_lemmas(lex: Lexicon) -> None:
    assert ("n", "box") in lex.lemmatize("boxes")
    assert ("v", "wear") in lex.lemmatize("wearing")
    assert ("n", "new_york") in lex.lemmatize("New York")
    assert lex.lemmatize("qwzxv") == ()
    assert not lex.known("qwzxv") and lex.known("Cats")


# ----------------------------------------------------------------------------- relations
@pytest.mark.parametrize("a,b", [("hot", "cold"), ("increase", "decrease"), ("buy", "sell"), ("left", "right"),
                                 ("bigger", "smaller"), ("advantages", "disadvantages"), ("up", "down"),
                                 ("inside", "outside")])
def test_antonyms_direct_and_through_inflections(lex: Lexicon, a: str, b: str) -> None:
    assert lex.relation(a, b) == "antonym"
    assert lex.relation(b, a) == "antonym"


def test_antonym_through_adjective_cluster_head(lex: Lexicon) -> None:
    # "huge" is a satellite of "large", whose antonym is "small"
    assert lex.relation("huge", "small") == "antonym"
    assert lex.relation("huge", "large") == "similar"


@pytest.mark.parametrize("a,b", [("car", "automobile"), ("film", "movie"), ("begin", "start"),
                                 ("colour", "color"), ("kid", "child")])
def test_synonyms(lex: Lexicon, a: str, b: str) -> None:
    assert lex.relation(a, b) == "synonym"


@pytest.mark.parametrize("a,b", [("cat", "dog"), ("Monday", "Friday"), ("red", "blue"), ("Paris", "London"),
                                 ("January", "March"), ("tea", "coffee"), ("hot", "warm")])
def test_cohyponyms_are_contrast_sets(lex: Lexicon, a: str, b: str) -> None:
    assert lex.relation(a, b) == "cohyponym"


@pytest.mark.parametrize("a,b", [("tall", "height"), ("invent", "invention"), ("heavy", "weight")])
def test_derived_forms_of_one_concept(lex: Lexicon, a: str, b: str) -> None:
    assert lex.relation(a, b) == "derived"


def test_semantic_class(lex: Lexicon) -> None:
    assert lex.semantic_class("yesterday") == "time"
    assert lex.semantic_class("city") == "place"
    assert lex.semantic_class("toddler") == "person"
    assert lex.semantic_class("paragraph") == "communication"
    assert lex.semantic_class("old") == "modifier"
    assert lex.semantic_class("qwzxv") == ""


def test_hypernym_direction(lex: Lexicon) -> None:
    assert lex.relation("dog", "animal") == "hypernym"
    assert lex.relation("animal", "dog") == "hyponym"


def test_same_unknown_unrelated(lex: Lexicon) -> None:
    assert lex.relation("children", "child") == "same"
    assert lex.relation("Dog", "dog") == "same"
    assert lex.relation("dog", "qwzxv") == "unknown"
    assert lex.relation("banana", "democracy") == "unrelated"
    assert all(lex.relation(a, b) in RELATIONS for a, b in [("a", "b"), ("x", "y")])


def test_common_senses_beat_rare_ones(lex: Lexicon) -> None:
    # "big" = "bad" only in a rare sense ("a big cold"): the cost says so
    r = lex.relation_detail("big", "bad")
    assert r.kind in ("synonym", "derived") and r.cost >= 2
    assert lex.relation_detail("big", "large").cost == 0


def test_module_level_relation_uses_the_shipped_lexicon() -> None:
    assert relation("open", "closed") == "antonym"


def test_word_sets(lex: Lexicon) -> None:
    assert "small" in lex.antonyms("big")
    assert "tuesday" in lex.cohyponyms("Monday")
    assert "automobile" in lex.synonyms("car")
    assert "noun.time" in lex.categories("yesterday")
    assert "noun.location" in lex.categories("city")
    assert lex.is_proper("Paris") and not lex.is_proper("city")
    assert lex.attested("house") and not lex.attested("qwzxv")
    assert "house" in lex.vocabulary("n")


def test_cached_relation_costs_microseconds(lex: Lexicon) -> None:
    pairs = [("hot", "cold"), ("cat", "dog"), ("car", "automobile"), ("dog", "animal")] * 250
    for a, b in pairs[:4]:
        lex.relation(a, b)
    t0 = time.perf_counter()
    for a, b in pairs:
        lex.relation(a, b)
    per_call = (time.perf_counter() - t0) / len(pairs)
    assert per_call < 50e-6  # measured ~0.5 µs; the bound allows a loaded machine
