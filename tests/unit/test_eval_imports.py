"""Every evaluation module imports: a command nobody ran in a session must not rot
silently (an import of a removed library name broke `contrast_eval` once)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import evaluation as eval_pkg

MODULES = sorted(m.name for m in pkgutil.walk_packages(eval_pkg.__path__, prefix="evaluation.")
                 if m.name != "evaluation.__main__")  # runs the CLI on import


def test_there_are_evaluation_modules() -> None:
    assert "evaluation.contrast.report" in MODULES and len(MODULES) > 20


@pytest.mark.parametrize("name", MODULES)
def test_evaluation_module_imports(name: str) -> None:
    mod = importlib.import_module(name)
    if hasattr(mod, "main"):
        assert callable(mod.main)


def _has_main(name: str) -> bool:
    path = Path(eval_pkg.__path__[0]).joinpath(*name.split(".")[1:])
    source = (path / "__init__.py") if path.is_dir() else path.with_suffix(".py")
    return "\ndef main(" in source.read_text()


@pytest.mark.parametrize("name", [m for m in MODULES if _has_main(m)])
def test_evaluation_command_line_builds(name: str, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Each module's command line parses ``--help``: an argument table that cannot be
    built (a renamed option, a moved default) fails here, not in a user's first run."""
    mod = importlib.import_module(name)
    monkeypatch.setattr("sys.argv", [name, "--help"])
    with pytest.raises(SystemExit) as done:
        try:
            mod.main(["--help"])
        except TypeError:  # main() reads sys.argv itself
            mod.main()
    assert done.value.code in (0, None)
    assert "usage" in capsys.readouterr().out.lower()
