"""Every figure in the README's result sections comes from a committed result file
(docs/results/, each naming the command, commit and configuration that produced it):
a number there that no result file holds is a claim nobody can reproduce.

Matching is by whole number token; a fraction in a result file also stands for its
percentage (0.955 -> 95.5 %, 96 %). Code (inline or fenced) is not a figure: commands,
options and defaults are checked by the snippet tests."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w])")
FIRST_RESULTS_SECTION = "## How the thresholds were chosen"
AFTER_RESULTS = "## Limits"


def number_tokens(text: str) -> set[str]:
    """Every number of ``text`` as written and as a report would round it (a result file
    holds 0.44062, the README says 0.441; 402.0 is 402; a fraction is also a percentage)."""
    out: set[str] = set()
    for m in NUMBER.finditer(text):
        token = m.group(0).replace(",", "")
        out.add(token)
        if "." not in token:
            continue
        v = float(token)
        out.update(f"{v:.{d}f}" for d in (0, 1, 2, 3))
        if 0.0 <= v <= 1.0:
            out.update(f"{v * 100:.{d}f}" for d in (0, 1, 2))
    return out


def results_tokens() -> set[str]:
    tokens: set[str] = set()
    for path in (ROOT / "docs" / "results").rglob("*"):
        if path.is_file() and path.suffix in (".md", ".json", ".txt", ".csv"):
            tokens |= number_tokens(path.read_text(errors="ignore"))
    return tokens


def readme_result_figures() -> list[tuple[int, str]]:
    text = (ROOT / "README.md").read_text()
    start, end = text.index(FIRST_RESULTS_SECTION), text.index(AFTER_RESULTS)
    section = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text[start:end], flags=re.S)
    section = re.sub(r"`[^`\n]*`", "", section)
    line0 = text.count("\n", 0, start) + 1
    out = []
    for m in NUMBER.finditer(section):
        digits = m.group(0).replace(",", "").replace(".", "").lstrip("-")
        if len(digits) >= 2:  # single digits are counts of things named in the sentence
            out.append((line0 + section.count("\n", 0, m.start()), m.group(0)))
    return out


def test_every_readme_result_figure_is_in_a_committed_result_file() -> None:
    known = results_tokens()
    untraced = [f"README.md:{line}: {fig}" for line, fig in readme_result_figures() if fig.replace(",", "") not in known]
    assert untraced == [], "\n".join(untraced)


def test_the_check_sees_the_result_sections() -> None:
    assert len(readme_result_figures()) > 100
    assert "95.5" in number_tokens("recall 0.955") and "12129" in number_tokens("12,129 pairs")
