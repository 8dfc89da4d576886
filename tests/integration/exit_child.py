"""A short-lived program that stores one answer and exits without ``close()`` -- the
first thing a new user tries -- and the reader that looks for it in a fresh process.

    python -m tests.integration.exit_child write  --via engine --exit sys_exit --key 3 --dir D
    python -m tests.integration.exit_child read   --keys engine:3,langchain:4 --host 127.0.0.1 --port P

``write`` prints ``STORED <answer>`` once the update is acknowledged (write-behind: not
yet written), then ends the way ``--exit`` says: the script's end, ``sys.exit``, an
uncaught exception, or waiting for the parent's SIGTERM. ``read`` prints one JSON
object: each key's answer found (or null). Only the exact tier is on: what is under
test is that acknowledged entries outlive the process, not the models.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import signal
import sys
import time
from typing import Any, Callable, Optional

from mlc_integrations import StorageOptions, TierOptions

OPTIONS: dict[str, Any] = {"tiers": TierOptions(l1=False), "image_encoder": None}
SCOPE = "exit-test-model"


def _where(args: argparse.Namespace) -> dict[str, Any]:
    if args.host:
        return {"chroma_host": args.host, "chroma_port": args.port,
                "storage": StorageOptions(collection_prefix=args.prefix)}
    return {"persist_directory": args.dir}


def question(key: int) -> str:
    return f"Who wrote book number {key}?"


def _engine(args: argparse.Namespace) -> Any:
    from mlc_integrations import MLCEngine

    return MLCEngine(**_where(args), **OPTIONS)


def _via_engine(args: argparse.Namespace, key: int, answer: Optional[str]) -> Optional[str]:
    from mlc_integrations import CacheRequest

    request = CacheRequest(text=question(key), scope=SCOPE)
    if answer is not None:  # the engine is a temporary: nothing keeps it, nothing closes it
        _engine(args).update(request, {"text": answer})
        return answer
    hit = READERS["engine"].lookup(request)
    return hit.payload["text"] if hit else None


def _via_langchain(args: argparse.Namespace, key: int, answer: Optional[str]) -> Optional[str]:
    from langchain_core.globals import set_llm_cache
    from langchain_core.outputs import Generation

    from mlc_integrations import MultimodalSemanticCache

    if answer is not None:
        cache = MultimodalSemanticCache(**_where(args), **OPTIONS)
        set_llm_cache(cache)  # as the README does; never closed
        cache.update(question(key), SCOPE, [Generation(text=answer)])
        return answer
    got = READERS["langchain"].lookup(question(key), SCOPE)
    return got[0].text if got else None


def _via_chat(args: argparse.Namespace, key: int, answer: Optional[str]) -> Optional[str]:
    from tests.unit._fake_chat import FakeToolChatModel

    from mlc_integrations import CachedChatModel

    fake = FakeToolChatModel()
    if answer is not None:
        return str(CachedChatModel(fake, **_where(args), **OPTIONS).invoke(question(key)).content)
    wrapped = READERS["chat"]
    text = str(wrapped.invoke(question(key)).content)
    return text if not wrapped.model.calls else None


def _via_llamaindex(args: argparse.Namespace, key: int, answer: Optional[str]) -> Optional[str]:
    from tests.unit._fake_llms import VisionEchoLLM

    from mlc_integrations import CachedMultiModalLLM

    if answer is not None:
        return CachedMultiModalLLM(llm=VisionEchoLLM(), **_where(args), **OPTIONS).complete(question(key)).text
    wrapped = READERS["llamaindex"]
    text = wrapped.complete(question(key)).text
    return text if not wrapped.llm.calls else None


VIAS: dict[str, Callable[[argparse.Namespace, int, Optional[str]], Optional[str]]] = {
    "engine": _via_engine, "langchain": _via_langchain, "chat": _via_chat, "llamaindex": _via_llamaindex}
READERS: dict[str, Any] = {}


def _open_readers(args: argparse.Namespace) -> None:
    """One engine for every reader (an embedded directory admits one per process)."""
    from tests.unit._fake_chat import FakeToolChatModel
    from tests.unit._fake_llms import VisionEchoLLM

    from mlc_integrations import CachedChatModel, CachedMultiModalLLM, MultimodalSemanticCache

    engine = _engine(args)
    READERS.update(engine=engine, langchain=MultimodalSemanticCache(engine=engine),
                   chat=CachedChatModel(FakeToolChatModel(), engine),
                   llamaindex=CachedMultiModalLLM(llm=VisionEchoLLM(), engine=engine))


def main(argv: Optional[list[str]] = None) -> None:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for stacks on a timeout
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("write", "read"))
    p.add_argument("--via", choices=tuple(VIAS), default="engine")
    p.add_argument("--exit", choices=("end", "sys_exit", "exception", "sigterm"), default="end")
    p.add_argument("--key", type=int, default=0)
    p.add_argument("--keys", default="", help="via:key,via:key,... to read")
    p.add_argument("--dir", default=None)
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--prefix", default="mlc")
    args = p.parse_args(argv)
    if args.mode == "read":
        _open_readers(args)
        found = {}
        for item in filter(None, args.keys.split(",")):
            via, key = item.split(":")
            found[item] = VIAS[via](args, int(key), None)
        print(json.dumps(found), flush=True)
        return
    stored = VIAS[args.via](args, args.key, f"answer {args.key} via {args.via}")
    print(f"STORED {stored}", flush=True)
    if args.exit == "sys_exit":
        sys.exit(3)
    if args.exit == "exception":
        raise RuntimeError("the program fails after the cache acknowledged its update")
    if args.exit == "sigterm":
        # The parent sends SIGTERM now. Python runs a signal's handler in the main thread
        # between bytecodes: when the kernel hands the signal to another thread (the
        # write-behind writer's), one long time.sleep is not interrupted and the handler waits
        # for its end -- so wait in short sleeps, as a real program's main loop would. A
        # process still alive a minute later writes every thread's stack.
        faulthandler.dump_traceback_later(60, exit=False)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(0.05)


if __name__ == "__main__":
    main()
