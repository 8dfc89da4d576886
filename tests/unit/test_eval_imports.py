"""Every evaluation module imports: a command nobody ran in a session must not rot
silently (an import of a removed library name broke `contrast_eval` once)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import evaluation as eval_pkg

MODULES = sorted(m.name for m in pkgutil.walk_packages(eval_pkg.__path__, prefix="evaluation.")
                 if m.name != "evaluation.__main__")  # runs the CLI on import


def test_there_are_evaluation_modules() -> None:
    assert "evaluation.contrast_report" in MODULES and len(MODULES) > 20


@pytest.mark.parametrize("name", MODULES)
def test_evaluation_module_imports(name: str) -> None:
    mod = importlib.import_module(name)
    if hasattr(mod, "main"):
        assert callable(mod.main)
