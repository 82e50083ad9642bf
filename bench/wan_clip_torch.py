#!/usr/bin/env python3
"""Same-math PyTorch chain of one whole FastWan2.1 1.3B clip, prompt to MP4, with random weights.

It is the PyTorch side of

    go run ./examples/bench -what clip -clip-model fastwan2.1-t2v-1.3b -clip-height 480 -clip-frames 81 -backend xla:cuda

and runs the same stages on the same shapes, in one process, bf16 on CUDA:

  condition  the UMT5-XXL encoder (d_model 4096, 64 heads of 64, gated-GELU FFN 10240, 24 layers, a
             relative-position bias table per layer, unscaled float32 attention scores, final RMSNorm;
             internal/textenc/umt5/graph.go) over the prompt's own tokens, zero-padded to the 512 rows
             the DiT's cross-attention reads. With --prompt-cache (the default, as the Go bench's)
             warm calls reuse the encoded prompt.
  denoise    the text embedder once per call, then the FastWan DMD ladder (1000, 757, 522 on the shift-8
             training grid, no CFG): one DiT forward per step (wan_dit_torch.py), x0 = x - sigma*v, then
             re-noise to the next rung with fresh noise from the seed's stream.
  decode     the Wan2.1 VAE (wan_vae_torch.py) one latent frame at a time; each chunk's frames are
             quantized to rgb24 and piped to ffmpeg as they come, as our pipeline streams them.
  mux        the H.264 flush (video only), with the Go writer's ffmpeg arguments (bench/clipkit.py).

Weights are drawn on the device before the first call (not timed, like the Go bench's random-weight
loads, which it reports apart). Prints every call's stages and a `torch clip record: {...}` JSON line
per call with the Go record's keys. cuDNN autotuning is on, as in wan_vae_torch.py: the cold call pays it.

    python3 bench/wan_clip_torch.py --smoke                # a few seconds: 2 layers, 128x128x9
    python3 bench/wan_clip_torch.py                        # 480x832x81, 3 DMD steps, 49 prompt tokens
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import clipkit  # noqa: E402
import wan_dit_torch as wdit  # noqa: E402
import wan_vae_torch as wvae  # noqa: E402
from benchutil import setup  # noqa: E402

# UMT5-XXL (fastvideo/wan's umt5XXL) and Wan's prompt rows (umt5.DefaultTextLen).
TEXT_VOCAB = 256384
TEXT_DIM = 4096
TEXT_HEADS = 64
TEXT_KV = 64
TEXT_FFN = 10240
TEXT_LAYERS = 24
TEXT_BUCKETS = 32
TEXT_MAX_DISTANCE = 128
TEXT_EPS = 1e-6
TEXT_LEN = 512

VAE_STRIDE = 8  # Wan2.1 VAE: 8x spatial, 4x temporal


# ---- condition: UMT5 ---------------------------------------------------------------------------------

def text_layer_shapes() -> dict:
    d, inner, f = TEXT_DIM, TEXT_HEADS * TEXT_KV, TEXT_FFN
    return {"norm0": (d,), "q": (inner, d), "k": (inner, d), "v": (inner, d), "o": (d, inner), "norm1": (d,),
            "wi0": (f, d), "wi1": (f, d), "wo": (d, f), "rel": (TEXT_BUCKETS, TEXT_HEADS)}


def relative_buckets(n: int, dev: torch.device) -> torch.Tensor:
    """umt5.RelativePositionBuckets: bidirectional buckets [S, S] of j - i, half per direction, half of
    those exact, the rest logarithmic up to max_distance."""
    half = TEXT_BUCKETS // 2
    exact = half // 2
    rel = torch.arange(n, device=dev)[None, :] - torch.arange(n, device=dev)[:, None]
    a = rel.abs()
    far = exact + (torch.log(a.float().clamp(min=1) / exact) / math.log(TEXT_MAX_DISTANCE / exact) *
                   (half - exact)).long()
    return (rel > 0).long() * half + torch.where(a < exact, a, far.clamp(max=half - 1))


def text_block(x: torch.Tensor, w: dict, buckets: torch.Tensor) -> torch.Tensor:
    """umt5.Block on x [1, S, d_model]: scores and softmax in float32, not scaled by 1/sqrt(d_kv)."""
    s = x.shape[1]
    n = clipkit.rms_norm_cast_first(x, w["norm0"], TEXT_EPS)
    q, k, v = (F.linear(n, w[p]).view(1, s, TEXT_HEADS, TEXT_KV).transpose(1, 2).float() for p in ("q", "k", "v"))
    bias = w["rel"].float()[buckets].permute(2, 0, 1)  # bias[h, i, j] = table[bucket(i, j), h]
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias[None], scale=1.0)
    x = x + F.linear(o.transpose(1, 2).reshape(1, s, TEXT_HEADS * TEXT_KV).to(x.dtype), w["o"])
    n = clipkit.rms_norm_cast_first(x, w["norm1"], TEXT_EPS)
    gate = F.gelu(F.linear(n, w["wi0"]).float(), approximate="tanh").to(x.dtype)
    return x + F.linear(gate * F.linear(n, w["wi1"]), w["wo"])


class TextEncoder:
    """The resident UMT5 encoder: ids [S] -> Wan's prompt rows [1, 512, d_model], zero-padded."""

    def __init__(self, layers: int, dt: torch.dtype, dev: torch.device, seed: int):
        g = torch.Generator(device=dev).manual_seed(seed)
        self.dev = dev
        self.embed = torch.empty(TEXT_VOCAB, TEXT_DIM, dtype=dt, device=dev).normal_(generator=g)
        self.final = clipkit.draw((TEXT_DIM,), dt, dev, g)
        self.layers = [clipkit.draw_layer(text_layer_shapes(), dt, dev, seed + i + 1) for i in range(layers)]

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        s = ids.shape[0]
        x = F.embedding(ids, self.embed)[None]
        buckets = relative_buckets(s, self.dev)
        for w in self.layers:
            x = text_block(x, w, buckets)
        rows = x.new_zeros(1, TEXT_LEN, TEXT_DIM)
        rows[:, :s] = clipkit.rms_norm_cast_first(x, self.final, TEXT_EPS)
        return rows


# ---- the models and stages ---------------------------------------------------------------------------

class Models:
    """Every component's weights, drawn once before the calls."""

    def __init__(self, args, dt: torch.dtype, dev: torch.device):
        self.dt, self.dev, self.weights_s = dt, dev, {}
        m = dict(wdit.MODELS["1.3b"])
        m.pop("vae_stride")
        m["layers"] = args.layers
        self.cfg = wdit.make_config(**m)
        self.dit = clipkit.timed_into(self.weights_s, "dit", dev, lambda: wdit.random_weights(self.cfg, dt, dev))
        self.block_fn = torch.compile(wdit.block) if args.compile else wdit.block
        self.vcfg = wvae.wan21()
        self.vae = clipkit.timed_into(self.weights_s, "video_vae", dev,
                                      lambda: wvae.make_weights(self.vcfg, dt, dev, args.seed + 1))
        self.text = clipkit.timed_into(self.weights_s, "text_encoder", dev,
                                       lambda: TextEncoder(args.text_layers, dt, dev, args.seed + 2))
        if dev.type == "cuda":
            print(f"weights resident: {torch.cuda.memory_allocated() / 2**30:.1f} GiB", flush=True)


def denoise(m: Models, rows: torch.Tensor, args, gen: torch.Generator) -> torch.Tensor:
    """The DMD loop (DmdDenoisingStage): the final latent [C, T, H, W] float32."""
    dev, cfg = m.dev, m.cfg
    ctx = wdit.embed_text(rows, m.dit, m.dt)
    lt, lh, lw = (args.frames - 1) // 4 + 1, args.height // VAE_STRIDE, args.width // VAE_STRIDE
    tables = wdit.rope_tables(cfg, lt, lh // 2, lw // 2, dev)
    steps = [int(s) for s in args.steps.split(",")]
    sig = wdit.dmd_sigmas(steps)
    x = torch.randn(cfg["cin"], lt, lh, lw, generator=gen, device=dev)
    for k, t in enumerate(steps):
        v = wdit.forward(x, torch.tensor([float(t)], dtype=torch.float32, device=dev), ctx, m.dit, cfg, tables, m.dt,
                         m.block_fn)
        x = (x.double() - sig[k] * v.double()).float()
        if k + 1 < len(steps):
            x = (1 - sig[k + 1]) * x + sig[k + 1] * torch.randn(x.shape, generator=gen, device=dev)
    return x


def decode(m: Models, x: torch.Tensor, sink) -> None:
    c = x.shape[0]
    mean, std = torch.zeros(c, device=m.dev), torch.ones(c, device=m.dev)  # the VAE's latents_mean/std
    z = x[None] * std.view(1, c, 1, 1, 1) + mean.view(1, c, 1, 1, 1)
    # vae/wan's pixel mapping: (x/2 + 0.5).clamp(0, 1).
    wvae.decode_chunks(m.vcfg, m.vae, m.dt, z, lambda f: sink.write(clipkit.rgb24((f / 2 + 0.5).clamp_(0, 1))))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--frames", type=int, default=81, help="4n+1 frames")
    ap.add_argument("--fps", type=float, default=16, help="the FastWan presets' 16 fps")
    ap.add_argument("--steps", default="1000,757,522", help="the DMD rungs (schedule.FastWanDMDSteps)")
    ap.add_argument("--text", type=int, default=49,
                    help="prompt tokens with </s> (the Go bench's default prompt through the random model's tokenizer: 49)")
    ap.add_argument("--layers", type=int, default=30, help="DiT blocks")
    ap.add_argument("--text-layers", type=int, default=TEXT_LAYERS, help="UMT5 layers")
    clipkit.add_common_args(ap)
    args = ap.parse_args()
    if args.smoke:
        args.layers, args.text_layers = 2, 2
        args.height, args.width, args.frames, args.iters = 128, 128, 9, 1
    if (args.frames - 1) % 4 or args.height % 16 or args.width % 16 or not 1 <= args.text <= TEXT_LEN:
        ap.error(f"frames must be 4n+1, height and width multiples of 16, text 1..{TEXT_LEN}")
    return args


def main():
    args = parse_args()
    dev, dt = setup("bf16", not args.no_tf32, args.seed)
    torch.backends.cudnn.benchmark = True
    print(f"wan clip torch {torch.__version__} on {dev}: {args.width}x{args.height}x{args.frames}, steps {args.steps}, "
          f"{args.text} prompt tokens, DiT {args.layers} layers, UMT5 {args.text_layers} layers", flush=True)
    m = Models(args, dt, dev)  # plain tensors and modules: built outside inference mode, used inside
    with torch.inference_mode():
        clipkit.run_clips("fastwan2.1-t2v-1.3b", args, dev, m.weights_s, TEXT_VOCAB, m.text,
                          lambda rows, gen: denoise(m, rows, args, gen), lambda x, sink: decode(m, x, sink), args.fps)


if __name__ == "__main__":
    main()
