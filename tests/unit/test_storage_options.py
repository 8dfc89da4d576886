"""What ``StorageOptions`` reaches: every store knob through the engine, token and TLS
settings for a secured server, Chroma Cloud (a stand-in for chromadb.CloudClient: no
cloud is reachable from the tests), and a client you pass keeps the request timeout and
the fail-fast policy."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

import chromadb
from mlc_integrations import MLCEngine, StorageError, StorageOptions
from mlc_integrations.store import chroma as chroma_mod
from mlc_integrations.store.chroma import ChromaStore, StorageAuthenticationError, token_headers


def _vec(texts: list[str]) -> np.ndarray:
    return np.ones((len(texts), 8), dtype=np.float32) / np.sqrt(8)


def test_every_storage_option_reaches_the_store_through_the_engine() -> None:
    opts = StorageOptions(collection_prefix="shop", timeout=2.5, retry_interval=7.0, check_every_writes=3,
                          check_index="never", ssl=True, ssl_verify="/etc/ca.pem", token="t0k",
                          token_header="Authorization", headers={"X-Team": "a"}, tenant="acme", database="cache")
    eng = MLCEngine(chroma_host="chroma.internal", chroma_port=443, storage=opts, text_model=_vec,
                    image_encoder=None, warm_start=False, durable=True)
    try:
        s = eng.store
        assert (s.mode, s.prefix, s.timeout, s.retry_interval, s.check_every_writes) == ("server", "shop", 2.5, 7.0, 3)
        assert (s.chroma_ssl, s.ssl_verify, s.tenant, s.database) == (True, "/etc/ca.pem", "acme", "cache")
        assert s.chroma_headers == {"X-Team": "a"} and s._auth_headers == {"Authorization": "Bearer t0k"}
        assert s.name("l1_static").startswith("shop_l1_static_")  # the static table's version, from the engine
    finally:
        eng.close()


def test_tokens_travel_as_chromas_token_authentication_reads_them() -> None:
    assert token_headers("abc") == {"X-Chroma-Token": "abc"}
    assert token_headers("abc", "Authorization") == {"Authorization": "Bearer abc"}
    assert token_headers(None) == {}
    with pytest.raises(ValueError, match="token_header"):
        token_headers("abc", "X-Api-Key")
    with pytest.raises(ValueError, match="ASCII"):
        token_headers("tök en")


def test_secrets_stay_out_of_the_options_repr() -> None:
    text = repr(StorageOptions(token="s3cret-token", cloud_api_key="ck-s3cret", headers={"Authorization": "Bearer x"}))
    assert "s3cret" not in text and "Bearer" not in text


def test_server_settings_without_a_server_are_refused() -> None:
    with pytest.raises(ValueError, match="chroma_host"):
        ChromaStore(token="abc")
    with pytest.raises(ValueError, match="not both"):
        ChromaStore(persist_directory="/tmp/x", cloud_api_key="k")
    with pytest.raises(ValueError, match="API key"):
        ChromaStore(cloud_api_key="k", token="t")


class _Collection:
    def __init__(self, fail: list[BaseException]) -> None:
        self.fail = fail
        self.calls = 0
        self.metadata: dict[str, Any] = {}

    def count(self) -> int:
        self.calls += 1
        if self.fail:
            raise self.fail[0]
        return 0


class _HttpClientStandIn:
    """What chromadb's HTTP clients look like to the store: an httpx session in ``_server``."""

    def __init__(self, fail: list[BaseException]) -> None:
        self._server = type("S", (), {})()
        self._server._session = httpx.Client()
        self.col = _Collection(fail)
        self.closed = 0

    def get_or_create_collection(self, name: str, **kw: Any) -> _Collection:
        return self.col

    def list_collections(self) -> list[Any]:
        return []

    def close(self) -> None:
        self.closed += 1


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_client_you_pass_keeps_the_request_timeout_and_fails_fast() -> None:
    refused = httpx.ConnectError("connection refused")
    client = _HttpClientStandIn([refused])
    clock = Clock()
    store = ChromaStore(client=client, timeout=1.5, retry_interval=10.0, monotonic=clock)
    assert client._server._session.timeout == httpx.Timeout(1.5)  # chromadb's own: none
    with pytest.raises(StorageError):
        store.call("count", lambda: store.collection("exact").count())
    tried = client.col.calls
    with pytest.raises(chroma_mod.ServerUnreachableError, match="unreachable"):
        store.call("count", lambda: store.collection("exact").count())
    assert client.col.calls == tried and store.failed_fast == 1  # no request while known down
    client.col.fail.clear()
    clock.now += 11
    assert store.call("count", lambda: store.collection("exact").count()) == 0


def test_engine_takes_a_passed_client_with_its_timeout() -> None:
    client = _HttpClientStandIn([])
    eng = MLCEngine(storage=StorageOptions(client=client, timeout=3.0, check_index="never"), text_model=_vec,
                    image_encoder=None, warm_start=False, durable=True)
    try:
        assert eng.store.mode == "client" and client._server._session.timeout == httpx.Timeout(3.0)
    finally:
        eng.close()


class _CloudStandIn:
    """Records how the store builds chromadb.CloudClient (no Chroma Cloud is reachable here)."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail = fail

    def __call__(self, **kw: Any) -> _HttpClientStandIn:
        self.calls.append(kw)
        if self.fail is not None:
            raise self.fail
        return _HttpClientStandIn([])


def test_chroma_cloud_is_built_from_the_api_key_tenant_and_database(monkeypatch) -> None:
    cloud = _CloudStandIn()
    heartbeats: list[str] = []
    monkeypatch.setattr(chromadb, "CloudClient", cloud)
    monkeypatch.setattr(httpx, "get", lambda url, **kw: heartbeats.append(url))
    eng = MLCEngine(storage=StorageOptions(cloud_api_key="ck-123", tenant="acme", database="cache", timeout=4.0,
                                           check_index="never"),
                    text_model=_vec, image_encoder=None, warm_start=False, durable=True)
    try:
        assert eng.store.mode == "cloud"
        client = eng.store.client
        (kw,) = cloud.calls
        assert kw["api_key"] == "ck-123" and (kw["tenant"], kw["database"]) == ("acme", "cache")
        assert (kw["cloud_host"], kw["cloud_port"], kw["enable_ssl"]) == ("api.trychroma.com", 443, True)
        assert heartbeats == ["https://api.trychroma.com:443/api/v2/heartbeat"]  # bounded by the timeout
        assert client._server._session.timeout == httpx.Timeout(4.0)
    finally:
        eng.close()


def test_a_rejected_api_key_is_an_authentication_error_then_fails_fast(monkeypatch) -> None:
    from chromadb.errors import ChromaAuthError

    cloud = _CloudStandIn(fail=ChromaAuthError())
    monkeypatch.setattr(chromadb, "CloudClient", cloud)
    monkeypatch.setattr(httpx, "get", lambda url, **kw: None)
    clock = Clock()
    store = ChromaStore(cloud_api_key="ck-wrong", retry_interval=5.0, monotonic=clock)
    with pytest.raises(StorageAuthenticationError, match="authentication failed.*API key"):
        store.call("count", lambda: store.collection("exact").count())
    with pytest.raises(StorageAuthenticationError, match="authentication failed"):
        store.call("count", lambda: store.collection("exact").count())
    assert len(cloud.calls) == 1 and store.failed_fast == 1 and store.auth_failures == 1
    assert "ck-wrong" not in str(store.where)
