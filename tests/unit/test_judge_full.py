"""The ``full`` judge file (every layer fine-tuned, shipped as int8 differences to the
installed all-MiniLM-L6-v2): what the packer writes, the library reads back into the
same model, offline, without the embeddings in the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlc_integrations.verify.text.judge import (JUDGE_FORMAT, JUDGE_FORMAT_VERSION, PairJudge, dequantized_delta,
                                                merged_state, read_judge)

PAIRS = [("How do I reverse a list in Python?", "What's the way to reverse a list in Python?"),
         ("How do I reverse a string in Python?", "How do I reverse a string in JavaScript?")]


@pytest.fixture(scope="session")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A judge whose layers moved a little from the base model (seeded), packed as shipped."""
    import torch
    from transformers import AutoModel

    from evaluation.training.judge_pack import calibration, pack_arrays
    from mlc_integrations.embed.models import resolve_text_model

    model_dir = str(resolve_text_model(None))
    base = AutoModel.from_pretrained(model_dir, attn_implementation="eager").state_dict()
    g = torch.Generator().manual_seed(7)
    state = {"bert." + k: v + 0.003 * torch.randn(v.shape, generator=g) for k, v in base.items()
             if k.startswith("encoder.")}
    state["head.weight"] = 0.05 * torch.randn(1, 384, generator=g)
    state["head.bias"] = torch.zeros(1)
    arrays, tuned_names = pack_arrays(state, base)
    y = np.array([True, False, True, False])
    meta = {"format": JUDGE_FORMAT, "version": JUDGE_FORMAT_VERSION, "kind": "full", "name": "test",
            "base_model": "all-MiniLM-L6-v2", "max_tokens": 64, "tuned": tuned_names, "threshold": 0.5,
            "calibration": calibration(y, np.array([0.9, 0.2, 0.8, 0.4]))}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    path = tmp_path_factory.mktemp("judge") / "judge.npz"
    np.savez_compressed(path, **arrays)
    return {"path": path, "state": state, "base": base, "model_dir": model_dir}


def test_the_file_holds_int8_layer_differences_and_no_embeddings(tuned: dict[str, Any]) -> None:
    j = read_judge(tuned["path"])
    assert j["meta"]["kind"] == "full"
    assert not any("embeddings" in k for k in j)
    q = [k for k in j if k.startswith("q:")]
    assert len(q) == 6 * 6 and all(j[k].dtype == np.int8 for k in q)  # 6 linear layers in each of 6 blocks


def test_a_difference_reads_back_within_half_a_quantization_step(tuned: dict[str, Any]) -> None:
    j = read_judge(tuned["path"])
    name = "encoder.layer.3.intermediate.dense.weight"
    want = (tuned["state"]["bert." + name] - tuned["base"][name]).numpy()
    got = dequantized_delta(j, name)
    step = j[f"s:{name}"].astype(np.float32)[:, None]
    assert np.all(np.abs(got - want) <= 0.5 * step + 1e-4 * np.abs(want).max())


def test_the_merged_model_is_base_plus_differences(tuned: dict[str, Any]) -> None:
    j = read_judge(tuned["path"])
    merged = merged_state(tuned["base"], j)
    name = "encoder.layer.0.attention.self.query.weight"
    np.testing.assert_allclose(merged[name].numpy(), tuned["state"]["bert." + name].numpy(), atol=2e-4)
    emb = "embeddings.word_embeddings.weight"
    assert merged[emb] is tuned["base"][emb]  # the installed model's embeddings, untouched


def test_the_library_scores_pairs_as_the_trained_model_does(tuned: dict[str, Any]) -> None:
    """Torch reference: the tuned state's mean-pooled states through the head."""
    import torch
    from transformers import AutoModel

    from mlc_integrations.embed.text_onnx import encoding_feeds, load_tokenizer

    ref = AutoModel.from_pretrained(tuned["model_dir"], attn_implementation="eager")
    ref.load_state_dict({**tuned["base"], **{k[5:]: v for k, v in tuned["state"].items() if k.startswith("bert.")}})
    tok = load_tokenizer(Path(tuned["model_dir"]))
    tok.enable_truncation(64, strategy="longest_first")
    want = []
    with torch.no_grad():
        for p in PAIRS:
            f = {k: torch.from_numpy(v) for k, v in encoding_feeds(tok.encode_batch([p])).items()}
            h = ref.eval()(**f).last_hidden_state.mean(1)
            want.append(float(torch.sigmoid(h @ tuned["state"]["head.weight"][0] + tuned["state"]["head.bias"][0])))
    judge = PairJudge(tuned["path"], backend="torch")
    assert judge.kind == "full" and judge.backend == ""  # lazy: nothing built before the first pair
    np.testing.assert_allclose(judge.probabilities(PAIRS), want, atol=2e-3)
    assert judge.backend == "torch"


def test_the_knob_reads_the_files_calibration_table(tuned: dict[str, Any]) -> None:
    judge = PairJudge(tuned["path"], backend="torch")
    assert judge.threshold_for(0.01) == judge.calibration[3]["threshold"]
    assert PairJudge(tuned["path"], backend="torch", max_wrong_reuse=0.2).threshold <= judge.threshold_for(0.01)


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="backend"):
        PairJudge(backend="gpu")
