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

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

from .store.eviction import DEFAULT_EVICTION_POLICY
from .store.resident import MAX_RESIDENT_ROWS
from .images import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_MAX_IMAGE_PIXELS
from .store.chroma import DEFAULT_RETRY_INTERVAL, DEFAULT_SEARCH_EF, DEFAULT_TIMEOUT
from .runtime.inflight import DEFAULT_WAIT_S
from .tiers import DEFAULT_L1_PRESCREEN, DEFAULT_L2_PRESCREEN
from .verify import DEFAULT_EXPLORE_RATE, DEFAULT_MIN_PRECISION
from .verify.policy import DEFAULT_MAX_WRONG_REUSE, JudgeChoice, check_max_wrong_reuse
from .store.writebehind import DEFAULT_MAX_PENDING


@dataclass(frozen=True)
class StorageOptions:
    """How Chroma keeps the entries (where they live is ``persist_directory`` /
    ``chroma_host``/``chroma_port`` on the engine, or Chroma Cloud with ``cloud_api_key``).

    * ``collection_prefix``: collection names ``{prefix}_exact``, ``{prefix}_l1``, ...;
      several caches can share one Chroma.
    * ``timeout``: seconds bound on each request to a Chroma server or Chroma Cloud
      (chromadb's own client has none).
    * ``retry_interval``: after a server could not be reached, or refused the
      credentials, calls fail fast (as counted misses) for this many seconds, then retry.
    * ``hnsw_search_ef``: HNSW query beam (recall vs speed), set when a collection is created.
    * ``check_index``: when opening checks that every stored vector can be found and repairs
      what cannot: ``"always"`` (default for persistent and server stores), ``"after_crash"``,
      ``"never"``. ``check_every_writes``: N > 0 re-checks a vector collection after every N
      writes to it (docs/operations.md, "Crash consistency").
    * A secured server: ``ssl`` (HTTPS; None: off for a server, on for Chroma Cloud),
      ``ssl_verify`` (a CA bundle path for a private CA, or False to skip verification),
      ``token`` (sent as Chroma's token authentication reads it, in ``token_header``:
      ``"X-Chroma-Token"`` or ``"Authorization"`` as ``Bearer <token>``), ``headers``
      (any other request headers), ``tenant`` and ``database`` (Chroma's defaults when None;
      they must exist on the server).
    * ``cloud_api_key``: Chroma Cloud (``chromadb.CloudClient``); ``tenant``/``database``
      default to the ones the key grants. ``chroma_host`` on the engine then names another
      Cloud-compatible endpoint (api.trychroma.com otherwise).
    * ``client``: your own Chroma client (then ``persist_directory``/``chroma_host`` are
      unused); an HTTP client still gets ``timeout`` and the fail-fast policy.
    * ``eviction_policy``: which entries ``max_entries`` evicts first, ``"lru"`` or ``"fifo"``.
    * ``vectors_in_memory``: where this process is the store's only writer, it also holds up
      to this many rows of each small vector tier (L1's, L2's fingerprints and prompts) and
      answers those queries from memory (docs/operations.md); 0: every query asks Chroma.

    Secrets (``token``, ``cloud_api_key``, ``headers``) are left out of the repr.

    Example: a token-protected server over TLS, its own tenant and database::

        MLCEngine(chroma_host="chroma.internal", chroma_port=443,
                  storage=StorageOptions(ssl=True, token=os.environ["CHROMA_TOKEN"],
                                         tenant="shop", database="cache", timeout=15.0))
    """

    collection_prefix: str = "mlc"
    timeout: Optional[float] = DEFAULT_TIMEOUT
    retry_interval: float = DEFAULT_RETRY_INTERVAL
    hnsw_search_ef: int = DEFAULT_SEARCH_EF
    check_index: Optional[str] = None
    check_every_writes: int = 0
    ssl: Optional[bool] = None
    ssl_verify: Union[bool, str, None] = None
    token: Optional[str] = field(default=None, repr=False)
    token_header: str = "X-Chroma-Token"
    headers: Optional[Mapping[str, str]] = field(default=None, repr=False)
    tenant: Optional[str] = None
    database: Optional[str] = None
    cloud_api_key: Optional[str] = field(default=None, repr=False)
    client: Any = None
    eviction_policy: str = DEFAULT_EVICTION_POLICY
    vectors_in_memory: int = MAX_RESIDENT_ROWS

    def __post_init__(self) -> None:
        if isinstance(self.vectors_in_memory, bool) or not isinstance(self.vectors_in_memory, int) \
                or self.vectors_in_memory < 0:
            from .errors import ConfigurationError

            raise ConfigurationError(f"vectors_in_memory must be a row count >= 0, not {self.vectors_in_memory!r}")

    def store_arguments(self) -> dict[str, Any]:
        """These options as :class:`~mlc_integrations.store.chroma.ChromaStore` keywords,
        with the version of each versioned tier's vectors (the static text table's recipe
        names the L1 pre-screen's collection: the store itself imports no embedding module)."""
        from .embed.static_text import RECIPE as STATIC_RECIPE

        return dict(collection_prefix=self.collection_prefix, client=self.client, timeout=self.timeout,
                    retry_interval=self.retry_interval, hnsw_search_ef=self.hnsw_search_ef,
                    check_index=self.check_index, check_every_writes=self.check_every_writes,
                    chroma_ssl=self.ssl, ssl_verify=self.ssl_verify, chroma_headers=self.headers,
                    token=self.token, token_header=self.token_header, tenant=self.tenant,
                    database=self.database, cloud_api_key=self.cloud_api_key,
                    versions={"l1_static": STATIC_RECIPE})


@dataclass(frozen=True)
class WriteOptions:
    """The write path (``durable=True`` on the engine writes before ``update()`` returns).

    * ``max_pending``: write-behind queue bound; ``update()`` waits when it is full.
    * ``store_prompts``: ``False`` hands Chroma no raw prompt text (keys, embeddings and
      responses only). Embedded Chroma's HNSW files can still hold freed memory of the
      process, prompts included (docs/operations.md, "Tenants and privacy": a Chroma
      server, or ``MALLOC_PERTURB_`` on Linux, keeps them out).

    Example: bursts of writes, no prompt text handed to storage::

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
    * ``l2_prescreen``: the pixel-fingerprint floor. Stored pictures at or above it are L2's
      first candidates, decided by the local image comparison with no image encoder run
      (a re-encoded or resized copy, the next camera frame); none at all is a miss with no
      encoder run either. The encoder (and ``l2_image_threshold``) finds candidates only
      when more stored pictures pass the floor than one query reads (a static camera's
      many frames) and none of the best was reused. None = off: every L2 lookup runs the
      encoder. Without an image verifier the floor only decides whether the encoder runs.
    * ``inflight_wait_s``: an identical request arriving while one is being answered waits
      up to this long for its answer instead of calling the model again (0 = never wait;
      inflight.py).
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
