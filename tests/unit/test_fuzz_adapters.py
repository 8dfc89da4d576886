"""Property-based tests (hypothesis) of the two adapters with hostile and broken input.

LangChain: the ``prompt`` string LangChain hands a cache (``dumps`` of the message
list) and ``llm_string``. LlamaIndex: ``ChatMessage`` lists through
``CachedMultiModalLLM.chat``.

Two kinds of input:

* *conversations*: random but well-formed multi-turn conversations built from a small
  vocabulary (so repeats, rewordings and near-repeats happen), pictures in every form
  each framework accepts (data URLs with right and wrong image MIME types, LangChain v1
  and Anthropic blocks, raw bytes, files, remote URLs), random tenant and model. Property:
  a hit is never for a request that differs from the stored one in scope, tenant,
  context (every message but the last user turn, exactly) or image pixels (L2, the
  similar-picture tier, must only see as many pictures). The identity is computed here
  from the generated conversation, not by the adapter;
* *hostile*: random JSON and block structures, wrong types, huge strings, deep
  nesting, invalid base64, truncated and mislabeled images, wrong-MIME data URLs,
  images over the pixel limit. Property: the default (fail-open) cache never raises.

Budgets: CI runs :data:`CI_EXAMPLES` examples per property (deterministic, 80 for the cheap
LlamaIndex hostile-message property); the soak (``-m slow``) :data:`SOAK_EXAMPLES` each, random.

Each no-wrong-hit test starts from an empty cache and checks, with its own ledger, that
its examples hit on several tiers (the property was not vacuous), so any test of this
module runs alone, under ``-k`` and in any order.
"""

from __future__ import annotations

import base64
import itertools
import json
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from mlc_integrations import MLCEngine
from mlc_integrations.images import decode_image
from tests.helpers import jpeg_bytes, pattern, png_bytes
from tests.unit.test_fuzz_engine import bomb_png

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from langchain_core.load import dumps  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration  # noqa: E402
from llama_index.core.base.llms.types import (  # noqa: E402
    ChatMessage,
    CompletionResponse,
    CompletionResponseGen,
    ImageBlock,
    LLMMetadata,
    MessageRole,
    TextBlock,
)
from llama_index.core.bridge.pydantic import PrivateAttr  # noqa: E402
from llama_index.core.llms import CustomLLM  # noqa: E402
from llama_index.core.llms.callbacks import llm_completion_callback  # noqa: E402

from mlc_integrations.langchain import MultimodalSemanticCache  # noqa: E402
from mlc_integrations.llamaindex import CachedMultiModalLLM  # noqa: E402
from mlc_integrations import Limits

CI_EXAMPLES = 25  # per property; each example is several lookups/updates with real models
SOAK_EXAMPLES = 1_500
MAX_PIXELS = 200_000
CI = settings(max_examples=CI_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
SOAK = settings(max_examples=SOAK_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))

PICS = [pattern(40 + i, (40, 40)) for i in range(3)]
NEAR = PICS[0].copy()
NEAR.putpixel((3, 3), tuple(255 - c for c in PICS[0].getpixel((3, 3))))
POOL = PICS + [NEAR]
REMOTE = "https://images.example.com/cat.png"


# ---------------------------------------------------------------------- neutral conversations
@dataclass(frozen=True)
class Img:
    pic: int  # index into POOL, or -1 for the remote URL
    form: str  # how it is encoded; never part of the identity


@dataclass(frozen=True)
class Msg:
    role: str  # system | user | assistant | tool
    blocks: tuple[Any, ...]  # str (text) or Img
    as_string: bool  # a single text block sent as a plain string


LC_FORMS = ("data_png", "data_jpeg_label", "data_star", "v1_base64", "anthropic", "png_recompressed")
LI_FORMS = ("bytes", "data_png", "data_wrong_label", "path", "png_recompressed")

vocab = st.sampled_from(["What color is the shape?", "what  color is the SHAPE?", "What colour is the shape?",
                         "How many shapes are there?", "Describe it.", "Thanks!", "Look at this picture."])
text_block = st.one_of(vocab, vocab, vocab, st.text(max_size=40))



def exact_text(text: str) -> str:
    """The reference rule of "the same text" (DESIGN.md): Unicode NFC, outer whitespace
    trimmed, nothing else (case and inner spacing can change an answer)."""
    return unicodedata.normalize("NFC", text).strip()

def image_block(forms: Sequence[str]) -> st.SearchStrategy[Img]:
    return st.builds(Img, st.integers(-1, len(POOL) - 1), st.sampled_from(forms))


def messages(forms: Sequence[str]) -> st.SearchStrategy[tuple[Msg, ...]]:
    msg = st.builds(
        lambda role, blocks, as_string: Msg(role, tuple(blocks), as_string),
        st.sampled_from(["user", "user", "assistant", "system", "tool"]),
        st.lists(st.one_of(text_block, text_block, image_block(forms)), min_size=1, max_size=3),
        st.booleans(),
    )
    return st.lists(msg, min_size=1, max_size=4).map(tuple)


@dataclass(frozen=True)
class Identity:
    scope: str
    tenant: str
    context: str
    pixels: tuple[str, ...]
    text: str


def _digest(img: Img) -> str:
    from mlc_integrations import ImageRef

    return decode_image(ImageRef(REMOTE) if img.pic < 0 else POOL[img.pic]).digest


def identity(msgs: Sequence[Msg], scope: str, tenant: str) -> Identity:
    """What the request is, from the generated conversation: the last user turn is the
    request, every other message (its role, text and pictures, and where it stands) is context."""
    users = [i for i, m in enumerate(msgs) if m.role == "user"]
    idx = users[-1] if users else len(msgs) - 1
    canon = [(m.role, [b if isinstance(b, str) else _digest(b) for b in m.blocks]) for m in msgs]
    req = msgs[idx]
    context = json.dumps({"before": canon[:idx], "after": canon[idx + 1:], "role": req.role})
    texts = [b for b in req.blocks if isinstance(b, str)]
    return Identity(scope, tenant, context, tuple(_digest(b) for b in req.blocks if isinstance(b, Img)),
                    exact_text("\n".join(texts)))


def keyable(msgs: Sequence[Msg]) -> bool:
    """A request the engine can key: its last user turn has a picture or some text."""
    ident = identity(msgs, "", "")
    return bool(ident.pixels or ident.text)


VARIANTS = ("reword", "near_picture", "other_tenant", "other_scope", "none")


def variant_pair(msgs: tuple[Msg, ...], variant: str, form: str) -> tuple[tuple[Msg, ...], tuple[Msg, ...]]:
    """Two versions of a conversation that differ only in the last user turn: a reworded
    question (L1 territory) or a picture one pixel off (L2 territory); or the same twice
    (asked by another tenant or model by the caller)."""
    users = [i for i, m in enumerate(msgs) if m.role == "user"]
    if not users:
        msgs = msgs + (Msg("user", ("What color is the shape?",), False),)
        users = [len(msgs) - 1]
    idx = users[-1]

    def with_request(text: str, pic: int) -> tuple[Msg, ...]:
        req = Msg("user", (Img(pic, form), text), False)
        return msgs[:idx] + (req,) + msgs[idx + 1:]

    if variant == "reword":
        return with_request("What color is the shape?", 1), with_request("What colour is the shape?", 1)
    if variant == "near_picture":
        return with_request("What color is the shape?", 0), with_request("What color is the shape?", POOL.index(NEAR))
    return msgs, msgs


class Ledger:
    """Which identity each stored answer was produced for (every attempt: a failed update
    may still have written its response first)."""

    def __init__(self) -> None:
        self.by_answer: dict[str, Identity] = {}
        self.tiers: dict[str, int] = {}
        self._ids = itertools.count()

    def new_answer(self, ident: Identity) -> str:
        answer = f"answer #{next(self._ids)}"
        self.by_answer[answer] = ident
        return answer

    def check_hit(self, answer: str, tier: str, probe: Identity) -> None:
        stored = self.by_answer[answer]
        where = f"{tier} hit reused {answer} stored for {stored} on {probe}"
        assert (stored.scope, stored.tenant) == (probe.scope, probe.tenant), "other scope/tenant: " + where
        assert stored.context == probe.context, "other context: " + where
        if tier in ("L0.5", "L1"):
            assert stored.pixels == probe.pixels, "other pixels: " + where
        else:
            assert len(stored.pixels) == len(probe.pixels), where
        if tier == "L0.5":
            assert stored.text == probe.text, where
        self.tiers[tier] = self.tiers.get(tier, 0) + 1

    def assert_hits_on_several_tiers(self) -> None:
        """The no-wrong-hit property was not vacuous: its examples hit, and not only exactly."""
        assert self.tiers.get("L0.5", 0) > 10, self.tiers
        assert self.tiers.get("L1", 0) + self.tiers.get("L2", 0) > 0, self.tiers


# ---------------------------------------------------------------------- shared engine
@pytest.fixture(scope="module")
def engine(text_embedder: Any, tiny_clip_dir: Path) -> Iterator[MLCEngine]:
    # The tests' CLIP has random weights (different pictures ~0.97-0.99): see test_isolation.
    eng = MLCEngine(l2_image_threshold=0.995, l2_prompt_threshold=0.9, image_encoder=str(tiny_clip_dir), limits=Limits(max_image_pixels=MAX_PIXELS))
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def picture_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    d = tmp_path_factory.mktemp("pics")
    paths = []
    for i, pic in enumerate(POOL):
        p = d / f"pic{i}.png"
        p.write_bytes(png_bytes(pic))
        paths.append(p)
    return paths


# ---------------------------------------------------------------------- LangChain
def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def lc_image(img: Img) -> dict[str, Any]:
    if img.pic < 0:
        return {"type": "image_url", "image_url": {"url": REMOTE}}
    pic = POOL[img.pic]
    png = png_bytes(pic, compress_level=1) if img.form == "png_recompressed" else png_bytes(pic)
    if img.form == "v1_base64":
        return {"type": "image", "base64": _b64(png), "mime_type": "image/png"}
    if img.form == "anthropic":
        return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _b64(png)}}
    mime = {"data_jpeg_label": "image/jpeg", "data_star": "image/*"}.get(img.form, "image/png")
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{_b64(png)}"}}


def to_langchain(msgs: Sequence[Msg]) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i, m in enumerate(msgs):
        if m.as_string and len(m.blocks) == 1 and isinstance(m.blocks[0], str):
            content: Any = m.blocks[0]
        else:
            content = [{"type": "text", "text": b} if isinstance(b, str) else lc_image(b) for b in m.blocks]
        if m.role == "user":
            out.append(HumanMessage(content=content))
        elif m.role == "assistant":
            out.append(AIMessage(content=content))
        elif m.role == "system":
            out.append(SystemMessage(content=content))
        else:
            out.append(ToolMessage(content=content, tool_call_id="call_1"))
    return out


LC_SCOPES = ["ChatFake model=a temperature=0", "ChatFake model=a temperature=1", "ChatFake model=b temperature=0"]
TENANTS = ["default", "tenant-a", "tenant-b"]


@pytest.fixture(scope="module")
def lc_caches(engine: MLCEngine) -> dict[str, MultimodalSemanticCache]:
    return {t: MultimodalSemanticCache(engine=engine, namespace=t) for t in TENANTS}


def lc_round(caches: dict[str, MultimodalSemanticCache], ledger: Ledger, msgs: tuple[Msg, ...], scope: str,
             tenant: str) -> None:
    cache = caches[tenant]
    prompt = dumps(to_langchain(msgs))
    probe = identity(msgs, scope, tenant)
    gens = cache.lookup(prompt, scope)
    if gens is None:
        answer = ledger.new_answer(probe)
        cache.update(prompt, scope, [ChatGeneration(message=AIMessage(content=answer))])
    else:
        hit = cache.last_hit
        assert hit is not None
        ledger.check_hit(gens[0].message.content, hit.tier, probe)


def other(values: Sequence[str], value: str) -> str:
    return values[(list(values).index(value) + 1) % len(values)]


LC_CONVERSATIONS = st.lists(st.tuples(messages(LC_FORMS), st.sampled_from(LC_SCOPES), st.sampled_from(TENANTS),
                                      st.sampled_from(VARIANTS), st.sampled_from(LC_FORMS)), min_size=1, max_size=3)


def langchain_never_hits_another_request(budget: settings, caches: dict[str, MultimodalSemanticCache]) -> Ledger:
    """The property over ``budget`` examples, from an empty cache (every stored answer is
    in the returned ledger)."""
    caches["default"].engine.clear()
    ledger = Ledger()

    @budget
    @given(convs=LC_CONVERSATIONS)
    def prop(convs: list[Any]) -> None:
        for msgs, scope, tenant, variant, form in convs:
            lc_round(caches, ledger, msgs, scope, tenant)
            lc_round(caches, ledger, msgs, scope, tenant)  # asked again: a hit, unless there is nothing to key
            if keyable(msgs):
                assert caches[tenant].last_hit is not None, "the same prompt twice did not hit"
            first, second = variant_pair(msgs, variant, form)
            lc_round(caches, ledger, first, scope, tenant)
            lc_round(caches, ledger, second, other(LC_SCOPES, scope) if variant == "other_scope" else scope,
                     other(TENANTS, tenant) if variant == "other_tenant" else tenant)

    prop()
    return ledger


def test_langchain_never_hits_another_request(lc_caches: dict[str, MultimodalSemanticCache]) -> None:
    langchain_never_hits_another_request(CI, lc_caches).assert_hits_on_several_tiers()


@pytest.mark.slow
def test_langchain_never_hits_another_request_soak(lc_caches: dict[str, MultimodalSemanticCache]) -> None:
    langchain_never_hits_another_request(SOAK, lc_caches).assert_hits_on_several_tiers()


# hostile LangChain prompts ------------------------------------------------------------
GOOD_PNG = png_bytes(PICS[1])
bad_image_url = st.one_of(
    st.builds(lambda n: "data:image/png;base64," + _b64(GOOD_PNG[:n]), st.integers(0, 120)),  # truncated
    st.sampled_from(["data:text/plain;base64," + _b64(GOOD_PNG), "data:application/pdf;base64," + _b64(GOOD_PNG),
                     "data:image/png;base64,@@not base64@@", "data:image/png,rawdata", "data:", "data:image/png;base64,",
                     "data:image/png;base64," + _b64(bomb_png(40_000, 40_000)),
                     "data:image/png;base64," + _b64(png_bytes(Image.new("L", (600, 600)))),  # over MAX_PIXELS
                     "data:image/gif;base64," + _b64(jpeg_bytes(PICS[2])),  # mislabeled but a real image
                     "file:///etc/hostname", "/etc/hostname", "C:\\\\img.png", "ftp://x/y.png", ""]),
    st.builds(lambda s: "data:image/png;base64," + s, st.text(max_size=40)),
)
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=30))
json_any = st.recursive(json_leaf, lambda c: st.one_of(st.lists(c, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), c, max_size=4)),
                        max_leaves=25)
hostile_block = st.one_of(
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, bad_image_url),
    st.builds(lambda u: {"type": "image_url", "image_url": u}, bad_image_url),
    st.builds(lambda d, m: {"type": "image", "base64": d, "mime_type": m}, st.text(max_size=50),
              st.one_of(st.none(), st.text(max_size=12), st.integers())),
    st.builds(lambda d: {"type": "image", "source": {"type": "base64", "media_type": "text/html", "data": d}},
              st.text(max_size=40)),
    st.builds(lambda d: {"type": "image", "source_type": "base64", "data": d}, st.one_of(st.text(max_size=30), st.integers())),
    st.builds(lambda t: {"type": "text", "text": t}, st.one_of(st.text(max_size=30), st.integers(), st.none())),
    st.builds(lambda n: {"type": "text", "text": "x" * n}, st.integers(0, 60_000)),  # huge
    st.dictionaries(st.text(max_size=8), json_any, max_size=4),
    json_leaf,
)


def deep(n: int) -> Any:
    v: Any = {"type": "text", "text": "bottom"}
    for _ in range(n):
        v = [v]
    return v


@st.composite
def hostile_prompt(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return draw(st.text(max_size=200))
    if kind == 1:
        return json.dumps(draw(json_any))
    msgs = [HumanMessage(content="start")]
    try:
        base = json.loads(dumps(msgs))
    except Exception:  # pragma: no cover
        base = []
    if kind == 2:  # serialized messages with hostile content blocks
        base[0]["kwargs"]["content"] = draw(st.lists(hostile_block, max_size=4))
    elif kind == 3:  # wrong types in the message envelope
        base[0][draw(st.sampled_from(["id", "kwargs", "lc", "type"]))] = draw(json_any)
    elif kind == 4:  # deep nesting
        base[0]["kwargs"]["content"] = deep(draw(st.integers(1, 400)))
    else:  # extra fields and lists of non-messages
        base[0]["kwargs"][draw(st.text(min_size=1, max_size=10))] = draw(json_any)
        base += draw(st.lists(json_any, max_size=3))
    text = json.dumps(base)
    if draw(st.booleans()) and len(text) > 4:  # truncated JSON
        text = text[: draw(st.integers(1, len(text) - 1))]
    return text


@CI
@given(prompt=hostile_prompt(), scope=st.one_of(st.sampled_from(LC_SCOPES), st.text(max_size=50)))
def test_langchain_hostile_prompts_never_raise(lc_caches: Any, prompt: str, scope: str) -> None:
    cache = lc_caches["default"]
    if cache.lookup(prompt, scope) is None:
        cache.update(prompt, scope, [ChatGeneration(message=AIMessage(content="x"))])
    again = cache.lookup(prompt, scope)
    assert again is None or (cache.last_hit is not None and again[0].message.content == "x")
    _only_bad_input_failed(cache)


@CI
@given(prompt=hostile_prompt())
async def test_langchain_hostile_prompts_never_raise_async(lc_caches: Any, prompt: str) -> None:
    cache = lc_caches["tenant-b"]
    if await cache.alookup(prompt, LC_SCOPES[0]) is None:
        await cache.aupdate(prompt, LC_SCOPES[0], [ChatGeneration(message=AIMessage(content="y"))])
    again = await cache.alookup(prompt, LC_SCOPES[0])
    assert again is None or again[0].message.content == "y"  # never another prompt's answer
    _only_bad_input_failed(cache)


BAD_INPUT_ERRORS = ("InvalidRequestError", "ImageDecodeError", "ImageTooLargeError", "PayloadError")


def _only_bad_input_failed(cache: Any) -> None:
    """A fail-open cache never raises, so "never raises" alone proves nothing: every
    failure it counted must be the bad input's, never a bug of ours swallowed as a miss."""
    errors = cache.engine.stats()["errors"]
    assert all(k.split(":")[-1] in BAD_INPUT_ERRORS for k in errors), errors


# ---------------------------------------------------------------------- LlamaIndex
class LedgerLLM(CustomLLM):
    """Inner LLM: each call produces a new answer, recorded against the identity the
    test says this call is for."""

    model: str = "ledger-a"
    _ledger: Any = PrivateAttr(default=None)
    _current: Any = PrivateAttr(default=None)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.model, is_chat_model=False)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        ledger = self._ledger
        text = ledger.new_answer(self._current) if ledger is not None and self._current is not None else "no answer"
        return CompletionResponse(text=text)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        resp = self.complete(prompt, formatted)
        yield resp


LI_ROLES = {"user": MessageRole.USER, "assistant": MessageRole.ASSISTANT, "system": MessageRole.SYSTEM,
            "tool": MessageRole.TOOL}


def li_image(img: Img, files: list[Path]) -> ImageBlock:
    if img.pic < 0:
        return ImageBlock(url=REMOTE)
    pic = POOL[img.pic]
    if img.form == "path":
        return ImageBlock(path=files[img.pic])
    png = png_bytes(pic, compress_level=1) if img.form == "png_recompressed" else png_bytes(pic)
    if img.form == "data_png":
        return ImageBlock(url=f"data:image/png;base64,{_b64(png)}")
    if img.form == "data_wrong_label":
        return ImageBlock(url=f"data:image/jpeg;base64,{_b64(png)}")
    return ImageBlock(image=png)


def to_llamaindex(msgs: Sequence[Msg], files: list[Path]) -> list[ChatMessage]:
    out = []
    for m in msgs:
        blocks = [TextBlock(text=b) if isinstance(b, str) else li_image(b, files) for b in m.blocks]
        out.append(ChatMessage(role=LI_ROLES[m.role], blocks=blocks))
    return out


@pytest.fixture(scope="module")
def li_wrappers(engine: MLCEngine) -> dict[tuple[str, str], CachedMultiModalLLM]:
    wrappers = {}
    for model in ("ledger-a", "ledger-b"):
        inner = LedgerLLM(model=model)
        for t in TENANTS:
            wrappers[(model, t)] = CachedMultiModalLLM(llm=inner, engine=engine, namespace=t)
    return wrappers


def li_round(wrappers: dict[tuple[str, str], CachedMultiModalLLM], ledger: Ledger, files: list[Path],
             msgs: tuple[Msg, ...], model: str, tenant: str) -> Optional[str]:
    cached = wrappers[(model, tenant)]
    probe = identity(msgs, model, tenant)
    cached.llm._ledger = ledger
    cached.llm._current = probe
    response = cached.chat(to_llamaindex(msgs, files))
    hit = cached.last_hit
    if hit is not None:
        ledger.check_hit(response.message.content, hit.tier, probe)
        return hit.tier
    return None


LI_MODELS = ["ledger-a", "ledger-b"]
LI_CONVERSATIONS = st.lists(st.tuples(messages(LI_FORMS), st.sampled_from(LI_MODELS), st.sampled_from(TENANTS),
                                      st.sampled_from(VARIANTS), st.sampled_from(LI_FORMS)), min_size=1, max_size=3)


def llamaindex_never_hits_another_request(budget: settings, wrappers: dict[tuple[str, str], CachedMultiModalLLM],
                                          files: list[Path]) -> Ledger:
    """The property over ``budget`` examples, from an empty cache (every stored answer is
    in the returned ledger)."""
    wrappers[(LI_MODELS[0], TENANTS[0])].engine.clear()
    ledger = Ledger()

    @budget
    @given(convs=LI_CONVERSATIONS)
    def prop(convs: list[Any]) -> None:
        for msgs, model, tenant, variant, form in convs:
            li_round(wrappers, ledger, files, msgs, model, tenant)
            tier = li_round(wrappers, ledger, files, msgs, model, tenant)
            assert tier is not None or not keyable(msgs), "asked twice, no hit"
            first, second = variant_pair(msgs, variant, form)
            li_round(wrappers, ledger, files, first, model, tenant)
            li_round(wrappers, ledger, files, second, other(LI_MODELS, model) if variant == "other_scope" else model,
                     other(TENANTS, tenant) if variant == "other_tenant" else tenant)

    prop()
    return ledger


def test_llamaindex_never_hits_another_request(li_wrappers: Any, picture_files: list[Path]) -> None:
    llamaindex_never_hits_another_request(CI, li_wrappers, picture_files).assert_hits_on_several_tiers()


@pytest.mark.slow
def test_llamaindex_never_hits_another_request_soak(li_wrappers: Any, picture_files: list[Path]) -> None:
    llamaindex_never_hits_another_request(SOAK, li_wrappers, picture_files).assert_hits_on_several_tiers()


# hostile LlamaIndex messages -----------------------------------------------------------
hostile_li_block = st.one_of(
    st.builds(lambda n: ImageBlock(image=GOOD_PNG[:n]), st.integers(1, 150)),  # truncated bytes
    st.builds(lambda b: ImageBlock(image=b), st.binary(min_size=1, max_size=100)),
    st.builds(lambda u: ImageBlock(url=u), st.sampled_from([
        "data:text/plain;base64," + _b64(GOOD_PNG), "data:image/png;base64,!!!!", "data:image/png;base64,",
        "data:image/png;base64," + _b64(bomb_png(40_000, 40_000)),
        "data:image/png;base64," + _b64(png_bytes(Image.new("L", (600, 600)))),
        "file:///nonexistent/x.png", "https://example.com/" + "a" * 3000])),
    st.builds(lambda: ImageBlock(path=Path(__file__))),  # a file that is not an image
    st.builds(lambda n: TextBlock(text="y" * n), st.integers(0, 60_000)),
    st.builds(TextBlock, text=st.text(max_size=50)),
)


def nested_dict(n: int) -> Any:
    v: Any = "leaf"
    for _ in range(n):
        v = {"k": v}
    return v


odd_kwargs = st.one_of(
    st.dictionaries(st.text("abcdefgh", min_size=1, max_size=8).map(lambda k: "x_" + k), json_any, max_size=3),
    st.builds(lambda n: {"deep": nested_dict(n)}, st.integers(1, 300)),
    st.just({"obj": object()}), st.just({"nan": float("nan")}), st.just({"bytes": b"\x00\xff"}),
    st.just({"set": {1, 2}}),
)


@settings(CI, max_examples=2 * CI_EXAMPLES)
@given(blocks=st.lists(hostile_li_block, min_size=1, max_size=3), role=st.sampled_from(list(LI_ROLES.values())),
       extra=odd_kwargs, kwargs=st.one_of(st.just({}), odd_kwargs))
def test_llamaindex_hostile_messages_never_raise(li_wrappers: Any, blocks: list[Any], role: MessageRole,
                                                 extra: dict[str, Any], kwargs: dict[str, Any]) -> None:
    cached = li_wrappers[("ledger-a", "default")]
    cached.llm._current = None
    msgs = [ChatMessage(role=MessageRole.SYSTEM, content="be brief"),
            ChatMessage(role=role, blocks=blocks, additional_kwargs=extra)]
    first = cached.chat(msgs, **kwargs)
    second = cached.chat(msgs, **kwargs)
    assert first.message.content == second.message.content == "no answer"
