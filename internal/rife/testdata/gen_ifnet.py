# Golden IFNet (RIFE 4.25) fixtures from upstream's PyTorch module, for internal/rife's TestIFNetParity.
#
#   python3 gen_ifnet.py VSRIFE_DIR OUTDIR
#
# VSRIFE_DIR is a checkout of HolyWu/vs-rife's vsrife/ package folder (only IFNet_HDv3_v4_25.py and
# warplayer.py are read; they are imported unchanged, by path, so vsrife/__init__.py and its
# VapourSynth/TensorRT imports are never loaded). Needs torch, numpy, safetensors. Runs on CUDA when
# available (f32, TF32 off), else on the CPU.
#
# Which file is the faithful 4.25: Practical-RIFE ships the 4.25 IFNet_HDv3.py only in its release zip
# (not in git). vs-rife's IFNet_HDv3_v4_25.py matches FastVideo's MLX port of the released weights
# (fastvideo/third_party/rife_mlx/model/IFNet_HDv3.py: five blocks, widths 192/128/96/64/32, Head
# 3->16->16->16->4, LeakyReLU(0.2), lastconv ConvTranspose2d(c, 52, 4, 2, 1) + PixelShuffle(2),
# bilinear interpolate with align_corners=False, border/align_corners=True warp). vs-rife's
# adaptations, which this script reproduces as vs-rife's own __init__.py drives them:
#   - forward(img0, img1, timestep, tenFlow_div, backwarp_tenGrid, f0, f1) takes the warp grid, its
#     divisor and the Head features precomputed (encode = the Head with the flownet's encode.* weights);
#   - inputs are clamped to [0, 1] (a no-op for frames from uint8), frames are zero-padded at the
#     bottom/right to a multiple of 64 (scale 1) and the output cropped back;
#   - it returns only the blended frame.
# Random weights: the five IFBlocks are rebuilt with small widths (upstream's IFBlock class,
# unchanged, with c from CHANNELS) so that the fixture stays small; everything else is upstream's.
import importlib.util
import json
import os
import sys
import types

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

CHANNELS = [16, 12, 8, 8, 8]  # internal/rife.Tiny()
CASES = [  # name, N, H, W, fractions (one per pair)
    ("pad_both_t05_03", 2, 40, 70, [0.5, 0.3]),
    ("exact_64x128_t07", 1, 64, 128, [0.7]),
    ("odd_33x47_batch3", 3, 33, 47, [0.25, 0.5, 0.9]),
    ("pad_w_64x100_t0125", 1, 64, 100, [0.125]),
]
PAD = 64


def load_vsrife(folder):
    # A stand-in package so that "from .warplayer import warp" resolves to vs-rife's warplayer.py.
    pkg = types.ModuleType("vsrife")
    pkg.__path__ = [folder]
    sys.modules["vsrife"] = pkg
    mods = {}
    for name in ("warplayer", "IFNet_HDv3_v4_25"):
        spec = importlib.util.spec_from_file_location("vsrife." + name, os.path.join(folder, name + ".py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules["vsrife." + name] = mod
        spec.loader.exec_module(mod)
        mods[name] = mod
    return mods["IFNet_HDv3_v4_25"]


def build(ifnet_mod, device):
    torch.manual_seed(0)
    net = ifnet_mod.IFNet()
    widths = [15] + [28] * 4
    for i, c in enumerate(CHANNELS):
        setattr(net, f"block{i}", ifnet_mod.IFBlock(widths[i], c=c))
    with torch.no_grad():  # betas are ones at init; make them matter
        for name, p in net.named_parameters():
            if name.endswith(".beta"):
                p.copy_(0.5 + torch.rand_like(p))
    net = net.to(device).eval()
    encode = ifnet_mod.Head().to(device).eval()
    encode.load_state_dict({k[len("encode."):]: v for k, v in net.state_dict().items() if k.startswith("encode.")})
    return net, encode


def grids(ph, pw, device):
    # vsrife/__init__.py: tenFlow_div and backwarp_tenGrid at the padded size.
    div = torch.tensor([(pw - 1.0) / 2.0, (ph - 1.0) / 2.0], dtype=torch.float, device=device)
    hor = torch.linspace(-1.0, 1.0, pw, dtype=torch.float, device=device).view(1, 1, 1, pw).expand(-1, -1, ph, -1)
    ver = torch.linspace(-1.0, 1.0, ph, dtype=torch.float, device=device).view(1, 1, ph, 1).expand(-1, -1, -1, pw)
    return div, torch.cat([hor, ver], 1)


def run_case(net, encode, rng, n, h, w, ts, device):
    a = rng.integers(0, 256, (n, h, w, 3), dtype=np.uint8)
    b = rng.integers(0, 256, (n, h, w, 3), dtype=np.uint8)
    # Smooth content shifted between the two frames gives the flow something to find.
    yy, xx = np.mgrid[0:h, 0:w]
    for i in range(n):
        for c in range(3):
            a[i, :, :, c] = (a[i, :, :, c] // 4 + 190 * (0.5 + 0.5 * np.sin((xx + 3 * c) / 5.0 + yy / 7.0))).clip(0, 255)
            b[i, :, :, c] = (b[i, :, :, c] // 4 + 190 * (0.5 + 0.5 * np.sin((xx + 3 * c + 2 + i) / 5.0 + yy / 7.0))).clip(0, 255)
    ph, pw = (h + PAD - 1) // PAD * PAD, (w + PAD - 1) // PAD * PAD
    pad = (0, pw - w, 0, ph - h)
    to = lambda x: F.pad(torch.from_numpy(x).to(device).permute(0, 3, 1, 2).float() / 255.0, pad)
    img0, img1 = to(a), to(b)
    t = torch.tensor(ts, dtype=torch.float, device=device).view(n, 1, 1, 1).expand(n, 1, ph, pw).contiguous()
    div, grid = grids(ph, pw, device)
    with torch.no_grad():
        out = net(img0, img1, t, div, grid.expand(n, -1, -1, -1), encode(img0), encode(img1))
    out = out[:, :, :h, :w].permute(0, 2, 3, 1).contiguous().cpu()
    return a, b, out


def main():
    folder, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ifnet_mod = load_vsrife(folder)
    net, encode = build(ifnet_mod, device)
    tensors = {"w." + k: v.detach().float().cpu().contiguous() for k, v in net.state_dict().items()}
    rng = np.random.default_rng(1)
    cases = []
    for name, n, h, w, ts in CASES:
        a, b, out = run_case(net, encode, rng, n, h, w, ts, device)
        tensors[f"in.{name}.img0"] = torch.from_numpy(a)
        tensors[f"in.{name}.img1"] = torch.from_numpy(b)
        tensors[f"out.{name}"] = out
        cases.append({"name": name, "n": n, "h": h, "w": w, "t": ts})
    meta = {
        "kind": "rife_ifnet",
        "module": "vsrife/IFNet_HDv3_v4_25.py IFNet (+ Head as encode, warplayer.py), random weights, blocks rebuilt with small widths",
        "device": device, "tf32": False, "torch": torch.__version__,
        "config": {"block_channels": CHANNELS},
        "layout": "w.*: the IFNet state dict (PyTorch names, NCHW kernels); in.<case>.img0/img1: uint8 NHWC frames, fed as x/255 "
                  "zero-padded to multiples of 64; out.<case>: float32 NHWC, cropped, neither clipped nor quantized",
        "cases": cases,
    }
    js = json.dumps(meta, indent=1)
    save_file(tensors, os.path.join(outdir, "ifnet.safetensors"), metadata={"refgen": js})
    with open(os.path.join(outdir, "ifnet.json"), "w") as f:
        f.write(js + "\n")
    print("wrote", os.path.join(outdir, "ifnet.safetensors"), sum(v.numel() * v.element_size() for v in tensors.values()), "bytes")


if __name__ == "__main__":
    main()
