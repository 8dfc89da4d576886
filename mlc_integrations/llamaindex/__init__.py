"""LlamaIndex adapter: ``CachedMultiModalLLM(llm)``, a caching wrapper around any LlamaIndex LLM.

* :mod:`.keying` decides what of a call is keyed (messages, arguments, tools, the
  inner LLM's settings as scope, never its secrets);
* :mod:`.payload` stores responses as plain JSON and replays them as streams;
* :mod:`.llm` is the wrapper: the eight LLM endpoints over the engine.
"""

from ..adapters.kit import LookupRecord, LookupTracker
from .keying import llm_scope, message_to_turn
from .llm import CachedFunctionCallingLLM, CachedMultiModalLLM

__all__ = ["CachedMultiModalLLM", "CachedFunctionCallingLLM", "message_to_turn", "llm_scope", "LookupRecord",
           "LookupTracker"]
