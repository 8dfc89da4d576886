"""The wheel is the serving library and nothing else; the framework versions CI runs
are inside the ranges the package declares; library modules keep to each other's public
names (a private name is a module's own business)."""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True, timeout=300)
    (path,) = out.glob("*.whl")
    return path


def test_the_wheel_is_the_library_only_and_small(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"mlc_integrations"}, tops  # no evaluation/, benchmarks/, data/, tests/
    assert not [n for n in names if "mlc-scenes-tiny" in n or "/eval/" in n]
    for needed in ("mlc_integrations/py.typed", "mlc_integrations/assets/verifier.json",
                   "mlc_integrations/assets/lexicon/wordnet.json.gz", "mlc_integrations/assets/lexicon/LICENSE-WordNet.txt"):
        assert needed in names
    assert wheel.stat().st_size <= 10 * 1024 * 1024


def _requirements() -> list[Requirement]:
    project = PYPROJECT["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in ("langchain", "llamaindex", "fast", "offline"):
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return reqs


@pytest.mark.parametrize("req", _requirements(), ids=str)
def test_the_installed_version_is_inside_the_declared_range(req: Requirement) -> None:
    try:
        version = importlib.metadata.version(req.name)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{req.name} not installed here")
    assert req.specifier.contains(version, prereleases=True), f"{req.name} {version} outside {req.specifier}"


def test_frameworks_whose_internals_are_used_have_upper_bounds() -> None:
    bounded = {r.name: r for r in _requirements()}
    for name in ("langchain-core", "llama-index-core", "chromadb"):
        assert any(spec.operator == "<" for spec in bounded[name].specifier), name


def _library_modules() -> list[Path]:
    return sorted((ROOT / "mlc_integrations").rglob("*.py"))


def test_no_library_module_imports_another_ones_private_name() -> None:
    offenders = []
    for path in _library_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("mlc_integrations")):
                offenders += [f"{path.name}:{node.lineno} {a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    assert offenders == []


def test_no_library_module_reads_private_attributes_of_the_engine() -> None:
    offenders = []
    for path in _library_modules():
        if path.name == "engine.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name) and node.value.id in ("engine", "eng")):
                offenders.append(f"{path.name}:{node.lineno} {node.value.id}.{node.attr}")
    assert offenders == []


def test_the_library_has_no_runtime_import_cycle() -> None:
    out = subprocess.run([sys.executable, str(ROOT.parent / "shared" / "tools" / "import_cycles.py"), "mlc_integrations"],
                         cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0 and "No such file" in out.stderr:
        pytest.skip("the import-cycle tool lives beside the checkout only")
    assert "import cycles among library modules: 0" in out.stdout, out.stdout + out.stderr
