"""The closed word classes of the text verifier live in one module, and every engine
reads the same copy."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator

import pytest

import mlc_integrations
from mlc_integrations.verify import extract_signals
from mlc_integrations.verify.text import edits, signals, tokens, words
from mlc_integrations.verify.text.edits import analyse

PACKAGE = Path(mlc_integrations.__file__).parent
WORDS_MODULE = Path(words.__file__)

# every closed class words.py defines (sets of words, and the keys of its word tables)
CLASSES: dict[str, frozenset[str]] = {
    name: frozenset(value) for name, value in vars(words).items()
    if not name.startswith("_") and isinstance(value, (frozenset, dict)) and len(value) >= 3
    and all(isinstance(w, str) for w in value)
}


def _word_collections(tree: ast.AST) -> Iterator[tuple[int, frozenset[str]]]:
    """Literal collections of words in a module: ``"a b c".split()``, set / frozenset /
    list / tuple literals of strings, and the string keys of dict literals."""
    for node in ast.walk(tree):
        found: list[str] = []
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "split"
                and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)):
            found = node.func.value.value.split()
        elif isinstance(node, (ast.Set, ast.List, ast.Tuple)):
            found = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        elif isinstance(node, ast.Dict):
            found = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        if len(found) >= 3:
            yield node.lineno, frozenset(w.casefold() for w in found)


def _copies(source: str) -> list[str]:
    out = []
    for line, coll in _word_collections(ast.parse(source)):
        for name, cls in CLASSES.items():
            shared = coll & cls
            # four words of one class, making up half of the literal: a copy of that class
            # (three is a rule's context: ``prev in ("me", "to", "you")``)
            if len(shared) >= 4 and len(shared) * 2 >= len(coll):
                out.append(f"line {line}: {sorted(shared)[:6]} of {name}")
    return out


def test_no_module_but_words_spells_a_closed_word_class() -> None:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == WORDS_MODULE:
            continue
        copies = _copies(path.read_text(encoding="utf-8"))
        if copies:
            found[str(path.relative_to(PACKAGE))] = copies
    assert not found, found


def test_the_copy_check_finds_a_copied_class() -> None:
    """The check above can fail: a module with its own negation list is caught."""
    assert _copies('NEG = frozenset("not no never nobody".split())\n')
    assert _copies('MODALS = {"can", "could", "should", "might"}\n')
    assert not _copies('KINDS = ("synonym", "antonym", "hypernym")\n')


@pytest.mark.parametrize("module,name,shared", [
    (signals, "NEGATIONS", "NEGATIONS"), (signals, "MODALS", "MODALS"), (signals, "WH_WORDS", "WH_WORDS"),
    (signals, "NUMBER_WORDS", "NUMBER_WORDS"), (signals, "AMBIGUOUS_NUMBERS", "AMBIGUOUS_NUMBERS"),
    (signals, "STOPWORDS", "STOPWORDS"),
    (tokens, "NUMBER_WORDS", "NUMBER_WORDS"), (tokens, "MODALS", "MODALS"), (tokens, "WH", "WH"),
    (tokens, "NEGATED_BASES", "NEGATED_BASES"), (signals, "NEGATED_BASES", "NEGATED_BASES"),
    (edits, "NEGATIONS", "NEGATIONS"), (edits, "MODALS", "MODALS"), (edits, "AMBIGUOUS_NUMBERS", "AMBIGUOUS_NUMBERS"),
    (edits, "PREPOSITIONS", "PREPOSITIONS"), (edits, "PRONOUNS", "PRONOUNS"), (edits, "QUANTIFIERS", "QUANTIFIERS"),
])
def test_every_engine_reads_the_one_copy(module: object, name: str, shared: str) -> None:
    assert getattr(module, name) is getattr(words, shared)


# ----------------------------------------------------------------------------- the classes, merged
def test_a_negation_typed_without_an_apostrophe_is_a_negation_for_both_engines() -> None:
    stored, new = "Why do cats purr?", "Why dont cats purr?"
    assert analyse(stored=stored, new=new).kind == "negation"  # was an unknown content word
    assert extract_signals(stored=stored, new=new, cosine=0.9)["negation_mismatch"] == 1.0
    assert [t.low for t in tokens.tokenize("I cant")] == ["i", "can", "not"]


def test_ought_is_a_modal_for_both_engines() -> None:
    stored, new = "Should I sell my car?", "Ought I sell my car?"
    assert analyse(stored=stored, new=new).kind == "modality change"
    assert extract_signals(stored=stored, new=new, cosine=0.9)["modal_mismatch"] == 1.0


def test_ordinals_past_fifth_are_numbers_for_both_engines() -> None:
    stored, new = "Who lives on the fifth floor?", "Who lives on the sixth floor?"
    e = analyse(stored=stored, new=new)
    assert e.kind == "number change" and e.detail == "5 -> 6"
    assert extract_signals(stored=stored, new=new, cosine=0.9)["number_mismatch"] == 1.0


def test_double_counts_as_a_number_only_beside_another_number() -> None:
    assert analyse(stored="Is 4 twice 2?", new="Is 4 double 2?").as_dict()["edit_number_changed"] == 0
    assert analyse(stored="Book a double room.", new="Book a room.").as_dict()["edit_number_added"] == 0
