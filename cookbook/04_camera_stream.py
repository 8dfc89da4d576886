"""04 - A camera stream: the same question about every frame of a slowly changing scene.

What it shows
    A camera watches a scene and an application asks a vision model the same question
    about every frame. Consecutive frames differ a little (the camera pans a few
    pixels, the light changes, sensor noise), so no two frames have the same pixels and
    the exact (L0.5) and text (L1) tiers never match. The multimodal tier L2 compares
    CLIP embeddings of the frames and reuses the answer while the scene stays the same;
    at a scene cut (another object in view) the similarity falls below the threshold
    and the model is called again.

    The frames are easy-vqa pictures changed frame by frame (shift, brightness, noise),
    so every frame has a ground-truth answer. The script runs the stream twice: without
    a cache (every frame calls the model) and with ``MultimodalSemanticCache``, and
    prints the hit rate, the wrong answers against ground truth, the wall time of both
    runs (time saved), and whether every scene cut was refused. It writes a PNG plot of
    each frame's CLIP similarity to the nearest cached frame, with the threshold line
    and the scene cuts.

    The model is a stand-in that sleeps ``--latency-ms`` per call to stand for a remote
    vision model (it says so in the output); both runs are measured wall time.

Run it
    ./dev python cookbook/04_camera_stream.py [--frames-per-scene 15] [--latency-ms 300] [--plot PATH]
                                              [--skip-baseline] [--torch-threads 1] [--picture-ids 6,36,...]

Real provider (optional)
    MLC_COOKBOOK_PROVIDER=openai  -> langchain_openai.ChatOpenAI   (pip install langchain-openai; OPENAI_API_KEY)
    MLC_COOKBOOK_PROVIDER=ollama  -> langchain_ollama.ChatOllama   (pip install langchain-ollama; a running Ollama)
    MLC_COOKBOOK_MODEL=<name> picks a vision model; ``--latency-ms`` is then ignored
    (the real model's own latency is what gets measured).

L2 needs a CLIP model. Offline, this uses ``mlc-easyvqa-tiny`` (trained by this project
on easy-vqa, so it only knows this toy world); for your own camera, point
``image_encoder`` at a real CLIP such as open_clip ``ViT-B-32``/``laion2b_s34b_b79k``.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import _common
import numpy as np
from _common import Picture, langchain_chat_model, picture, picture_by_id, png_bytes, tier_of, true_answer
from langchain_core.messages import HumanMessage
from PIL import Image

from mlc_integrations import MultimodalSemanticCache
from PIL import ImageChops, ImageEnhance
from mlc_integrations.images import pixel_digest
from mlc_integrations.verify import normalize_answer

QUESTION = "Describe the shape in the picture."
DEFAULT_PLOT = Path(__file__).resolve().parent / "output" / "04_camera_stream.png"
# One scene per object; each picture has its shape away from the border, so that a few
# pixels of panning keep it whole.
SCENES = (("blue", "circle", 1), ("red", "triangle", 2), ("yellow", "rectangle", 1), ("teal", "triangle", 0))


@dataclass
class Frame:
    index: int
    scene: int
    image: Image.Image
    truth: str


def drift(im: Image.Image, dx: int, dy: int) -> Image.Image:
    """The camera moved by (dx, dy) pixels; the border it uncovered repeats the edge."""
    moved = ImageChops.offset(im, dx, dy)
    a, src = np.asarray(moved).copy(), np.asarray(im)
    if dx > 0:
        a[:, :dx] = src[:, :1]
    elif dx < 0:
        a[:, dx:] = src[:, -1:]
    if dy > 0:
        a[:dy] = a[dy:dy + 1]
    elif dy < 0:
        a[dy:] = a[dy - 1:dy]
    return Image.fromarray(a)


def sensor_noise(im: Image.Image, sigma: float, rng: np.random.Generator) -> Image.Image:
    """Gaussian sensor noise of ``sigma`` grey levels."""
    a = np.asarray(im, dtype=np.float32) + rng.normal(0.0, sigma, (im.size[1], im.size[0], 3))
    return Image.fromarray(np.clip(a + 0.5, 0, 255).astype(np.uint8))


def camera_frames(frames_per_scene: int, seed: int = 0, pictures: Optional[Sequence[Picture]] = None) -> list[Frame]:
    """Frames of each scene drifting slowly: pan up to a few pixels, light +-8 %, noise.
    One scene per picture (default: :data:`SCENES`)."""
    rng = np.random.default_rng(seed)
    frames: list[Frame] = []
    scenes = pictures if pictures is not None else [picture(c, s, nth) for c, s, nth in SCENES]
    for s, pic in enumerate(scenes):
        truth = true_answer(QUESTION, pic.color, pic.shape)
        for k in range(frames_per_scene):
            t = k / max(1, frames_per_scene - 1)
            im = drift(pic.image, round(3 * math.sin(math.pi * t)), round(2 * t))
            im = ImageEnhance.Brightness(im).enhance(1.0 + 0.08 * math.sin(2 * math.pi * t))
            im = sensor_noise(im, 3.0, rng)
            frames.append(Frame(len(frames), s, im, truth))
    return frames


def ask(model: Any, frame: Frame) -> str:
    pic_block = {"type": "image_url", "image_url": {"url": _data_url(frame.image)}}
    return str(model.invoke([HumanMessage(content=[{"type": "text", "text": QUESTION}, pic_block])]).content)


def _data_url(im: Image.Image) -> str:
    import base64

    return "data:image/png;base64," + base64.b64encode(png_bytes(im)).decode("ascii")


def is_correct(answer: str, truth: str) -> bool:
    return normalize_answer(answer).strip(".") == truth


def run_without_cache(frames: list[Frame], latency_s: float) -> dict[str, Any]:
    model = langchain_chat_model(latency_s, cache=False)
    t0 = time.perf_counter()
    answers = [ask(model, f) for f in frames]
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "model_calls": len(frames),
            "wrong": sum(not is_correct(a, f.truth) for a, f in zip(answers, frames))}


def run_with_cache(frames: list[Frame], latency_s: float, clip: Optional[str]) -> tuple[dict[str, Any], list[dict[str, Any]], float]:
    cache = MultimodalSemanticCache(persist_directory=None, image_encoder=clip)
    model = langchain_chat_model(latency_s, cache=cache)
    ask(model, Frame(-1, -1, picture("green", "circle").image, ""))  # warm-up: loads the models, not timed
    cache.clear()
    cache.engine.reset_stats()
    records: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for f in frames:
        answer = ask(model, f)
        records.append({"frame": f.index, "scene": f.scene, "hit": cache.last_hit, "answer": answer, "truth": f.truth})
    seconds = time.perf_counter() - t0
    # Similarity of each frame to the nearest frame cached before it (what L2 compared);
    # the engine memoizes embeddings by pixel digest, so this reruns no model.
    clip_model = cache.engine.image_tower
    stored: list[np.ndarray] = []
    for f, r in zip(frames, records):
        sim = float("nan")
        if clip_model is not None:
            vec = clip_model.embed_images([f.image], [pixel_digest(f.image)])[0]
            if stored:
                sim = float(max(np.dot(v, vec) for v in stored))
            if r["hit"] is None:
                stored.append(vec)
        r["similarity"] = sim
    threshold = cache.engine.l2_image_threshold
    l2 = cache.stats()["config"]["tiers"]["L2"]
    cache.close()
    misses = sum(r["hit"] is None for r in records)
    return {"seconds": seconds, "model_calls": misses, "l2": l2,
            "wrong": sum(not is_correct(r["answer"], r["truth"]) for r in records)}, records, threshold


def plot(records: list[dict[str, Any]], threshold: float, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    x = np.array([r["frame"] for r in records])
    y = np.array([r["similarity"] for r in records])
    hit = np.array([r["hit"] is not None for r in records])
    fig, ax = plt.subplots(figsize=(9, 3.6))
    ax.plot(x, y, color="0.6", lw=1, zorder=1)
    ax.scatter(x[hit], y[hit], color="tab:green", s=22, label="cache hit (answer reused)", zorder=2)
    ax.scatter(x[~hit], y[~hit], color="tab:red", marker="x", s=30, label="miss (model called)", zorder=2)
    ax.axhline(threshold, color="tab:blue", ls="--", lw=1, label=f"L2 image threshold {threshold:.2f}")
    cuts = [r["frame"] for prev, r in zip(records, records[1:]) if r["scene"] != prev["scene"]]
    for i, c in enumerate(cuts):
        ax.axvline(c - 0.5, color="k", ls=":", lw=1, label="scene cut" if i == 0 else None)
    if records and not np.isfinite(y[0]):
        ax.annotate("frame 0: empty cache", (x[0], threshold), xytext=(4, -28), textcoords="offset points",
                    fontsize=8, color="tab:red")
    ax.set_xlabel("frame")
    ax.set_ylabel("CLIP similarity to nearest cached frame")
    ax.set_title(title, fontsize=10)
    ax.set_ylim(min(-0.1, float(np.nanmin(y)) - 0.05) if np.isfinite(y).any() else -0.1, 1.02)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames-per-scene", type=int, default=15)
    parser.add_argument("--latency-ms", type=float, default=300.0, help="stand-in model latency per call")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT, help="where to write the PNG plot")
    parser.add_argument("--picture-ids", default=None,
                        help="comma-separated easy-vqa test picture ids, one scene each (default: four pictures "
                             "the stand-in reads right, shapes away from the border)")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="CPU threads for the CLIP model (0: torch's default). One thread suits a tiny model "
                             "on a busy small machine: more threads wait on each other there")
    parser.add_argument("--skip-baseline", action="store_true",
                        help="do not run the stream without a cache (saves paying a real model twice)")
    args = parser.parse_args(argv)
    clip = _common.offline_clip_model()
    latency_s = args.latency_ms / 1000.0 if _common.provider() == "standin" else 0.0
    print("04 camera stream: the same question about every frame")
    print(_common.describe_setup(clip))
    if _common.provider() == "standin":
        print(f"latency: the stand-in sleeps {args.latency_ms:.0f} ms per call (standing for a remote model)")
    pictures = None if not args.picture_ids else [picture_by_id(int(i)) for i in args.picture_ids.split(",")]
    frames = camera_frames(args.frames_per_scene, args.seed, pictures)
    n_scenes = len(pictures) if pictures is not None else len(SCENES)
    print(f"stream: {n_scenes} scenes x {args.frames_per_scene} frames, question {QUESTION!r}; "
          f"CLIP on {args.torch_threads or 'default'} CPU thread(s)\n")

    base = {"seconds": float("nan"), "wrong": None} if args.skip_baseline else run_without_cache(frames, latency_s)
    import torch

    threads_before = torch.get_num_threads()
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    try:
        cached, records, threshold = run_with_cache(frames, latency_s, clip)
    finally:
        torch.set_num_threads(threads_before)
    for r in records:
        hit = r["hit"]
        cut = r["frame"] > 0 and r["scene"] != records[r["frame"] - 1]["scene"]
        outcome = f"HIT {hit.tier} (entry {hit.entry_id[:8]})" if hit else "MISS, model called"
        check = "ok" if is_correct(r["answer"], r["truth"]) else f"WRONG, truth {r['truth']!r}"
        print(f"  frame {r['frame']:3d} scene {r['scene']}{' CUT' if cut else '    '} "
              f"similarity {r['similarity']:6.3f}  {outcome:26} -> {r['answer']!r} ({check})")

    cut_frames = [r for prev, r in zip(records, records[1:]) if r["scene"] != prev["scene"]]
    hits = sum(r["hit"] is not None for r in records)
    title = (f"{n_scenes} scenes x {args.frames_per_scene} frames; hit rate {hits / len(records):.0%}; "
             f"L2 {cached['l2']}")
    plot_path = plot(records, threshold, args.plot, title)
    summary = {
        "example": "04_camera_stream",
        "provider": _common.provider(),
        "l2": cached["l2"],
        "frames": len(frames),
        "scenes": n_scenes,
        "hits": hits,
        "hit_rate": hits / len(records),
        "hits_by_tier": {t: sum(tier_of(r["hit"]) == t for r in records) for t in ("L0.5", "L1", "L2")},
        "model_calls": cached["model_calls"],
        "wrong_with_cache": cached["wrong"],
        "wrong_without_cache": base["wrong"],
        "seconds_with_cache": cached["seconds"],
        "seconds_without_cache": base["seconds"],
        "seconds_saved": base["seconds"] - cached["seconds"],
        "latency_ms": args.latency_ms if _common.provider() == "standin" else None,
        "scene_cuts": len(cut_frames),
        "scene_cuts_refused": sum(r["hit"] is None for r in cut_frames),
        "threshold": threshold,
        "plot": str(plot_path),
        "frames_detail": [{k: (tier_of(v) if k == "hit" else v) for k, v in r.items()} for r in records],
    }
    print(f"\nsummary: hit rate {summary['hit_rate']:.0%} ({hits}/{len(records)} frames, {summary['hits_by_tier']}); "
          f"model calls {summary['model_calls']} instead of {len(frames)}")
    latency_note = f"; stand-in latency {args.latency_ms:.0f} ms per call" if _common.provider() == "standin" else ""
    if args.skip_baseline:
        print(f"         wrong answers vs ground truth: {summary['wrong_with_cache']} with cache")
        print(f"         wall time (measured, model loading excluded{latency_note}): "
              f"{summary['seconds_with_cache']:.1f} s with cache (run without --skip-baseline to compare)")
    else:
        print(f"         wrong answers vs ground truth: {summary['wrong_with_cache']} with cache, "
              f"{summary['wrong_without_cache']} without")
        print(f"         wall time (measured, model loading excluded{latency_note}): "
              f"{summary['seconds_with_cache']:.1f} s with cache, {summary['seconds_without_cache']:.1f} s without; "
              f"saved {summary['seconds_saved']:.1f} s")
    if not cached["l2"].startswith("on"):
        print(f"         L2 is {cached['l2']}: no two frames have the same pixels, so nothing can be reused "
              f"without a CLIP model")
    print(f"         scene cuts refused: {summary['scene_cuts_refused']}/{summary['scene_cuts']}; plot: {plot_path}")
    return summary


if __name__ == "__main__":
    main()
