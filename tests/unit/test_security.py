"""No code-executing deserialization or dynamic evaluation anywhere in the package.

A cache reads back what was written earlier, possibly by another process or another
version of the application; anything that can execute code when it reads (pickle and
friends, unsafe YAML, ``torch.load`` without ``weights_only``) or that evaluates text
(``eval``/``exec``) would turn a poisoned cache entry into code execution. The check
parses every module of the package (AST, so docstrings and comments mentioning pickle
do not count) and is itself tested against snippets that must be caught.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mlc_integrations

PACKAGE_DIR = Path(mlc_integrations.__file__).parent

UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "shelve", "marshal", "jsonpickle", "joblib"}
UNSAFE_BUILTINS = {"eval", "exec"}
SAFE_YAML_LOADERS = {"SafeLoader", "CSafeLoader", "BaseLoader", "CBaseLoader"}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _kw(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def unsafe_uses(source: str, filename: str = "<src>") -> list[str]:
    """Every unsafe construct in ``source`` as 'file:line: what'."""
    found: list[str] = []
    tree = ast.parse(source, filename)

    def hit(node: ast.AST, what: str) -> None:
        found.append(f"{filename}:{getattr(node, 'lineno', '?')}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in UNSAFE_MODULES:
                    hit(node, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] in UNSAFE_MODULES:
                hit(node, f"from {node.module} import ...")
            if node.module == "yaml" and any(a.name in ("unsafe_load", "full_load", "load", "load_all") for a in node.names):
                hit(node, "from yaml import a loader function (call yaml.safe_load instead)")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            last = name.rsplit(".", 1)[-1]
            if isinstance(node.func, ast.Name) and name in UNSAFE_BUILTINS:
                hit(node, f"{name}()")
            elif name in ("builtins.eval", "builtins.exec"):
                hit(node, f"{name}()")
            elif name in ("__import__", "importlib.import_module", "import_module") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and str(arg.value).split(".")[0] in UNSAFE_MODULES:
                    hit(node, f"dynamic import of {arg.value}")
            elif name.startswith("yaml.") and last in ("unsafe_load", "unsafe_load_all", "full_load", "full_load_all"):
                hit(node, f"{name}()")
            elif name.startswith("yaml.") and last in ("load", "load_all"):
                loader = _kw(node, "Loader") or (node.args[1] if len(node.args) > 1 else None)
                if loader is None or _dotted(loader).rsplit(".", 1)[-1] not in SAFE_YAML_LOADERS:
                    hit(node, f"{name}() without a safe Loader")
            elif name == "torch.load":
                wo = _kw(node, "weights_only")
                if not (isinstance(wo, ast.Constant) and wo.value is True):
                    hit(node, "torch.load() without weights_only=True")
            elif last == "load" and name.split(".")[0] in ("np", "numpy"):
                ap = _kw(node, "allow_pickle")
                if ap is not None and not (isinstance(ap, ast.Constant) and ap.value is False):
                    hit(node, "numpy.load(allow_pickle=...)")
            elif last == "read_pickle":
                hit(node, f"{name}()")
            elif name in ("os.system", "os.popen"):
                hit(node, f"{name}()")
            elif name.startswith("subprocess.") or last in ("Popen", "run", "call", "check_output", "check_call"):
                shell = _kw(node, "shell")
                if isinstance(shell, ast.Constant) and shell.value:
                    hit(node, f"{name}(shell=True)")
    return found


def package_sources() -> list[Path]:
    return sorted(p for p in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in p.parts)


def test_package_has_no_pickle_eval_exec_or_unsafe_yaml() -> None:
    files = package_sources()
    assert len(files) >= 10, files  # the scan really covers the package
    problems = [p for f in files for p in unsafe_uses(f.read_text(encoding="utf-8"), str(f.relative_to(PACKAGE_DIR)))]
    assert problems == []


@pytest.mark.parametrize(
    "snippet",
    [
        "import pickle",
        "import cPickle as p",
        "from pickle import loads",
        "import dill, os",
        "import shelve",
        "from marshal import loads",
        "x = eval('1+1')",
        "exec(code)",
        "import builtins; builtins.eval(s)",
        "m = __import__('pickle')",
        "import importlib; importlib.import_module('cloudpickle')",
        "import yaml; yaml.load(s)",
        "import yaml; yaml.load(s, Loader=yaml.Loader)",
        "import yaml; yaml.load(s, yaml.FullLoader)",
        "import yaml; yaml.unsafe_load(s)",
        "import yaml; yaml.full_load(s)",
        "from yaml import load",
        "import torch; torch.load(path)",
        "import torch; torch.load(path, weights_only=False)",
        "import numpy as np; np.load(p, allow_pickle=True)",
        "import pandas as pd; pd.read_pickle(p)",
        "import os; os.system('ls')",
        "import subprocess; subprocess.run(cmd, shell=True)",
    ],
)
def test_scanner_catches(snippet: str) -> None:
    assert unsafe_uses(snippet), snippet


@pytest.mark.parametrize(
    "snippet",
    [
        '"""Weights only: no pickle, no eval."""',
        "# never pickle here",
        "model.eval()",
        "import yaml; yaml.safe_load(s)",
        "import yaml; yaml.load(s, Loader=yaml.SafeLoader)",
        "import torch; torch.load(path, weights_only=True)",
        "import json; json.loads(s)",
        "import subprocess; subprocess.Popen(['chroma', 'run'])",
        "from safetensors.torch import load_file",
    ],
)
def test_scanner_allows(snippet: str) -> None:
    assert unsafe_uses(snippet) == []


def test_server_helper_never_binds_a_public_interface() -> None:
    from mlc_integrations.ops.server import LOOPBACK_HOSTS, ChromaServer

    for host in ("0.0.0.0", "::", "192.168.1.10", "example.com"):
        with pytest.raises(ValueError, match="loopback"):
            ChromaServer(host=host)
    assert set(LOOPBACK_HOSTS) == {"127.0.0.1", "localhost", "::1"}
