"""Procedural scenes with their scene graphs: a small, offline stand-in for GQA.

A scene is 2-6 objects (shape, colour, size, position, depth) on a textured, lit,
noisy background, drawn with PIL. Its scene graph is the :class:`Scene` itself: every
question's ground truth is computed from it (:mod:`.scene_questions`), never from
pixels. Everything is seeded and deterministic; the train and test splits are
different scenes (different seed streams).

Geometry is kept unambiguous on purpose: any two objects' centres differ by at least
``MIN_SEP`` pixels horizontally *and* vertically, so "left of" and "above" always have
one true answer; objects may overlap (occlusion, drawn back to front by ``depth``) but
never hide most of each other.

Pictures are ``FRAME`` x ``FRAME`` windows of a ``CANVAS`` x ``CANVAS`` canvas: a camera
shift moves the window (the textured background moves with it, as a real pan would),
and every object stays inside every window, so drift never changes an answer.
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Optional, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance

SHAPES = ("circle", "square", "triangle", "diamond")
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (205, 35, 40), "green": (35, 150, 55), "blue": (35, 75, 205),
    "yellow": (235, 205, 35), "purple": (135, 55, 170), "orange": (240, 125, 25),
}
# "Radius" of each size class in canvas pixels (224-pixel frame).
SIZES: dict[str, int] = {"small": 13, "medium": 20, "large": 29}
SIZE_ORDER = ("small", "medium", "large")

CANVAS = 256
FRAME = 224
PAD = (CANVAS - FRAME) // 2  # camera shifts stay within +-MAX_SHIFT <= PAD
MAX_SHIFT = 8
MIN_SEP = 16  # minimum centre distance along x and along y between any two objects
_INSET = PAD + MAX_SHIFT + 3  # objects stay inside every camera window
_SUPERSAMPLE = 2

SPLIT_CODES = {"train": 1, "test": 2}


@dataclass(frozen=True)
class SceneObject:
    """One object of a scene. ``depth`` 0 is nearest the camera."""

    oid: int
    shape: str
    color: str
    size: str
    x: float
    y: float
    depth: int

    @property
    def radius(self) -> int:
        return SIZES[self.size]

    @property
    def name(self) -> str:
        return f"{self.size} {self.color} {self.shape}"


@dataclass(frozen=True)
class Background:
    """Texture, colours and lighting of a scene's background (all from ``seed``)."""

    seed: int


@dataclass(frozen=True)
class Scene:
    """A scene graph: objects, background, and where it came from.

    ``scene_id`` names the scene's lineage (an edited scene keeps it); ``edits`` lists
    the edits applied since the original (empty for the original)."""

    scene_id: str
    objects: tuple[SceneObject, ...]
    background: Background
    edits: tuple[str, ...] = ()

    @property
    def state(self) -> str:
        """Names this scene state: same lineage and edits = same content."""
        return self.scene_id + "".join(f"+{e}" for e in self.edits)

    def by_id(self, oid: int) -> SceneObject:
        return next(o for o in self.objects if o.oid == oid)

    def graph(self) -> dict[str, object]:
        """The scene graph as plain data: objects and the pairwise relations."""
        objs = sorted(self.objects, key=lambda o: o.oid)
        rel: dict[str, list[tuple[int, int]]] = {"left_of": [], "above": [], "in_front_of": [], "bigger_than": []}
        for a in objs:
            for b in objs:
                if a.oid == b.oid:
                    continue
                if a.x < b.x:
                    rel["left_of"].append((a.oid, b.oid))
                if a.y < b.y:
                    rel["above"].append((a.oid, b.oid))
                if overlap(a, b) and a.depth < b.depth:
                    rel["in_front_of"].append((a.oid, b.oid))
                if a.radius > b.radius:
                    rel["bigger_than"].append((a.oid, b.oid))
        return {"scene": self.state,
                "objects": [{"id": o.oid, "shape": o.shape, "color": o.color, "size": o.size,
                             "x": round(o.x, 1), "y": round(o.y, 1), "depth": o.depth} for o in objs],
                "relations": rel}


def overlap(a: SceneObject, b: SceneObject) -> bool:
    """Whether the two objects' discs intersect (then one occludes the other)."""
    return float(np.hypot(a.x - b.x, a.y - b.y)) < a.radius + b.radius


def _placeable(o: SceneObject, others: Sequence[SceneObject]) -> bool:
    r = o.radius
    if not (_INSET + r <= o.x <= CANVAS - _INSET - r and _INSET + r <= o.y <= CANVAS - _INSET - r):
        return False
    for p in others:
        if p.oid == o.oid:
            continue
        if abs(o.x - p.x) < MIN_SEP or abs(o.y - p.y) < MIN_SEP:
            return False
        # Overlap allowed, but each object keeps most of itself visible.
        if float(np.hypot(o.x - p.x, o.y - p.y)) < 0.75 * (r + p.radius):
            return False
    return True


def valid(scene: Scene) -> bool:
    """The invariants every scene keeps (unambiguous relations, unique colour+shape)."""
    pairs = {(o.color, o.shape) for o in scene.objects}
    return (len(pairs) == len(scene.objects) and len({o.depth for o in scene.objects}) == len(scene.objects)
            and all(_placeable(o, scene.objects) for o in scene.objects))


def scene_seed(split: str, index: int) -> int:
    """The seed of scene ``index`` of ``split``: disjoint streams per split."""
    if split not in SPLIT_CODES:
        raise ValueError("split must be 'train' or 'test'")
    return int(np.random.SeedSequence([SPLIT_CODES[split], int(index)]).generate_state(1)[0])


def generate_scene(split: str, index: int, n_objects: Optional[int] = None) -> Scene:
    """Scene ``index`` of ``split``: 2-6 objects, about a third of them placed to
    partly overlap an earlier one (so depth is visible)."""
    seed = scene_seed(split, index)
    rng = np.random.default_rng(seed)
    n = int(n_objects or rng.integers(2, 7))
    for _attempt in range(200):
        objs: list[SceneObject] = []
        for oid in range(n):
            for _try in range(100):
                shape = str(rng.choice(SHAPES))
                color = str(rng.choice(list(COLORS)))
                if any(o.shape == shape and o.color == color for o in objs):
                    continue
                size = str(rng.choice(SIZE_ORDER))
                r = SIZES[size]
                if objs and rng.random() < 0.35:
                    near = objs[int(rng.integers(len(objs)))]
                    ang = rng.uniform(0, 2 * np.pi)
                    dist = rng.uniform(0.78, 0.95) * (r + near.radius)
                    x, y = near.x + dist * np.cos(ang), near.y + dist * np.sin(ang)
                else:
                    lo, hi = _INSET + r, CANVAS - _INSET - r
                    x, y = rng.uniform(lo, hi), rng.uniform(lo, hi)
                o = SceneObject(oid, shape, color, size, round(float(x), 1), round(float(y), 1), 0)
                if _placeable(o, objs):
                    objs.append(o)
                    break
            else:
                break
        if len(objs) == n:
            depths = rng.permutation(n)
            objs = [replace(o, depth=int(d)) for o, d in zip(objs, depths)]
            return Scene(f"{split}-{index}", tuple(objs), Background(int(rng.integers(2**31))))
    raise RuntimeError(f"could not place {n} objects for scene {split}-{index}")  # pragma: no cover


def scenes(split: str, n: int, start: int = 0) -> list[Scene]:
    return [generate_scene(split, i) for i in range(start, start + n)]


# ------------------------------------------------------------------------------ edits
def move_object(scene: Scene, oid: int, x: float, y: float) -> Scene:
    objs = tuple(replace(o, x=round(float(x), 1), y=round(float(y), 1)) if o.oid == oid else o for o in scene.objects)
    return replace(scene, objects=objs, edits=scene.edits + (f"move{oid}",))


def recolor_object(scene: Scene, oid: int, color: str) -> Scene:
    objs = tuple(replace(o, color=color) if o.oid == oid else o for o in scene.objects)
    return replace(scene, objects=objs, edits=scene.edits + (f"recolor{oid}{color}",))


def remove_object(scene: Scene, oid: int) -> Scene:
    return replace(scene, objects=tuple(o for o in scene.objects if o.oid != oid), edits=scene.edits + (f"remove{oid}",))


EDIT_KINDS = ("move", "recolor", "remove")


def propose_edit(scene: Scene, kind: str, rng: np.random.Generator) -> Optional[Scene]:
    """A valid small edit of ``kind``: ``move`` carries one object to the other side
    (left/right, or above/below) of another; ``recolor`` gives one object another
    colour; ``remove`` takes one object away (scenes keep at least two)."""
    objs = list(scene.objects)
    order = [int(i) for i in rng.permutation(len(objs))]
    if kind == "remove":
        if len(objs) < 3:
            return None
        return remove_object(scene, objs[order[0]].oid)
    if kind == "recolor":
        for i in order:
            o = objs[i]
            free = [c for c in COLORS if c != o.color and not any(p.shape == o.shape and p.color == c for p in objs)]
            if free:
                return recolor_object(scene, o.oid, free[int(rng.integers(len(free)))])
        return None
    if kind != "move":
        raise ValueError(f"unknown edit {kind!r}")
    for i in order:
        a = objs[i]
        for j in order:
            b = objs[j]
            if a.oid == b.oid:
                continue
            for _try in range(12):
                gap = rng.uniform(MIN_SEP + 2, 56)
                if rng.random() < 0.6:  # across b horizontally
                    x = b.x + gap if a.x < b.x else b.x - gap
                    y = a.y + rng.uniform(-10, 10)
                else:  # across b vertically
                    x = a.x + rng.uniform(-10, 10)
                    y = b.y + gap if a.y < b.y else b.y - gap
                moved = move_object(scene, a.oid, x, y)
                if valid(moved):
                    return moved
    return None


# -------------------------------------------------------------------------- rendering
@dataclass(frozen=True)
class Camera:
    """How one picture of a scene is taken: window shift, zoom, exposure, sensor noise."""

    dx: int = 0
    dy: int = 0
    zoom: float = 1.0
    brightness: float = 1.0
    noise: float = 2.0
    noise_seed: int = 0

    @staticmethod
    def drifted(rng: np.random.Generator, base: Optional["Camera"] = None) -> "Camera":
        """The next camera of a slowly drifting sequence (a few pixels, a few % exposure)."""
        b = base or Camera()
        return Camera(
            dx=int(np.clip(b.dx + rng.integers(-3, 4), -MAX_SHIFT, MAX_SHIFT)),
            dy=int(np.clip(b.dy + rng.integers(-3, 4), -MAX_SHIFT, MAX_SHIFT)),
            zoom=float(np.clip(b.zoom + rng.uniform(-0.015, 0.015), 0.97, 1.03)),
            brightness=float(np.clip(b.brightness + rng.uniform(-0.04, 0.04), 0.88, 1.12)),
            noise=float(rng.uniform(1.5, 4.0)),
            noise_seed=int(rng.integers(2**31)),
        )


def _smooth_noise(rng: np.random.Generator, cells: int, size: int) -> np.ndarray:
    grid = (rng.random((cells, cells)) * 255).astype(np.uint8)
    up = Image.fromarray(grid).resize((size, size), Image.BICUBIC)
    return np.asarray(up, dtype=np.float32) / 255.0


@lru_cache(maxsize=256)
def _background(bg: Background, size: int) -> np.ndarray:
    """Float RGB in [0, 1]: two muted colours mixed by smooth noise, a faint stripe or
    checker pattern, fine grain, and a lighting gradient (all in canvas coordinates)."""
    rng = np.random.default_rng(bg.seed)
    hue = rng.random()
    c1 = np.array(colorsys.hsv_to_rgb(hue, rng.uniform(0.08, 0.3), rng.uniform(0.55, 0.85)), np.float32)
    c2 = np.array(colorsys.hsv_to_rgb((hue + rng.uniform(0.05, 0.25)) % 1, rng.uniform(0.05, 0.3),
                                      rng.uniform(0.45, 0.8)), np.float32)
    mix = _smooth_noise(rng, int(rng.integers(3, 8)), size)[..., None]
    img = c1 * mix + c2 * (1 - mix)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) * (CANVAS / size)
    theta = rng.uniform(0, np.pi)
    period = rng.uniform(10, 40)
    u = xx * np.cos(theta) + yy * np.sin(theta)
    if rng.random() < 0.5:
        pattern = np.sin(2 * np.pi * u / period)
    else:
        v = -xx * np.sin(theta) + yy * np.cos(theta)
        pattern = np.sign(np.sin(2 * np.pi * u / period) * np.sin(2 * np.pi * v / period))
    img = img + rng.uniform(0.02, 0.06) * pattern[..., None]
    grain = np.asarray(Image.fromarray(((rng.random((CANVAS, CANVAS)) - 0.5) * 255 + 128).astype(np.uint8))
                       .resize((size, size), Image.BILINEAR), np.float32) / 255.0 - 0.5
    img = img + 0.08 * grain[..., None]
    return np.clip(img, 0, 1).astype(np.float32)


def _lighting(bg: Background, size: int) -> np.ndarray:
    rng = np.random.default_rng(bg.seed + 1)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    phi = rng.uniform(0, 2 * np.pi)
    ramp = (xx - 0.5) * np.cos(phi) + (yy - 0.5) * np.sin(phi)
    cx, cy = rng.uniform(0.2, 0.8, 2)
    vignette = np.hypot(xx - cx, yy - cy)
    return (1.0 + rng.uniform(0.2, 0.4) * ramp - rng.uniform(0.05, 0.2) * vignette)[..., None].astype(np.float32)


def _polygon(shape: str, x: float, y: float, r: float) -> list[tuple[float, float]]:
    if shape == "square":
        s = 0.86 * r
        return [(x - s, y - s), (x + s, y - s), (x + s, y + s), (x - s, y + s)]
    if shape == "triangle":
        return [(x, y - 1.1 * r), (x + 1.02 * r, y + 0.75 * r), (x - 1.02 * r, y + 0.75 * r)]
    if shape == "diamond":
        return [(x, y - 1.15 * r), (x + 0.9 * r, y), (x, y + 1.15 * r), (x - 0.9 * r, y)]
    raise ValueError(shape)


def _mask(shape: str, x: float, y: float, r: float, size: int) -> Image.Image:
    m = Image.new("L", (size, size), 0)
    d = ImageDraw.Draw(m)
    if shape == "circle":
        d.ellipse([x - r, y - r, x + r, y + r], fill=255)
    else:
        d.polygon(_polygon(shape, x, y, r), fill=255)
    return m


@lru_cache(maxsize=128)
def render_canvas(scene: Scene, size: int = CANVAS) -> np.ndarray:
    """The whole canvas of a scene state as uint8 RGB (``size`` < CANVAS draws it smaller)."""
    scale = size / CANVAS
    img = _background(scene.background, size).copy()
    big = size * _SUPERSAMPLE
    k = scale * _SUPERSAMPLE
    for o in sorted(scene.objects, key=lambda o: -o.depth):  # far to near
        x, y, r = o.x * k, o.y * k, o.radius * k
        outline = _mask(o.shape, x, y, r + 1.6 * k, big).resize((size, size), Image.BOX)
        fill = _mask(o.shape, x, y, r, big).resize((size, size), Image.BOX)
        a_out = np.asarray(outline, np.float32)[..., None] / 255.0
        a_in = np.asarray(fill, np.float32)[..., None] / 255.0
        base = np.array(COLORS[o.color], np.float32) / 255.0
        yy = np.arange(size, dtype=np.float32)[:, None, None]
        shade = 1.12 - 0.24 * np.clip((yy - (o.y - o.radius) * scale) / max(1.0, 2 * o.radius * scale), 0, 1)
        img = img * (1 - a_out) + (base * 0.45) * a_out
        img = img * (1 - a_in) + np.clip(base * shade, 0, 1) * a_in
    img = img * _lighting(scene.background, size)
    return (np.clip(img, 0, 1) * 255).round().astype(np.uint8)


def render(scene: Scene, camera: Camera = Camera(), *, canvas_size: int = CANVAS) -> Image.Image:
    """One picture of ``scene`` as ``camera`` sees it: ``FRAME * canvas_size / CANVAS``
    pixels square (224 at the default canvas)."""
    return view(render_canvas(scene, canvas_size), camera)


def view(canvas: np.ndarray, camera: Camera = Camera()) -> Image.Image:
    """The picture ``camera`` takes of a rendered canvas (see :func:`render`)."""
    s = canvas.shape[0] / CANVAS
    frame = round(FRAME * s)
    half = frame / (2 * camera.zoom)
    cx = (CANVAS / 2 + camera.dx) * s
    cy = (CANVAS / 2 + camera.dy) * s
    box = (round(cx - half), round(cy - half), round(cx + half), round(cy + half))
    im = Image.fromarray(canvas).crop(box)
    if im.size != (frame, frame):
        im = im.resize((frame, frame), Image.BICUBIC)
    if camera.brightness != 1.0:
        im = ImageEnhance.Brightness(im).enhance(camera.brightness)
    if camera.noise > 0:
        rng = np.random.default_rng(camera.noise_seed)
        a = np.asarray(im, np.float32) + rng.normal(0.0, camera.noise, (frame, frame, 3))
        im = Image.fromarray(np.clip(a, 0, 255).round().astype(np.uint8))
    return im
