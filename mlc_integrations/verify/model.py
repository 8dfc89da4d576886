"""The verifier's model: calibrated probability that reusing a stored answer is right.

A small model (gradient-boosted trees, a logistic regression, optionally an embedding
head; trained by ``python -m evaluation.training.train_verifier``) read from plain
JSON (``assets/verifier.json``) and evaluated with numpy only: no scikit-learn at run
time, no pickle. Its output goes through isotonic calibration, so a threshold on it is
a precision.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from ..assets import ASSETS_DIR
from ..keys import exact_text
from .text.signals import (
    FEATURE_NAMES,
    SIGNAL_NAMES,
    TEXT_FEATURE_NAMES,
    WordWeights,
    pair_features,
    profile,
    text_features,
)

DEFAULT_VERIFIER_PATH = ASSETS_DIR / "verifier.json"
VERIFIER_FORMAT = "mlc-verifier"
VERIFIER_FORMAT_VERSION = 3  # 2: optional "vectors" model with an embedding head; 3: edit features


class VerifierFormatError(ValueError):
    """The verifier file is not a model this version can evaluate."""


@dataclass
class _TreeEnsemble:
    """Gradient-boosted trees flattened into arrays: evaluated for all trees at once."""

    features: list[str]
    baseline: float
    feature: np.ndarray  # (nodes,) int, -1 at leaves
    threshold: np.ndarray  # (nodes,) float: go left when x <= threshold
    left: np.ndarray  # (nodes,) int, absolute node index
    right: np.ndarray
    value: np.ndarray  # (nodes,) float, leaf value (already times the learning rate)
    roots: np.ndarray  # (trees,) int
    depth: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "_TreeEnsemble":
        feats, thr, left, right, val, roots = [], [], [], [], [], []
        depth = 0
        off = 0
        for t in d["trees"]:
            n = len(t["feature"])
            if not all(len(t[k]) == n for k in ("threshold", "left", "right", "value")):
                raise VerifierFormatError("tree arrays of different lengths")
            roots.append(off)
            feats.extend(t["feature"])
            thr.extend(t["threshold"])
            left.extend(off + c if c >= 0 else -1 for c in t["left"])
            right.extend(off + c if c >= 0 else -1 for c in t["right"])
            val.extend(t["value"])
            depth = max(depth, int(t.get("depth", n)))
            off += n
        ens = cls(
            features=list(d["features"]),
            baseline=float(d["baseline"]),
            feature=np.asarray(feats, dtype=np.int64),
            threshold=np.asarray(thr, dtype=np.float64),
            left=np.asarray(left, dtype=np.int64),
            right=np.asarray(right, dtype=np.int64),
            value=np.asarray(val, dtype=np.float64),
            roots=np.asarray(roots, dtype=np.int64),
            depth=depth,
        )
        inner = ens.feature >= 0
        if inner.any() and (ens.feature[inner].max() >= len(ens.features) or (ens.left[inner] < 0).any()
                            or (ens.right[inner] < 0).any()):
            raise VerifierFormatError("tree references a missing feature or child")
        return ens

    def raw(self, x: np.ndarray) -> np.ndarray:
        """Sum of leaf values plus baseline (log-odds) for rows of ``x`` (n, features)."""
        n = x.shape[0]
        node = np.broadcast_to(self.roots, (n, len(self.roots))).copy()
        rows = np.arange(n)[:, None]
        for _ in range(self.depth + 1):
            f = self.feature[node]
            inner = f >= 0
            if not inner.any():
                break
            go_left = x[rows, np.where(inner, f, 0)] <= self.threshold[node]
            node = np.where(inner, np.where(go_left, self.left[node], self.right[node]), node)
        return self.baseline + self.value[node].sum(axis=1)


@dataclass
class _Logistic:
    features: list[str]
    coef: np.ndarray
    intercept: float
    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "_Logistic":
        k = len(d["features"])
        coef = np.asarray(d["coef"], dtype=np.float64)
        mean = np.asarray(d.get("mean", [0.0] * k), dtype=np.float64)
        scale = np.asarray(d.get("scale", [1.0] * k), dtype=np.float64)
        if not (coef.shape == mean.shape == scale.shape == (k,)):
            raise VerifierFormatError("logistic model arrays do not match its feature list")
        return cls(list(d["features"]), coef, float(d["intercept"]), mean, scale)

    def raw(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mean) / self.scale) @ self.coef + self.intercept



@dataclass
class _EmbeddingHead:
    """Logistic regression on :func:`pair_features` of the two texts' embeddings: the
    classic sentence-pair classification head, a learned per-dimension weighted cosine.
    Its log-odds is the ``embedding_head`` input of the "vectors" model."""

    dim: int
    coef: np.ndarray  # (2 * dim,)
    intercept: float
    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "_EmbeddingHead":
        if d.get("kind") != "logistic" or d.get("input") != "absdiff_product":
            raise VerifierFormatError(f"unknown embedding head {d.get('kind')!r}/{d.get('input')!r}")
        dim = int(d["dim"])
        coef = np.asarray(d["coef"], dtype=np.float64)
        mean = np.asarray(d["mean"], dtype=np.float64)
        scale = np.asarray(d["scale"], dtype=np.float64)
        if not (coef.shape == mean.shape == scale.shape == (2 * dim,)) or not (scale > 0).all():
            raise VerifierFormatError("embedding head arrays do not match its dimension")
        return cls(dim, coef, float(d["intercept"]), mean, scale)

    def raw(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return ((pair_features(u, v) - self.mean) / self.scale) @ self.coef + self.intercept


@dataclass
class VerifierModel:
    """One calibrated model: raw score -> isotonic calibration -> probability."""

    name: str
    scorer: Union[_TreeEnsemble, _Logistic]
    cal_x: np.ndarray
    cal_y: np.ndarray
    operating_points: list[dict[str, float]]
    columns: np.ndarray  # indices into FEATURE_NAMES
    head: Optional[_EmbeddingHead] = None

    @property
    def needs_vectors(self) -> bool:
        return self.head is not None

    @property
    def reads_edits(self) -> bool:
        """Whether the model reads any edit feature (else they are not computed)."""
        lo = len(SIGNAL_NAMES)
        return bool(((self.columns >= lo) & (self.columns < len(TEXT_FEATURE_NAMES))).any())

    @classmethod
    def from_json(cls, name: str, d: Mapping[str, Any]) -> "VerifierModel":
        kind = d.get("kind")
        if kind == "gbdt":
            scorer: Union[_TreeEnsemble, _Logistic] = _TreeEnsemble.from_json(d)
        elif kind == "logistic":
            scorer = _Logistic.from_json(d)
        else:
            raise VerifierFormatError(f"model {name!r}: unknown kind {kind!r}")
        unknown = [f for f in scorer.features if f not in FEATURE_NAMES]
        if unknown:
            raise VerifierFormatError(f"model {name!r} uses signals this version does not compute: {unknown}")
        head = _EmbeddingHead.from_json(d["embedding_head"]) if d.get("embedding_head") else None
        if (head is None) != ("embedding_head" not in scorer.features):
            raise VerifierFormatError(f"model {name!r}: the embedding_head input and its head come together")
        cal = d.get("calibration") or {}
        cx = np.asarray(cal.get("x", []), dtype=np.float64)
        cy = np.asarray(cal.get("y", []), dtype=np.float64)
        if cx.shape != cy.shape or cx.ndim != 1 or (cx.size and (np.diff(cx) < 0).any()):
            raise VerifierFormatError(f"model {name!r}: calibration must be increasing x with matching y")
        ops = sorted((dict(op) for op in d.get("operating_points", [])), key=lambda o: o["precision"])
        return cls(name, scorer, cx, cy, ops, np.asarray([FEATURE_NAMES.index(f) for f in scorer.features]), head)

    def probability(self, signals: np.ndarray, u: Optional[np.ndarray] = None,
                    v: Optional[np.ndarray] = None) -> np.ndarray:
        """Calibrated P(reuse is correct) for rows of the full signal matrix (and, for a
        model with an embedding head, the rows' two embeddings ``u``, ``v``)."""
        x = np.atleast_2d(signals)
        if self.head is not None:
            if u is None or v is None:
                raise ValueError(f"model {self.name!r} needs the two texts' embeddings")
            x = np.c_[x[:, :len(TEXT_FEATURE_NAMES)], self.head.raw(u, v)]
        raw = self.scorer.raw(x[:, self.columns])
        if self.cal_x.size:
            return np.interp(raw, self.cal_x, self.cal_y)
        return 1.0 / (1.0 + np.exp(-raw))

    def threshold_for_precision(self, precision: float) -> float:
        """The probability a hit must reach: the requested precision itself.

        Probabilities are calibrated (isotonic, out-of-fold), so accepting only
        candidates with P(correct) >= precision gives every accepted set an expected
        precision >= precision, whatever the mix of candidates. ``operating_points``
        record what that threshold measured in cross-validation.
        """
        return float(precision)


class Verifier:
    """The calibrated verifier read from JSON (``assets/verifier.json`` by default).

    It holds up to four models, used according to what is known about a pair:
    ``vectors`` (texts and both embeddings of the text model it was trained with:
    the cosine and the embedding head), ``full`` (texts and that model's cosine),
    ``lexical`` (texts only: another embedding model, or CLIP's text tower) and
    ``cosine`` (no stored text: ``store_prompts=False``).
    """

    def __init__(self, data: Mapping[str, Any], source: str = "<dict>") -> None:
        if data.get("format") != VERIFIER_FORMAT:
            raise VerifierFormatError(f"{source}: not an {VERIFIER_FORMAT} file")
        if int(data.get("version", 0)) > VERIFIER_FORMAT_VERSION:
            raise VerifierFormatError(f"{source}: format version {data.get('version')} is newer than this library")
        self.source = source
        self.text_model: str = str(data.get("text_model", ""))
        self.training: dict[str, Any] = dict(data.get("training", {}))
        self.models: dict[str, VerifierModel] = {
            name: VerifierModel.from_json(name, m) for name, m in dict(data.get("models", {})).items()
        }
        if "full" not in self.models:
            raise VerifierFormatError(f"{source}: no 'full' model")
        ww = data.get("word_weights") or {}
        self.weights = WordWeights(ww.get("df", {}), int(ww.get("n_docs", 1))) if ww else WordWeights.uniform()
        self._data = data

    @classmethod
    def load(cls, path: Union[str, Path, None] = None) -> "Verifier":
        """Read a verifier JSON file (the shipped one when ``path`` is None)."""
        p = Path(path) if path is not None else DEFAULT_VERIFIER_PATH
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise VerifierFormatError(f"cannot read verifier {p}: {exc}") from exc
        return cls(data, str(p))

    _default: "Optional[Verifier]" = None
    _default_lock = threading.Lock()

    @classmethod
    def default(cls) -> "Verifier":
        """The shipped verifier, read once per process."""
        with cls._default_lock:
            if cls._default is None:
                cls._default = cls.load()
            return cls._default

    def to_json(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._data))

    def save(self, path: Union[str, Path]) -> None:
        Path(path).write_text(json.dumps(self._data, indent=None, separators=(",", ":")), encoding="utf-8")

    def model_for(self, have_text: bool, have_cosine: bool, have_vectors: bool = False) -> Optional[VerifierModel]:
        if have_text and have_cosine:
            if have_vectors and "vectors" in self.models:
                return self.models["vectors"]
            return self.models["full"]
        if have_text:
            return self.models.get("lexical")
        if have_cosine:
            return self.models.get("cosine")
        return None

    def head_dim(self) -> Optional[int]:
        """Embedding dimension the "vectors" model expects (None: no such model)."""
        m = self.models.get("vectors")
        return m.head.dim if m is not None and m.head is not None else None

    def _usable(self, vectors: Optional[tuple[Any, Any]]) -> bool:
        if vectors is None or vectors[0] is None or vectors[1] is None:
            return False
        dim = self.head_dim()
        return dim is not None and np.shape(vectors[0])[-1] == dim == np.shape(vectors[1])[-1]

    def probability(self, *, stored: Optional[str], new: Optional[str], cosine: Optional[float],
                    vectors: Optional[tuple[Any, Any]] = None) -> tuple[float, str]:
        """(P(reuse correct), model name) for one pair; (nan, '') if nothing applies.

        ``stored`` / ``new``: the two requests' texts (None when unknown), keyword-only
        like everywhere in the verifier: the edit features are not symmetric.
        ``vectors``: the two texts' normalized embeddings (stored, new) from the text
        model the verifier was trained with; they select the "vectors" model.
        """
        new_text, stored_text = new, stored
        have_text = new_text is not None and stored_text is not None
        have_vectors = cosine is not None and self._usable(vectors)
        model = self.model_for(have_text, cosine is not None, have_vectors)
        if model is None:
            return float("nan"), ""
        if have_text and exact_text(new_text) == exact_text(stored_text):  # type: ignore[arg-type]
            # The same request text (an L2 candidate: same question, a near-identical
            # picture): nothing on the text side can differ. No training pair is identical,
            # so the models would extrapolate here.
            return 1.0, model.name
        if have_text:
            sig = text_features(stored=stored_text, new=new_text,  # type: ignore[arg-type]
                                cosine=float(cosine) if cosine is not None else 0.0,
                                weights=self.weights, edits=model.reads_edits)
        else:
            sig = np.zeros(len(TEXT_FEATURE_NAMES))
            sig[0] = float(cosine)  # type: ignore[arg-type]
        u, v = vectors if model.needs_vectors else (None, None)  # type: ignore[misc]
        return float(model.probability(sig, u, v)[0]), model.name

    def probabilities(self, pairs: Sequence[tuple[str, str]], cosines: Sequence[float], model: str = "full",
                      vectors: Optional[tuple[np.ndarray, np.ndarray]] = None) -> np.ndarray:
        """Batch probabilities (evaluation and tests) of (stored, new) text pairs;
        ``vectors`` = (stored rows, new rows) of embeddings for the "vectors" model."""
        edits = self.models[model].reads_edits
        x = np.stack([text_features(stored=a, new=b, cosine=float(c), weights=self.weights, edits=edits,
                                    profiles=(profile(a), profile(b)))
                      for (a, b), c in zip(pairs, cosines)])
        u, v = vectors if vectors is not None else (None, None)
        same = np.asarray([exact_text(a) == exact_text(b) for a, b in pairs])
        return np.where(same, 1.0, self.models[model].probability(x, u, v))
