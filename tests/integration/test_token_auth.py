"""A token-protected Chroma server through ``MLCEngine(storage=StorageOptions(...))``: the
right token works end to end, a wrong one is a clear StorageError naming authentication
(a counted miss with ``strict=False``), and no token never falls back to anything else.

The server is a real ``chroma run`` behind chromadb's own token authentication
(:mod:`tests.integration.auth_gateway` says why a gateway: ``chroma run`` 1.x does not
enforce the token settings). Chroma Cloud is covered by a stand-in only (no cloud is
reachable from the tests): chromadb's real ``CloudClient`` pointed at the same gateway.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any, Iterator

import pytest

import chromadb
from mlc_integrations import MLCEngine, StorageError, StorageOptions
from mlc_integrations.ops.server import ChromaServer
from mlc_integrations.store.chroma import ServerUnreachableError, StorageAuthenticationError
from tests.integration.auth_gateway import TokenGateway, self_signed_certificate
from tests.integration.workers import engine, question

TOKEN = "s3cret-" + uuid.uuid4().hex[:8]


@pytest.fixture(params=["X-Chroma-Token", "Authorization"])
def gateway(request: Any, chroma_server: ChromaServer) -> Iterator[TokenGateway]:
    with TokenGateway(chroma_server.host, chroma_server.port, TOKEN, header=request.param) as gw:
        gw.header = request.param  # type: ignore[attr-defined]
        yield gw


def _engine(gw: TokenGateway, prefix: str, **storage: Any) -> MLCEngine:
    kw = {"strict": storage.pop("strict", False)}
    eng = engine(chroma_host=gw.host, chroma_port=gw.port, warm_start=False,
                 storage=StorageOptions(collection_prefix=prefix, token_header=gw.header, **storage), **kw)  # type: ignore[attr-defined]
    return eng


def _close(*engines: MLCEngine) -> None:
    for e in engines:
        with contextlib.suppress(StorageError):  # a strict engine's close reports the store's failure too
            e.close()


def _collections(server: ChromaServer, prefix: str) -> list[str]:
    """What the server holds under ``prefix``, asked directly (no gateway)."""
    client = chromadb.HttpClient(host=server.host, port=server.port)
    return sorted(c.name for c in client.list_collections() if c.name.startswith(prefix + "_"))


def test_the_right_token_works_end_to_end(gateway: TokenGateway, chroma_server: ChromaServer, prefix: str) -> None:
    eng = _engine(gateway, prefix, token=TOKEN)
    try:
        assert eng.update(question(1), {"answer": 1}) is not None
        exact = eng.lookup(question(1))
        reworded = eng.lookup(question(1, paraphrase=1))
        assert exact is not None and exact.payload == {"answer": 1}
        assert reworded is not None and reworded.tier == "L1" and reworded.payload == {"answer": 1}
        assert eng.stats()["errors"] == {}
        assert f"{prefix}_exact" in _collections(chroma_server, prefix)
        assert gateway.forwarded > 0 and gateway.refused == 0
    finally:
        eng.close()


def test_a_wrong_token_is_an_authentication_error_or_a_counted_miss(
        gateway: TokenGateway, chroma_server: ChromaServer, prefix: str) -> None:
    good = _engine(gateway, prefix, token=TOKEN)
    strict = _engine(gateway, prefix, token="wrong-token", strict=True)
    lenient = _engine(gateway, prefix, token="wrong-token")
    try:
        assert good.update(question(2), {"answer": 2}) is not None
        with pytest.raises(StorageError, match="authentication failed") as err:
            strict.lookup(question(2))
        assert isinstance(err.value, StorageAuthenticationError)
        assert gateway.header in str(err.value) and "wrong-token" not in str(err.value)  # type: ignore[attr-defined]
        assert lenient.lookup(question(2)) is None
        assert lenient.update(question(3), {"answer": 3}) is None  # dropped, counted
        st = lenient.stats()
        assert st["misses"] == 1 and st["hits"] == 0
        assert any("StorageAuthenticationError" in k for k in st["errors"]), st["errors"]
        assert good.lookup(question(3)) is None  # the rejected update reached nothing
    finally:
        _close(good, strict, lenient)


def test_no_token_never_falls_back_to_anything_else(gateway: TokenGateway, chroma_server: ChromaServer,
                                                    prefix: str, tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)  # an embedded fallback would leave a directory here
    good = _engine(gateway, prefix, token=TOKEN)
    anonymous = _engine(gateway, prefix, strict=True)
    try:
        assert good.update(question(4), {"answer": 4}) is not None
        with pytest.raises(StorageAuthenticationError, match="sent no token"):
            anonymous.lookup(question(4))
        with pytest.raises(StorageAuthenticationError):
            anonymous.update(question(5), {"answer": 5})
        assert anonymous.storage_mode == "server" and anonymous.store.chroma_port == gateway.port
        assert list(tmp_path.iterdir()) == []
        assert good.lookup(question(5)) is None
        assert gateway.refused > 0
    finally:
        _close(good, anonymous)


def test_chroma_cloud_client_with_an_api_key_stand_in(chroma_server: ChromaServer, prefix: str) -> None:
    """chromadb.CloudClient (tenant and database from the key's identity) against the
    gateway instead of api.trychroma.com: the Cloud code path, not Chroma Cloud itself."""
    with TokenGateway(chroma_server.host, chroma_server.port, TOKEN) as gw:
        eng = engine(chroma_host=gw.host, chroma_port=gw.port, warm_start=False,
                     storage=StorageOptions(collection_prefix=prefix, cloud_api_key=TOKEN, ssl=False))
        wrong = engine(chroma_host=gw.host, chroma_port=gw.port, warm_start=False, strict=True,
                       storage=StorageOptions(collection_prefix=prefix, cloud_api_key="not-the-key", ssl=False))
        try:
            assert eng.storage_mode == "cloud"
            assert eng.update(question(6), {"answer": 6}) is not None
            hit = eng.lookup(question(6))
            assert hit is not None and hit.payload == {"answer": 6}
            with pytest.raises(StorageAuthenticationError, match="API key"):
                wrong.lookup(question(6))
        finally:
            _close(eng, wrong)


def test_tls_with_a_private_ca_and_a_token(chroma_server: ChromaServer, prefix: str, tmp_path: Any) -> None:
    """HTTPS with the server's CA given as ``ssl_verify`` works; without it the certificate
    is refused (never a silent downgrade to plain HTTP or to unverified TLS)."""
    cert, key = self_signed_certificate(str(tmp_path))
    with TokenGateway(chroma_server.host, chroma_server.port, TOKEN, tls=(cert, key)) as gw:
        secure = engine(chroma_host=gw.host, chroma_port=gw.port, warm_start=False,
                        storage=StorageOptions(collection_prefix=prefix, ssl=True, ssl_verify=cert, token=TOKEN))
        unverified = engine(chroma_host=gw.host, chroma_port=gw.port, warm_start=False, strict=True,
                            storage=StorageOptions(collection_prefix=prefix, ssl=True, token=TOKEN))
        try:
            assert secure.update(question(7), {"answer": 7}) is not None
            hit = secure.lookup(question(7))
            assert hit is not None and hit.payload == {"answer": 7}
            with pytest.raises(ServerUnreachableError, match="CERTIFICATE_VERIFY_FAILED"):
                unverified.lookup(question(7))
        finally:
            _close(secure, unverified)
