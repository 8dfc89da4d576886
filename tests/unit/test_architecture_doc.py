"""docs/architecture.md names every library module, and no module that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_architecture_page_names_every_module_and_only_those() -> None:
    package = ROOT / "mlc_integrations"
    modules = {str(p.relative_to(package)) for p in package.rglob("*.py")}
    page = (ROOT / "docs" / "architecture.md").read_text()
    table = set(re.findall(r"^\| `([\w/]+\.py)` \|", page, re.M))
    assert sorted(modules - table) == [], "modules the page does not name"
    assert sorted(table - modules) == [], "modules the page names that do not exist"
