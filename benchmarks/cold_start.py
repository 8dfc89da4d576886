"""Cold start and memory: where the first call of each kind goes in a fresh process, and
what a process holds after warm-up (text-only traffic, then with pictures).

    ./dev python benchmarks/cold_start.py                # every scenario, each in fresh processes
    ./dev python benchmarks/cold_start.py --reps 10      # fewer warm repetitions
    ./dev python benchmarks/cold_start.py --json out.json

Scenarios, each in its own fresh interpreter (the model files are already cached on this
machine, as on any machine after its first run: ONNX export, static table):

* ``components``: each loading step alone, in order, with the resident set (RSS) after it:
  imports, engine construction, store open, sentence model (ONNX session), static table,
  verifier + lexicon, image tower, first encodes;
* ``calls`` (``warm_start=False``: every load lands on the caller's path),
  ``calls-warm-start`` (the default for a persistent cache: loads run in a background
  thread from construction; the first call is made at once, as a server's first request
  would be) and ``calls-after-warm-start`` (the first call once the warm-up thread has
  finished, as a server that is ready before taking traffic): the first call of each kind — new text question (lookup + update, as the
  LangChain adapter pays it), exact repeat, reworded question (L1), new picture (lookup +
  update), the same picture re-encoded (L2) — against the median of ``--reps`` warm calls
  of the same kind in the same process; RSS after text-only warm-up and after pictures,
  and which heavy packages the process imported.

Timings are as noisy as the machine: read the ratios (first / warm, same process) and the
load average printed with them.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = ("components", "calls", "calls-warm-start", "calls-after-warm-start")
PHOTOS = REPO / "data" / "photos"
HEAVY = ("torch", "torchvision", "timm", "open_clip", "onnxruntime", "onnx", "transformers", "sentence_transformers",
         "chromadb", "tokenizers", "langchain_core", "scipy", "sklearn")
# Questions stored as new ones, each reworded later in a way the verifier accepts.
STORED = "What is the capital of {}?"
REWORDED = "What's the capital of {}?"
COUNTRIES = ["France", "Japan", "Kenya", "Peru", "Norway", "Egypt", "Canada", "Vietnam", "Chile", "Poland",
             "Ghana", "Nepal", "Spain", "Mexico", "Finland", "Morocco", "Iceland", "Thailand", "Greece", "Cuba",
             "Austria", "Mongolia", "Portugal", "Senegal", "Ireland", "Bolivia", "Jordan", "Denmark", "Kazakhstan",
             "Uruguay", "Hungary", "Laos", "Tunisia", "Croatia", "Ecuador", "Latvia"]


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def heavy_imports() -> list[str]:
    return [m for m in HEAVY if m in sys.modules]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000.0, out


def photo_bytes(name: str, quality: Optional[int] = None) -> bytes:
    from PIL import Image

    with Image.open(PHOTOS / name) as im:
        im = im.convert("RGB")
        buf = io.BytesIO()
        im.save(buf, format="JPEG", quality=quality or 95)
        return buf.getvalue()


def synthetic_picture(seed: int, size: int = 160) -> bytes:
    """A picture unlike the photos and unlike each other (random colour blocks)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(1000 + seed)
    cells = rng.integers(0, 256, size=(4 + seed % 5, 4 + seed % 7, 3), dtype=np.uint8)
    im = Image.fromarray(cells).resize((size, size), Image.NEAREST)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def photo_names() -> list[str]:
    return sorted(p.name for p in PHOTOS.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))


# ---------------------------------------------------------------------------- child scenarios
def child_components(cache_dir: str) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []

    def step(name: str, fn: Callable[[], Any]) -> Any:
        ms, out = timed(fn)
        steps.append({"step": name, "ms": round(ms, 1), "rss_mb": round(rss_mb(), 1), "heavy": heavy_imports()})
        return out

    steps.append({"step": "interpreter", "ms": 0.0, "rss_mb": round(rss_mb(), 1), "heavy": heavy_imports()})
    step("import mlc_integrations", lambda: __import__("mlc_integrations"))
    step("import mlc_integrations.langchain", lambda: __import__("mlc_integrations.langchain"))
    from mlc_integrations import MLCEngine

    eng = step("MLCEngine(persist_directory=..., warm_start=False)",
               lambda: MLCEngine(persist_directory=cache_dir, warm_start=False))
    step("store open (Chroma client, collections, index check)", lambda: eng.store.open())
    step("sentence model load (backend session)", lambda: eng.encoders.text_embedder._ensure())
    step("first sentence encode", lambda: eng.encoders.text_embedder.embed(["a first question"]))
    if hasattr(eng.encoders, "static_embedder"):  # absent before the L1 pre-screen existed (--code of an older commit)
        step("static table load (L1 pre-screen)", lambda: eng.encoders.static_embedder)
    step("verifier + lexicon load", lambda: eng.verification.warmup() if eng.verification else None)
    step("image tower load", lambda: eng.encoders.image_tower)
    from PIL import Image

    with Image.open(PHOTOS / photo_names()[0]) as im:
        pic = im.convert("RGB")
    tower = eng.encoders.image_tower
    step("first image encode", lambda: tower.embed_images([pic], ["bench-digest"]) if tower else None)
    eng.close()
    return {"steps": steps, "text_backend": eng.encoders.text_embedder.backend}


def child_calls(cache_dir: str, warm_start: bool, reps: int, wait_warm: bool = False) -> dict[str, Any]:
    from mlc_integrations import CacheRequest, MLCEngine

    t0 = time.perf_counter()
    eng = MLCEngine(persist_directory=cache_dir, warm_start=warm_start)
    construct_ms = (time.perf_counter() - t0) * 1000.0
    out: dict[str, Any] = {"construct_ms": round(construct_ms, 1)}
    if wait_warm and eng._warm is not None:
        ms, _ = timed(lambda: eng._warm.join(600))
        out["warm_start_ms"] = round(ms, 1)
    rows: dict[str, dict[str, Any]] = {}

    def req(text: str, image: Optional[bytes] = None) -> CacheRequest:
        from mlc_integrations.images import DecodedImage  # noqa: F401  (decoding happens in the engine)

        imgs = [eng.decode_image(image)] if image is not None else []
        return CacheRequest(text=text, images=imgs, scope="cold-start-bench")

    def miss(text: str, image: Optional[bytes] = None) -> tuple[float, str]:
        def run() -> str:
            r = req(text, image)
            found = eng.lookup_explained(r)
            eng.update(r, f"answer to {text}")
            return "miss" if found.hit is None else f"hit {found.hit.tier}"
        ms, outcome = timed(run)
        eng.flush()  # the writer's work is off the caller's path; untimed, as a model call would cover it
        return ms, outcome

    def look(text: str, image: Optional[bytes] = None) -> tuple[float, str]:
        ms, found = timed(lambda: eng.lookup_explained(req(text, image)))
        return ms, "miss" if found.hit is None else f"hit {found.hit.tier}"

    def record(kind: str, first: tuple[float, str], warm: list[tuple[float, str]], expect: str) -> None:
        ok = [ms for ms, o in warm if o == expect]
        med = statistics.median(ok) if ok else float("nan")
        rows[kind] = {"first_ms": round(first[0], 2), "first_outcome": first[1], "warm_median_ms": round(med, 3),
                      "warm_n": len(ok), "warm_unexpected": len(warm) - len(ok),
                      "ratio": round(first[0] / med, 1) if ok and med > 0 else None}

    countries = COUNTRIES[: reps + 1]
    first_new = miss(STORED.format(countries[0]))
    warm_new = [miss(STORED.format(c)) for c in countries[1:]]
    record("new text question (lookup + update)", first_new, warm_new, "miss")
    first_exact = look(STORED.format(countries[0]))
    warm_exact = [look(STORED.format(c)) for c in countries[1:]]
    record("exact repeat (L0.5)", first_exact, warm_exact, "hit L0.5")
    first_l1 = look(REWORDED.format(countries[0]))
    warm_l1 = [look(REWORDED.format(c)) for c in countries[1:]]
    record("reworded question (L1)", first_l1, warm_l1, "hit L1")
    out["rss_text_only_mb"] = round(rss_mb(), 1)
    out["heavy_text_only"] = heavy_imports()
    names = photo_names()
    pics = [photo_bytes(n) for n in names] + [synthetic_picture(i) for i in range(max(0, reps + 1 - len(names)))]
    first_pic = miss("What is in this picture?", pics[0])
    warm_pic = [miss("What is in this picture?", p) for p in pics[1: reps + 1]]
    record("new picture (lookup + update)", first_pic, warm_pic, "miss")
    first_l2 = look("What is in this picture?", photo_bytes(names[0], quality=80))
    warm_l2 = [look("What is in this picture?", photo_bytes(n, quality=80)) for n in (names[1:] * reps)[:reps]]
    record("same picture re-encoded (L2)", first_l2, warm_l2, "hit L2")
    out["rss_with_pictures_mb"] = round(rss_mb(), 1)
    out["heavy_with_pictures"] = heavy_imports()
    out["rows"] = rows
    out["stats"] = {k: eng.stats().get(k) for k in ("l1_prescreened", "l2_prescreened")}
    out["text_backend"] = eng.encoders.text_embedder.backend
    eng.close()
    return out


# ---------------------------------------------------------------------------- parent
def run_child(scenario: str, reps: int, code: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mlc-cold-") as d:
        cmd = [sys.executable, __file__, "--child", scenario, "--dir", d, "--reps", str(reps)]
        env = dict(os.environ, PYTHONPATH=str(code) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        if res.returncode != 0:
            raise SystemExit(f"{scenario} failed:\n{res.stderr[-4000:]}")
        return json.loads(res.stdout.strip().splitlines()[-1])


def print_report(res: dict[str, Any]) -> None:
    print(f"# Cold start and memory (load average at start {res['load_start']}, at end {res['load_end']}; "
          f"library: {res['commit']}, {res['code']})\n")
    comp = res["components"]
    print(f"## Loading steps in a fresh process (text backend: {comp['text_backend']})\n")
    print("| step | ms | RSS after (MB) | heavy packages imported so far |")
    print("|---|---|---|---|")
    for s in comp["steps"]:
        print(f"| {s['step']} | {s['ms']} | {s['rss_mb']} | {', '.join(s['heavy']) or '-'} |")
    for name in SCENARIOS[1:]:
        r = res[name]
        waited = f"; warm-up finished {r['warm_start_ms']} ms after construction" if "warm_start_ms" in r else ""
        print(f"\n## First call of each kind vs warm ({name}; construction {r['construct_ms']} ms{waited}; "
              f"text backend {r['text_backend']})\n")
        print("| call | first (ms) | first outcome | warm median (ms) | warm n | first / warm |")
        print("|---|---|---|---|---|---|")
        for kind, row in r["rows"].items():
            bad = f" ({row['warm_unexpected']} other outcomes left out)" if row["warm_unexpected"] else ""
            print(f"| {kind} | {row['first_ms']} | {row['first_outcome']} | {row['warm_median_ms']} | "
                  f"{row['warm_n']}{bad} | {row['ratio']}x |")
        print(f"\nRSS after text-only warm-up: {r['rss_text_only_mb']} MB (heavy imports: "
              f"{', '.join(r['heavy_text_only'])}); after pictures: {r['rss_with_pictures_mb']} MB "
              f"(heavy imports: {', '.join(r['heavy_with_pictures'])}). Pre-screened: {r['stats']}.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default=None)
    ap.add_argument("--code", default=str(REPO), help="the checkout whose mlc_integrations is measured "
                    "(e.g. an export of an older commit: `git archive C | tar -x -C DIR`)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        if args.child == "components":
            out = child_components(args.dir)
        else:
            out = child_calls(args.dir, warm_start=args.child != "calls", reps=args.reps,
                              wait_warm=args.child == "calls-after-warm-start")
        print(json.dumps(out))
        return
    code = Path(args.code).resolve()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=code).stdout.strip() or f"code at {code}"
    res: dict[str, Any] = {"load_start": os.getloadavg(), "commit": commit, "code": str(code)}
    for scenario in SCENARIOS:
        res[scenario] = run_child(scenario, args.reps, code)
    res["load_end"] = os.getloadavg()
    print_report(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
