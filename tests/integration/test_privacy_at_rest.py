"""``store_prompts=False`` on a Chroma server: no byte of the prompt is at rest, anywhere.

The server's process never receives the prompt text, so every file it writes -- SQLite
database, write-ahead log and the HNSW segments, whose unused capacity holds freed heap
memory of the writing process (chroma-core/chroma#7688) -- is scanned whole. (Embedded,
the same scan covers the files written from the records: tests/unit/test_isolation.py.)
"""

from __future__ import annotations

from mlc_integrations import StorageOptions, WriteOptions
from mlc_integrations.ops.server import ChromaServer
from tests.integration.workers import engine
from tests.unit._prompt_secret import files, store_and_find_secret, where_found


def test_no_prompt_byte_in_any_file_the_server_writes(private_chroma_server: ChromaServer) -> None:
    server = private_chroma_server
    eng = engine(chroma_host=server.host, chroma_port=server.port, writes=WriteOptions(store_prompts=False),
                 storage=StorageOptions(collection_prefix="private"))
    store_and_find_secret(eng)
    eng.close()
    server.stop()  # the server persists its segments as it stops
    written = files(server.path)
    assert any(p.name == "data_level0.bin" for p in written), [p.name for p in written]
    assert sum(p.stat().st_size for p in written) > 10_000
    assert where_found(written) == []
