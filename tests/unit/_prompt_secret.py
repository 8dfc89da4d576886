"""A secret prompt and context, and where their bytes can be found on disk: the
``store_prompts=False`` tests (tests/unit/test_isolation.py, embedded Chroma;
tests/integration/test_privacy_at_rest.py, a Chroma server) share them."""

from __future__ import annotations

from pathlib import Path

from mlc_integrations import CacheRequest, MLCEngine
from tests.helpers import pattern

SECRET_PROMPT = "Patient Zyxwvutsr Quintanilla-Oberholzer reports symptom QX-7741 since March"
SECRET_CONTEXT = "earlier turn mentions account number 5555-0199-8723-4410"


# Chroma's HNSW segment files. hnswlib allocates their buffers with malloc at the index's
# full capacity and persists the whole capacity, so the slots past the live elements hold
# whatever the process's heap held before (chroma-core/chroma#7688): fragments of any
# freed string, in UTF-16 when CPython held it as UCS-2 (`python -m
# evaluation.studies.heap_at_rest` counts how often). Every byte of them is checked on a
# Chroma server, whose process never receives the prompt (tests/integration/test_privacy_at_rest.py).
HNSW_SEGMENT_FILES = frozenset({"data_level0.bin", "length.bin", "link_lists.bin", "header.bin"})


def files(directory: Path, *, hnsw: bool = True) -> list[Path]:
    return [p for p in sorted(directory.rglob("*"))
            if p.is_file() and (hnsw or p.name not in HNSW_SEGMENT_FILES)]


def where_found(files: list[Path]) -> list[str]:
    """Each needle found in the files, and where: file, offset and the bytes around it."""
    out = []
    for p in files:
        data = p.read_bytes()
        for n in needles():
            i = data.find(n)
            if i >= 0:
                out.append(f"{n.decode('utf-8', 'replace')!r} in {p.name} at {i}: {data[max(0, i - 48):i + len(n) + 48]!r}")
    return out


def needles() -> list[bytes]:
    words = [w for w in (SECRET_PROMPT + " " + SECRET_CONTEXT).replace(",", " ").split() if len(w) >= 7]
    forms = {SECRET_PROMPT, SECRET_PROMPT.casefold(), SECRET_CONTEXT, *words, *(w.casefold() for w in words)}
    return sorted({f.encode(enc) for f in forms for enc in ("utf-8", "utf-16-le")})


def secret_request() -> CacheRequest:
    return CacheRequest(text=SECRET_PROMPT, images=[pattern(30)], scope="m",
                        context=[{"role": "user", "content": SECRET_CONTEXT}, {"role": "assistant", "content": "ok"}])


def store_and_find_secret(eng: MLCEngine) -> None:
    """Store the secret request's answer, then find it again through a reworded copy."""
    req = secret_request()
    assert eng.update(req, {"answer": "see a doctor"}) is not None
    hit = eng.lookup(CacheRequest(text=f" {SECRET_PROMPT}\n", images=[pattern(30)], scope="m", context=req.context))
    assert hit is not None and hit.tier == "L0.5"
    assert hit.matched_text is None if not eng.store_prompts else hit.matched_text == SECRET_PROMPT
