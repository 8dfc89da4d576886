"""Chroma's token authentication in front of a real ``chroma run``.

``chroma run`` of chromadb 1.x (the Rust server) accepts the token settings
(``CHROMA_SERVER_AUTHN_PROVIDER``, ``CHROMA_SERVER_AUTHN_CREDENTIALS``) and does not
enforce them: started with both, it answered an unauthenticated collection listing with
200 (chromadb 1.5.9; its frontend's authenticator is a no-op, chroma-core/chroma#3750,
#4965). A production single-node server gets its authentication from a gateway in front
of it. This is that gateway, judging each request with chromadb's own
``TokenAuthenticationServerProvider`` -- the provider Chroma's Python server runs for
``chroma_server_authn_provider`` -- and answering a rejected one as that server does
(HTTP 403, ``{"error": "AuthError", "message": "Forbidden"}``); the heartbeat, version
and pre-flight checks stay open, as there. Everything else is forwarded to the server.
"""

from __future__ import annotations

import http.client
import subprocess
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OPEN_PATHS = ("/api/v2/heartbeat", "/api/v2/version", "/api/v2/pre-flight-checks")
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def token_provider(token: str, header: str) -> Any:
    from chromadb.auth.token_authn import TokenAuthenticationServerProvider
    from chromadb.config import Settings, System

    settings = Settings(chroma_server_authn_provider="chromadb.auth.token_authn.TokenAuthenticationServerProvider",
                        chroma_server_authn_credentials=token, chroma_auth_token_transport_header=header,
                        anonymized_telemetry=False)
    return TokenAuthenticationServerProvider(System(settings))


class TokenGateway:
    """Listen on a free loopback port; authenticate with ``token`` in ``header``; forward
    to ``upstream_host:upstream_port``. Counts what it let through and what it refused."""

    def __init__(self, upstream_host: str, upstream_port: int, token: str, header: str = "X-Chroma-Token",
                 tls: "tuple[str, str] | None" = None) -> None:
        """``tls``: (certificate file, key file) to serve HTTPS with."""
        self.upstream = (upstream_host, upstream_port)
        self.provider = token_provider(token, header)
        self.forwarded = 0
        self.refused = 0
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet: pytest shows failures
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if not self.path.split("?")[0].rstrip("/").endswith(OPEN_PATHS):
                    from chromadb.errors import ChromaAuthError

                    try:
                        gateway.provider.authenticate_or_raise({k.lower(): v for k, v in self.headers.items()})
                    except ChromaAuthError as exc:
                        gateway.refused += 1
                        self._reply(exc.code(), json.dumps({"error": exc.name(), "message": exc.message()}).encode(),
                                    {"Content-Type": "application/json"})
                        return
                gateway.forwarded += 1
                conn = http.client.HTTPConnection(*gateway.upstream, timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    self._reply(resp.status, data, {k: v for k, v in resp.getheaders() if k.lower() not in _HOP})
                finally:
                    conn.close()

            def _reply(self, status: int, data: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if tls is not None:
            import ssl

            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self.host = "127.0.0.1"
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="token-gateway", daemon=True)

    def __enter__(self) -> "TokenGateway":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


def self_signed_certificate(directory: str) -> tuple[str, str]:
    """A certificate for 127.0.0.1 signed by itself (its own CA): (certificate, key) paths."""
    cert, key = f"{directory}/gateway.pem", f"{directory}/gateway.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", key,
                    "-out", cert, "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key
