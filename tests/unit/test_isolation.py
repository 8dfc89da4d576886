"""Tenants and scopes never see each other's answers; prompts can be kept out of storage.

* Randomized: many tenants (namespaces) x scopes (models) send interleaved, identical
  requests (exact repeats, paraphrases, near-duplicate pictures) against one engine;
  every hit must come from the same tenant and scope, and there must be many hits.
  More identical neighbours than the engine's first unfiltered page (``SEARCH_STEPS``)
  sit in other tenants, so a filter applied after the search would hide hits: it must not.
* ``store_prompts=False``: nothing of the raw prompt (nor the context) is handed to
  Chroma, nor found in any file written from the records (SQLite database and WAL).
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mlc_integrations import CacheRequest, MLCEngine
from tests.helpers import pattern, png_bytes
from tests.unit._prompt_secret import SECRET_PROMPT, files, store_and_find_secret, where_found
from mlc_integrations import WriteOptions

N_TENANTS = 8
SCOPES = ["model-a;t=0", "model-a;t=0.7", "model-b;t=0", "model-c;max_tokens=64"]
CONTEXT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
           {"role": "assistant", "content": "Hello."}]


def _questions() -> list[dict[str, Any]]:
    pic_a, pic_b = pattern(21), pattern(22)
    near_a = pic_a.copy()
    near_a.putpixel((0, 0), (0, 0, 0) if pic_a.getpixel((0, 0)) != (0, 0, 0) else (255, 255, 255))
    return [
        {"q": 0, "text": "What is the capital of Australia?", "asked": ["what is the capital of australia ?",
                                                                      "What's the capital of Australia?"]},
        {"q": 1, "text": "Summarize the plot of Hamlet in one sentence.",
         "asked": ["Summarize the plot of Hamlet in one sentence", "summarise the plot of hamlet in one sentence."]},
        {"q": 2, "text": "What color is the square?", "images": [pic_a],
         "asked": ["What color is the square?", "What colour is the square?"], "asked_images": [[png_bytes(pic_a)], [near_a]]},
        {"q": 3, "text": "What color is the square?", "images": [pic_b], "asked": ["WHAT COLOR IS THE SQUARE?"]},
        {"q": 4, "text": "And what about tomorrow?", "context": CONTEXT, "asked": ["and what about tomorrow?"]},
    ]


def _request(q: dict[str, Any], tenant: int, scope: str, variant: int = -1) -> CacheRequest:
    text = q["text"] if variant < 0 else q["asked"][variant % len(q["asked"])]
    images = q.get("images", [])
    if variant >= 0 and "asked_images" in q:
        images = q["asked_images"][variant % len(q["asked_images"])]
    return CacheRequest(text=text, images=list(images), context=q.get("context", []), scope=scope,
                        namespace=f"tenant-{tenant}")


def test_randomized_tenants_and_scopes_never_cross(make_engine: Any) -> None:
    # The tests' CLIP has random weights: different pictures still score ~0.97-0.99, a changed pixel ~1.0.
    eng: MLCEngine = make_engine(l2_image_threshold=0.995, l2_prompt_threshold=0.9)
    from mlc_integrations.store.entries import SEARCH_STEPS

    assert N_TENANTS * len(SCOPES) > SEARCH_STEPS[0][1]  # neighbours elsewhere outnumber the first page fetched
    questions = _questions()
    rng = random.Random(2024)
    stored: set[tuple[int, str, int]] = set()
    outcomes: Counter[str] = Counter()
    events = [(t, s, q["q"]) for t in range(N_TENANTS) for s in SCOPES for q in questions]
    events = [e for e in events if rng.random() < 0.6]  # some tenant/scope/question combinations never store
    order = events * 2
    rng.shuffle(order)
    for tenant, scope, qi in order:
        q = questions[qi]
        variant = rng.randrange(4) - 1  # -1: the stored wording; else one of the asked forms
        hit = eng.lookup(_request(q, tenant, scope, variant))
        if hit is None:
            outcomes["miss"] += 1
            # The answer names who it belongs to, so a cross-tenant hit cannot go unnoticed.
            eng.update(_request(q, tenant, scope), {"tenant": tenant, "scope": scope, "q": qi})
            stored.add((tenant, scope, qi))
            continue
        outcomes[hit.tier] += 1
        assert hit.payload["tenant"] == tenant and hit.payload["scope"] == scope, (tenant, scope, qi, hit.explain())
        assert hit.payload["q"] == qi, (tenant, scope, qi, hit.payload, hit.explain())
    # Every tenant/scope that never stored a question misses it in every form.
    for tenant in range(N_TENANTS):
        for scope in SCOPES:
            for q in questions:
                if (tenant, scope, q["q"]) in stored:
                    continue
                for variant in range(-1, len(q["asked"])):
                    hit = eng.lookup(_request(q, tenant, scope, variant))
                    assert hit is None, (tenant, scope, q["q"], variant, hit.explain())
                    outcomes["isolated_miss"] += 1
    print(f"isolation: {dict(outcomes)}")
    assert outcomes["L0.5"] > 20 and outcomes["L1"] > 10 and outcomes["L2"] > 0, outcomes
    assert outcomes["isolated_miss"] > 100, outcomes
    st = eng.stats()
    assert st["hits"] + st["misses"] == st["lookups"] and st["errors"] == {}


def test_clear_of_one_tenant_leaves_the_others(make_engine: Any) -> None:
    eng = make_engine(image_encoder=None)
    q = _questions()[0]
    for t in range(4):
        eng.update(_request(q, t, SCOPES[0]), {"tenant": t})
    eng.clear(namespace="tenant-2")
    assert eng.lookup(_request(q, 2, SCOPES[0])) is None
    for t in (0, 1, 3):
        assert eng.lookup(_request(q, t, SCOPES[0], 1)).payload == {"tenant": t}


@pytest.fixture
def handed_to_chroma(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every id, document and metadata value the cache hands Chroma to write, as text."""
    from chromadb.api.models.Collection import Collection

    sent: list[str] = []
    for name in ("add", "upsert", "update"):
        original = getattr(Collection, name)

        def recording(self: Any, *a: Any, _original: Any = original, **kw: Any) -> Any:
            sent.append(repr((a, {k: v for k, v in kw.items() if k != "embeddings"})))
            return _original(self, *a, **kw)

        monkeypatch.setattr(Collection, name, recording)
    return sent


@pytest.mark.parametrize("store_prompts", [False, True])
def test_store_prompts_false_writes_no_prompt_text_to_disk(make_engine: Any, tmp_path: Path, store_prompts: bool,
                                                           handed_to_chroma: list[str]) -> None:
    d = tmp_path / "cache"
    eng = make_engine(persist_directory=str(d), writes=WriteOptions(store_prompts=store_prompts))
    store_and_find_secret(eng)
    eng.close()
    sent = "\n".join(handed_to_chroma)
    assert "see a doctor" in sent  # the recorder sees the writes
    # Everything written from the records: SQLite database and WAL, the cache's own files.
    written = files(d, hnsw=False)
    assert sum(p.stat().st_size for p in written) > 10_000
    found = where_found(written)
    # The context is only ever stored as a digest.
    assert "5555-0199" not in sent and "account" not in sent
    assert not any("5555-0199" in f or "'account'" in f for f in found), found
    if store_prompts:
        # The scan would see prompt text if it were there (it is, by choice, in this mode).
        assert SECRET_PROMPT in sent
        assert any("Zyxwvutsr" in f for f in found)
    else:
        assert "Zyxwvutsr" not in sent and "Quintanilla" not in sent
        assert found == []
