"""Every Python code block of README.md, docs/*.md and cookbook/README.md runs as written.

The blocks of one document run in order in one namespace, as a reader pastes them
into one session; a ``./dev python - <<'EOF'`` script inside a bash block runs on its
own, as it would in a fresh interpreter. They run in a temporary working directory
(so ``./.mlc_cache`` and other relative paths land there) that holds small PNGs under
the names the docs use (``cat.png``, ``car.png``). Provider packages are replaced by
fakes with the same import path and constructor: ``langchain_openai.ChatOpenAI`` is a
``FakeListChatModel``, ``llama_index.llms.openai.OpenAI`` a ``MockLLM``; no network, no
API key. Nothing else is provided: a block that uses a name it does not define or
import fails here, as it would for a reader.

A block that cannot run here (e.g. it needs a server) is preceded by
``<!-- not-run: reason -->``; the reason is required and such blocks stay few.
"""

from __future__ import annotations

import os
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest
from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parents[2]
MAX_NOT_RUN = 4
GENERATED = ("cookbook/output/",)  # written by the examples, git-ignored
NOT_RUN = re.compile(r"<!--\s*not-run:(.*?)-->", re.S)
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.S | re.M)
HEREDOC = re.compile(r"\./dev python - <<'EOF'\n(.*?)^EOF$", re.S | re.M)


def documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "cookbook" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass
class Snippet:
    doc: Path
    line: int
    code: str
    own_process: bool  # a heredoc script: a fresh namespace of its own
    not_run: Optional[str]  # the marker's reason

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def snippets(doc: Path) -> list[Snippet]:
    text = doc.read_text()
    out = []
    for m in FENCE.finditer(text):
        lang, body = m.group(1).lower(), m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        before = text[: m.start()].rstrip().splitlines()
        marker = NOT_RUN.fullmatch(before[-1].strip()) if before else None
        reason = marker.group(1).strip() if marker else None
        if lang == "python":
            out.append(Snippet(doc, line + 1, body, False, reason))
        elif lang in ("bash", "sh", "shell", ""):
            for h in HEREDOC.finditer(body):
                out.append(Snippet(doc, line + 1 + body.count("\n", 0, h.start(1)), h.group(1), True, reason))
    return out


def _picture(path: Path, color: tuple[int, int, int]) -> None:
    im = Image.new("RGB", (96, 96), (255, 255, 255))
    ImageDraw.Draw(im).ellipse((20, 20, 76, 76), fill=color)
    im.save(path)


def fake_provider_modules() -> dict[str, types.ModuleType]:
    """``langchain_openai`` and ``llama_index.llms.openai`` as the docs import them."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from llama_index.core.llms import MockLLM

    class ChatOpenAI(FakeListChatModel):
        """Takes ChatOpenAI's usual arguments; always answers the same."""

        model: str = "gpt-4o-mini"
        temperature: Optional[float] = None
        responses: list = ["The cat is orange."]

    class OpenAI(MockLLM):
        """Takes OpenAI's usual arguments; echoes the prompt (MockLLM)."""

        model: str = "gpt-4o"
        temperature: float = 0.1

        def __init__(self, model: str = "gpt-4o", temperature: float = 0.1, **kwargs: Any) -> None:
            super().__init__(**kwargs)  # MockLLM's constructor names its own arguments only
            self.model, self.temperature = model, temperature

    lc = types.ModuleType("langchain_openai")
    lc.ChatOpenAI = ChatOpenAI  # type: ignore[attr-defined]
    li = types.ModuleType("llama_index.llms.openai")
    li.OpenAI = OpenAI  # type: ignore[attr-defined]
    return {"langchain_openai": lc, "llama_index.llms.openai": li}


@pytest.fixture
def docs_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text_embedder: Any) -> Iterator[Path]:
    """A working directory with the docs' pictures, fake provider packages, and no
    LangChain global cache left behind."""
    from langchain_core.globals import set_llm_cache

    monkeypatch.chdir(tmp_path)
    _picture(tmp_path / "cat.png", (230, 140, 30))
    _picture(tmp_path / "car.png", (200, 20, 20))
    for name, module in fake_provider_modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    try:
        yield tmp_path
    finally:
        set_llm_cache(None)


# ``print(x)  # => shown output`` states what the line prints: checked. In the shown
# output ``...`` stands for anything (ids, timings); decimals may differ by 0.005
# (float sums differ between CPUs); everything else must match.
EXPECT = re.compile(r"^(\s*)print\((.*)\)\s*#\s*=>\s*(.*?)\s*$")
NUMBER = re.compile(r"-?\d+\.\d+")


def with_output_checks(code: str) -> str:
    return "\n".join(EXPECT.sub(lambda m: f"{m.group(1)}__expect__(lambda: print({m.group(2)}), {m.group(3)!r})", line)
                     for line in code.splitlines())


def expect_output(produce: Any, shown: str) -> None:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        produce()
    printed = buf.getvalue().strip()
    pattern = ".*".join(r"(-?\d+\.\d+)".join(re.escape(t) for t in NUMBER.split(part))
                        for part in shown.split("..."))
    m = re.fullmatch(pattern, printed, re.S)
    assert m is not None, f"printed {printed!r}, the docs show {shown!r}"
    for got, want in zip(m.groups(), NUMBER.findall(shown.replace("...", " "))):
        assert abs(float(got) - float(want)) <= 0.005, f"printed {printed!r}, the docs show {shown!r}"


def _run(snippet: Snippet, namespace: dict[str, Any]) -> None:
    namespace.setdefault("__expect__", expect_output)
    try:
        exec(compile(with_output_checks(snippet.code), snippet.where, "exec"), namespace)
    except Exception as exc:
        raise AssertionError(f"the code block at {snippet.where} raised {type(exc).__name__}: {exc}") from exc


DOCS_WITH_CODE = [d for d in documents() if any(s.not_run is None for s in snippets(d))]


@pytest.mark.parametrize("doc", DOCS_WITH_CODE, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_python_block_runs(doc: Path, docs_session: Path, capsys: pytest.CaptureFixture[str]) -> None:
    session: dict[str, Any] = {"__name__": "__main__"}
    ran = 0
    for snippet in snippets(doc):
        if snippet.not_run is not None:
            continue
        _run(snippet, {"__name__": "__main__"} if snippet.own_process else session)
        ran += 1
    assert ran > 0


def test_not_run_markers_have_reasons_precede_code_and_are_few() -> None:
    markers = []
    for doc in documents():
        text = doc.read_text()
        for m in NOT_RUN.finditer(text):
            where = f"{doc.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
            reason = m.group(1).strip()
            assert len(reason) >= 10, f"{where}: a not-run marker needs a reason"
            assert text[m.end():].lstrip(" \n").startswith("```"), f"{where}: the marker must precede a code block"
            markers.append(where)
    assert len(markers) <= MAX_NOT_RUN, f"too many blocks left unrun: {markers}"
    skipped = [s for d in documents() for s in snippets(d) if s.not_run is not None]
    assert len(skipped) == len(markers), "every marker skips exactly one runnable block"


def test_the_extractor_sees_the_blocks_it_must_run() -> None:
    """Guard against a regex that silently finds nothing (then nothing would be tested)."""
    readme = snippets(ROOT / "README.md")
    assert sum(not s.own_process for s in readme) >= 3
    assert any("CachedMultiModalLLM" in s.code for s in readme)
    heredocs = [s for s in snippets(ROOT / "docs" / "llamaindex.md") if s.own_process]
    assert heredocs and all("import" in s.code for s in heredocs)


def test_docs_name_only_files_that_exist() -> None:
    """Paths the docs cite in backticks (repository files) exist; outputs the examples
    write are not in the repository and are named as such."""
    cited = re.compile(r"`((?:benchmarks|cookbook|docs|mlc_integrations|tests)/[\w./-]+?)(?:::\w+)?`")
    missing = []
    for doc in documents():
        text = doc.read_text()
        for m in cited.finditer(text):
            path = m.group(1).rstrip("/")
            if path.startswith(GENERATED):
                continue
            if not (ROOT / path).exists():
                missing.append(f"{doc.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {path}")
    assert missing == []


def test_a_relative_persist_directory_follows_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   text_embedder: Any) -> None:
    from mlc_integrations import CacheRequest, MLCEngine

    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    name = "relative-cache-xfail"  # a name no other test uses: chromadb's client cache is process-wide
    monkeypatch.chdir(first)
    a = MLCEngine(persist_directory=name, image_encoder=None, durable=True, warm_start=False)
    a.update(CacheRequest(text="stored in first", scope="s"), {"text": "1"})
    monkeypatch.chdir(second)
    b = MLCEngine(persist_directory=name, image_encoder=None, durable=True, warm_start=False, strict=True)
    try:
        assert b.count() == 0, "a new directory holds no entries"
        b.update(CacheRequest(text="stored in second", scope="s"), {"text": "2"})
        assert b.count() == 1 and a.count() == 1
    finally:
        a.close()
        b.close()


def test_shown_outputs_are_checked() -> None:
    expect_output(lambda: print("tier=L1 entry=27267946aaa9 text=0.9661"), "tier=L1 entry=... text=0.966")
    with pytest.raises(AssertionError):
        expect_output(lambda: print("tier=L2 entry=1 text=0.966"), "tier=L1 entry=... text=0.966")
    with pytest.raises(AssertionError):
        expect_output(lambda: print("text=0.900"), "text=0.966")
    assert "__expect__" in with_output_checks("print(x)  # => 1")
    shown = [s for d in documents() for s in snippets(d) if EXPECT.search(s.code) or "# =>" in s.code]
    assert len(shown) >= 5  # the README and the adapter docs state their outputs
