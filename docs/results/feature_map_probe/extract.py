"""Exploration: raw stage-2 and stage-4 maps of train-split pairs (+ easy-vqa train pictures)."""
import sys, time, random, numpy as np, torch, pickle
torch.set_num_threads(1)
from PIL import Image
from evaluation.training.image_pairs import load_sources, split_sources, make_pairs, different_pairs
from evaluation.sources import imageops
from evaluation.studies.image_change_eval import _jitter, _recolour_shape, EASYVQA_COLOURS
from evaluation.sources.easyvqa import load_split
from mlc_integrations.embed.image_towers import resolve_image_encoder
enc = resolve_image_encoder("efficientnet-lite0"); m = enc.load()
cap = {}
m.blocks[2].register_forward_hook(lambda mod, i, o: cap.__setitem__(2, o))
m.blocks[4].register_forward_hook(lambda mod, i, o: cap.__setitem__(4, o))
def run(im):
    b = enc.preprocess([im])
    with torch.inference_mode():
        v = enc.features(b).float().numpy()[0]
    return v / np.linalg.norm(v), cap[2][0].numpy().astype(np.float16), cap[4][0].numpy().astype(np.float16)
pics, group = load_sources()
train, held = split_sources(group)
pairs = make_pairs(pics, train) + different_pairs(pics, train)
pairs = [p for p in pairs if p.split == "train"]
# easy-vqa train pictures
tr = load_split("train"); r = random.Random(5); g = np.random.default_rng(5)
for img in r.sample(list(tr), 40):
    with Image.open(img.path) as f: im = f.convert("RGB")
    oc = r.choice([c for c in EASYVQA_COLOURS if c != img.color])
    class P: pass
    for lab, kind, new in (("benign","evqa jitter",_jitter(im, r, g)), ("benign","evqa jitter",_jitter(im, r, g)), ("edit","evqa recolour",_recolour_shape(im, oc))):
        p = P(); p.source="evqa:"+str(img.path); p.split="train"; p.label=lab; p.kind=kind; p.detail=kind; p.area=0.1; p.stored=im; p.new=new
        pairs.append(p)
print(len(pairs), flush=True)
cache = {}
rows = []
t0 = time.time()
for k, p in enumerate(pairs):
    if id(p.stored) not in cache: cache[id(p.stored)] = run(p.stored)
    if id(p.new) not in cache or p.label != "different": cache[id(p.new)] = run(p.new)
    rows.append(dict(source=p.source, label=p.label, kind=p.kind, detail=p.detail, area=p.area, a=id(p.stored), b=id(p.new)))
    if k % 200 == 0: print(k, time.time()-t0, flush=True)
pickle.dump({"rows": rows, "maps": cache}, open("/tmp/img2/train_maps.pkl", "wb"))
print("done", time.time()-t0)
