"""The README's LangChain snippet as a new user runs it, one process per call of this script
(a fake chat model stands in for ChatOpenAI: no key needed): how long the first call of a
fresh process takes against a warm miss and an exact hit of the same process. Run it twice
with the same MLC_CACHE_DIR: the first process pays the one-time model exports (and says so
in a WARNING line), later ones must not.

    MLC_CACHE_DIR=/tmp/mlc-models python benchmarks/first_call.py [label]
"""

from __future__ import annotations

import base64
import io
import sys
import time


def main() -> None:
    t0 = time.perf_counter()
    from langchain_core.globals import set_llm_cache
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.messages import HumanMessage
    from PIL import Image

    from mlc_integrations import MultimodalSemanticCache

    label = sys.argv[1] if len(sys.argv) > 1 else str(time.time())
    buf = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 20, 20)).save(buf, "PNG")
    data_url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    cache = MultimodalSemanticCache()
    set_llm_cache(cache)
    llm = FakeListChatModel(responses=["The car is red."] * 10)

    def ask(text: str) -> list:
        return [HumanMessage(content=[{"type": "text", "text": f"{text} ({label})"},
                                      {"type": "image_url", "image_url": {"url": data_url}}])]

    t1 = time.perf_counter()
    llm.invoke(ask("What color is the car?"))
    t2 = time.perf_counter()
    llm.invoke(ask("What colour is that car, please?"))
    t3 = time.perf_counter()
    llm.invoke(ask("What color is the car?"))
    t4 = time.perf_counter()
    first, warm = t2 - t1, t3 - t2
    print(f"import+build {t1 - t0:.2f} s; first call {first:.3f} s; warm miss {warm:.3f} s; exact hit {t4 - t3:.4f} s; "
          f"first / warm miss {first / warm:.1f}x (hit tier {cache.last_hit.tier if cache.last_hit else None})")


if __name__ == "__main__":
    main()
