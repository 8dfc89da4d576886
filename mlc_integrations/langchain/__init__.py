"""LangChain adapter: ``set_llm_cache(MultimodalSemanticCache())``, or
``CachedChatModel(model)`` for a chat model whose streams are cached too.

* :mod:`.prompt` reads the ``prompt`` string LangChain hands a cache (serialized
  messages, every provider's image block format) into framework-neutral turns;
* :mod:`.cache` is the ``BaseCache``: keying through the engine, LangChain's own
  serializer for generations, hit details (``last_hit``, ``track()``);
* :mod:`.chat_model` is the ``BaseChatModel`` wrapper (invoke, batch, stream, astream,
  astream_events, bind_tools, with_structured_output through the same keys);
  :mod:`.replay` turns stored replies into chunks and finished streams into replies.
"""

from ..adapters.kit import LookupRecord, LookupTracker
from .cache import (
    DEFAULT_PERSIST_DIRECTORY,
    PAYLOAD_FORMAT,
    PAYLOAD_VERSION,
    MultimodalSemanticCache,
    answer_text,
)
from .chat_model import CachedChatModel
from .prompt import BY_FILE_ID, ImageResolver, ParsedPrompt, PromptParser, image_block_source

__all__ = [
    "MultimodalSemanticCache",
    "CachedChatModel",
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
