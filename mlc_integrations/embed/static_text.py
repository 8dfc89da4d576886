"""A static text embedding distilled from the sentence model: L1's pre-screen at microseconds a text.

model2vec-style: every vocabulary token of the local sentence model (all-MiniLM-L6-v2 by
default) is run through the model once, alone (``[CLS] token [SEP]``), and its sentence
vector is kept; PCA reduces the table to :data:`DIM` dimensions; a text's static vector is
the weighted mean of its tokens' rows, L2-normalized. Token weights are SIF weights over a
Zipf prior on the vocabulary order (frequent pieces weigh less), as model2vec does.

The table is built offline from the local weights on first use, once per machine (about
15 s on one core through the cached ONNX export), and cached under
``cache_root()/text-static`` (beside the ONNX export, :mod:`.text_onnx`), keyed by the
SHA-256 of the model's files and :data:`RECIPE`. Nothing ships in the wheel and nothing is
downloaded. ``python -m mlc_integrations.embed.static_text`` builds it ahead of first use.

Only its *recall* matters: the L1 pre-screen (:class:`~.tiers.TextSemanticTier`) calls a
new text a miss when no stored static vector of its partition is within
:data:`~.tiers.DEFAULT_L1_PRESCREEN`; that threshold is chosen so that pairs the sentence
model puts over L1's retrieval floor pass it (``python -m evaluation.studies.text_prescreen``,
docs/results/text_prescreen.md).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..runtime.lru import LRU

log = logging.getLogger(__name__)

RECIPE = "s1"  # bump when the table changes (the cache key includes it)
DIM = 128
SIF_A = 1e-5  # SIF weight a / (a + p(token)), p from a Zipf prior on the vocabulary order
_BATCH = 512
STATIC_MODEL_PREFIX = "static-"  # recorded on the l1_static collection with the source model


def _token_vectors_onnx(model_dir: Path, ids: np.ndarray, cls_id: int, sep_id: int) -> np.ndarray:
    """Sentence vectors of ``[CLS] id [SEP]`` for every id, through the cached fp32 ONNX export."""
    from .text_onnx import OnnxTextEncoder

    enc = OnnxTextEncoder.open(model_dir, quantize=False)
    session = enc._fp32  # the fp32 graph: pooling and normalization inside
    names = [i.name for i in session.get_inputs()]
    out = np.empty((len(ids), enc.dim), dtype=np.float32)
    for start in range(0, len(ids), _BATCH):
        chunk = ids[start:start + _BATCH]
        n = len(chunk)
        feeds = {"input_ids": np.stack([np.full(n, cls_id), chunk, np.full(n, sep_id)], 1).astype(np.int64),
                 "attention_mask": np.ones((n, 3), dtype=np.int64), "token_type_ids": np.zeros((n, 3), dtype=np.int64)}
        out[start:start + n] = session.run(None, {k: feeds[k] for k in names})[0]
    return out


def _token_vectors_torch(model_dir: Path, ids: np.ndarray, cls_id: int, sep_id: int) -> np.ndarray:
    """The same through sentence-transformers' torch model (when ONNX cannot serve it)."""
    import torch
    from transformers import AutoModel

    from .models import quiet_progress_bars

    with quiet_progress_bars():
        model = AutoModel.from_pretrained(str(model_dir)).eval()
    out = []
    with torch.inference_mode():
        for start in range(0, len(ids), _BATCH):
            chunk = torch.from_numpy(ids[start:start + _BATCH].astype(np.int64))
            n = len(chunk)
            inp = torch.stack([torch.full((n,), cls_id), chunk, torch.full((n,), sep_id)], 1)
            hidden = model(input_ids=inp, attention_mask=torch.ones_like(inp)).last_hidden_state
            out.append(torch.nn.functional.normalize(hidden.mean(1), dim=1).numpy())
    return np.concatenate(out).astype(np.float32)


def token_vectors(model_dir: str | Path) -> tuple[np.ndarray, dict[str, int], str]:
    """Every vocabulary token's sentence vector (``[CLS] token [SEP]``), the vocabulary, and
    how it was computed ("onnx-fp32", or "torch" when ONNX cannot serve the model)."""
    from .text_onnx import OnnxUnavailable, load_tokenizer

    d = Path(model_dir)
    vocab = load_tokenizer(d).get_vocab()
    ids = np.arange(max(vocab.values()) + 1, dtype=np.int64)
    cls_id, sep_id = vocab.get("[CLS]", 101), vocab.get("[SEP]", 102)
    try:
        return _token_vectors_onnx(d, ids, cls_id, sep_id), vocab, "onnx-fp32"
    except OnnxUnavailable as exc:
        log.info("static text table: ONNX unavailable (%s); distilling through torch", exc)
        return _token_vectors_torch(d, ids, cls_id, sep_id), vocab, "torch"


def reduce(raw: np.ndarray, dim: int = DIM) -> np.ndarray:
    """Centre the token vectors and keep their first ``dim`` principal components."""
    centred = raw - raw.mean(0)
    _u, _s, vt = np.linalg.svd(centred, full_matrices=False)
    return (centred @ vt[:dim].T).astype(np.float32)


def sif_weights(vocab: dict[str, int], a: float = SIF_A) -> np.ndarray:
    """SIF token weights a / (a + p) with p from a Zipf prior on the vocabulary order;
    special tokens ([CLS], [PAD], ...) weigh 0."""
    size = max(vocab.values()) + 1
    rank = np.arange(1, size + 1, dtype=np.float64)
    p = (1.0 / rank) / (1.0 / rank).sum()
    weights = (a / (a + p)).astype(np.float32)
    weights[[i for t, i in vocab.items() if t.startswith("[") and t.endswith("]")]] = 0.0
    return weights


def distill(model_dir: str | Path, dim: int = DIM) -> dict[str, Any]:
    """The static table of ``model_dir``: ``vectors`` (vocab x dim, float16), ``weights`` (vocab)."""
    t0 = time.perf_counter()
    raw, vocab, how = token_vectors(model_dir)
    return {"vectors": reduce(raw, dim).astype(np.float16), "weights": sif_weights(vocab),
            "meta": {"source": str(model_dir), "recipe": RECIPE, "dim": dim, "sif_a": SIF_A, "vocab": len(raw),
                     "distilled_with": how, "seconds": round(time.perf_counter() - t0, 2)}}


def build(model_dir: str | Path) -> Path:
    """The cached static table for ``model_dir`` (distilled now if absent); its file."""
    from .text_onnx import cache_root, source_digest

    d = Path(model_dir)
    final = cache_root() / "text-static" / f"{source_digest(d)[:16]}-{RECIPE}.npz"
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    table = distill(d)
    fd, tmp = tempfile.mkstemp(dir=final.parent, suffix=".npz.tmp")
    with os.fdopen(fd, "wb") as fh:
        np.savez(fh, vectors=table["vectors"], weights=table["weights"], meta=json.dumps(table["meta"]))
    os.replace(tmp, final)  # another process finishing first wrote the same table
    log.info("distilled a static text table from %s in %.1f s -> %s", d.name, table["meta"]["seconds"], final)
    return final


class StaticTextEmbedder:
    """Static vectors of texts: tokenize, weighted mean of token rows, L2-normalize (memoized)."""

    def __init__(self, tokenizer: Any, vectors: np.ndarray, weights: np.ndarray, name: str) -> None:
        self._tok = tokenizer
        self._vectors = np.asarray(vectors, dtype=np.float16)  # 7.8 MB for MiniLM; rows cast per text
        self._weights = np.asarray(weights, dtype=np.float32)
        self.dim = int(self._vectors.shape[1])
        self.name = name  # recorded on the l1_static collection: a collection never mixes tables
        self._memo = LRU(8192)

    @classmethod
    def open(cls, model_dir: str | Path) -> "StaticTextEmbedder":
        from .text_onnx import load_tokenizer

        path = build(model_dir)
        with np.load(path) as z:
            vectors, weights = z["vectors"], z["weights"]
        return cls(load_tokenizer(model_dir), vectors, weights, f"{STATIC_MODEL_PREFIX}{RECIPE}:{path.stem}")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        todo: list[int] = []
        for i, t in enumerate(texts):
            v = self._memo.get(t)
            if v is None:
                todo.append(i)
            else:
                out[i] = v
        if todo:
            for i, enc in zip(todo, self._tok.encode_batch([texts[i] for i in todo], add_special_tokens=False)):
                ids = np.asarray(enc.ids, dtype=np.int64)
                if len(ids):
                    w = self._weights[ids]
                    v = w @ self._vectors[ids].astype(np.float32)
                    n = float(np.linalg.norm(v))
                    if n > 0:
                        out[i] = v / n
                self._memo.put(texts[i], out[i].copy())
        return out


_lock = threading.Lock()
_shared: dict[str, StaticTextEmbedder] = {}


def shared_static(model_dir: str, opener: Callable[[str], StaticTextEmbedder] = StaticTextEmbedder.open
                  ) -> Optional[StaticTextEmbedder]:
    """The process-wide static embedder of ``model_dir``; None (logged once) when it cannot be
    had — a hub name, a model that is not a local BERT sentence-transformers directory."""
    got = _shared.get(model_dir)
    if got is not None or model_dir in _failed:
        return got
    with _lock:
        if model_dir not in _shared and model_dir not in _failed:
            try:
                _shared[model_dir] = opener(model_dir)
            except Exception as exc:
                _failed.add(model_dir)
                log.info("L1 text pre-screen off: no static table for %s (%s: %s)", model_dir, type(exc).__name__, exc)
        return _shared.get(model_dir)


_failed: set[str] = set()


def main() -> None:
    """``python -m mlc_integrations.embed.static_text [MODEL_DIR]``: build the table ahead of first use."""
    import argparse

    from .models import resolve_text_model

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("model", nargs="?", default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(build(resolve_text_model(args.model)))


if __name__ == "__main__":
    main()
