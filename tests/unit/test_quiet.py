"""Quiet by default: no progress bar per new text, none on a model's first load."""

from __future__ import annotations

import logging

from mlc_integrations.embed.models import TextEmbedder, quiet_progress_bars


def test_embedding_new_texts_at_info_prints_no_progress_bar(text_embedder: TextEmbedder, capsys, caplog) -> None:
    with caplog.at_level(logging.INFO):
        text_embedder.embed([f"a sentence never embedded before, number {i}" for i in range(3)])
    err = capsys.readouterr().err
    assert "Batches" not in err and "it/s" not in err


def test_quiet_progress_bars_restores_the_applications_setting() -> None:
    from transformers.utils import logging as tf_logging

    tf_logging.enable_progress_bar()
    with quiet_progress_bars():
        assert not tf_logging.is_progress_bar_enabled()
    assert tf_logging.is_progress_bar_enabled()
    tf_logging.disable_progress_bar()
    with quiet_progress_bars():
        pass
    assert not tf_logging.is_progress_bar_enabled()  # left as the application set it
    tf_logging.enable_progress_bar()
