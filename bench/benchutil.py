"""Helpers shared by the PyTorch baselines in bench/: device setup, timing and memory reports.

Each baseline imports this module from its own folder (python bench/<script>.py puts bench/ on
sys.path), so every script keeps its own arguments and output.
"""

from __future__ import annotations

import csv
import math
import os
import statistics
import subprocess
import time

import torch


def setup(dtype: str, tf32: bool, seed: int) -> tuple[torch.device, torch.dtype]:
    """CUDA when present, else CPU; "bf16" or "f32"; TF32 matmuls and convolutions on or off."""
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dt = torch.bfloat16 if dtype == "bf16" else torch.float32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.manual_seed(seed)
    return dev, dt


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, dev: torch.device):
    """Runs fn once between device syncs: (seconds, its result)."""
    sync(dev)
    t = time.perf_counter()
    out = fn()
    sync(dev)
    return time.perf_counter() - t, out


def time_runs(fn, warmup: int, iters: int, dev: torch.device):
    """Resets the peak-memory counter, then runs fn once (compile, autotune), warmup more times
    untimed and iters timed times: (first seconds, the iters timings, the last result)."""
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    first, out = timed(fn, dev)
    for _ in range(warmup):
        timed(fn, dev)
    times = []
    for _ in range(iters):
        s, out = timed(fn, dev)
        times.append(s)
    return first, times, out


def print_forward_rate(first: float, times: list[float], tflop: float) -> None:
    """The DiT baselines' timing lines: the first forward, min and median, and TFLOP/s against the
    H200's 790 dense BF16 TFLOP/s."""
    med = statistics.median(times)
    print(f"first forward {first:.2f} s (includes compile/autotune with --compile)")
    print(f"forward min {min(times):.3f} s, median {med:.3f} s over {len(times)} runs; {tflop:.1f} TFLOP -> "
          f"{tflop / med:.0f} TFLOP/s ({100 * tflop / med / 790:.0f}% of 790)")


def timestep_proj(t: torch.Tensor, freq_dim: int) -> torch.Tensor:
    """Sinusoidal timestep embedding [cos | sin] (diffusers Timesteps, flip_sin_to_cos=True)."""
    half = freq_dim // 2
    exponent = -math.log(10000) * torch.arange(half, dtype=torch.float32, device=t.device) / half
    emb = t[:, None].float() * torch.exp(exponent)[None, :]
    return torch.cat([torch.cos(emb), torch.sin(emb)], dim=-1)


def gpu_mem_mib() -> int:
    """This process's GPU memory as nvidia-smi reports it, in MiB (-1 when unknown)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return -1
    for line in out.splitlines():
        f = [s.strip() for s in line.split(",")]
        if len(f) == 2 and f[0] == str(os.getpid()):
            return int(f[1])
    return -1


def peak_memory() -> str:
    """The VAE baselines' memory report: torch's peaks and nvidia-smi's current figure."""
    return (f"peak allocated {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB, "
            f"peak reserved {torch.cuda.max_memory_reserved() / 2**20:.0f} MiB, nvidia-smi now {gpu_mem_mib()} MiB")


def profile_kernels(fn, dev: torch.device, out_csv: str, median_s: float) -> None:
    """Runs fn once more under torch.profiler and writes the device kernels, memcpys and memsets it
    launched, grouped by name (name, calls, total_us), to out_csv: the input of
    bench/kernel_breakdown.py --torch. CPU and CUDA activities are both recorded so that kernels stay
    linked to their ops in every torch version; only device-side events are written."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    want = DeviceType.CUDA if dev.type == "cuda" else DeviceType.CPU
    sync(dev)
    with profile(activities=acts) as prof:
        fn()
        sync(dev)
    table: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == want:
            row = table.setdefault(e.name, [0, 0.0])
            row[0] += 1
            row[1] += e.time_range.elapsed_us()
    rows = sorted(table.items(), key=lambda kv: -kv[1][1])
    with open(out_csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "calls", "total_us"])
        for name, (calls, us) in rows:
            w.writerow([name, calls, f"{us:.3f}"])
    total = sum(us for _, (_, us) in rows)
    print(f"profile: {sum(c for _, (c, _) in rows)} device events, {len(rows)} names, {total / 1000:.2f} ms summed "
          f"-> {out_csv}; forward median {1000 * median_s:.1f} ms "
          f"(bench/kernel_breakdown.py --torch {out_csv} --wall-ms {1000 * median_s:.1f})")
