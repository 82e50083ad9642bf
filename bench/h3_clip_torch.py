#!/usr/bin/env python3
"""Same-math PyTorch chain of one whole FastH3 clip, prompt to MP4, at release size with random weights.

It is the PyTorch side of

    go run ./examples/bench -what clip -clip-model fasth3 -backend xla:cuda

and runs the same stages on the same shapes, in one process, bf16 on CUDA:

  condition  the Qwen3-VL-32B text stack (hidden 5120, 64 heads / 8 KV heads of 128, SwiGLU 25600,
             RMSNorm eps 1e-6, per-head q/k RMSNorm, RoPE theta 5e6, causal GQA through SDPA) through
             50 layers over the prompt's tokens: H3 conditions on hidden_states[50], the un-normalized
             output of layer 49 (internal/textenc/qwen3vl/graph.go; for text-only tokens the
             multimodal RoPE is plain 1-D RoPE). With --prompt-cache (the default, as the Go bench's)
             warm calls reuse the encoded prompt.
  denoise    the FastH3 4-step ladders (video shift 12, audio shift 3, schedule/h3.go NewH3Ladder) with
             the DiT of h3_dit_torch.py: the refined prompt once per call, the AdaLN tables of every
             visited timestep once per call (our AdaLN cache), one forward per step, the
             MiniMaxH3Scheduler step on the video and audio rows between forwards.
  decode     the audio VAE (h3_audio_vae_torch.py, float32) on the stereo latents, then the video VAE
             (h3_video_vae_torch.py) clip by clip; each finished run of frames is quantized to rgb24 and
             piped to ffmpeg as it comes, as our pipeline streams frames into the encoder.
  mux        the H.264 flush and the AAC pass, with the Go writer's ffmpeg arguments (bench/clipkit.py).

Weights are drawn on the device before the first call (not timed, like the Go bench's random-weight
loads, which it reports apart); the text stack stays resident unless --stream-text (or too little
device memory) draws each layer when it runs and frees it after. Prints every call's stages and a
`torch clip record: {...}` JSON line per call with the Go record's keys.

    python3 bench/h3_clip_torch.py --smoke                 # a few seconds: 2 layers per model, 256x256x22
    python3 bench/h3_clip_torch.py                         # 832x480x124, 4 steps, 93 prompt tokens
    python3 bench/h3_clip_torch.py --text 22               # the Go bench's default prompt is 22 tokens
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import clipkit  # noqa: E402
import h3_audio_vae_torch as avae  # noqa: E402
import h3_dit_torch as dit  # noqa: E402
import h3_video_vae_torch as vvae  # noqa: E402
from benchutil import setup  # noqa: E402

# Qwen3-VL-32B's text stack (qwen3vl.Q32B) and H3's output layer (qwen3vl.H3HiddenStateIndex).
TEXT_VOCAB = 151936
TEXT_HIDDEN = 5120
TEXT_FFN = 25600
TEXT_HEADS = 64
TEXT_KV_HEADS = 8
TEXT_HEAD_DIM = 128
TEXT_EPS = 1e-6
TEXT_THETA = 5e6
TEXT_LAYERS = 50

VIDEO_SHIFT, AUDIO_SHIFT = 12.0, 3.0  # schedule.H3VideoShift, H3AudioShift
FPS = 24
AUDIO_RATE = 32000  # h3audio.DefaultConfig().SamplingRate
HEADROOM = 12 * 2**30  # device memory kept free for activations when the text stack would be resident


# ---- condition: the Qwen3-VL text stack -------------------------------------------------------------

def text_layer_shapes() -> dict:
    q, kv, d, f, hd = TEXT_HEADS * TEXT_HEAD_DIM, TEXT_KV_HEADS * TEXT_HEAD_DIM, TEXT_HIDDEN, TEXT_FFN, TEXT_HEAD_DIM
    return {"in_norm": (d,), "q": (q, d), "k": (kv, d), "v": (kv, d), "q_norm": (hd,), "k_norm": (hd,),
            "o": (d, q), "post_norm": (d,), "gate": (f, d), "up": (f, d), "down": (d, f)}


def text_rope(s: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [S, head_dim] float32 for positions 0..S-1 (qwen3vl.RopeTables of TextPositions)."""
    inv = 1.0 / TEXT_THETA**(torch.arange(0, TEXT_HEAD_DIM, 2, dtype=torch.float32, device=dev) / TEXT_HEAD_DIM)
    ang = torch.arange(s, dtype=torch.float32, device=dev)[:, None] * inv[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos(), ang.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [1, S, heads, head_dim]: x*cos + rotate_half(x)*sin in float32, back in x's dtype."""
    xf = x.float()
    x1, x2 = xf.chunk(2, dim=-1)
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return (xf * c + torch.cat((-x2, x1), dim=-1) * s).to(x.dtype)


def text_layer(x: torch.Tensor, w: dict, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """qwen3vl.DecoderLayer on x [1, S, hidden]."""
    s = x.shape[1]
    h = clipkit.rms_norm_cast_first(x, w["in_norm"], TEXT_EPS)
    q = F.linear(h, w["q"]).view(1, s, TEXT_HEADS, TEXT_HEAD_DIM)
    k = F.linear(h, w["k"]).view(1, s, TEXT_KV_HEADS, TEXT_HEAD_DIM)
    v = F.linear(h, w["v"]).view(1, s, TEXT_KV_HEADS, TEXT_HEAD_DIM)
    q = rotate(clipkit.rms_norm_cast_first(q, w["q_norm"], TEXT_EPS), cos, sin)
    k = rotate(clipkit.rms_norm_cast_first(k, w["k_norm"], TEXT_EPS), cos, sin)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                       enable_gqa=True)
    x = x + F.linear(o.transpose(1, 2).reshape(1, s, TEXT_HEADS * TEXT_HEAD_DIM), w["o"])
    h = clipkit.rms_norm_cast_first(x, w["post_norm"], TEXT_EPS)
    return x + F.linear(F.silu(F.linear(h, w["gate"])) * F.linear(h, w["up"]), w["down"])


class TextStack:
    """The layers up to H3's hidden state: resident, or drawn when each runs and freed after."""

    def __init__(self, layers: int, dt: torch.dtype, dev: torch.device, seed: int, stream: bool):
        self.layers, self.dt, self.dev, self.seed, self.stream = layers, dt, dev, seed, stream
        g = torch.Generator(device=dev).manual_seed(seed)
        self.embed = torch.empty(TEXT_VOCAB, TEXT_HIDDEN, dtype=dt, device=dev).normal_(generator=g)
        self.resident = [] if stream else [self._draw(i) for i in range(layers)]

    def _draw(self, i: int) -> dict:
        return clipkit.draw_layer(text_layer_shapes(), self.dt, self.dev, self.seed + i + 1)

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [S] -> hidden_states[layers] [1, S, hidden]."""
        x = F.embedding(ids, self.embed)[None]
        cos, sin = text_rope(ids.shape[0], self.dev)
        for i in range(self.layers):
            x = text_layer(x, self._draw(i) if self.stream else self.resident[i], cos, sin)
        return x


# ---- denoise ---------------------------------------------------------------------------------------

def h3_ladder(shift: float, steps: int) -> tuple[list[float], list[float]]:
    """schedule.NewH3Ladder: (sigmas, timesteps) in float32, sigma = shift*b/(1+(shift-1)*b) on
    torch.linspace(1, 0, steps+1), consecutive duplicates removed, t = 1 - sigma."""
    b = torch.linspace(1, 0, steps + 1, dtype=torch.float32)
    sig = (shift * b) / (1 + (shift - 1) * b)
    sig = torch.unique_consecutive(sig)
    return sig.tolist(), (1 - sig[:-1]).tolist()


def ladder_step(ladder, k: int, v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """H3Ladder.Step: x0 = x + (1 - t_k)*v, r = sigma_{k+1}/sigma_k, x = r*x + (1 - r)*x0."""
    sig, ts = ladder
    x0 = x + (1 - ts[k]) * v
    r = sig[k + 1] / sig[k]
    return r * x + (1 - r) * x0


class Models:
    """Every component's weights, drawn once before the calls."""

    def __init__(self, args, dt: torch.dtype, dev: torch.device):
        self.dt, self.dev, self.weights_s = dt, dev, {}
        self.dit = clipkit.timed_into(self.weights_s, "dit", dev, lambda: dit.make_weights(args.layers, 2, dt, dev))
        self.block_fn = torch.compile(dit.joint_block) if args.compile else dit.joint_block
        self.vcfg = vvae.Cfg()
        self.vcfg.layers = args.vae_layers
        self.vae = clipkit.timed_into(self.weights_s, "video_vae", dev,
                                      lambda: vvae.make_weights(self.vcfg, dt, dev, args.seed + 1))
        self.vae["q_dtype"] = dt
        self.ropes: dict = {}

        def audio():
            m = avae.AudioDecoder()
            avae.random_init(m, args.seed + 2, 0.05)
            return m.to(dev).eval()

        self.audio = clipkit.timed_into(self.weights_s, "audio_vae", dev, audio)
        stream = self._stream_text(args)
        self.text = clipkit.timed_into(self.weights_s, "text_encoder", dev,
                                       lambda: TextStack(args.text_layers, dt, dev, args.seed + 3, stream))
        if dev.type == "cuda":
            print(f"weights resident: {torch.cuda.memory_allocated() / 2**30:.1f} GiB; text stack "
                  f"{'streamed layer by layer' if self.text.stream else 'resident'}", flush=True)

    def _stream_text(self, args) -> bool:
        if args.stream_text or self.dev.type != "cuda":
            return args.stream_text
        need = args.text_layers * clipkit.layer_bytes(text_layer_shapes(), self.dt) + TEXT_VOCAB * TEXT_HIDDEN * 2
        free, _ = torch.cuda.mem_get_info()
        if need + HEADROOM > free:
            print(f"note: the text stack ({need / 2**30:.1f} GiB) and {HEADROOM / 2**30:.0f} GiB of activations "
                  f"do not fit the {free / 2**30:.1f} GiB free: streaming it layer by layer", flush=True)
            return True
        return False


def denoise(m: Models, text_feats: torch.Tensor, args, gen: torch.Generator):
    """The sampling loop: final (video rows [1, Nv, 96], audio rows [1, 2N, 32]) float32."""
    dev, dt = m.dev, m.dt
    pos, tags, s, n_audio, n_video = dit.layout(args.height, args.width, args.frames, text_feats.shape[1])
    cos, sin = dit.rope_tables(pos, dev, dt)
    tag = torch.tensor(tags, dtype=torch.long, device=dev)
    audio_row = tag == 2
    rows = (torch.arange(0, s, device=dev), torch.arange(s, s + n_audio, device=dev),
            torch.arange(s + n_audio, len(pos), device=dev))
    text = dit.refine_text(text_feats, m.dit)
    video, audio = h3_ladder(VIDEO_SHIFT, args.steps), h3_ladder(AUDIO_SHIFT, args.steps)
    # The AdaLN cache: every visited (timestep, modality) table, once, instead of once per step and block.
    visited = sorted(set(video[1]) | set(audio[1]))
    a = dit.embed_timesteps(torch.tensor(visited, dtype=torch.float32, device=dev), m.dit, dt)
    tables = [dit.modulation(a, b) for b in m.dit["blocks"]]
    patch_dim = dit.IN_CHANNELS * dit.PATCH[0] * dit.PATCH[1] * dit.PATCH[2]
    xv = torch.randn(1, n_video, patch_dim, generator=gen, device=dev)
    xa = torch.randn(1, n_audio, dit.AUDIO_CHANNELS, generator=gen, device=dev)
    for k in range(len(video[1])):
        # Text and video rows take the video time, audio rows the audio time (packing.RowTimesteps).
        tidx = torch.full_like(tag, visited.index(video[1][k])).masked_fill_(audio_row, visited.index(audio[1][k]))
        v, au = dit.forward(m.dit, text, xv, xa, rows, a, tables, tidx, tidx * dit.MODALITIES + tag, cos, sin,
                            m.block_fn)
        xv, xa = ladder_step(video, k, v, xv), ladder_step(audio, k, au, xa)
    return xv, xa


# ---- decode ----------------------------------------------------------------------------------------

def decode(m: Models, xv: torch.Tensor, xa: torch.Tensor, args, sink) -> None:
    """The waveform [2, samples] on the host to sink.audio, then the video clip by clip to sink.write."""
    n = xa.shape[1] // 2
    sink.audio(m.audio(xa.view(2, n, dit.AUDIO_CHANNELS).permute(0, 2, 1).contiguous())[:, 0].cpu())
    c, hn, wn = dit.IN_CHANNELS, args.height // 32, args.width // 32
    t = xv.shape[1] // (hn * wn)
    z = xv.view(t, hn, wn, c, 1, 2, 2).permute(3, 0, 4, 1, 5, 2, 6).reshape(1, c, t, 2 * hn, 2 * wn)
    mean, std = torch.zeros(c, device=m.dev), torch.ones(c, device=m.dev)  # the release's latents_mean/std
    z = z * std.view(1, c, 1, 1, 1) + mean.view(1, c, 1, 1, 1)
    vvae.decode_runs(m.vcfg, m.vae, z, args.frames, m.ropes, lambda start, px: sink.write(clipkit.rgb24(px)))


# ---- the calls -------------------------------------------------------------------------------------

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--frames", type=int, default=124, help="17n+5 frames at 24 fps")
    ap.add_argument("--steps", type=int, default=4, help="DiT forwards (FastH3: 4)")
    ap.add_argument("--text", type=int, default=93, help="prompt tokens")
    ap.add_argument("--layers", type=int, default=50, help="DiT blocks")
    ap.add_argument("--text-layers", type=int, default=TEXT_LAYERS, help="text layers run (H3 reads hidden_states[50])")
    ap.add_argument("--vae-layers", type=int, default=36, help="video VAE decoder layers")
    ap.add_argument("--stream-text", action="store_true",
                    help="draw each text layer when it runs and free it after (automatic when the resident stack "
                         "would not leave room for activations)")
    clipkit.add_common_args(ap)
    args = ap.parse_args()
    if args.smoke:
        args.layers, args.text_layers, args.vae_layers = 2, 2, 2
        args.height, args.width, args.frames, args.iters = 256, 256, 22, 1
    if args.frames % 17 != 5 or args.height % 32 or args.width % 32 or args.steps < 1 or args.text < 1:
        ap.error("frames must be 17n+5, height and width multiples of 32, steps and text >= 1")
    return args


def main():
    args = parse_args()
    dev, dt = setup("bf16", not args.no_tf32, args.seed)
    print(f"h3 clip torch {torch.__version__} on {dev}: {args.width}x{args.height}x{args.frames}, {args.steps} steps, "
          f"{args.text} prompt tokens, DiT {args.layers} layers, text {args.text_layers} layers", flush=True)
    m = Models(args, dt, dev)  # plain tensors and modules: built outside inference mode, used inside
    with torch.inference_mode():
        clipkit.run_clips("fasth3", args, dev, m.weights_s, TEXT_VOCAB, m.text,
                          lambda feats, gen: denoise(m, feats, args, gen),
                          lambda latents, sink: decode(m, *latents, args, sink), FPS, audio_rate=AUDIO_RATE)


if __name__ == "__main__":
    main()
