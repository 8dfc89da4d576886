"""LangChain adapter: ``set_llm_cache(MultimodalSemanticCache())``.

* :mod:`.prompt` reads the ``prompt`` string LangChain hands a cache (serialized
  messages, every provider's image block format) into framework-neutral turns;
* :mod:`.cache` is the ``BaseCache``: keying through the engine, LangChain's own
  serializer for generations, hit details (``last_hit``, ``track()``).
"""

from ..adapter_kit import LookupRecord, LookupTracker
from .cache import (
    DEFAULT_PERSIST_DIRECTORY,
    PAYLOAD_FORMAT,
    PAYLOAD_VERSION,
    MultimodalSemanticCache,
    answer_text,
)
from .prompt import BY_FILE_ID, ImageResolver, ParsedPrompt, PromptParser, image_block_source

__all__ = [
    "MultimodalSemanticCache",
    "PromptParser",
    "ParsedPrompt",
    "ImageResolver",
    "image_block_source",
    "BY_FILE_ID",
    "LookupRecord",
    "LookupTracker",
    "answer_text",
    "DEFAULT_PERSIST_DIRECTORY",
    "PAYLOAD_FORMAT",
    "PAYLOAD_VERSION",
]
