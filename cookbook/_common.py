"""Plumbing the cookbook examples share: which model to talk to, the pictures and their
right answers, and the toy shop the agent examples (01, 02, 06) serve. Each example's
own story (its framework's agent, how it reads each step) is in the example; the
offline stand-in model is in ``_standin.py``.

Nothing here is part of the library. The examples import it as ``_common`` (the
script's own folder is first on ``sys.path`` when you run ``python cookbook/NN_x.py``).

* **The model**: the offline stand-in (default; not an LLM, labelled as such in every
  output) or, with ``MLC_COOKBOOK_PROVIDER=openai`` / ``ollama``, a real one
  (``MLC_COOKBOOK_MODEL`` picks which). Provider packages are imported only in their branch.
* **Pictures** come from easy-vqa's test split (installed offline by ``./dev``): one
  shape of one colour on a plain background, the colour and shape known from the
  dataset's own question/answer pairs, so every answer can be checked.
  :func:`picture` picks pictures the stand-in reads right (it misreads 4 of 668);
  :func:`picture_by_id` takes any, misread ones included.
* **The toy shop**: its prompt, catalog (:func:`price_of`), the runs every agent
  example makes (:func:`shop_tasks`) and their summary (:func:`agent_summary`), so
  the three agents differ only in how their framework runs the agent.
"""

from __future__ import annotations

import io

import base64
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Optional

from PIL import Image

# The examples depend on the library only (and easy-vqa's pictures, the `cookbook` extra):
# copy one into your project and it runs.
COLORS = ("red", "green", "blue", "black", "gray", "teal", "brown", "yellow")  # easy-vqa's vocabulary
SHAPES = ("circle", "rectangle", "triangle")


def png_bytes(im: Image.Image) -> bytes:
    """The picture as a PNG file (same pixels whatever the encoder's settings)."""
    out = io.BytesIO()
    im.save(out, format="PNG")
    return out.getvalue()
from mlc_integrations.embed.models import NAMED_CLIP_MODELS

PROVIDER_ENV = "MLC_COOKBOOK_PROVIDER"
MODEL_ENV = "MLC_COOKBOOK_MODEL"
PROVIDERS = ("standin", "openai", "ollama")
DEFAULT_MODELS = {"openai": "gpt-4o-mini", "ollama": "llama3.2-vision"}
OFFLINE_CLIP = "mlc-easyvqa-tiny"
STANDIN_LABEL = (
    "STAND-IN MODEL (not an LLM): reads colour and shape from the pixels; "
    f"set {PROVIDER_ENV}=openai|ollama for a real one"
)
FRENCH = {
    "red": "rouge", "green": "vert", "blue": "bleu", "black": "noir", "gray": "gris", "teal": "sarcelle",
    "brown": "marron", "yellow": "jaune", "circle": "cercle", "rectangle": "rectangle", "triangle": "triangle",
    "yes": "oui", "no": "non",
}


# ---------------------------------------------------------------------------- the model
def provider() -> str:
    """The model provider chosen by ``MLC_COOKBOOK_PROVIDER`` (default: the stand-in)."""
    value = os.environ.get(PROVIDER_ENV, "standin").strip().lower() or "standin"
    if value not in PROVIDERS:
        raise SystemExit(f"{PROVIDER_ENV}={value!r}: choose one of {', '.join(PROVIDERS)}")
    return value


def provider_model(name: str) -> str:
    return os.environ.get(MODEL_ENV) or DEFAULT_MODELS[name]


def langchain_chat_model(latency_s: float = 0.0, *, cache: Any = None) -> Any:
    """The LangChain chat model for the chosen provider (``latency_s``: the stand-in sleeps
    that long per call, standing for a remote model)."""
    name = provider()
    options: dict[str, Any] = {"cache": cache} if cache is not None else {}
    if name == "openai":
        from langchain_openai import ChatOpenAI  # pip install langchain-openai; needs OPENAI_API_KEY

        return ChatOpenAI(model=provider_model(name), temperature=0, **options)
    if name == "ollama":
        from langchain_ollama import ChatOllama  # pip install langchain-ollama; needs `ollama serve`

        return ChatOllama(model=provider_model(name), temperature=0, **options)
    from _standin import langchain_stand_in_class

    return langchain_stand_in_class()(latency_s=latency_s, **options)


def llamaindex_llm(latency_s: float = 0.0) -> Any:
    """The LlamaIndex LLM for the chosen provider."""
    name = provider()
    if name == "openai":
        from llama_index.llms.openai import OpenAI  # pip install llama-index-llms-openai; needs OPENAI_API_KEY

        return OpenAI(model=provider_model(name), temperature=0)
    if name == "ollama":
        from llama_index.llms.ollama import Ollama  # pip install llama-index-llms-ollama; needs `ollama serve`

        return Ollama(model=provider_model(name), temperature=0, request_timeout=120)
    from _standin import llamaindex_stand_in_class

    return llamaindex_stand_in_class()(latency_s=latency_s)


def model_calls(model: Any, misses: int) -> int:
    """Times the model really ran: the stand-in counts them; for a real provider every
    cache miss is one call (LangChain and the wrapper call the model only on a miss)."""
    return int(getattr(model, "calls", misses))


def offline_clip_model() -> Optional[str]:
    """``"mlc-easyvqa-tiny"`` when its checkpoint is installed, else None (L2 off).

    The offline CLIP only knows easy-vqa's world (eight colours, three shapes), which is
    what these examples show. For your own pictures point ``image_encoder`` at a real CLIP.
    """
    path = NAMED_CLIP_MODELS[OFFLINE_CLIP]
    return OFFLINE_CLIP if (path / "open_clip_config.json").exists() else None


def introduce(title: str) -> Optional[str]:
    """Print the example's title and set-up; returns the CLIP model for L2 (None: off)."""
    clip = offline_clip_model()
    print(title)
    print(describe_setup(clip) + "\n")
    return clip


def describe_setup(clip_model: Optional[str]) -> str:
    model = STANDIN_LABEL if provider() == "standin" else f"{provider()} model {provider_model(provider())}"
    l2 = f"L2 on ({clip_model})" if clip_model else f"L2 off ({OFFLINE_CLIP} checkpoint not installed)"
    return f"model: {model}\ncache: in-memory Chroma, L0.5 + L1 (all-MiniLM-L6-v2) + {l2}"


def tier_of(hit: Any) -> str:
    """``"L0.5"``/``"L1"``/``"L2"`` for a hit, ``"miss"`` for None."""
    return hit.tier if hit is not None else "miss"


def served(step: dict[str, Any]) -> str:
    """How a recorded model call was served, as the examples print it."""
    return "MISS, model called" if step["model"] == "miss" else f"CACHE HIT {step['why']}"


class CallMeter:
    """Model calls and cache misses during one run: read the counters before, then
    :meth:`read` after (``misses``: the adapter's miss counter)."""

    def __init__(self, model: Any, misses: Callable[[], int]) -> None:
        self._model, self._misses = model, misses
        self._calls_before, self._misses_before = model_calls(model, 0), misses()

    def read(self) -> tuple[int, int]:
        """``(model calls, cache misses)`` since this meter was made."""
        misses = self._misses() - self._misses_before
        return model_calls(self._model, self._calls_before + misses) - self._calls_before, misses


# ---------------------------------------------------------------------------- pictures and right answers
@dataclass(frozen=True)
class Picture:
    """An easy-vqa picture and its ground truth."""

    image_id: int
    color: str
    shape: str
    image: Image.Image = field(compare=False, repr=False)

    @property
    def name(self) -> str:
        return f"{self.color} {self.shape} (easy-vqa test #{self.image_id})"

    def png(self) -> bytes:
        return png_bytes(self.image)

    def data_url(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png()).decode("ascii")


def langchain_image_block(pic: Picture) -> dict[str, Any]:
    """An OpenAI-style image block with the picture as a PNG data URL."""
    return {"type": "image_url", "image_url": {"url": pic.data_url()}}


@lru_cache(maxsize=1)
def easyvqa_labels() -> dict[int, tuple[str, str]]:
    """(colour, shape) of every easy-vqa test image whose questions state both."""
    import easy_vqa

    qs, answers, ids = easy_vqa.get_test_questions()
    color: dict[int, str] = {}
    shape: dict[int, str] = {}
    for q, a, i in zip(qs, answers, ids):
        q = q.lower()
        if q.startswith("what") and "color" in q:
            color[i] = a
        elif q.startswith("what shape"):
            shape[i] = a
        else:
            m = re.match(r"what is the (\w+) shape\?", q)
            if m:
                color[i], shape[i] = m.group(1), a
    return {i: (color[i], shape[i]) for i in sorted(color) if i in shape}


@lru_cache(maxsize=64)
def picture_by_id(image_id: int) -> Picture:
    """Easy-vqa test picture ``image_id`` with its labels, whatever the stand-in reads in it."""
    import easy_vqa

    color, shape = easyvqa_labels()[image_id]
    return Picture(image_id, color, shape, Image.open(easy_vqa.get_test_image_paths()[image_id]).convert("RGB"))


@lru_cache(maxsize=64)
def picture(color: str, shape: str, nth: int = 0) -> Picture:
    """The ``nth`` easy-vqa test picture of a ``color`` ``shape`` among those the
    stand-in reads right: the examples show the cache, not the stand-in's mistakes."""
    from _standin import read_picture

    readable = (i for i, label in easyvqa_labels().items() if label == (color, shape)
                and read_picture(picture_by_id(i).image) == label)
    for seen, image_id in enumerate(readable):
        if seen == nth:
            return picture_by_id(image_id)
    raise LookupError(f"no easy-vqa test picture #{nth} of a {color} {shape}")


def true_answer(question: str, color: str, shape: str, previous: Optional[str] = None) -> str:
    """The right answer to the questions the examples ask about a ``color`` ``shape``
    (``previous``: the right answer to the question before, for "answer again ... in French")."""
    q = question.lower()
    if "french" in q:
        return FRENCH.get(previous or "", previous or "")
    if "describe" in q:
        return f"a {color} {shape}"
    if q.startswith(("what", "which")) and ("color" in q or "colour" in q):
        return color
    if q.startswith("what") and "shape" in q:
        return shape
    negated = bool(re.search(r"\b(not|no)\b", q))
    for word in COLORS + SHAPES:
        if re.search(rf"\b{word}\b", q):
            present = word in (color, shape)
            return "yes" if present != negated else "no"
    return "I can only answer questions about the colour and shape in the picture."


# ---------------------------------------------------------------------------- the toy shop (01, 02, 06)
SHOP_SYSTEM = ("You are a toy shop assistant. Look at the customer's picture, then use the "
               "catalog_price tool with the colour and shape you see to quote the price.")
PRICE_QUESTION = "What is the price of the shape in this picture?"
PRICE_PARAPHRASES = ("Tell me the price of the shape in this picture.", "What is the price of the shape in this image?")


def price_of(color: str, shape: str) -> str:
    """The toy shop's catalog: a price per shape, 20 cents more per colour down the list."""
    if shape not in SHAPES or color not in COLORS:
        return f"no catalog entry for a {color} {shape}"
    cents = {"circle": 300, "rectangle": 450, "triangle": 250}[shape] + 20 * COLORS.index(color)
    return f"${cents // 100}.{cents % 100:02d}"


@lru_cache(maxsize=1)
def langchain_catalog_tool() -> Any:
    """The catalog as the LangChain tool ``catalog_price`` (examples 01 and 06)."""
    from langchain_core.tools import tool

    @tool
    def catalog_price(color: str, shape: str) -> str:
        """Look up the price of a shape of the given colour in the shop's catalog."""
        return price_of(color.lower(), shape.lower())

    return catalog_price


def shop_tasks(paraphrases: int = 2) -> list[tuple[str, str, Picture]]:
    """The agent examples' runs, ``(label, question, picture)``: a task, the same task
    again, ``paraphrases`` paraphrased tasks, the task about a different picture."""
    blue_circle, red_triangle = picture("blue", "circle"), picture("red", "triangle")
    labels = ["paraphrase"] if paraphrases == 1 else [f"paraphrase {n}" for n in range(1, paraphrases + 1)]
    return ([("task", PRICE_QUESTION, blue_circle), ("same task again", PRICE_QUESTION, blue_circle)]
            + [(label, q, blue_circle) for label, q in zip(labels, PRICE_PARAPHRASES)]
            + [("different picture", PRICE_QUESTION, red_triangle)])


def run_record(label: str, question: str, pic: Picture, answer: str, steps: list[dict[str, Any]],
               calls: int, misses: int, **extra: Any) -> dict[str, Any]:
    """What an agent example keeps of one run; ``correct``: the answer quotes the
    catalog price of what the picture really shows (easy-vqa's labels)."""
    return {"label": label, "question": question, "picture": pic.name, "answer": answer, "steps": steps,
            **extra, "model_calls": calls, "cache_misses": misses,
            "correct": price_of(pic.color, pic.shape) in answer}


def agent_summary(example: str, stats: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The agent examples' summary (``stats``: the cache's ``stats()``), printed and
    returned. Without the cache every recorded model call would have run the model."""
    summary = {
        "example": example,
        "provider": provider(),
        "l2": stats["config"]["tiers"]["L2"],
        "runs": runs,
        "model_calls": sum(r["model_calls"] for r in runs),
        "model_calls_without_cache": sum(1 for r in runs for step in r["steps"] if "model" in step),
        "hits_by_tier": {t: v.get("hit", 0) for t, v in stats["tiers"].items()},
        "all_correct": all(r["correct"] for r in runs),
    }
    print(f"summary: {summary['model_calls']} model calls instead of {summary['model_calls_without_cache']}; "
          f"hits by tier {summary['hits_by_tier']}; every answer has the catalog price: {summary['all_correct']}")
    return summary
