#!/usr/bin/env python3
"""Same-math PyTorch benchmark of the Wan DiT forward (Wan2.1 1.3B/14B, Wan2.2-TI2V-5B).

The functions below restate FastVideo's `fastvideo/models/dits/wanvideo.py` (WanTransformer3DModel) with
the precision policy of our Go port (dit/wan): float32 patch embedding, time embedder, proj_out, norms,
modulation, RoPE and gated residual adds; everything else in the compute dtype. Attention is torch SDPA
(flash/cuDNN on the GPU). It is the counterpart of

    go run ./examples/bench -what wandit -backend xla:cuda

and uses the same shapes: Wan2.1-1.3B at 480x832x81 -> latent 16x21x60x104 -> 32,760 tokens, 512 text rows,
random weights drawn on the GPU (matrices randn/sqrt(fan_in), biases 0.05 randn, scale_shift_tables
randn/sqrt(D), norm weights 1 + 0.1 randn). The text embedding is computed once and reused, as the
pipeline does. Prints seconds per forward (median after warm-up), TFLOP/s counted as forward_flops does, the
FastWan 3-step DMD denoise total (timesteps 1000, 757, 522, no CFG), and the peak memory torch allocated.

    python3 bench/wan_dit_torch.py                       # 1.3B, bf16, 480x832x81
    python3 bench/wan_dit_torch.py --model 5b --height 704 --width 1280 --frames 121
    python3 bench/wan_dit_torch.py --check dit/wan/testdata/wan21_dit_tiny.safetensors   # same-math check (f32, CPU ok)

--check runs a golden fixture (released weight names) through this script's forward in float32 and
prints the max abs error against out.sample: it is how the script is shown to compute what FastVideo does.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import struct
import time

import torch
import torch.nn.functional as F

from benchutil import print_forward_rate, setup, sync, time_runs, timed, timestep_proj

MODELS = {  # each checkpoint's transformer/config.json: layers, heads, ffn, channels, VAE spatial stride
    "1.3b": dict(layers=30, heads=12, ffn=8960, channels=16, vae_stride=8),
    "14b": dict(layers=40, heads=40, ffn=13824, channels=16, vae_stride=8),
    "5b": dict(layers=30, heads=24, ffn=14336, channels=48, vae_stride=16),
}


def make_config(layers, heads, ffn, channels, head_dim=128, text_dim=4096, freq_dim=256, patch=(1, 2, 2), eps=1e-6):
    return dict(layers=layers, heads=heads, head_dim=head_dim, dim=heads * head_dim, ffn=ffn, cin=channels,
                cout=channels, text_dim=text_dim, freq_dim=freq_dim, patch=tuple(patch), eps=eps)


def param_shapes(cfg):
    """(released name, shape, float32?) of every parameter."""
    d, f = cfg["dim"], cfg["ffn"]
    pv = math.prod(cfg["patch"])
    out = [("patch_embedding.weight", (d, cfg["cin"], *cfg["patch"]), True), ("patch_embedding.bias", (d,), True)]

    def lin(name, o, i, fp32):
        out.extend([(name + ".weight", (o, i), fp32), (name + ".bias", (o,), fp32)])

    ce = "condition_embedder."
    lin(ce + "time_embedder.linear_1", d, cfg["freq_dim"], True)
    lin(ce + "time_embedder.linear_2", d, d, True)
    lin(ce + "time_proj", 6 * d, d, False)
    lin(ce + "text_embedder.linear_1", d, cfg["text_dim"], False)
    lin(ce + "text_embedder.linear_2", d, d, False)
    for i in range(cfg["layers"]):
        p = f"blocks.{i}."
        out.append((p + "scale_shift_table", (1, 6, d), True))
        for a in ("attn1.", "attn2."):
            for n in ("to_q", "to_k", "to_v", "to_out.0"):
                lin(p + a + n, d, d, False)
            out.extend([(p + a + "norm_q.weight", (d,), True), (p + a + "norm_k.weight", (d,), True)])
        out.extend([(p + "norm2.weight", (d,), True), (p + "norm2.bias", (d,), True)])
        lin(p + "ffn.net.0.proj", f, d, False)
        lin(p + "ffn.net.2", d, f, False)
    out.append(("scale_shift_table", (1, 2, d), True))
    lin("proj_out", cfg["cout"] * pv, d, True)
    return out


def random_weights(cfg, dt, dev):
    w = {}
    for name, shape, fp32 in param_shapes(cfg):
        t = torch.empty(shape, dtype=torch.float32 if fp32 else dt, device=dev)
        if name.endswith(".bias"):
            t.normal_(0.0, 0.05)
        elif name.endswith("scale_shift_table"):
            t.normal_(0.0, 1.0 / math.sqrt(shape[-1]))
        elif len(shape) >= 2:
            t.normal_(0.0, 1.0 / math.sqrt(math.prod(shape[1:])))
        else:
            t.normal_(1.0, 0.1)
        w[name] = t
    return w


# ---- host tables ---------------------------------------------------------------------------------

def rope_tables(cfg, nt, nh, nw, dev):
    """cos, sin [L, Dh/2] float32: one angle per interleaved pair, axes (t, h, w), built in float64."""
    d = cfg["head_dim"]
    dims = (d - 4 * (d // 6), 2 * (d // 6), 2 * (d // 6))
    grid = torch.meshgrid(torch.arange(nt, dtype=torch.float64), torch.arange(nh, dtype=torch.float64),
                          torch.arange(nw, dtype=torch.float64), indexing="ij")
    ang = []
    for pos, dim in zip(grid, dims):
        freqs = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float64)[: dim // 2] / dim))
        ang.append(torch.outer(pos.reshape(-1), freqs))
    ang = torch.cat(ang, dim=1)
    return ang.cos().float().to(dev), ang.sin().float().to(dev)


# ---- the forward ---------------------------------------------------------------------------------

def rope(x, cos, sin):
    """x [1, L, H, Dh] float32; rotates pairs (2j, 2j+1) (GPT-J style, is_neox_style=False)."""
    re, im = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((re * c - im * s, im * c + re * s), dim=-1).flatten(-2)


def attend(h, kv, w, p, cfg, cos, sin):
    d, heads, hd, eps = cfg["dim"], cfg["heads"], cfg["head_dim"], cfg["eps"]
    dt = h.dtype
    q = F.linear(h, w[p + "to_q.weight"], w[p + "to_q.bias"])
    k = F.linear(kv, w[p + "to_k.weight"], w[p + "to_k.bias"])
    v = F.linear(kv, w[p + "to_v.weight"], w[p + "to_v.bias"])
    q = F.rms_norm(q.float(), (d,), w[p + "norm_q.weight"], eps).unflatten(-1, (heads, hd))  # across heads
    k = F.rms_norm(k.float(), (d,), w[p + "norm_k.weight"], eps).unflatten(-1, (heads, hd))
    if cos is not None:
        q, k = rope(q, cos, sin), rope(k, cos, sin)
    v = v.unflatten(-1, (heads, hd))
    o = F.scaled_dot_product_attention(q.to(dt).transpose(1, 2), k.to(dt).transpose(1, 2), v.transpose(1, 2))
    return F.linear(o.transpose(1, 2).flatten(2), w[p + "to_out.0.weight"], w[p + "to_out.0.bias"])


def block(x, ctx, tproj, cos, sin, w, p, cfg):
    """x [1, L, D] compute dtype; tproj [R, 6, D] float32 with R = 1 or L (per-token timesteps)."""
    d, eps, dt = cfg["dim"], cfg["eps"], x.dtype
    shift, scale, gate, c_shift, c_scale, c_gate = (w[p + "scale_shift_table"] + tproj).unbind(-2)
    n = (F.layer_norm(x.float(), (d,), eps=eps) * (1 + scale) + shift).to(dt)
    r = x.float() + attend(n, n, w, p + "attn1.", cfg, cos, sin).float() * gate
    x = r.to(dt)
    n2 = F.layer_norm(r, (d,), w[p + "norm2.weight"], w[p + "norm2.bias"], eps).to(dt)
    x = x + attend(n2, ctx, w, p + "attn2.", cfg, None, None)
    n3 = (F.layer_norm(x.float(), (d,), eps=eps) * (1 + c_scale) + c_shift).to(dt)
    ff = F.linear(F.gelu(F.linear(n3, w[p + "ffn.net.0.proj.weight"], w[p + "ffn.net.0.proj.bias"]), approximate="tanh"),
                  w[p + "ffn.net.2.weight"], w[p + "ffn.net.2.bias"])
    return (x.float() + ff.float() * c_gate).to(dt)


def embed_text(text, w, dt):
    ce = "condition_embedder.text_embedder."
    h = F.gelu(F.linear(text.to(dt), w[ce + "linear_1.weight"], w[ce + "linear_1.bias"]), approximate="tanh")
    return F.linear(h, w[ce + "linear_2.weight"], w[ce + "linear_2.bias"])


def forward(latent, timesteps, ctx, w, cfg, tables, dt, block_fn=block):
    """latent [C, T, H, W] float32, timesteps [1] or [L] float32, ctx [1, S, D] -> velocity [C, T, H, W] f32."""
    d, eps, patch = cfg["dim"], cfg["eps"], cfg["patch"]
    x = F.conv3d(latent[None], w["patch_embedding.weight"], w["patch_embedding.bias"], stride=patch)
    nt, nh, nw = x.shape[2:]
    x = x.flatten(2).transpose(1, 2).to(dt)
    ce = "condition_embedder."
    temb = F.linear(F.silu(F.linear(timestep_proj(timesteps, cfg["freq_dim"]), w[ce + "time_embedder.linear_1.weight"],
                                    w[ce + "time_embedder.linear_1.bias"])),
                    w[ce + "time_embedder.linear_2.weight"], w[ce + "time_embedder.linear_2.bias"])
    tproj = F.linear(F.silu(temb).to(w[ce + "time_proj.weight"].dtype), w[ce + "time_proj.weight"],
                     w[ce + "time_proj.bias"]).float().unflatten(-1, (6, d))
    cos, sin = tables
    for i in range(cfg["layers"]):
        x = block_fn(x, ctx, tproj, cos, sin, w, f"blocks.{i}.", cfg)
    shift, scale = (w["scale_shift_table"] + temb[:, None, :]).unbind(-2)
    y = F.layer_norm(x.float(), (d,), eps=eps) * (1 + scale) + shift
    out = F.linear(y[0], w["proj_out.weight"], w["proj_out.bias"])
    pt, ph, pw = patch
    c = cfg["cout"]
    return out.reshape(nt, nh, nw, pt, ph, pw, c).permute(6, 0, 3, 1, 4, 2, 5).reshape(c, nt * pt, nh * ph, nw * pw)


def forward_flops(cfg, tokens, text_rows):
    """Matmul FLOPs (2 per multiply-add): every linear, dense self-attention QK^T and PV, cross-attention over all text rows."""
    l, s, d, f = tokens, text_rows, cfg["dim"], cfg["ffn"]
    pv = math.prod(cfg["patch"])
    blk = 2 * l * d * d * 6 + 2 * s * d * d * 2 + 2 * l * d * f * 2 + 4 * l * l * d + 4 * l * s * d
    top = 2 * l * cfg["cin"] * pv * d + 2 * s * (cfg["text_dim"] * d + d * d) + 2 * l * d * cfg["cout"] * pv
    return cfg["layers"] * blk + top


def dmd_sigmas(steps, shift=8.0):
    """sigma(t) on the shift-8 training grid (nearest grid timestep, first on ties), as DmdDenoisingStage in fastvideo/pipelines/stages/denoising.py does."""
    grid = []
    for i in range(1000):
        s = (1000 - i) / 1000
        s = shift * s / (1 + (shift - 1) * s)
        grid.append((s * 1000, s))
    return [min(grid, key=lambda g: abs(g[0] - t))[1] for t in steps]


# ---- --check: a golden fixture through this forward ------------------------------------------------

def read_safetensors(path):
    with open(path, "rb") as fh:
        data = fh.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    dts = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32}
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[8 + n + a:8 + n + b]), dtype=dts[e["dtype"]]).reshape(e["shape"])
    return out, meta


def check(path):
    t, meta = read_safetensors(path)
    arch = json.loads(meta["refgen"])["arch_config"]
    cfg = make_config(arch["num_layers"], arch["num_attention_heads"], arch["ffn_dim"], arch["in_channels"],
                      head_dim=arch["attention_head_dim"], text_dim=arch["text_dim"], freq_dim=arch["freq_dim"],
                      patch=arch["patch_size"], eps=arch["eps"])
    cfg["cout"] = arch.get("out_channels") or arch["in_channels"]
    w = {k[2:]: v for k, v in t.items() if k.startswith("w.")}
    latent = t["in.hidden_states"][0]
    ts = t["in.timestep"].float().reshape(-1)
    nt, nh, nw = (latent.shape[1 + i] // cfg["patch"][i] for i in range(3))
    with torch.no_grad():
        ctx = embed_text(t["in.encoder_hidden_states"], w, torch.float32)
        out = forward(latent, ts, ctx, w, cfg, rope_tables(cfg, nt, nh, nw, "cpu"), torch.float32)
    want = t["out.sample"][0]
    err = (out - want).abs().max().item()
    tol = 1e-4 * max(1.0, want.abs().max().item())
    print(f"check {path}: max abs error {err:.3g} (tolerance {tol:.3g}) -> {'OK' if err <= tol else 'FAIL'}")
    return err <= tol


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), default="1.3b")
    ap.add_argument("--layers", type=int, default=0, help="blocks (0: the model's own)")
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--frames", type=int, default=81)
    ap.add_argument("--text", type=int, default=512)
    ap.add_argument("--dtype", choices=("bf16", "f32"), default="bf16")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--denoise-runs", type=int, default=3)
    ap.add_argument("--steps", default="1000,757,522", help="DMD timesteps of the FastWan loop ('' skips it)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compile", action="store_true", help="torch.compile the block")
    ap.add_argument("--no-tf32", action="store_true")
    ap.add_argument("--check", metavar="FIXTURE", help="run a golden fixture in f32 and compare (no benchmark)")
    args = ap.parse_args()
    if args.check:
        raise SystemExit(0 if check(args.check) else 1)
    if args.iters < 3:
        ap.error("--iters must be >= 3 for a median")

    dev, dt = setup(args.dtype, not args.no_tf32, args.seed)
    m = dict(MODELS[args.model])
    stride = m.pop("vae_stride")
    if args.layers > 0:
        m["layers"] = args.layers
    cfg = make_config(**m)
    if (args.frames - 1) % 4 or args.height % (2 * stride) or args.width % (2 * stride):
        ap.error(f"frames must be 4n+1 and height/width multiples of {2 * stride}")
    lt, lh, lw = (args.frames - 1) // 4 + 1, args.height // stride, args.width // stride
    nt, nh, nw = lt, lh // 2, lw // 2
    tokens = nt * nh * nw
    print(f"wandit torch {torch.__version__} on {dev}: {args.model}, {cfg['layers']} layers, {args.dtype}; "
          f"{args.width}x{args.height}x{args.frames} -> latent {cfg['cin']}x{lt}x{lh}x{lw} -> {tokens} tokens + {args.text} text rows")

    t0 = time.perf_counter()
    with torch.inference_mode():
        w = random_weights(cfg, dt, dev)
    sync(dev)
    print(f"random weights on {dev} in {time.perf_counter() - t0:.2f} s")

    latent = torch.randn(cfg["cin"], lt, lh, lw, device=dev)
    text = torch.randn(1, args.text, cfg["text_dim"], device=dev)
    tables = rope_tables(cfg, nt, nh, nw, dev)
    block_fn = torch.compile(block) if args.compile else block

    with torch.inference_mode():
        ctx = embed_text(text, w, dt)  # once per prompt

        def step(x, t):
            return forward(x, torch.tensor([t], dtype=torch.float32, device=dev), ctx, w, cfg, tables, dt, block_fn)

        first, times, out = time_runs(lambda: step(latent, 757.0), args.warmup, args.iters, dev)
        tflop = forward_flops(cfg, tokens, args.text) / 1e12
        print_forward_rate(first, times, tflop)
        print(f"output rms {out.pow(2).mean().sqrt().item():.4f}, non-finite {(~torch.isfinite(out)).sum().item()}")

        steps = [int(s) for s in args.steps.split(",") if s.strip()]
        if steps:
            sig = dmd_sigmas(steps)
            noise = [torch.randn_like(latent) for _ in steps]
            totals = []
            for _ in range(args.denoise_runs):
                x = latent.clone()
                sync(dev)
                s = time.perf_counter()
                for k, t in enumerate(steps):
                    _, v = timed(lambda: step(x, float(t)), dev)
                    x0 = (x.double() - sig[k] * v.double()).float()
                    if k + 1 < len(steps):
                        x = (1 - sig[k + 1]) * x0 + sig[k + 1] * noise[k]
                sync(dev)
                totals.append(time.perf_counter() - s)
            tm = statistics.median(totals)
            total = tflop * len(steps)
            print(f"FastWan denoise {steps} (sigma {[round(v, 6) for v in sig]}, no CFG): total min {min(totals):.3f} s, "
                  f"median {tm:.3f} s over {args.denoise_runs} runs ({tm / len(steps):.3f} s per step); {total:.1f} TFLOP -> "
                  f"{total / tm:.0f} TFLOP/s ({100 * total / tm / 790:.0f}% of 790)")
    if dev.type == "cuda":
        print(f"peak memory allocated by torch: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
