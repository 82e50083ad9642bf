# More golden frame-resize / unsharp cases from OpenCV itself (cv2 on the GPU machine), in the layout
# of frame_resize_gen.py: non-integer ratios for every kernel (bilinear off its 2x INTER_AREA path,
# nearest's floor mapping), downscales, a frame smaller than the 7-tap blur, strong sharpening, and
# the spatial fast mode's own 2x geometry at a quarter of FastH3's default size.
import json, sys, os
import numpy as np, cv2
from safetensors.numpy import save_file

MODES = {"lanczos": cv2.INTER_LANCZOS4, "cubic": cv2.INTER_CUBIC, "bilinear": cv2.INTER_LINEAR, "nearest": cv2.INTER_NEAREST}

def frame(rng, h, w):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = 128 + 90 * np.sin(x / (3 + rng.random() * 5))[..., None] * np.cos(y / (4 + rng.random() * 6))[..., None] * rng.random(3)
    img = base + rng.normal(0, 18, (h, w, 3))
    for _ in range(6):  # hard edges
        y0, x0 = rng.integers(0, h), rng.integers(0, w)
        img[y0:y0 + rng.integers(2, h), x0:x0 + rng.integers(2, w)] = rng.integers(0, 256, 3)
    img[0, 0] = 255; img[-1, -1] = 0  # extremes for saturation
    return np.clip(img, 0, 255).astype(np.uint8)

def unsharp(f, a):
    if a <= 0: return f
    blur = cv2.GaussianBlur(f, (0, 0), 1.0)
    return cv2.addWeighted(f, 1.0 + a, blur, -a, 0)

def build(name, seed, sizes, cases):
    rng = np.random.default_rng(seed)
    tensors, meta = {}, {"kind": "frame_resize", "module": f"cv2 {cv2.__version__} (as frame_resize_gen.py)", "cases": {}}
    for i, (h, w) in enumerate(sizes):
        tensors[f"in.frame_{i}"] = frame(rng, h, w)
    for cname, (i, W, H, mode, a) in cases.items():
        f = tensors[f"in.frame_{i}"]
        out = f if mode == "none" else cv2.resize(f, (W, H), interpolation=MODES[mode])
        out = unsharp(out, a)
        tensors[f"out.{cname}"] = np.ascontiguousarray(out)
        meta["cases"][cname] = {"input": f"in.frame_{i}", "width": W, "height": H, "interpolation": mode, "sharpen": a, "output": f"out.{cname}"}
    meta["tensors"] = {k: [list(v.shape), str(v.dtype)] for k, v in tensors.items()}
    js = json.dumps(meta, indent=1)
    save_file(tensors, os.path.join(sys.argv[1], name + ".safetensors"), metadata={"refgen": js})
    open(os.path.join(sys.argv[1], name + ".json"), "w").write(js + "\n")

cases = {}
for m in MODES:
    cases[f"fast_{m}_sharpen04"] = (0, 208, 120, m, 0.4)   # 60x104 stage 1 -> 120x208, as 240x416 -> 480x832
    cases[f"odd_up_{m}"] = (1, 80, 61, m, 0.0)               # 47x33 -> 80x61
    cases[f"odd_down_{m}"] = (2, 41, 27, m, 0.0)             # 96x64 -> 41x27
    cases[f"up3_{m}"] = (3, 63, 39, m, 0.0)                  # 21x13 -> 63x39
    cases[f"up25_{m}_sharpen06"] = (1, 118, 83, m, 0.6)      # 47x33 -> 118x83 (x2.5)
cases["down3_bilinear"] = (2, 32, 21, "bilinear", 0.0)
cases["tiny_sharpen06_only"] = (4, 5, 4, "none", 0.6)        # smaller than the 7-tap blur
cases["strong_sharpen15_only"] = (1, 47, 33, "none", 1.5)
build("frame_resize_more", 2, [(60, 104), (33, 47), (64, 96), (13, 21), (4, 5)], cases)
print("ok", cv2.__version__)
