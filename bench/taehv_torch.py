#!/usr/bin/env python3
"""PyTorch timing of upstream's TAEHV tiny decoder, the baseline of `examples/bench -what taehv`.

Imports madebyollin/taehv's own taehv.py unchanged (--upstream: a checkout or the file itself), builds
TAEHV(checkpoint_path=None) with the variant's latent channels and patch size (taeh3: is_h3, what a
"taeh3" checkpoint name sets), random weights, casts it to --dtype on CUDA and times
decode_video(parallel=True) on random latents [1, T, C, h, w] (upstream's NTCHW), the frames copied to
a pinned float32 host buffer as the Go bench hands them to the host (--output rgb24: quantized to
8-bit RGB on the GPU first, as the Go bench's rgb24 row). It prints the same kind of lines
as the Go bench and a "decoder record torch <dtype> <median s>" line.

Example, beside the Go bench at the same size (one process per dtype):
  python3 bench/taehv_torch.py --upstream /tmp/taehv --variant taew2_1 --latents 21 --dtype bf16
  python3 bench/taehv_torch.py --upstream /tmp/taehv/taehv.py --variant taeh3 --latents 37 --dtype fp16
  go run ./examples/bench -what taehv -backend xla:cuda -taehv-variant taeh3 -taehv-latents 37
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

from benchutil import gpu_mem_mib, peak_memory, time_runs

VARIANTS = {"taew2_1": (16, 1, False), "taew2_2": (48, 2, False), "taeh3": (24, 2, True)}


def load_upstream(path):
    """Imports upstream's taehv.py (a folder holding it, or the file) as the parity fixtures do
    (vae/taehv/testdata/gen_taehv.py's load_upstream: unchanged, with a tqdm stand-in if needed)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "vae", "taehv", "testdata"))
    from gen_taehv import load_upstream as load_folder
    mod, _ = load_folder(path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path)))
    return mod


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", required=True, help="madebyollin/taehv checkout or its taehv.py")
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="taew2_1")
    ap.add_argument("--latents", type=int, default=21, help="latent frames (21: Wan's 81 frames; taeh3 wants 5k+2, 37: 124 frames)")
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--dtype", choices=["fp16", "bf16", "f32"], default="bf16")
    ap.add_argument("--output", choices=["f32", "rgb24"], default="f32",
                    help="host frames: float32 NTCHW, or rgb24 (quantized on the GPU as FastVideo's pipelines "
                         "do, (x*255).clamp(0, 255).to(uint8), laid out [T, H, W, 3]) as `bench -what taehv` times both")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: the CPU row beside `bench -what taehv -backend go` (f32, no pinned copy)")
    args = ap.parse_args()

    c, p, h3 = VARIANTS[args.variant]
    r = 8 * p
    assert args.height % r == 0 and args.width % r == 0, f"canvas must be a multiple of {r}"
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[args.dtype]
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(args.seed)
    mod = load_upstream(args.upstream)
    t0 = time.perf_counter()
    model = mod.TAEHV(checkpoint_path=None, patch_size=p, latent_channels=c)
    if h3:
        model.is_h3 = True
    model = model.to(device=device, dtype=dtype).eval()
    if cuda:
        torch.cuda.synchronize()
    nparams = sum(v.numel() for v in model.decoder.parameters())
    where = torch.cuda.get_device_name() if cuda else f"CPU, {torch.get_num_threads()} threads"
    print(f"torch {torch.__version__}, {where}, {args.variant} (C={c}, patch {p}), dtype {args.dtype}")
    print(f"weights: {nparams / 1e6:.2f}M decoder params on device in {time.perf_counter() - t0:.2f} s; "
          f"nvidia-smi {gpu_mem_mib() if cuda else -1} MiB")

    g = torch.Generator(device=device).manual_seed(args.seed + 1)
    z = torch.randn(1, args.latents, c, args.height // r, args.width // r, generator=g, device=device, dtype=dtype)
    def host_frames(f):
        if args.output == "rgb24":
            return (f[0].float() * 255).clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
        return f

    with torch.inference_mode():
        frames = host_frames(model.decode_video(z, parallel=True, show_progress_bar=False))
    out = torch.empty(tuple(frames.shape), dtype=torch.uint8 if args.output == "rgb24" else torch.float32, pin_memory=cuda)

    def decode():
        f = host_frames(model.decode_video(z, parallel=True, show_progress_bar=False))
        out.copy_(f, non_blocking=True)
        return f

    with torch.inference_mode():
        first, timed, _ = time_runs(decode, args.warmup, args.iters, device)
    med = statistics.median(timed)
    print(f"{args.latents} latents -> {out.shape[0 if args.output == 'rgb24' else 1]} frames {args.height}x{args.width}: first {first:.3f} s, "
          f"min {min(timed):.3f} s, median {med:.3f} s over {len(timed)} runs")
    print(f"  {peak_memory() if cuda else 'CPU'}; mean sample {out.float().mean().item():.4f}, NaN {int(torch.isnan(out.float()).sum())}")
    print(f"decoder record torch{'-rgb24' if args.output == 'rgb24' else ''} {args.dtype} {med:.4f}")


if __name__ == "__main__":
    main()
