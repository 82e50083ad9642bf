# RIFE 4.25 IFNet frames per second in PyTorch on the GPU, the counterpart of
# `go run ./examples/bench -bench rife` (same architecture, release widths, random weights).
#
#   python3 bench/rife_torch.py VSRIFE_DIR [--height 480 --width 832 --batch 1,8 --iters 20]
#
# VSRIFE_DIR is vs-rife's vsrife/ folder (IFNet_HDv3_v4_25.py and warplayer.py, imported unchanged by
# path as internal/rife/testdata/gen_ifnet.py does). Frames are padded to multiples of 64 (832x480 ->
# 832x512) and the Head features computed per pair, as vs-rife's __init__.py does without its cache.
# Timed with CUDA events after warm-up, f32 (TF32 off and on) and bf16.
import argparse
import importlib.util
import json
import os
import sys
import types

import torch
import torch.nn.functional as F


def load_vsrife(folder):
    pkg = types.ModuleType("vsrife")
    pkg.__path__ = [folder]
    sys.modules["vsrife"] = pkg
    for name in ("warplayer", "IFNet_HDv3_v4_25"):
        spec = importlib.util.spec_from_file_location("vsrife." + name, os.path.join(folder, name + ".py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules["vsrife." + name] = mod
        spec.loader.exec_module(mod)
    return sys.modules["vsrife.IFNet_HDv3_v4_25"]


def bench(mod, dtype, tf32, h, w, n, iters):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    dev = "cuda"
    net = mod.IFNet().to(dev, dtype).eval()
    enc = mod.Head().to(dev, dtype).eval()
    ph, pw = (h + 63) // 64 * 64, (w + 63) // 64 * 64
    div = torch.tensor([(pw - 1.0) / 2.0, (ph - 1.0) / 2.0], dtype=torch.float, device=dev)
    hor = torch.linspace(-1.0, 1.0, pw, device=dev).view(1, 1, 1, pw).expand(-1, -1, ph, -1)
    ver = torch.linspace(-1.0, 1.0, ph, device=dev).view(1, 1, ph, 1).expand(-1, -1, -1, pw)
    grid = torch.cat([hor, ver], 1)
    a = torch.randint(0, 256, (n, 3, h, w), device=dev, dtype=torch.uint8)
    b = torch.randint(0, 256, (n, 3, h, w), device=dev, dtype=torch.uint8)
    t = torch.full((n, 1, ph, pw), 0.5, device=dev, dtype=dtype)

    def step():
        with torch.no_grad():
            i0 = F.pad(a.to(dtype) / 255.0, (0, pw - w, 0, ph - h))
            i1 = F.pad(b.to(dtype) / 255.0, (0, pw - w, 0, ph - h))
            out = net(i0, i1, t, div, grid, enc(i0), enc(i1))
            return (out[:, :, :h, :w].clamp(0, 1) * 255).round().to(torch.uint8)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        step()
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / iters
    return {"impl": "pytorch", "dtype": str(dtype).replace("torch.", ""), "tf32": tf32, "height": h, "width": w,
            "pairs": n, "ms_per_call": round(ms, 3), "frames_per_s": round(1000 * n / ms, 1)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("vsrife")
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--width", type=int, default=832)
    p.add_argument("--batch", default="1,8")
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args()
    mod = load_vsrife(args.vsrife)
    print("torch", torch.__version__, torch.cuda.get_device_name(0))
    for n in [int(x) for x in args.batch.split(",")]:
        for dtype, tf32 in ((torch.float32, False), (torch.float32, True), (torch.bfloat16, False)):
            print(json.dumps(bench(mod, dtype, tf32, args.height, args.width, n, args.iters)))


if __name__ == "__main__":
    main()
