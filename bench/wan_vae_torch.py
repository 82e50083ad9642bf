#!/usr/bin/env python3
"""PyTorch timing of the Wan VAE decoder, same math as fastvideo-go's vae/wan.

Our own re-statement of FastVideo's AutoencoderKLWan feature-cache decode (post_quant_conv, causal
3D-conv decoder run one latent frame at a time, every 3-tap causal conv carrying the last two frames
of its input between chunks, the time upsampler skipped on the first chunk, output clamped to
[-1, 1]) with random weights drawn on the GPU. Each chunk's frames are copied to a pinned CPU
float32 buffer as they come out, like the Go decoder's streaming callback. It needs only torch, so
it runs where FastVideo is not installed.

Precision modes (the policy of the Go decoder's Options.DType):
  f32   weights and convolutions in float32 (TF32 off unless --tf32), the released precision.
  bf16  weights, convolutions and the activation stream in bfloat16; RMS norm + SiLU computed in
        float32, mid-block attention (q, k, v, softmax) in float32, output float32.

Example (one process per dtype, so that memory peaks are not shared):
  python3 bench/wan_vae_torch.py --dtype bf16
  python3 bench/wan_vae_torch.py --dtype f32
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F

from benchutil import gpu_mem_mib, peak_memory, time_runs


def wan21():
    return dict(base_dim=96, decoder_base_dim=None, z_dim=16, dim_mult=(1, 2, 4, 4), num_res_blocks=2,
                temperal_downsample=(False, True, True), is_residual=False, out_channels=3, patch_size=None)


def wan22():
    return dict(base_dim=160, decoder_base_dim=256, z_dim=48, dim_mult=(1, 2, 4, 4), num_res_blocks=2,
                temperal_downsample=(False, True, True), is_residual=True, out_channels=12, patch_size=2)


def up_blocks(cfg):
    """(in, out, mode, up_out, ft, shortcut) per decoder up block, as WanDecoder3d derives them."""
    d = cfg["decoder_base_dim"] or cfg["base_dim"]
    mult = list(cfg["dim_mult"])
    dims = [d * mult[-1]] + [d * m for m in reversed(mult)]
    temporal_up = list(reversed(cfg["temperal_downsample"]))
    out = []
    for i in range(len(mult)):
        cin, cout = dims[i], dims[i + 1]
        if i > 0 and not cfg["is_residual"]:
            cin //= 2
        mode, up_out, ft, shortcut = None, 0, 1, False
        if i != len(mult) - 1:
            mode = "3d" if temporal_up[i] else "2d"
            ft = 2 if temporal_up[i] else 1
            up_out = cout if cfg["is_residual"] else cout // 2
            shortcut = cfg["is_residual"]
        out.append((cin, cout, mode, up_out, ft, shortcut))
    return dims, out


def weight_shapes(cfg) -> dict:
    s = {}

    def conv(name, co, ci, *k):
        s[name + ".weight"] = (co, ci, *k)
        s[name + ".bias"] = (co, )

    def res(p, ci, co):
        s[p + ".norm1.gamma"] = (ci, 1, 1, 1)
        conv(p + ".conv1", co, ci, 3, 3, 3)
        s[p + ".norm2.gamma"] = (co, 1, 1, 1)
        conv(p + ".conv2", co, co, 3, 3, 3)
        if ci != co:
            conv(p + ".conv_shortcut", co, ci, 1, 1, 1)

    z = cfg["z_dim"]
    dims, blocks = up_blocks(cfg)
    c0 = dims[0]
    conv("post_quant_conv", z, z, 1, 1, 1)
    conv("decoder.conv_in", c0, z, 3, 3, 3)
    res("decoder.mid_block.resnets.0", c0, c0)
    s["decoder.mid_block.attentions.0.norm.gamma"] = (c0, 1, 1)
    conv("decoder.mid_block.attentions.0.to_qkv", 3 * c0, c0, 1, 1)
    conv("decoder.mid_block.attentions.0.proj", c0, c0, 1, 1)
    res("decoder.mid_block.resnets.1", c0, c0)
    for i, (ci, co, mode, up_out, _, _) in enumerate(blocks):
        for j in range(cfg["num_res_blocks"] + 1):
            res(f"decoder.up_blocks.{i}.resnets.{j}", ci, co)
            ci = co
        if mode:
            up = f"decoder.up_blocks.{i}." + ("upsampler" if cfg["is_residual"] else "upsamplers.0")
            conv(up + ".resample.1", up_out, co, 3, 3)
            if mode == "3d":
                conv(up + ".time_conv", 2 * co, co, 3, 1, 1)
    s["decoder.norm_out.gamma"] = (blocks[-1][1], 1, 1, 1)
    conv("decoder.conv_out", cfg["out_channels"], blocks[-1][1], 3, 3, 3)
    return s


def make_weights(cfg, dtype, device, seed) -> dict:
    """Fixture-generator scales: conv weights randn/sqrt(fan_in), biases 0.05 randn, gains 1+0.1 randn."""
    g = torch.Generator(device=device).manual_seed(seed)
    w = {}
    for name, shape in weight_shapes(cfg).items():
        v = torch.randn(*shape, generator=g, device=device)
        if name.endswith(".bias"):
            w[name] = (0.05 * v).to(dtype)
        elif name.endswith(".gamma"):
            w[name] = 1 + 0.1 * v  # float32: applied to float32 statistics
        else:
            w[name] = (v / math.sqrt(math.prod(shape[1:]))).to(dtype)
    return w


def decode_gflop(cfg, t, h, w) -> float:
    total = 0.0

    def conv(co, ci, taps, n):
        nonlocal total
        total += 2.0 * co * ci * taps * n

    def res(ci, co, n):
        conv(co, ci, 27, n)
        conv(co, co, 27, n)
        if ci != co:
            conv(co, ci, 1, n)

    z = cfg["z_dim"]
    dims, blocks = up_blocks(cfg)
    c0, f = dims[0], t
    conv(z, z, 1, f * h * w)
    conv(c0, z, 27, f * h * w)
    res(c0, c0, f * h * w)
    conv(3 * c0, c0, 1, f * h * w)
    total += 4.0 * f * (h * w)**2 * c0
    conv(c0, c0, 1, f * h * w)
    res(c0, c0, f * h * w)
    for ci, co, mode, up_out, _, _ in blocks:
        for _ in range(cfg["num_res_blocks"] + 1):
            res(ci, co, f * h * w)
            ci = co
        if mode == "3d":
            conv(2 * co, co, 3, (f - 1) * h * w)
            f = 1 + 2 * (f - 1)
        if mode:
            h, w = 2 * h, 2 * w
            conv(up_out, co, 9, f * h * w)
    conv(cfg["out_channels"], blocks[-1][1], 27, f * h * w)
    return total / 1e9


class Chunk:
    """One latent frame through the decoder; caches in, caches out (slot order = call order)."""

    def __init__(self, cfg, W, dtype, first, cache):
        self.cfg, self.W, self.dt, self.first, self.cache, self.next = cfg, W, dtype, first, cache, []

    def conv(self, x, name):
        w, b = self.W[name + ".weight"], self.W[name + ".bias"]
        if w.dim() == 4:  # per-frame Conv2d as a depth-1 Conv3d
            w = w.unsqueeze(2)
        return F.conv3d(x.to(w.dtype), w, b, padding=(0, w.shape[3] // 2, w.shape[4] // 2))

    def cached(self, x, name):
        if self.first:  # zero frames = the reference's causal zero padding
            prefix = x.new_zeros(x.shape[0], x.shape[1], 2, *x.shape[3:])
        else:
            prefix = self.cache[len(self.next)]
        full = torch.cat([prefix, x], dim=2)
        self.next.append(full[:, :, -2:])
        return self.conv(full, name)

    def norm_act(self, x, gamma):
        xf = x.float()
        c = xf.shape[1]
        y = xf / xf.norm(dim=1, keepdim=True).clamp_min(1e-12) * math.sqrt(c)
        y = y * self.W[gamma].view(1, c, *([1] * (xf.dim() - 2)))
        return F.silu(y).to(self.dt)

    def res(self, x, p, ci, co):
        h = self.conv(x, p + ".conv_shortcut") if ci != co else x
        y = self.cached(self.norm_act(x, p + ".norm1.gamma"), p + ".conv1")
        y = self.cached(self.norm_act(y, p + ".norm2.gamma"), p + ".conv2")
        return y + h

    def attention(self, x, p):
        _, c, t, h, w = x.shape
        xf = x.float()
        xn = xf / xf.norm(dim=1, keepdim=True).clamp_min(1e-12) * math.sqrt(c) * self.W[p + ".norm.gamma"].view(1, c, 1, 1, 1)
        tok = xn.to(self.dt).permute(0, 2, 3, 4, 1).reshape(t, h * w, c)
        qkv = F.linear(tok, self.W[p + ".to_qkv.weight"].flatten(1), self.W[p + ".to_qkv.bias"]).float()
        q, k, v = (u.unsqueeze(1) for u in qkv.chunk(3, dim=-1))
        o = F.scaled_dot_product_attention(q, k, v).squeeze(1)
        o = F.linear(o.to(self.dt), self.W[p + ".proj.weight"].flatten(1), self.W[p + ".proj.bias"])
        return x + o.reshape(1, t, h, w, c).permute(0, 4, 1, 2, 3).to(x.dtype)

    def resample(self, x, p, mode):
        if mode == "3d":
            if self.first:  # the reference's "Rep": no time conv on the first chunk, cache starts empty
                self.next.append(x.new_zeros(x.shape[0], x.shape[1], 2, *x.shape[3:]))
            else:
                _, c, t, h, w = x.shape
                y = self.cached(x, p + ".time_conv")
                x = y.view(1, 2, c, t, h, w).permute(0, 2, 3, 1, 4, 5).reshape(1, c, 2 * t, h, w)
        x = F.interpolate(x, scale_factor=(1, 2, 2), mode="nearest")
        return self.conv(x, p + ".resample.1")

    def dupup(self, x, cout, ft):
        b, cin, t, h, w = x.shape
        fs = 2
        rep = cout * ft * fs * fs // cin
        y = x.repeat_interleave(rep, dim=1).view(b, cout, ft, fs, fs, t, h, w)
        y = y.permute(0, 1, 5, 2, 6, 3, 7, 4).reshape(b, cout, t * ft, h * fs, w * fs)
        return y[:, :, ft - 1:] if self.first else y

    def run(self, z):
        cfg = self.cfg
        dims, blocks = up_blocks(cfg)
        x = self.conv(z, "post_quant_conv")
        x = self.cached(x, "decoder.conv_in")
        c0 = dims[0]
        x = self.res(x, "decoder.mid_block.resnets.0", c0, c0)
        x = self.attention(x, "decoder.mid_block.attentions.0")
        x = self.res(x, "decoder.mid_block.resnets.1", c0, c0)
        for i, (ci, co, mode, _, ft, shortcut) in enumerate(blocks):
            inp = x
            for j in range(cfg["num_res_blocks"] + 1):
                x = self.res(x, f"decoder.up_blocks.{i}.resnets.{j}", ci, co)
                ci = co
            if mode:
                x = self.resample(x, f"decoder.up_blocks.{i}." + ("upsampler" if cfg["is_residual"] else "upsamplers.0"),
                                  mode)
            if shortcut:
                x = x + self.dupup(inp, co, ft)
        x = self.cached(self.norm_act(x, "decoder.norm_out.gamma"), "decoder.conv_out")
        x = x.float()
        p = cfg["patch_size"] or 1
        if p > 1:  # b (c r q) f h w -> b c f (h q) (w r)
            b, ch, f, h, w = x.shape
            x = x.view(b, ch // (p * p), p, p, f, h, w).permute(0, 1, 4, 5, 3, 6, 2).reshape(b, ch // (p * p), f, h * p,
                                                                                           w * p)
        return x.clamp_(-1, 1)


def decode(cfg, W, dtype, z, out) -> None:
    """z [1, z, T, h, w] VAE-space latents -> out [1, 3, F, H, W] (pinned CPU), chunk by chunk."""
    start = 0

    def put(frames):
        nonlocal start
        n = frames.shape[2]
        out[:, :, start:start + n].copy_(frames, non_blocking=True)
        start += n

    decode_chunks(cfg, W, dtype, z, put)
    assert start == out.shape[2], (start, out.shape)


def decode_chunks(cfg, W, dtype, z, emit) -> None:
    """z [1, z, T, h, w] VAE-space latents, one latent frame at a time: emit(frames [1, 3, n, H, W]
    float32 in [-1, 1] on the device) for each chunk, in order (1 frame, then 4 per latent frame)."""
    cache = None
    for k in range(z.shape[2]):
        ch = Chunk(cfg, W, dtype, k == 0, cache)
        frames = ch.run(z[:, :, k:k + 1])
        cache = ch.next
        emit(frames)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="bf16")
    ap.add_argument("--variant", choices=("wan21", "wan22"), default="wan21")
    ap.add_argument("--frames", type=int, default=81, help="video frames, 4n+1 (81 = 21 latent frames)")
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tf32", action="store_true", help="allow TF32 for float32 convolutions and matmuls")
    args = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda")
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    cfg = wan21() if args.variant == "wan21" else wan22()
    r = 2**(len(cfg["dim_mult"]) - 1) * (cfg["patch_size"] or 1)
    assert (args.frames - 1) % 4 == 0 and args.height % r == 0 and args.width % r == 0, "frames 4n+1, canvas multiple of ratio"
    nl = (args.frames - 1) // 4 + 1
    t0 = time.perf_counter()
    W = make_weights(cfg, dtype, device, args.seed)
    torch.cuda.synchronize()
    nparams = sum(v.numel() for v in W.values())
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {args.variant}, dtype {args.dtype}, tf32 {args.tf32}")
    print(f"weights: {nparams / 1e6:.1f}M params on device in {time.perf_counter() - t0:.2f} s; "
          f"allocated {torch.cuda.memory_allocated() / 2**20:.0f} MiB, nvidia-smi {gpu_mem_mib()} MiB")

    g = torch.Generator(device=device).manual_seed(args.seed + 1)
    z = torch.randn(1, cfg["z_dim"], nl, args.height // r, args.width // r, generator=g, device=device)
    out = torch.empty(1, 3, args.frames, args.height, args.width, dtype=torch.float32, pin_memory=True)
    gflop = decode_gflop(cfg, nl, args.height // r, args.width // r)
    with torch.inference_mode():
        first, timed, _ = time_runs(lambda: decode(cfg, W, dtype, z, out), args.warmup, args.iters, device)
    med = statistics.median(timed)
    print(f"{args.frames} frames = {nl} latents, {args.height}x{args.width}: first {first:.3f} s, "
          f"min {min(timed):.3f} s, median {med:.3f} s over {len(timed)} runs; {gflop:.0f} GFLOP -> "
          f"{gflop / med / 1e3:.1f} TFLOP/s")
    print(f"  {peak_memory()}; "
          f"mean sample {out.mean().item():.4f}, NaN {int(torch.isnan(out).sum())}")


if __name__ == "__main__":
    main()
