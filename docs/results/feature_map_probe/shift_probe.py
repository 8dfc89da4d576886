import numpy as np, torch, time
torch.set_num_threads(1)
from PIL import Image
import skimage.data as sd
from mlc_integrations.embed.image_towers import resolve_image_encoder
from evaluation.sources import imageops
enc = resolve_image_encoder("efficientnet-lite0"); m = enc.load()
cap = {}
for i in (1,2,4): m.blocks[i].register_forward_hook(lambda mod, inp, o, i=i: cap.__setitem__(i, o[0].numpy().copy()))
def run(im):
    with torch.inference_mode(): enc.features(enc.preprocess([im]))
    return dict(cap)
im = Image.fromarray(sd.coffee()).convert("RGB").resize((224,224))
base = run(im)
def blur(x):
    p = np.pad(x, ((0,0),(1,1),(1,1)), mode="edge")
    h = p[:, :, :-2] + 2*p[:, :, 1:-1] + p[:, :, 2:]
    return (h[:, :-2] + 2*h[:, 1:-1] + h[:, 2:]) / 16
def pool(x, f):
    c, n, _ = x.shape; return x.reshape(c, n//f, f, n//f, f).mean((2,4))
for px in (0, 2, 4, 8, 16):
    s = run(imageops.shift(im, px, 0))
    out = []
    for st, stride in ((1,4),(2,8),(4,16)):
        a, b = base[st], s[st]
        k = px // stride if px % stride == 0 else None
        # best integer shift in cells
        best = min(((np.sqrt(((a[:, 2:-2, 2:-2] - b[:, 2:-2, 2+dx:b.shape[2]-2+dx])**2).sum(0)).mean() / np.sqrt((a**2).sum(0).mean()), dx) for dx in range(-2,3)))
        ab, bb = blur(a), blur(b)
        bestb = min(((np.sqrt(((ab[:, 2:-2, 2:-2] - bb[:, 2:-2, 2+dx:b.shape[2]-2+dx])**2).sum(0)).mean() / np.sqrt((ab**2).sum(0).mean()), dx) for dx in range(-2,3)))
        out.append(f"st{st} raw {best[0]:.3f}@{best[1]} blur {bestb[0]:.3f}@{bestb[1]}")
    a1, b1 = pool(blur(base[1]), 2), pool(blur(s[1]), 2)
    bp = min(((np.sqrt(((a1[:, 2:-2, 2:-2] - b1[:, 2:-2, 2+dx:b1.shape[2]-2+dx])**2).sum(0)).mean() / np.sqrt((a1**2).sum(0).mean()), dx) for dx in range(-2,3)))
    print(px, " | ".join(out), f"| st1 blur+pool2 {bp[0]:.3f}@{bp[1]}")
t = time.perf_counter()
x = enc.preprocess([im])
with torch.inference_mode():
    for _ in range(5):
        h = m.bn1(m.conv_stem(x))
        for i in range(3): h = m.blocks[i](h)
print("trunc to stage2 ms", (time.perf_counter()-t)/5*1000)
