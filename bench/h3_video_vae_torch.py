#!/usr/bin/env python3
"""PyTorch timing of the MiniMax H3 video VAE decoder, same math as fastvideo-go's vae/h3video.

Our own re-statement of FastVideo's AutoencoderKLMiniMaxH3 decode path (post_quant_conv + 36-layer
ViT per 7-latent clip and 256 px tile, reference tile/clip blending, pixels de-normalized and copied
to a CPU float32 buffer clip by clip like decode_to_pixels), with random weights drawn on the GPU.
It needs only torch, so it runs where FastVideo is not installed.

Precision modes:
  f32   weights and compute in float32 (TF32 off unless --tf32), the released precision.
  bf16  / fp16: weights in that dtype, linears and attention in it; RMSNorm/LayerNorm statistics,
        RoPE and the residual stream in float32 -- the policy of the Go decoder's Options.DType.

Example (one process per dtype, so that memory peaks are not shared):
  python3 bench/h3_video_vae_torch.py --dtype bf16 --frames 64,124
  python3 bench/h3_video_vae_torch.py --dtype f32 --frames 64,124
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F

from benchutil import gpu_mem_mib, peak_memory, time_runs

PIXEL_MEAN = (0.485, 0.456, 0.406)
PIXEL_STD = (0.229, 0.224, 0.225)


class Cfg:
    latent = 24
    heads = 32
    head_dim = 64
    dim = 32 * 64
    layers = 36
    registers = 4
    ffn_mult = 4
    theta = 100.0
    rot = int(64 * 0.75)  # 48 rotary channels per head
    eps = 1e-5
    patch = 16  # spatial ratio
    patch_t = 4  # temporal ratio
    clip_length = 17
    token_drop = 3
    tile = 256
    tile_overlap = 64


def align_frames(n: int) -> int:
    while n % 17 != 5:
        n += 1
    return n


def latent_frames(n: int) -> int:
    return (n - 5) // 17 * 5 + 2


def split_tiles(length: int, tile: int, min_overlap: int, ratio: int):
    if tile >= length:
        return [0], [length], []
    n = math.ceil(length / tile)
    while tile * n - min_overlap * (n - 1) < length:
        n += 1
    overlaps = [min_overlap] * (n - 1)
    remaining = tile * n - sum(overlaps) - length
    for i in range(remaining // ratio):
        overlaps[i % (n - 1)] += ratio
    starts = [0]
    for i in range(n - 1):
        starts.append(starts[-1] + tile - overlaps[i])
    return starts, [tile] * n, overlaps


def blend(a: torch.Tensor, b: torch.Tensor, extent: int, dim: int) -> torch.Tensor:
    extent = min(a.shape[dim], b.shape[dim], extent)
    pos = torch.arange(extent, device=b.device, dtype=b.dtype)
    shape = [1] * a.ndim
    shape[dim] = extent
    wb = (pos / extent).view(shape)
    wa = (1 - pos / extent).view(shape)
    blended = a.narrow(dim, a.shape[dim] - extent, extent) * wa + b.narrow(dim, 0, extent) * wb
    if extent == b.shape[dim]:
        return blended
    return torch.cat([blended, b.narrow(dim, extent, b.shape[dim] - extent)], dim=dim)


def make_weights(cfg: Cfg, dtype: torch.dtype, device: torch.device, seed: int) -> dict:
    """Fixture-generator scales: matrices randn/sqrt(fan_in), biases 0.05 randn, vectors 1+0.1 randn."""
    g = torch.Generator(device=device).manual_seed(seed)

    def mat(o, i):
        return (torch.randn(o, i, generator=g, device=device) / math.sqrt(i)).to(dtype)

    def bias(n):
        return (0.05 * torch.randn(n, generator=g, device=device)).to(dtype)

    def vec(n):  # norm weights and layer scales stay float32 (used on float32 activations)
        return 1 + 0.1 * torch.randn(n, generator=g, device=device)

    d, c, inner = cfg.dim, cfg.latent, cfg.dim * cfg.ffn_mult
    w = {
        "pq_w": mat(c, c), "pq_b": bias(c), "pi_w": mat(d, c), "pi_b": bias(d),
        "reg": (torch.randn(1, cfg.registers, d, generator=g, device=device) / math.sqrt(cfg.registers * d)).float(),
        "no_w": vec(d), "no_b": (0.05 * torch.randn(d, generator=g, device=device)),
        "po_w": mat(3 * cfg.patch_t * cfg.patch * cfg.patch, d), "po_b": bias(3 * cfg.patch_t * cfg.patch * cfg.patch),
        "blocks": [],
    }
    for _ in range(cfg.layers):
        w["blocks"].append({
            "n1": vec(d), "q": mat(d, d), "qb": bias(d), "k": mat(d, d), "kb": bias(d), "v": mat(d, d), "vb": bias(d),
            "o": mat(d, d), "ob": bias(d), "s1": vec(d), "n2": vec(d),
            "f0": mat(2 * inner, d), "f0b": bias(2 * inner), "f2": mat(d, inner), "f2b": bias(d), "s2": vec(d),
        })
    return w


def rope_tables(cfg: Cfg, t: int, h: int, w: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / cfg.theta**torch.arange(0, 1, 6 / cfg.rot, dtype=torch.float32, device=device)
    grids = [2.0 * (torch.arange(0.5, s, dtype=torch.float32, device=device) / s) - 1.0 for s in (t, h, w)]
    pos = torch.stack(torch.meshgrid(*grids, indexing="ij"), dim=-1).flatten(0, 2)
    pos = torch.cat([pos, pos.new_zeros(cfg.registers + 1, 3)])
    ang = 2.0 * math.pi * pos[:, :, None] * inv[None, None, :]
    ang = ang.flatten(1, 2).tile(2)
    return ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]


def rms(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    x = x.float()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * w if w is not None else y


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    r = cos.shape[-1]
    xr, xp = x[..., :r], x[..., r:]
    a, b = xr.chunk(2, dim=-1)
    return torch.cat([xr * cos + torch.cat([-b, a], dim=-1) * sin, xp], dim=-1)


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.linear(x.to(w.dtype), w, b).float()


def decode_tile(cfg: Cfg, W: dict, z: torch.Tensor, ropes: dict) -> torch.Tensor:
    """z [1, C, T, h, w] float32 -> [1, 3, 4T, 16h, 16w] normalized pixels."""
    _, c, t, h, w = z.shape
    n = t * h * w
    dt = W["q_dtype"]
    x = z.permute(0, 2, 3, 4, 1).reshape(1, n, c)
    x = linear(linear(x, W["pq_w"], W["pq_b"]), W["pi_w"], W["pi_b"])
    x = torch.cat([x, W["reg"], x.new_zeros(1, 1, cfg.dim)], dim=1)
    key = (t, h, w)
    if key not in ropes:
        ropes[key] = rope_tables(cfg, t, h, w, z.device)
    cos, sin = ropes[key]
    L = x.shape[1]
    for B in W["blocks"]:
        hn = rms(x, B["n1"], cfg.eps)
        q = rope(rms(linear(hn, B["q"], B["qb"]).view(1, L, cfg.heads, cfg.head_dim), None, cfg.eps), cos, sin)
        k = rope(rms(linear(hn, B["k"], B["kb"]).view(1, L, cfg.heads, cfg.head_dim), None, cfg.eps), cos, sin)
        v = linear(hn, B["v"], B["vb"]).view(1, L, cfg.heads, cfg.head_dim)
        q, k, v = (u.to(dt).transpose(1, 2) for u in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(1, L, cfg.dim)
        x = x + linear(o, B["o"], B["ob"]) * B["s1"]
        f = linear(rms(x, B["n2"], cfg.eps), B["f0"], B["f0b"])
        val, gate = f.chunk(2, dim=-1)
        x = x + linear(val * F.silu(gate), B["f2"], B["f2b"]) * B["s2"]
    y = F.layer_norm(x, (cfg.dim, ), W["no_w"], W["no_b"], cfg.eps)
    y = linear(y, W["po_w"], W["po_b"])[:, :n]
    p, pt = cfg.patch, cfg.patch_t
    y = y.view(1, t, h, w, 3, pt, p, p).permute(0, 4, 1, 5, 2, 6, 3, 7)
    return y.reshape(1, 3, t * pt, h * p, w * p)


def decode_clip(cfg: Cfg, W: dict, z: torch.Tensor, ropes: dict) -> torch.Tensor:
    r = cfg.patch
    hh, ww = z.shape[-2] * r, z.shape[-1] * r
    ys, yl, yo = split_tiles(hh, cfg.tile, cfg.tile_overlap, r)
    xs, xl, xo = split_tiles(ww, cfg.tile, cfg.tile_overlap, r)
    tiles = [[decode_tile(cfg, W, z[..., y // r:y // r + ylen // r, x // r:x // r + xlen // r], ropes)
              for x, xlen in zip(xs, xl)] for y, ylen in zip(ys, yl)]
    rows = []
    for i, row in enumerate(tiles):
        out = []
        for j, tile in enumerate(row):
            if i > 0:
                tile = blend(tiles[i - 1][j], tile, yo[i - 1], -2)
            if j > 0:
                tile = blend(row[j - 1], tile, xo[j - 1], -1)
            if i < len(tiles) - 1:
                tile = tile[..., :-yo[i], :]
            if j < len(row) - 1:
                tile = tile[..., :, :-xo[j]]
            out.append(tile)
        rows.append(torch.cat(out, dim=-1))
    return torch.cat(rows, dim=-2)


def decode_to_pixels(cfg: Cfg, W: dict, z: torch.Tensor, out: torch.Tensor, ropes: dict) -> None:
    """decode_runs into out [1, 3, frames, H, W] (a pinned CPU float32 buffer in the benchmark)."""
    decode_runs(cfg, W, z, out.shape[2], ropes, lambda start, px: out[:, :, start:start + px.shape[2]].copy_(px))


def decode_runs(cfg: Cfg, W: dict, z: torch.Tensor, total: int, ropes: dict, emit) -> None:
    """Temporal clips as in _decode_chunks; each finished run of frames is de-normalized, clamped to
    [0, 1] and handed to emit(first frame index, pixels [1, 3, n, H, W] on the device), total frames in all."""
    chunk = math.ceil(cfg.clip_length / cfg.patch_t)
    pre = (-cfg.clip_length) % cfg.patch_t
    tok_overlap = (-cfg.token_drop) % chunk
    frame_overlap = max(tok_overlap * cfg.patch_t - pre, 0)
    T = z.shape[2]
    ntok = T + cfg.token_drop
    pad = (-ntok) % chunk
    chunks = (ntok + pad) // chunk - int(cfg.token_drop > 0)
    if chunks < 1:
        pad, chunks = pad + chunk, 1
    if pad > 0:
        z = torch.cat([z, z[:, :, -1:].repeat(1, 1, pad, 1, 1)], dim=2)
    mean = torch.tensor(PIXEL_MEAN, device=z.device).view(1, 3, 1, 1, 1)
    std = torch.tensor(PIXEL_STD, device=z.device).view(1, 3, 1, 1, 1)
    start, overlap = 0, None

    def put(run):
        nonlocal start
        n = min(run.shape[2], total - start)
        if n > 0:
            emit(start, (run[:, :, :n] * std + mean).clamp_(0, 1))
            start += n

    for k in range(chunks):
        clip = decode_clip(cfg, W, z[:, :, k * chunk:k * chunk + chunk + tok_overlap], ropes)
        run = clip[:, :, pre:chunk * cfg.patch_t]
        if overlap is not None:
            run = blend(overlap, run, frame_overlap, -3)
        put(run)
        overlap = clip[:, :, chunk * cfg.patch_t + pre:].clone() if cfg.token_drop > 0 else None
    if overlap is not None:
        put(overlap)
    assert start == total, (start, total)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", choices=("f32", "bf16", "fp16"), default="bf16")
    ap.add_argument("--frames", default="64,124", help="frame counts, each aligned up to 17n+5")
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tf32", action="store_true", help="allow TF32 for float32 matmuls")
    ap.add_argument("--layers", type=int, default=36, help="decoder layers (fewer only for smoke tests)")
    args = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    device = torch.device("cuda")
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    cfg = Cfg()
    cfg.layers = args.layers
    t0 = time.perf_counter()
    W = make_weights(cfg, dtype, device, args.seed)
    W["q_dtype"] = dtype
    torch.cuda.synchronize()
    nparams = sum(v.numel() for k, v in W.items() if isinstance(v, torch.Tensor)) + sum(
        v.numel() for b in W["blocks"] for v in b.values())
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, dtype {args.dtype}, tf32 {args.tf32}")
    print(f"weights: {nparams / 1e9:.3f}B params on device in {time.perf_counter() - t0:.2f} s; "
          f"allocated {torch.cuda.memory_allocated() / 2**20:.0f} MiB, nvidia-smi {gpu_mem_mib()} MiB")

    g = torch.Generator(device=device).manual_seed(args.seed + 1)
    ropes: dict = {}
    for req in [int(s) for s in args.frames.split(",")]:
        nf = align_frames(req)
        nl = latent_frames(nf)
        z = torch.randn(1, cfg.latent, nl, args.height // cfg.patch, args.width // cfg.patch, generator=g, device=device)
        out = torch.empty(1, 3, nf, args.height, args.width, dtype=torch.float32, pin_memory=True)
        with torch.inference_mode():
            first, timed, _ = time_runs(lambda: decode_to_pixels(cfg, W, z, out, ropes), args.warmup, args.iters, device)
        print(f"{nf} frames (asked {req}) = {nl} latents, {args.height}x{args.width}: first {first:.3f} s, "
              f"min {min(timed):.3f} s, median {statistics.median(timed):.3f} s over {len(timed)} runs")
        print(f"  {peak_memory()}; "
              f"mean pixel {out.mean().item():.4f}, NaN {int(torch.isnan(out).sum())}")


if __name__ == "__main__":
    main()
