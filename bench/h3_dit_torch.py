#!/usr/bin/env python3
"""Same-math PyTorch benchmark of the MiniMax H3 DiT forward at release size.

The functions below restate FastVideo's `fastvideo/models/dits/minimax_h3.py` eager path (fusions off):
FP32 proj_in / audio_proj_in / time_embedder / proj_out / audio_proj_out, everything else in the compute
dtype; per-row AdaLN from (timestep, modality) tables, per-head QK RMSNorm, partial 3-axis RoPE (96 of
128 channels, half-split rotation), joint attention through torch SDPA, value-first SwiGLU. It is the
counterpart of

    go run ./examples/bench -what h3dit -backend xla:cuda

and uses the same shapes: 832x480x124 with a 93-token prompt = 14,937 packed rows (text 93, audio 414,
video 14,430), random weights drawn on the GPU (matrices randn/sqrt(fan_in), biases 0.05 randn, norm
weights 1 + 0.1 randn). The refined prompt is computed once and reused, as FastVideo caches it across
steps; the AdaLN projections run in every forward unless --adaln-cache. Prints seconds per forward
(median after warm-up), TFLOP/s of the block matmuls and attention, and the peak memory torch allocated.

--vsa 0.9 --upstream DIR runs the joint blocks' attention as Video Sparse Attention (FastH3's), the counterpart
of `bench -what h3dit -h3dit-vsa 0.9`: tiling, pooled routing, prefix rows dense and the gated compression branch
as bench/vsa_torch.py computes them, the fine stage upstream's own Triton forward (fastvideo-kernel's
block_sparse_attn_triton.py in DIR, imported unchanged), each block with its to_gate_compress projection. Before
timing, the attention is checked against bench/vsa_torch.py's on random inputs of the forward's shape.

--profile OUT.csv records ONE more forward after the timed runs with torch.profiler (compile and
autotuning stay outside) and writes its GPU kernels (name, calls, total_us), the input of
bench/kernel_breakdown.py --torch.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F

import vsa_torch
from benchutil import print_forward_rate, profile_kernels, setup, sync, time_runs, timestep_proj

# Release architecture (the released transformer/config.json; fastvideo/configs/models/dits/minimax_h3.py).
HIDDEN = 5376
HEADS = 56
HEAD_DIM = 128
FFN = 14336
IN_CHANNELS = 24
PATCH = (1, 2, 2)
AUDIO_CHANNELS = 32
TEXT_DIM = 5120
FREQ_DIM = 256
TIME_HIDDEN = 5376
TIME_DIM = 2688
ROPE_FREQ_DIM = 16
ROPE_THETA = 10000.0
EPS = 1e-5
MODALITIES = 3


def rand_param(shape, dtype, device, kind):
    """Fixture-generator scales: matrices randn/sqrt(fan_in), biases 0.05 randn, vectors 1 + 0.1 randn."""
    t = torch.empty(shape, dtype=dtype, device=device)
    if kind == "bias":
        return t.normal_(0.0, 0.05)
    if len(shape) >= 2:
        return t.normal_(0.0, 1.0 / math.sqrt(shape[1]))
    return t.normal_(1.0, 0.1)


def make_weights(layers, refiner_layers, dt, dev, gate=False):
    f32 = torch.float32
    inner = HEADS * HEAD_DIM
    patch_dim = IN_CHANNELS * PATCH[0] * PATCH[1] * PATCH[2]

    def core():
        return {
            "norm1": rand_param((HIDDEN,), dt, dev, "w"),
            "q": rand_param((inner, HIDDEN), dt, dev, "w"),
            "k": rand_param((inner, HIDDEN), dt, dev, "w"),
            "v": rand_param((inner, HIDDEN), dt, dev, "w"),
            "nq": rand_param((HEAD_DIM,), dt, dev, "w"),
            "nk": rand_param((HEAD_DIM,), dt, dev, "w"),
            "o": rand_param((HIDDEN, inner), dt, dev, "w"),
            "norm2": rand_param((HIDDEN,), dt, dev, "w"),
            "ffin": rand_param((2 * FFN, HIDDEN), dt, dev, "w"),
            "ffout": rand_param((HIDDEN, FFN), dt, dev, "w"),
        }

    w = {
        "proj_in": (rand_param((HIDDEN, patch_dim), f32, dev, "w"), rand_param((HIDDEN,), f32, dev, "bias")),
        "audio_proj_in": (rand_param((HIDDEN, AUDIO_CHANNELS), f32, dev, "w"), rand_param((HIDDEN,), f32, dev, "bias")),
        "context": (rand_param((HIDDEN, TEXT_DIM), dt, dev, "w"), rand_param((HIDDEN,), dt, dev, "bias")),
        "time1": (rand_param((TIME_HIDDEN, FREQ_DIM), f32, dev, "w"), rand_param((TIME_HIDDEN,), f32, dev, "bias")),
        "time2": (rand_param((TIME_DIM, TIME_HIDDEN), f32, dev, "w"), rand_param((TIME_DIM,), f32, dev, "bias")),
        "refiner": [core() for _ in range(refiner_layers)],
        "final_norm": rand_param((HIDDEN,), dt, dev, "w"),
        "blocks": [],
        "norm_out": rand_param((HIDDEN,), dt, dev, "w"),
        "norm_out_lin": (rand_param((2 * HIDDEN, TIME_DIM), dt, dev, "w"), rand_param((2 * HIDDEN,), dt, dev, "bias")),
        "proj_out": (rand_param((patch_dim, HIDDEN), f32, dev, "w"), rand_param((patch_dim,), f32, dev, "bias")),
        "audio_proj_out": (rand_param((AUDIO_CHANNELS, HIDDEN), f32, dev, "w"), rand_param((AUDIO_CHANNELS,), f32, dev, "bias")),
    }
    for _ in range(layers):
        b = core()
        b["ada"] = (rand_param((6 * MODALITIES * HIDDEN, TIME_DIM), dt, dev, "w"),
                    rand_param((6 * MODALITIES * HIDDEN,), dt, dev, "bias"))
        if gate:  # VSA's to_gate_compress [inner, D]
            b["gate"] = rand_param((HEADS * HEAD_DIM, HIDDEN), dt, dev, "w")
        w["blocks"].append(b)
    return w


# ---- geometry (fastvideo/pipelines/basic/minimax_h3/packing.py): rows [text | audio ch0 | audio ch1 | video]

def layout(height, width, frames, text_tokens):
    t_lat = (frames - 5) // 17 * 5 + 2
    n_audio = round(frames / 24 * 40)
    hl, wl = height // 16, width // 16
    a = math.sqrt(hl * wl)

    def grid(d):
        ratio = d / a
        left = (1 - ratio) / 2
        n = d // 2
        return [32 * (i * ((left + ratio) - left) / n + left) for i in range(n)]

    hg, wg = grid(hl), grid(wl)
    tg = [0.0]
    c = (1, 4, 4, 4, 4)
    for j in range(1, t_lat):
        tg.append(tg[-1] + 5 / 3 * c[(j - 1) % 5])
    s = text_tokens
    pos, tags = [], []
    for i in range(s):
        pos.append((i, 0.0, 0.0))
        tags.append(1)
    for ch in range(2):
        for k in range(n_audio):
            pos.append((s + k, 0.0, wg[0] if ch == 0 else wg[-1]))
            tags.append(2)
    for j in range(t_lat):
        for hh in hg:
            for ww in wg:
                pos.append((s + tg[j], hh, ww))
                tags.append(0)
    n_video = t_lat * len(hg) * len(wg)
    return pos, tags, s, 2 * n_audio, n_video


def rope_tables(pos, dev, dt):
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, 2 * ROPE_FREQ_DIM, 2, dtype=torch.float32, device=dev) / (2 * ROPE_FREQ_DIM)))
    p = torch.tensor(pos, dtype=torch.float64, device=dev).to(torch.float32)
    freqs = p.unsqueeze(-1) * inv.view(1, 1, -1)
    freqs = torch.cat(freqs.unbind(dim=1), dim=-1)
    freqs = torch.cat((freqs, freqs), dim=-1)
    return freqs.cos().to(dt), freqs.sin().to(dt)


# ---- the block math (FastVideo eager path) --------------------------------------------------------

def apply_rope(x, cos, sin):
    r = cos.shape[-1]
    xr, xp = x[..., :r], x[..., r:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    x1, x2 = xr.chunk(2, dim=-1)
    return torch.cat((xr * c + torch.cat((-x2, x1), dim=-1) * s, xp), dim=-1)


# VSA (--vsa): the joint blocks' attention as fastvideo/attention/backends/video_sparse_attn_h3.py routes it
# (bench/vsa_torch.py's Plan), and its fine stage, upstream's own Triton forward (fastvideo-kernel
# block_sparse_attn_triton.py, imported unchanged from --upstream). Set by main; None: dense attention.
VSA = VSA_FINE = None


def upstream_fine(kernel):
    """bench/vsa_torch.py's fine stage on upstream's Triton forward: its layout is [1, H, tiles·64, D] in tile
    order, pads in each tile's tail (variable_block_sizes)."""
    # Outside torch.compile's graph (--compile): Inductor recompiles a user Triton kernel it traces into, and
    # upstream's fails there (its tl.dot with an accumulator; torch 2.11), so the block graph breaks around it.
    kernel = torch.compiler.disable(kernel)

    def fine(qv, kt, vt, sel, plan):
        n_video, e, H, D = qv.shape
        head_major = lambda xt: xt.permute(2, 0, 1, 3).reshape(1, H, -1, D)
        num = torch.full((1, H, n_video), plan.width, dtype=torch.int32, device=qv.device)
        o, _ = kernel(head_major(qv), head_major(kt), head_major(vt), sel.to(torch.int32)[None].contiguous(), num,
                      plan.block_sizes)
        return o.view(H, n_video, e, D).permute(1, 2, 0, 3)

    return fine


def attention(h, w, rope):
    q = F.linear(h, w["q"]).unflatten(-1, (HEADS, HEAD_DIM))
    k = F.linear(h, w["k"]).unflatten(-1, (HEADS, HEAD_DIM))
    v = F.linear(h, w["v"]).unflatten(-1, (HEADS, HEAD_DIM))
    q = F.rms_norm(q, (HEAD_DIM,), w["nq"], EPS)
    k = F.rms_norm(k, (HEAD_DIM,), w["nk"], EPS)
    if rope is not None:
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
    if VSA is not None and rope is not None:  # the joint blocks (the refiner's have no rotation)
        gate = F.linear(h, w["gate"]).unflatten(-1, (HEADS, HEAD_DIM))
        o = vsa_torch.vsa(q[0], k[0], v[0], gate[0], VSA, VSA_FINE)[None]
        return F.linear(o.flatten(2), w["o"])
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return F.linear(o.transpose(1, 2).flatten(2), w["o"])


def feed_forward(h, w):
    value, gate = F.linear(h, w["ffin"]).chunk(2, dim=-1)
    return F.linear(value * F.silu(gate), w["ffout"])


def refiner_block(x, w):
    x = x + attention(F.rms_norm(x, (HIDDEN,), w["norm1"], EPS), w, None)
    return x + feed_forward(F.rms_norm(x, (HIDDEN,), w["norm2"], EPS), w)


def modulation(temb_silu, w):
    """[nT, 18D] -> six [nT*3, D] tables (rows timestep*3 + modality)."""
    return F.linear(temb_silu, *w["ada"]).view(-1, 6 * HIDDEN).chunk(6, dim=-1)


def embed_timesteps(timestep, w, dt):
    """silu(time embedding) of the DiT's timestep input [nT] -> [nT, TIME_DIM] in dt: what every AdaLN
    projection and the output norm take."""
    temb = F.linear(F.silu(F.linear(timestep_proj(timestep, FREQ_DIM), *w["time1"])), *w["time2"])
    return F.silu(temb).to(dt)


def refine_text(text_feats, w):
    """The prompt rows through the context projection, the refiner blocks and the final norm: once per
    prompt, as FastVideo caches it across steps."""
    text = F.linear(text_feats, *w["context"])
    for rb in w["refiner"]:
        text = refiner_block(text, rb)
    return F.rms_norm(text, (HIDDEN,), w["final_norm"], EPS)


def joint_block(x, tables, idx, cos, sin, w):
    shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = (t.to(x.dtype) for t in tables)
    h = F.rms_norm(x, (HIDDEN,), w["norm1"], EPS)
    h = h * (1.0 + scale_msa.index_select(0, idx)) + shift_msa.index_select(0, idx)
    x = x + gate_msa.index_select(0, idx) * attention(h, w, (cos, sin))
    h = F.rms_norm(x, (HIDDEN,), w["norm2"], EPS)
    h = h * (1.0 + scale_mlp.index_select(0, idx)) + shift_mlp.index_select(0, idx)
    return x + gate_mlp.index_select(0, idx) * feed_forward(h, w)


def forward(w, text, video_rows, audio_rows, rows, a, tables, tidx, adaln_idx, cos, sin, block_fn=joint_block):
    """One DiT forward on the packed sequence [text | audio | video]: rows = (text, audio, video) row indices,
    text = refine_text's rows, a = embed_timesteps of the step's distinct timesteps, tables = every block's
    modulation(a) (None: projected here, in every forward, as without an AdaLN cache), tidx = each row's
    timestep index into a, adaln_idx = tidx * MODALITIES + modality tag. Returns the float32 velocities
    (video rows [1, Nv, patch_dim], audio rows [1, Na, AUDIO_CHANNELS])."""
    text_idx, audio_idx, video_idx = rows
    ve = F.linear(video_rows, *w["proj_in"])
    ae = F.linear(audio_rows, *w["audio_proj_in"])
    x = text.new_empty((1, cos.shape[0], HIDDEN))
    x.index_copy_(1, text_idx, text)
    x.index_copy_(1, video_idx, ve.to(x.dtype))
    x.index_copy_(1, audio_idx, ae.to(x.dtype))
    for i, b in enumerate(w["blocks"]):
        tab = modulation(a, b) if tables is None else tables[i]
        x = block_fn(x, tab, adaln_idx, cos, sin, b)
    shift, scale = F.linear(a, *w["norm_out_lin"]).chunk(2, dim=-1)
    y = F.rms_norm(x, (HIDDEN,), w["norm_out"], EPS)
    y = (y * (1.0 + scale.index_select(0, tidx)) + shift.index_select(0, tidx)).float()
    v = F.linear(y.index_select(1, video_idx), *w["proj_out"])
    au = F.linear(y.index_select(1, audio_idx), *w["audio_proj_out"])
    return v, au


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=50)
    ap.add_argument("--refiner-layers", type=int, default=2)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--frames", type=int, default=124)
    ap.add_argument("--text", type=int, default=93)
    ap.add_argument("--dtype", choices=("bf16", "f32"), default="bf16")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compile", action="store_true", help="torch.compile the joint block (FastVideo compiles per block)")
    ap.add_argument("--adaln-cache", action="store_true", help="precompute the AdaLN tables once (step cache)")
    ap.add_argument("--no-tf32", action="store_true")
    ap.add_argument("--profile", metavar="OUT.csv", help="write the GPU kernels of one more forward (torch.profiler)")
    ap.add_argument("--vsa", type=float, default=-1, help="Video Sparse Attention at this sparsity in the joint blocks "
                    "(0.9: FastH3's), the fine stage upstream's Triton forward from --upstream; negative: dense")
    ap.add_argument("--upstream", metavar="DIR", help="the folder of fastvideo-kernel's block_sparse_attn_triton.py")
    args = ap.parse_args()
    if args.vsa >= 0 and not args.upstream:
        ap.error("--vsa needs --upstream DIR, the folder holding fastvideo-kernel's block_sparse_attn_triton.py")
    if args.iters < 3:
        ap.error("--iters must be >= 3 for a median")

    dev, dt = setup(args.dtype, not args.no_tf32, args.seed)

    pos, tags, s, n_audio, n_video = layout(args.height, args.width, args.frames, args.text)
    L = len(pos)
    print(f"h3dit torch {torch.__version__} on {dev}: {args.layers} layers, {args.dtype}, "
          f"{args.width}x{args.height}x{args.frames} + {s} text tokens -> {L} rows ({n_video} video, {n_audio} audio)")

    t0 = time.perf_counter()
    with torch.inference_mode():
        w = make_weights(args.layers, args.refiner_layers, dt, dev, gate=args.vsa >= 0)
    sync(dev)
    print(f"random weights on {dev} in {time.perf_counter() - t0:.2f} s")

    # FastH3 4-step ladder, step 1: text/video rows at t_v, audio rows at t_a.
    t_v, t_a = 0.027027010917663574, 0.10000002384185791
    timestep = torch.tensor([t_v, t_a], dtype=torch.float32, device=dev)
    tidx = torch.tensor([1 if tag == 2 else 0 for tag in tags], dtype=torch.long, device=dev)
    tag_t = torch.tensor(tags, dtype=torch.long, device=dev)
    adaln_idx = tidx * MODALITIES + tag_t
    text_idx = torch.arange(0, s, device=dev)
    audio_idx = torch.arange(s, s + n_audio, device=dev)
    video_idx = torch.arange(s + n_audio, L, device=dev)
    patch_dim = IN_CHANNELS * PATCH[0] * PATCH[1] * PATCH[2]
    video_rows = torch.randn(1, n_video, patch_dim, device=dev)
    audio_rows = torch.randn(1, n_audio, AUDIO_CHANNELS, device=dev)
    text_feats = torch.randn(1, s, TEXT_DIM, device=dev, dtype=dt)
    cos, sin = rope_tables(pos, dev, dt)

    if args.vsa >= 0:
        global VSA, VSA_FINE
        import os, sys
        sys.path.insert(0, os.path.abspath(args.upstream))
        import block_sparse_attn_triton as upstream
        t_lat = n_video // ((args.height // 32) * (args.width // 32))
        VSA = vsa_torch.Plan((s, 0, n_audio), (t_lat, args.height // 32, args.width // 32), 64, args.vsa, dev)
        VSA_FINE = upstream_fine(upstream.triton_block_sparse_attn_forward)
        print(f"VSA sparsity {args.vsa}: {VSA.n_prefix} prefix + {VSA.n_tiles - VSA.n_prefix} video tiles, top-{VSA.topk} "
              f"video tiles per video query tile; fine stage: upstream's Triton forward")
        # The attention against bench/vsa_torch.py's fine stage (gathered tiles through SDPA) on random inputs of
        # the forward's shape, so that the timed forward is known to run the same math.
        with torch.inference_mode():
            q, k, v, g = (torch.randn(L, HEADS, HEAD_DIM, device=dev, dtype=dt) for _ in range(4))
            got = vsa_torch.vsa(q, k, v, g, VSA, VSA_FINE).float()
            want = vsa_torch.vsa(q, k, v, g, VSA, vsa_torch.gathered(8)).float()
            print(f"VSA attention against bench/vsa_torch.py's: max abs diff {(got - want).abs().max().item():.3g} "
                  f"of {want.abs().max().item():.3g}")
            del q, k, v, g, got, want
    block_fn = torch.compile(joint_block) if args.compile else joint_block

    with torch.inference_mode():
        text = refine_text(text_feats, w)
        rows = (text_idx, audio_idx, video_idx)
        cached = None
        if args.adaln_cache:
            a = embed_timesteps(timestep, w, dt)
            cached = (a, [modulation(a, b) for b in w["blocks"]])

        def run():
            a, tables = cached if cached is not None else (embed_timesteps(timestep, w, dt), None)
            return forward(w, text, video_rows, audio_rows, rows, a, tables, tidx, adaln_idx, cos, sin, block_fn)

        first, times, out = time_runs(run, args.warmup, args.iters, dev)
        if args.profile:
            profile_kernels(run, dev, args.profile, statistics.median(times))

    inner = HEADS * HEAD_DIM
    tflop = args.layers * (L * (8 * HIDDEN * inner + 6 * HIDDEN * FFN) + 4 * L * L * inner) / 1e12
    if VSA is not None:  # as the Go bench counts it (h3ditVSATFLOP): the gate projection, the prefix rows dense
        # and each video row over its list's full tiles
        attn = 4 * inner * ((s + n_audio) * L + n_video * 64 * VSA.width)
        tflop = args.layers * (L * (10 * HIDDEN * inner + 6 * HIDDEN * FFN) + attn) / 1e12
    v = out[0].float()
    print_forward_rate(first, times, tflop)
    if dev.type == "cuda":
        print(f"peak memory allocated by torch: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    print(f"video rms {v.pow(2).mean().sqrt().item():.4f}, non-finite {(~torch.isfinite(v)).sum().item()}")


if __name__ == "__main__":
    main()
