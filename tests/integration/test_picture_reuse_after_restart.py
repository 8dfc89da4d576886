"""A persistent cache is reused across processes: pictures its first process stored are
served to a second process as re-encoded or resized copies (the image judge's evidence is
at rest by default there), and a different photo is never served."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PHOTOS = ["HappyFish.jpg", "apple.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg", "squirrel_cls.jpg"]
OTHERS = ["aero1.jpg", "home.jpg", "messi5.jpg"]

CHILD = r'''
import io, json, sys
from PIL import Image
from mlc_integrations import CacheRequest, MLCEngine
directory, role, photos_dir = sys.argv[1], sys.argv[2], sys.argv[3]
names, others = json.loads(sys.argv[4]), json.loads(sys.argv[5])

def picture(name):
    return Image.open(f"{photos_dir}/{name}").convert("RGB")

def jpeg(im, q):
    buf = io.BytesIO(); im.save(buf, "JPEG", quality=q); buf.seek(0)
    return Image.open(buf).convert("RGB")

def ask(im):
    return CacheRequest(text="What is in this picture?", images=[im], scope="vision-model")

eng = MLCEngine(persist_directory=directory, durable=True)
out = {}
if role == "store":
    for n in names:
        eng.update(ask(picture(n)), {"text": f"this is {n}"})
else:
    for i, n in enumerate(names):
        im = picture(n)
        copy = jpeg(im, 70) if i % 2 == 0 else im.resize((im.width * 3 // 4, im.height * 3 // 4))
        hit = eng.lookup(ask(copy))
        out[n] = None if hit is None else hit.payload["text"]
    for n in others:
        hit = eng.lookup(ask(picture(n)))
        out[n] = None if hit is None else hit.payload["text"]
eng.close()
print(json.dumps(out))
'''


def _run(directory: Path, role: str) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-c", CHILD, str(directory), role, str(ROOT / "data" / "photos"),
                          json.dumps(PHOTOS), json.dumps(OTHERS)], capture_output=True, text=True, env=env,
                         timeout=900, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_a_second_process_reuses_the_pictures_the_first_one_stored(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    _run(directory, "store")
    served = _run(directory, "reuse")
    copies = {n: served[n] for n in PHOTOS}
    assert all(v in (None, f"this is {n}") for n, v in copies.items()), copies  # never another photo's answer
    assert sum(v is not None for v in copies.values()) >= 5, copies
    assert all(served[n] is None for n in OTHERS), served  # different photos are never served
