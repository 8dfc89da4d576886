"""Integration fixtures: a real Chroma server (``chroma run`` on 127.0.0.1, free port).

The session server is started here, by the test run itself, so ``./dev test`` (and
``.ci/run``, which calls it) needs nothing running beforehand. Tests isolate
themselves with a unique ``collection_prefix``; tests that stop or kill a server get
their own (:func:`private_chroma_server`).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Iterator

import pytest

from mlc_integrations.ops.server import ChromaServer


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.server)


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    """One Chroma server for the whole session, data in a temporary directory."""
    server = ChromaServer(tmp_path_factory.mktemp("chroma-server") / "data")
    server.start()
    yield server
    server.close()


@pytest.fixture
def private_chroma_server(tmp_path: Path) -> Iterator[ChromaServer]:
    """A server of this test's own, for tests that stop, kill or freeze it."""
    server = ChromaServer(tmp_path / "chroma-data")
    server.start()
    yield server
    server.close()


@pytest.fixture
def prefix() -> str:
    """A collection prefix no other test uses on the shared server."""
    return f"it-{uuid.uuid4().hex[:12]}"
