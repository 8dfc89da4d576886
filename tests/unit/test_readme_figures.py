"""The README quotes the code and the reports, never from memory.

* Results: every figure in a row of the README's results table is in the report that
  row links (docs/results/...), as written or as that report's value rounded (0.3297 ->
  0.330, 0.955 -> 95.5 %). A row's figures are checked against its own report only.
* Configuration: each default the configuration table gives is the code's default.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?=x\b|[^\w]|$)")  # "1.18x" is the figure 1.18
LINK = re.compile(r"\]\((docs/results/[^)]+)\)")


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    nxt = text.find("\n## ", start + len(heading))
    return text[start: nxt if nxt >= 0 else len(text)]


def table_rows(block: str) -> list[list[str]]:
    rows = [ln for ln in block.splitlines() if ln.startswith("|") and not re.match(r"^\|[-:| ]+\|$", ln)]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows[1:]]  # without the header


def figures(text: str) -> list[str]:
    """Numbers a reader takes as measurements (two digits or more, or with a decimal point)."""
    text = re.sub(r"`[^`]*`|\([^)]*\.(md|txt|json|png)\)", "", text)
    return [m.group(0) for m in NUMBER.finditer(text) if len(m.group(0).replace(",", "").replace(".", "").lstrip("-")) >= 2
            or "." in m.group(0)]


def report_values(text: str) -> set[str]:
    """What a report says, as written and as each of its values rounds."""
    out: set[str] = set()
    for m in NUMBER.finditer(text):
        tok = m.group(0).replace(",", "")
        out.add(tok)
        if "." in tok:
            v = float(tok)
            out.update(f"{v:.{d}f}" for d in range(4))
            if 0 <= v <= 1:
                out.update(f"{100 * v:.{d}f}" for d in range(3))
    return out


README = (ROOT / "README.md").read_text()


def test_every_results_row_names_its_report_and_holds_only_its_figures() -> None:
    rows = table_rows(section(README, "## Results"))
    assert len(rows) >= 4
    problems = []
    for row in rows:
        cells = " | ".join(row)
        links = LINK.findall(cells)
        if not links:
            problems.append(f"no report named: {cells[:80]}")
            continue
        known: set[str] = set()
        for link in links:
            path = ROOT / link
            assert path.is_file(), link
            known |= report_values(path.read_text(errors="ignore"))
        for fig in figures(row[1] if len(row) > 1 else cells):
            if fig.replace(",", "").rstrip("x") not in known:
                problems.append(f"{fig} is not in {', '.join(links)}")
    assert problems == [], "\n".join(problems)


def test_the_check_would_catch_a_figure_its_report_does_not_hold() -> None:
    assert figures("hit rate 0.330, 1.18x, 2 cameras") == ["0.330", "1.18"]
    assert "95.5" in report_values("recall 0.955") and "0.330" in report_values("0.3297")
    assert "0.331" not in report_values("hit rate 0.330 and 0.334")  # no neighbouring value passes


def _defaults() -> dict[str, str]:
    rows = table_rows(section(README, "## Configuration"))
    return {row[0]: row[1] for row in rows}


def test_the_configuration_table_gives_the_codes_defaults() -> None:
    import inspect

    from mlc_integrations import MLCEngine
    from mlc_integrations.embed.image_towers import DEFAULT_IMAGE_ENCODER, resolve_image_encoder
    from mlc_integrations.tiers import DEFAULT_L1_THRESHOLD, DEFAULT_L2_PROMPT_THRESHOLD

    table = _defaults()
    sig = inspect.signature(MLCEngine.__init__).parameters
    assert table["`image_encoder`"] == f'`"{DEFAULT_IMAGE_ENCODER}"`' == f'`"{sig["image_encoder"].default}"`'
    assert float(table["`l1_threshold`"]) == DEFAULT_L1_THRESHOLD == sig["l1_threshold"].default
    assert float(table["`l2_prompt_threshold`"]) == DEFAULT_L2_PROMPT_THRESHOLD == sig["l2_prompt_threshold"].default
    lite0 = resolve_image_encoder(DEFAULT_IMAGE_ENCODER).default_image_threshold
    assert table["`l2_image_threshold`"] == f"{lite0:g} with the default tower"
    assert table["`strict`"] == str(sig["strict"].default)
    assert table["`durable`"] == "False" and sig["durable"].default is None  # None: strict decides, off by default
    assert table["`verifier`"] == f'`"{sig["verifier"].default}"`'


@pytest.mark.parametrize("cell", ["0.8", "0.6 with the default tower"])
def test_the_defaults_table_is_read(cell: str) -> None:
    assert cell in _defaults().values()
