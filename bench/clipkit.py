"""What the whole-clip PyTorch baselines (h3_clip_torch.py, wan_clip_torch.py) share: the MP4 writer
with our Go encoder's exact ffmpeg arguments, frame quantization, the random draw of the text stacks,
per-stage timing and the JSON records.

The records carry the keys of `examples/bench -what clip`'s `clip record:` lines (total_s, stages_s,
prompt_cached, peak_gpu_mib, peak_host_gib, cold, ...), so that BENCHMARKS.md can set the two side by
side. Unlike the Go record, the cold call's total leaves out the weights: they are drawn before the
first call and reported apart, as weights_s.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import secrets
import shutil
import subprocess
import tempfile
import time

import torch

from benchutil import timed

# internal/media/writer.go: DefaultPreset, DefaultLookahead, DefaultCRF, DefaultAudioBitrate.
DEFAULT_PRESET = "faster"  # internal/media DefaultPreset: the same encoder work as the Go chain
DEFAULT_LOOKAHEAD = 10  # with the default preset only; a named preset is libx264's unchanged
DEFAULT_CRF = 18
DEFAULT_AUDIO_BITRATE = 192_000


def add_common_args(ap: argparse.ArgumentParser) -> None:
    """The options both clip baselines take."""
    ap.add_argument("--iters", type=int, default=2, help="warm calls after the cold first call")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prompt-cache", action=argparse.BooleanOptionalAction, default=True,
                    help="warm calls reuse the encoded prompt, as the Go bench's -clip-prompt-cache does")
    ap.add_argument("--compile", action="store_true", help="torch.compile the DiT block (the cold call pays the compile)")
    ap.add_argument("--no-tf32", action="store_true", help="exact float32 matmuls and convolutions")
    ap.add_argument("--ffmpeg", default=os.environ.get("FASTVIDEO_FFMPEG") or "ffmpeg",
                    help="ffmpeg executable (default: $FASTVIDEO_FFMPEG, else ffmpeg on PATH); without a usable one "
                         "the mux stage is skipped and the frames go to a host buffer")
    ap.add_argument("--preset", default="", help="libx264 preset (default: the Go writer's, faster with a 10-frame lookahead)")
    ap.add_argument("--crf", type=int, default=DEFAULT_CRF, help="libx264 CRF (the Go writer's default: 18)")
    ap.add_argument("--out", default="", help="folder for the MP4s (default: a temporary folder, removed at the end)")
    ap.add_argument("--smoke", action="store_true", help="2 layers per model and a tiny clip: a quick check that it runs")


# ---- ffmpeg ----------------------------------------------------------------------------------------

def find_ffmpeg(name: str) -> tuple[str | None, str]:
    """(path, "") of a usable ffmpeg (libx264 and aac encoders, as the Go Media.Check asks), or (None, why not)."""
    path = shutil.which(name)
    if path is None:
        return None, f"no ffmpeg at {name!r} (set --ffmpeg or $FASTVIDEO_FFMPEG)"
    try:
        out = subprocess.run([path, "-hide_banner", "-nostdin", "-encoders"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"{path} does not run: {e}"
    missing = [enc for enc in ("libx264", "aac") if f" {enc} " not in out]
    if missing:
        return None, f"{path} lacks the encoders {missing}"
    return path, ""


def _rate(fps: float) -> str:
    """Go's strconv.FormatFloat(fps, 'g', -1, 64): 24 -> "24"."""
    return str(int(fps)) if float(fps).is_integer() else repr(float(fps))


class Mp4Writer:
    """media.MP4Writer (internal/media/writer.go) with the same ffmpeg command line: one pass of rgb24 frames
    piped into libx264 (BT.709 conversion and tags) and, for a clip with audio, AAC from an interleaved f32le
    file given at the start (audio(), before the first frame: fitted to the clip's frames first, as the Go
    writer does); a hidden temporary in the output folder, renamed into place at the end."""

    def __init__(self, ffmpeg: str, path: str, width: int, height: int, fps: float, preset: str, crf: int,
                 frames: int, audio_rate: int = 0, audio_channels: int = 2, audio_bitrate: int = DEFAULT_AUDIO_BITRATE):
        self.ffmpeg, self.path, self.width, self.height, self.fps = ffmpeg, path, width, height, fps
        # "" is the Go writer's default encoding (MP4Options.Preset).
        self.preset, self.lookahead = (preset, 0) if preset else (DEFAULT_PRESET, DEFAULT_LOOKAHEAD)
        self.crf, self.want, self.frames = crf, frames, 0
        self.audio_rate, self.audio_channels, self.audio_bitrate = audio_rate, audio_channels, audio_bitrate
        stem = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + "." + secrets.token_hex(6))
        self.tmp_final = stem + ".part"
        self.temps = [self.tmp_final]
        self.proc = None
        self.stderr = tempfile.TemporaryFile()
        if not audio_rate:
            self._start([])

    def audio(self, wave: torch.Tensor) -> None:
        """Starts the encoder with the audio track, [channels, samples] float32 on the host."""
        n = math.ceil(self.want * self.audio_rate / self.fps - 1e-6)  # media.AudioSamplesFor
        fitted = wave.new_zeros(wave.shape[0], n)
        m = min(n, wave.shape[1])
        fitted[:, :m] = wave[:, :m]
        fd, pcm = tempfile.mkstemp(prefix="." + os.path.basename(self.path) + ".", suffix=".f32le",
                                   dir=os.path.dirname(self.path))
        self.temps.append(pcm)
        with os.fdopen(fd, "wb") as f:
            f.write(fitted.t().contiguous().numpy().tobytes())
        self._start(["-f", "f32le", "-ar", str(self.audio_rate), "-ac", str(self.audio_channels), "-i", "file:" + pcm,
                     "-map", "0:v:0", "-map", "1:a:0"])

    def _start(self, audio_input: list) -> None:
        args = [self.ffmpeg, "-hide_banner", "-nostats", "-loglevel", "level+warning",
                "-f", "rawvideo", "-pix_fmt", "rgb24", "-video_size", f"{self.width}x{self.height}",
                "-framerate", _rate(self.fps), "-i", "pipe:0"]
        args += audio_input or ["-an"]
        args += ["-vf", "scale=out_color_matrix=bt709:out_range=tv:flags=accurate_rnd+full_chroma_int,format=yuv420p",
                 "-c:v", "libx264", "-preset", self.preset, "-crf", str(self.crf),
                 "-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709", "-color_range", "tv"]
        if self.lookahead:
            args += ["-x264-params", f"rc-lookahead={self.lookahead}"]
        if audio_input:
            args += ["-c:a", "aac", "-b:a", str(self.audio_bitrate), "-shortest"]
        args += ["-movflags", "+faststart", "-f", "mp4", "-n", "file:" + self.tmp_final]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stderr=self.stderr)

    def write(self, rgb: torch.Tensor) -> None:
        """rgb: uint8 [n, H, W, 3] frames on the host."""
        if self.proc is None:
            raise RuntimeError("the audio track must reach the writer before the first frame")
        try:
            self.proc.stdin.write(rgb.reshape(-1).numpy())
        except BrokenPipeError:  # ffmpeg stopped reading: its exit status and stderr say why
            self._check(self.proc.wait() or -1, f"encoding video after {self.frames} frames")
        self.frames += rgb.shape[0]

    def close(self) -> None:
        """Finishes the streams (the encoders' flush) and renames the file into place."""
        if self.frames != self.want:
            raise RuntimeError(f"{self.frames} frames written, the clip has {self.want}")
        self.proc.stdin.close()
        self._check(self.proc.wait(), "encoding")
        os.rename(self.tmp_final, self.path)
        self.temps.remove(self.tmp_final)
        self.abort()

    def abort(self) -> None:
        """Stops ffmpeg and removes the temporaries (a no-op for what is already gone)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for t in self.temps:
            if os.path.exists(t):
                os.remove(t)
        self.temps = []

    def _check(self, rc: int, op: str) -> None:
        if rc != 0:
            self.stderr.seek(0)
            tail = self.stderr.read()[-2000:].decode(errors="replace")
            raise RuntimeError(f"ffmpeg failed {op} (exit status {rc}): {tail}")


class HostFrames:
    """The frame sink without ffmpeg: the frames still come to the host, into one buffer."""

    def __init__(self, frames: int, height: int, width: int):
        self.buf = torch.empty(frames, height, width, 3, dtype=torch.uint8)
        self.frames = 0

    def audio(self, wave: torch.Tensor) -> None:
        """The waveform is on the host already; without ffmpeg there is no track to start."""

    def write(self, rgb: torch.Tensor) -> None:
        self.buf[self.frames:self.frames + rgb.shape[0]].copy_(rgb)
        self.frames += rgb.shape[0]


def rgb24(unit: torch.Tensor) -> torch.Tensor:
    """Pixels [1, 3, n, H, W] in [0, 1] on the device -> uint8 [n, H, W, 3] on the host, quantized as
    FastVideo's pipelines and our media.Quantize do: (x*255).clamp(0, 255) truncated."""
    return (unit[0] * 255).clamp_(0, 255).to(torch.uint8).permute(1, 2, 3, 0).contiguous().cpu()


# ---- random weights ----------------------------------------------------------------------------------

def draw(shape, dt: torch.dtype, dev: torch.device, gen: torch.Generator) -> torch.Tensor:
    """The fixture generators' scales (the Go side's randweights.FixtureDraw): matrices randn/sqrt(fan_in),
    vectors 1 + 0.1 randn."""
    t = torch.empty(shape, dtype=dt, device=dev)
    if len(shape) >= 2:
        return t.normal_(0.0, 1.0 / math.sqrt(math.prod(shape[1:])), generator=gen)
    return t.normal_(1.0, 0.1, generator=gen)


def draw_layer(shapes: dict, dt: torch.dtype, dev: torch.device, seed: int) -> dict:
    """One text layer's tensors, the same for a seed whether drawn up front or when the layer runs."""
    g = torch.Generator(device=dev).manual_seed(seed)
    return {name: draw(shape, dt, dev, g) for name, shape in shapes.items()}


def layer_bytes(shapes: dict, dt: torch.dtype) -> int:
    return sum(math.prod(s) for s in shapes.values()) * torch.tensor([], dtype=dt).element_size()


def rms_norm_cast_first(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's Qwen3/T5 RMSNorm (our nn.RMSNormCastFirst): statistics in float32, the normalized value cast
    back to x's dtype, then the gain."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


# ---- timing, the calls and their records --------------------------------------------------------------

def timed_into(times: dict, name: str, dev: torch.device, fn):
    """Runs fn between device syncs, files its seconds under times[name] and returns its result."""
    times[name], out = timed(fn, dev)
    return out


def run_clips(model: str, args, dev: torch.device, weights_s: dict, vocab: int, encode, denoise, decode,
              fps: float, audio_rate: int = 0) -> None:
    """The cold call and args.iters warm ones, each through the stages condition (encode(args.text token
    ids) -> prompt rows, skipped on warm calls with the prompt cache), denoise (denoise(prompt rows,
    generator) -> latents), decode (decode(latents, frame sink): the waveform [channels, samples] on the
    host to sink.audio first, for a model with audio, then the frames to sink.write) and mux. Prints each call's stages and its JSON record."""
    print("weights drawn before the calls (not in their totals): " +
          ", ".join(f"{k} {v:.2f} s" for k, v in weights_s.items()), flush=True)
    ids = torch.randint(vocab, (args.text,), generator=torch.Generator().manual_seed(args.seed)).to(dev)
    ffmpeg, why = find_ffmpeg(args.ffmpeg)
    print(f"ffmpeg: {ffmpeg or 'absent, the mux stage is skipped: ' + why}", flush=True)
    out_dir, remove = out_folder(args.out)
    size = f"{args.width}x{args.height}x{args.frames}"
    cache: dict = {}

    def call(n: int, stages: dict):
        gen = torch.Generator(device=dev).manual_seed(args.seed)
        cached = args.prompt_cache and "prompt" in cache
        prompt = timed_into(stages, "condition", dev, lambda: cache["prompt"] if cached else encode(ids))
        if args.prompt_cache:
            cache["prompt"] = prompt
        latents = timed_into(stages, "denoise", dev, lambda: denoise(prompt, gen))
        if not ffmpeg:
            timed_into(stages, "decode", dev, lambda: decode(latents, HostFrames(args.frames, args.height, args.width)))
            return cached, "", "mux skipped: " + why
        path = os.path.join(out_dir, f"{model}_{n}.mp4")
        writers = []

        def decode_into_ffmpeg():  # the encoder starts in the decode stage, with the audio, as our pipeline's does
            writers.append(Mp4Writer(ffmpeg, path, args.width, args.height, fps, args.preset, args.crf, args.frames,
                                     audio_rate=audio_rate))
            return decode(latents, writers[0])

        try:
            timed_into(stages, "decode", dev, decode_into_ffmpeg)
            timed_into(stages, "mux", dev, lambda: writers[0].close())
        finally:
            for w in writers:
                w.abort()
        return cached, path, ""

    try:
        for n in range(1, args.iters + 2):
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            stages: dict = {}
            t = time.perf_counter()
            cached, output, note = call(n, stages)
            print_record(model, size, n, time.perf_counter() - t, stages, cached, output, note, weights_s, dev)
    finally:
        if remove:
            shutil.rmtree(out_dir, ignore_errors=True)


def print_record(model: str, size: str, n: int, total: float, stages: dict, cached: bool, output: str, note: str,
                 weights_s: dict, dev: torch.device) -> None:
    rec = {"model": "torch:" + model, "call": n, "cold": n == 1, "size": size, "total_s": round(total, 4),
           "stages_s": {k: round(v, 4) for k, v in stages.items()}, "prompt_cached": cached,
           "peak_gpu_mib": -1, "peak_alloc_mib": -1,
           "peak_host_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
           "output": os.path.basename(output)}
    if dev.type == "cuda":
        rec["peak_gpu_mib"] = torch.cuda.max_memory_reserved() // 2**20
        rec["peak_alloc_mib"] = torch.cuda.max_memory_allocated() // 2**20
    if n == 1:
        rec["weights_s"] = {k: round(v, 3) for k, v in weights_s.items()}
    if note:
        rec["note"] = note
    line = ", ".join(f"{k} {v:.3f} s" for k, v in stages.items())
    print(f"call {n} ({'cold' if n == 1 else 'warm'}): {line}; total {total:.3f} s; peak torch memory "
          f"{rec['peak_alloc_mib']} MiB allocated, {rec['peak_gpu_mib']} MiB reserved", flush=True)
    print("torch clip record: " + json.dumps(rec), flush=True)


def out_folder(arg: str) -> tuple[str, bool]:
    """(folder, whether to remove it at the end)."""
    if arg:
        os.makedirs(arg, exist_ok=True)
        return arg, False
    return tempfile.mkdtemp(prefix="torch-clip-"), True
