#!/usr/bin/env python3
"""Same-math PyTorch benchmark of the MiniMax H3 audio VAE decoder at release size.

The modules below restate FastVideo's `fastvideo/models/vaes/minimax_h3_audio.py`
decoder path (dec_in_proj -> BigVGAN with weight-normed convs, alias-free
SnakeBeta activations, clamp) so that the script runs with torch alone. It is
the counterpart of `go run ./examples/bench -what h3audio`:

  * without --load: random weights (same scales as the Go bench), timing only;
  * with --load DIR: the weights, latents and Go waveform that the Go bench wrote
    with -audio-dump DIR; the script decodes the same latents and prints the
    max abs difference to Go's output (use --no-tf32 and the Go backend
    "xla:cuda,tf32=false" for an f32-exact comparison).

Timings are end to end like Go's Decode (host latents -> host PCM), plus the
device-only time from CUDA events, and the peak memory PyTorch allocated.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import weight_norm

# Release architecture (MiniMaxH3AudioVAEArchConfig defaults; fastvideo/models/vaes/minimax_h3_audio.py).
LATENT_CHANNELS = 32
LATENT_DIM = 2048
DECODER_DIM = 1024
DECODER_RATES = (5, 5, 2, 2, 2, 2, 2)
DECODER_KERNELS = (9, 9, 4, 4, 4, 4, 4)
RESBLOCK_KERNELS = (3, 7, 11)
RESBLOCK_DILATIONS = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
SAMPLING_RATE = 32000


def kaiser_sinc_filter1d(cutoff: float, half_width: float, kernel_size: int) -> torch.Tensor:
    half_size = kernel_size // 2
    attenuation = 2.285 * (half_size - 1) * math.pi * (4 * half_width) + 7.95
    if attenuation > 50.0:
        beta = 0.1102 * (attenuation - 8.7)
    elif attenuation >= 21.0:
        beta = 0.5842 * (attenuation - 21)**0.4 + 0.07886 * (attenuation - 21.0)
    else:
        beta = 0.0
    window = torch.kaiser_window(kernel_size, beta=beta, periodic=False, dtype=torch.float32)
    if kernel_size % 2 == 0:
        time_ = torch.arange(-half_size, half_size, dtype=torch.float32) + 0.5
    else:
        time_ = torch.arange(kernel_size, dtype=torch.float32) - half_size
    filter_ = 2 * cutoff * window * torch.sinc(2 * cutoff * time_)
    filter_ /= filter_.sum()
    return filter_.view(1, 1, kernel_size)


class SnakeBeta(nn.Module):

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x):
        alpha = torch.exp(self.alpha.unsqueeze(0).unsqueeze(-1))
        beta = torch.exp(self.beta.unsqueeze(0).unsqueeze(-1))
        return x + (beta + 1e-9).reciprocal() * torch.sin(alpha * x).pow(2)


class LowPassFilter1d(nn.Module):

    def __init__(self, cutoff, half_width, stride, kernel_size):
        super().__init__()
        even = kernel_size % 2 == 0
        self.pad_left = kernel_size // 2 - int(even)
        self.pad_right = kernel_size // 2
        self.stride = stride
        self.register_buffer("filter", kaiser_sinc_filter1d(cutoff, half_width, kernel_size))

    def forward(self, x):
        c = x.shape[1]
        x = F.pad(x, (self.pad_left, self.pad_right), mode="replicate")
        return F.conv1d(x, self.filter.expand(c, -1, -1), stride=self.stride, groups=c)


class UpSample1d(nn.Module):

    def __init__(self, ratio, kernel_size):
        super().__init__()
        self.ratio = ratio
        self.stride = ratio
        self.pad = kernel_size // ratio - 1
        self.pad_left = self.pad * self.stride + (kernel_size - self.stride) // 2
        self.pad_right = self.pad * self.stride + (kernel_size - self.stride + 1) // 2
        self.register_buffer("filter", kaiser_sinc_filter1d(0.5 / ratio, 0.6 / ratio, kernel_size))

    def forward(self, x):
        c = x.shape[1]
        x = F.pad(x, (self.pad, self.pad), mode="replicate")
        x = self.ratio * F.conv_transpose1d(x, self.filter.expand(c, -1, -1), stride=self.stride, groups=c)
        return x[..., self.pad_left:-self.pad_right]


class DownSample1d(nn.Module):

    def __init__(self, ratio, kernel_size):
        super().__init__()
        self.lowpass = LowPassFilter1d(0.5 / ratio, 0.6 / ratio, ratio, kernel_size)

    def forward(self, x):
        return self.lowpass(x)


class Activation1d(nn.Module):

    def __init__(self, activation, ratio=2, kernel_size=12):
        super().__init__()
        self.act = activation
        self.upsample = UpSample1d(ratio, kernel_size)
        self.downsample = DownSample1d(ratio, kernel_size)

    def forward(self, x):
        return self.downsample(self.act(self.upsample(x)))


def wn_conv1d(*args, **kwargs):
    return weight_norm(nn.Conv1d(*args, **kwargs))


class AMPBlock(nn.Module):

    def __init__(self, channels, kernel_size, dilation):
        super().__init__()
        self.convs1 = nn.ModuleList([
            wn_conv1d(channels, channels, kernel_size, dilation=d, padding=(kernel_size * d - d) // 2)
            for d in dilation
        ])
        self.convs2 = nn.ModuleList(
            [wn_conv1d(channels, channels, kernel_size, dilation=1, padding=(kernel_size - 1) // 2) for _ in dilation])
        self.activations = nn.ModuleList([Activation1d(SnakeBeta(channels)) for _ in range(2 * len(dilation))])

    def forward(self, x):
        acts1, acts2 = self.activations[::2], self.activations[1::2]
        for c1, c2, a1, a2 in zip(self.convs1, self.convs2, acts1, acts2):
            x = c2(a2(c1(a1(x)))) + x
        return x


class BigVGANDecoder(nn.Module):

    def __init__(self):
        super().__init__()
        self.num_kernels = len(RESBLOCK_KERNELS)
        self.num_upsamples = len(DECODER_RATES)
        self.conv_pre = wn_conv1d(LATENT_DIM, DECODER_DIM, 7, 1, padding=3)
        self.ups = nn.ModuleList()
        for i, (rate, kernel) in enumerate(zip(DECODER_RATES, DECODER_KERNELS)):
            self.ups.append(
                nn.ModuleList([
                    weight_norm(
                        nn.ConvTranspose1d(DECODER_DIM // (2**i), DECODER_DIM // (2**(i + 1)), kernel, rate,
                                           padding=(kernel - rate) // 2))
                ]))
        self.resblocks = nn.ModuleList()
        for i in range(self.num_upsamples):
            ch = DECODER_DIM // (2**(i + 1))
            for k, d in zip(RESBLOCK_KERNELS, RESBLOCK_DILATIONS):
                self.resblocks.append(AMPBlock(ch, k, d))
        self.activation_post = Activation1d(SnakeBeta(ch))
        self.conv_post = wn_conv1d(ch, 1, 7, 1, padding=3, bias=False)

    def forward(self, x):
        x = self.conv_pre(x)
        for i in range(self.num_upsamples):
            x = self.ups[i][0](x)
            res = None
            for j in range(self.num_kernels):
                b = self.resblocks[i * self.num_kernels + j](x)
                res = b if res is None else res + b
            x = res / self.num_kernels
        x = self.conv_post(self.activation_post(x))
        return torch.clamp(x, min=-1.0, max=1.0)


class AudioDecoder(nn.Module):
    """dec_in_proj + decoder under the released tensor names (latent stats: mean 0, std 1)."""

    def __init__(self):
        super().__init__()
        self.dec_in_proj = nn.Conv1d(LATENT_CHANNELS, LATENT_DIM, 1)
        self.decoder = BigVGANDecoder()

    def forward(self, z):
        return self.decoder(self.dec_in_proj(z))


@torch.no_grad()
def random_init(model: nn.Module, seed: int, post_gain: float) -> None:
    g = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        if name == "decoder.conv_post.weight_g":
            p.fill_(post_gain)
        elif name.endswith(".weight_g"):
            p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
        elif name.endswith(".bias"):
            p.copy_(0.05 * torch.randn(p.shape, generator=g))
        elif name.endswith(".act.alpha") or name.endswith(".act.beta"):
            p.copy_(0.1 * torch.randn(p.shape, generator=g))
        else:
            fan_in = p[0].numel()
            p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))


def gflop(b: int, n: int) -> float:
    f = 2.0 * b * n * (LATENT_CHANNELS * LATENT_DIM + LATENT_DIM * DECODER_DIM * 7)
    c, length = DECODER_DIM, n
    for rate, k in zip(DECODER_RATES, DECODER_KERNELS):
        f += 2 * b * length * c * (c // 2) * k
        c //= 2
        length *= rate
        for kk, dil in zip(RESBLOCK_KERNELS, RESBLOCK_DILATIONS):
            f += 2 * len(dil) * 2 * b * length * c * c * kk
    f += 2 * b * length * c * 7
    return f / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=207, help="latent frames per channel (207 = 5.175 s)")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--post-gain", type=float, default=0.05, help="conv_post weight-norm gain (as the Go bench)")
    ap.add_argument("--no-tf32", action="store_true", help="exact f32 convolutions (cuDNN allows TF32 by default)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the decoder, as FastVideo can")
    ap.add_argument("--load", default="", help="folder the Go bench wrote with -audio-dump")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    torch.backends.cudnn.allow_tf32 = not args.no_tf32
    torch.backends.cuda.matmul.allow_tf32 = not args.no_tf32
    dev = torch.device(args.device)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(dev) if dev.type == 'cuda' else dev}, "
          f"tf32={'off' if args.no_tf32 else 'on'}, compile={args.compile}")

    model = AudioDecoder()
    go_wave = None
    if args.load:
        from safetensors.torch import load_file
        state = load_file(os.path.join(args.load, "h3audio_weights.safetensors"))
        missing, unexpected = model.load_state_dict(state, strict=True)
        io = load_file(os.path.join(args.load, "h3audio_io.safetensors"))
        z_host = io["latents"].contiguous()
        go_wave = io["wave"]
    else:
        random_init(model, args.seed, args.post_gain)
        g = torch.Generator().manual_seed(args.seed + 1)
        z_host = torch.randn(2, LATENT_CHANNELS, args.frames, generator=g)
    frames = z_host.shape[-1]
    n_params = sum(p.numel() for p in model.parameters())
    print(f"h3audio: decoder {n_params / 1e6:.1f} M params ({n_params * 4 / 1e6:.1f} MB f32)")
    model = model.to(dev).eval()
    fwd = torch.compile(model) if args.compile else model
    z_host = z_host.pin_memory() if dev.type == "cuda" else z_host

    def decode():
        with torch.inference_mode():
            return fwd(z_host.to(dev, non_blocking=True)).cpu()

    torch.cuda.reset_peak_memory_stats(dev)
    t0 = time.perf_counter()
    out = decode()
    print(f"h3audio: first decode {time.perf_counter() - t0:.3f} s")
    for _ in range(args.warmup):
        decode()
    e2e, dev_ms = [], []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        out = decode()
        e2e.append(time.perf_counter() - t0)
    z_dev = z_host.to(dev)
    for _ in range(args.iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.inference_mode():
            start.record()
            fwd(z_dev)
            end.record()
        torch.cuda.synchronize(dev)
        dev_ms.append(start.elapsed_time(end))
    peak = torch.cuda.max_memory_allocated(dev)

    samples = out.shape[-1]
    seconds = samples / SAMPLING_RATE
    med = statistics.median(e2e)
    gf = gflop(2, frames)
    print(f"h3audio: {frames} latents -> 2 x {samples} samples ({seconds:.3f} s of audio at {SAMPLING_RATE} Hz)")
    print(f"h3audio: decode min {min(e2e) * 1e3:.2f} ms, median {med * 1e3:.2f} ms, mean {statistics.mean(e2e) * 1e3:.2f} ms "
          f"over {args.iters} runs (end to end: host latents -> host PCM)")
    print(f"h3audio: device-only (CUDA events) median {statistics.median(dev_ms):.2f} ms, min {min(dev_ms):.2f} ms")
    print(f"h3audio: {gf:.0f} GFLOP per decode -> {gf / med / 1e3:.1f} TFLOP/s at the median; {seconds / med:.0f}x real time")
    print(f"h3audio: peak memory allocated by torch {peak / 2**20:.0f} MiB (weights {n_params * 4 / 2**20:.0f} MiB)")
    finite = torch.isfinite(out)
    print(f"h3audio: output rms {out[finite].pow(2).mean().sqrt().item():.4f}, peak {out[finite].abs().max().item():.4f}, "
          f"clipped {(out.abs() == 1).sum().item()}, non-finite {(~finite).sum().item()}")
    if go_wave is not None:
        diff = (out - go_wave).abs()
        ref = max(1.0, go_wave.abs().max().item())
        print(f"h3audio: vs Go waveform: max abs diff {diff.max().item():.3e} (at {tuple(int(i) for i in torch.nonzero(diff == diff.max())[0])}), "
              f"mean {diff.mean().item():.3e}, tol 1e-4*max(1,max|ref|) = {1e-4 * ref:.1e} -> "
              f"{'PASS' if diff.max().item() <= 1e-4 * ref else 'over tol (expected with TF32 on either side)'}")


if __name__ == "__main__":
    main()
