"""The engine's expert knobs, grouped by what they tune. Everyday options (where,
which models, thresholds, TTL, size, strict) are :class:`~mlc_integrations.MLCEngine`
keywords; these small immutable objects hold the rest, each with working defaults::

    from . import MLCEngine, Limits, StorageOptions, TierOptions, VerifierOptions, WriteOptions

    engine = MLCEngine(
        persist_directory="./.mlc_cache",
        storage=StorageOptions(collection_prefix="shop", check_index="after_crash"),
        writes=WriteOptions(max_pending=1024, store_prompts=False),
        limits=Limits(max_image_pixels=20_000_000, max_prompt_chars=4096),
        tiers=TierOptions(l1=False),             # exact + image tiers only
        verifier=VerifierOptions(min_precision=0.9),
    )

The LangChain and LlamaIndex adapters take the same objects (they pass engine options
through).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .store.eviction import DEFAULT_EVICTION_POLICY
from .images import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_MAX_IMAGE_PIXELS
from .store.chroma import DEFAULT_SEARCH_EF
from .runtime.inflight import DEFAULT_WAIT_S
from .tiers import DEFAULT_L1_PRESCREEN, DEFAULT_L2_PRESCREEN
from .verify import DEFAULT_EXPLORE_RATE, DEFAULT_MIN_PRECISION
from .verify.policy import DEFAULT_MAX_WRONG_REUSE, JudgeChoice, check_max_wrong_reuse
from .store.writebehind import DEFAULT_MAX_PENDING


@dataclass(frozen=True)
class StorageOptions:
    """How Chroma keeps the entries (where they live is ``persist_directory`` /
    ``chroma_host``/``chroma_port`` on the engine).

    * ``collection_prefix``: collection names ``{prefix}_exact``, ``{prefix}_l1``, ...;
      several caches can share one Chroma.
    * ``timeout``: seconds bound on each request to a Chroma server.
    * ``hnsw_search_ef``: HNSW query beam (recall vs speed), set when a collection is created.
    * ``check_index``: when opening checks that every stored vector can be found and repairs
      what cannot: ``"always"`` (default for persistent and server stores), ``"after_crash"``,
      ``"never"``.
    * ``client``: your own Chroma client (then ``persist_directory``/``chroma_host`` are unused).
    * ``eviction_policy``: which entries ``max_entries`` evicts first, ``"lru"`` or ``"fifo"``.

    Example: two caches in one Chroma server, a slow network::

        MLCEngine(chroma_host="10.0.0.5", storage=StorageOptions(collection_prefix="shop", timeout=15.0))
    """

    collection_prefix: str = "mlc"
    timeout: Optional[float] = 5.0
    hnsw_search_ef: int = DEFAULT_SEARCH_EF
    check_index: Optional[str] = None
    client: Any = None
    eviction_policy: str = DEFAULT_EVICTION_POLICY


@dataclass(frozen=True)
class WriteOptions:
    """The write path (``durable=True`` on the engine writes before ``update()`` returns).

    * ``max_pending``: write-behind queue bound; ``update()`` waits when it is full.
    * ``store_prompts``: ``False`` keeps no raw prompt text in Chroma (keys, embeddings and
      responses only).

    Example: bursts of writes, no prompt text at rest::

        MLCEngine(persist_directory=".mlc_cache", writes=WriteOptions(max_pending=2048, store_prompts=False))
    """

    max_pending: int = DEFAULT_MAX_PENDING
    store_prompts: bool = True


@dataclass(frozen=True)
class Limits:
    """Bounds on input; what exceeds them is bad input (a counted miss, or a typed error
    with ``strict=True``). A prompt longer than ``max_prompt_chars`` is still keyed
    exactly, just not embedded.

    Example: phone photos up to 48 MP, short prompts::

        MLCEngine(limits=Limits(max_image_pixels=48_000_000, max_prompt_chars=2000))
    """

    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    max_prompt_chars: int = 8192
    max_response_bytes: int = 4 * 1024 * 1024


@dataclass(frozen=True)
class TierOptions:
    """Which tiers run and how (L2 is switched off with ``image_encoder=None``).

    * ``exact``, ``l1``: switch the exact tier or the text-semantic tier off.
    * ``text_backend``: how the sentence model runs: ``"auto"`` (ONNX Runtime fp32 when
      installed, else torch), ``"onnx-fp32"``, ``"onnx-int8"``, ``"torch"``; None reads
      ``$MLC_TEXT_BACKEND``.
    * ``l2_prompt_encoder``: L2's prompt side, ``"text"`` (the L1 sentence model) or
      ``"clip"`` (an open_clip image encoder's text tower).
    * ``l1_prescreen``: static-embedding cosine under which no stored text can reach the
      L1 floor, so the sentence model does not run on the caller's path (None = off;
      docs/results/text_prescreen.md).
    * ``l2_prescreen``: pixel-fingerprint cosine under which no stored picture can match,
      so no image encoder runs (None = off).
    * ``inflight_wait_s``: an identical request arriving while one is being answered waits
      up to this long for its answer instead of calling the model again (0 = never wait;
      inflight.py).
    * ``n_candidates``: neighbours fetched per vector tier.
    * ``image_verifier``: L2's local comparison of the two pictures (``"default"``: the
      shipped :class:`~mlc_integrations.verify.image_change.ImageChangeVerifier`; None =
      global similarity alone, which reuses answers across edited pictures:
      docs/image-change.md).
    * ``image_evidence``: where that comparison's evidence about each stored picture (a
      96-pixel grey version of it and a 24-pixel colour map) lives. ``"auto"`` (default):
      where the cache lives -- at rest in Chroma for a persistent directory, a server or a
      client you pass (so picture reuse survives a restart and works across workers), in
      memory for an in-memory engine. ``"store"``: always at rest. ``"memory"``: in this
      process only, never at rest; a picture stored by another process or before a
      restart is then not reused through L2 (a counted refusal).

    Example: exact and image tiers only, on the int8 text model::

        MLCEngine(tiers=TierOptions(l1=False, text_backend="onnx-int8"))
    """

    exact: bool = True
    l1: bool = True
    text_backend: Optional[str] = None
    l2_prompt_encoder: str = "text"
    l1_prescreen: Optional[float] = DEFAULT_L1_PRESCREEN
    l2_prescreen: Optional[float] = DEFAULT_L2_PRESCREEN
    inflight_wait_s: float = DEFAULT_WAIT_S
    n_candidates: int = 16
    image_verifier: Any = "default"
    image_evidence: str = "auto"


@dataclass(frozen=True)
class VerifierOptions:
    """The judge between retrieval and reuse (docs/verification.md).

    * ``model``: ``"default"`` (the shipped judge where both texts are known, the trees
      elsewhere), ``"judge"``, ``"trees"`` (the trees alone), ``"off"`` (raw cosine
      thresholds), a path to a verifier JSON, a ``Verifier`` or a ``VerificationPolicy``.
    * ``max_wrong_reuse``: the judge's knob, the tolerated share of answer-changing requests
      that reuse a stored answer (0.01 = 1 %), mapped to its threshold by the calibration
      table shipped with it (measured on held-out domains). A number in (0, 1), else a
      ``ConfigurationError``.
    * ``min_precision``: the precision the trees' operating point must keep.
    * ``max_false_hit_rate``: error-bounded online mode (None = off); ``explore_rate`` its
      exploration share.
    * ``embedding_head``: the opt-in Quora-tuned embedding head.

    Example: more rewordings reused, up to 2 % answer-changing requests served a stored answer::

        MLCEngine(verifier=VerifierOptions(max_wrong_reuse=0.02))
    """

    model: Any = "default"
    min_precision: float = DEFAULT_MIN_PRECISION
    max_false_hit_rate: Optional[float] = None
    explore_rate: float = DEFAULT_EXPLORE_RATE
    embedding_head: bool = False
    max_wrong_reuse: float = DEFAULT_MAX_WRONG_REUSE

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_wrong_reuse", check_max_wrong_reuse(self.max_wrong_reuse))
        # The engine hands make_policy ``model``: a judge name travels with its knob.
        if self.max_wrong_reuse != DEFAULT_MAX_WRONG_REUSE and (
                self.model is True or (isinstance(self.model, str) and self.model in ("default", "judge"))):
            object.__setattr__(self, "model", JudgeChoice(self.model, self.max_wrong_reuse))

    @classmethod
    def of(cls, value: Any) -> "VerifierOptions":
        """The engine's ``verifier=`` argument: these options, or just the model."""
        return value if isinstance(value, VerifierOptions) else cls(model=value)


def _check(value: Any, kind: type, name: str) -> Any:
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise TypeError(f"{name}= takes a {kind.__name__}(...), not {type(value).__name__}")
    return value


def resolve_options(storage: Any, writes: Any, limits: Any, tiers: Any
                    ) -> tuple[StorageOptions, WriteOptions, Limits, TierOptions]:
    """The engine's option groups, defaults filled in; a wrong type is a TypeError that names the class."""
    return (_check(storage, StorageOptions, "storage"), _check(writes, WriteOptions, "writes"),
            _check(limits, Limits, "limits"), _check(tiers, TierOptions, "tiers"))
