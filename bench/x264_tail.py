# The mux stage's tail: how long the H.264 encoder runs after the last frame when frames arrive at the
# decoder's pace, per encoder setting, with the MP4 writer's own arguments (internal/media/writer.go:
# rgb24 on a pipe, BT.709 limited range, libx264 CRF 18, +faststart). A whole clip's "mux" stage is this
# tail: the decoders hand over the last frame, the encoder flushes its lookahead and frame threads, the
# muxer moves the index to the front. Noise frames (what random weights decode to) are the worst case
# for the encoder and for the file size, so also a rewrite's.
#
#   python3 bench/x264_tail.py --ffmpeg FF [--fps 65] [--size 832x480x124] [--rounds 3]
#
# --fps is the pace the frames arrive at (the FastH3 decoder makes about 59-73 frames/s on the H200,
# BENCHMARKS.md); the encoder must keep that pace for the tail to be all that is left. Prints, per
# setting, the time the last frame was written (against the pace's ideal), the tail, the file size and,
# with --content moving, what a shorter tail costs: the file size and the PSNR against the frames (same
# CRF) on frames with structure (drifting gradients and a moving disc over fine grain), where noise
# frames say nothing about compression.
import argparse, os, re, subprocess, time

# The writer's conversion of its rgb24 frames to the encoder's YUV (internal/media/writer.go).
TO_YUV = "scale=out_color_matrix=bt709:out_range=tv:flags=accurate_rnd+full_chroma_int,format=yuv420p"

VARIANTS = {  # name: the x264 and muxer arguments after the writer's "-crf 18" (its default: the third)
    "faster": ["-preset", "faster", "-movflags", "+faststart"],
    "faster, no faststart": ["-preset", "faster"],
    "faster, rc-lookahead 10 (default)": ["-preset", "faster", "-x264-params", "rc-lookahead=10", "-movflags", "+faststart"],
    "faster, sliced threads": ["-preset", "faster", "-x264-params", "sliced-threads=1", "-movflags", "+faststart"],
    "faster, 8 threads": ["-preset", "faster", "-threads", "8", "-movflags", "+faststart"],
    "faster, lookahead 10, 8 thr": ["-preset", "faster", "-threads", "8", "-x264-params", "rc-lookahead=10", "-movflags", "+faststart"],
    "veryfast": ["-preset", "veryfast", "-movflags", "+faststart"],
}


def run(ff, frames, w, h, n, fps, extra, out):
    args = [ff, "-hide_banner", "-nostats", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24",
            "-video_size", f"{w}x{h}", "-framerate", "24", "-i", "pipe:0", "-an",
            "-vf", TO_YUV,
            "-c:v", "libx264", "-crf", "18"] + extra + ["-f", "mp4", "-y", out]
    p = subprocess.Popen(args, stdin=subprocess.PIPE)
    size = w * h * 3
    t0 = time.perf_counter()
    for i in range(n):
        wait = t0 + i / fps - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        p.stdin.write(frames[i * size:(i + 1) * size])
    p.stdin.flush()
    last = time.perf_counter()
    p.stdin.close()
    if p.wait() != 0:
        raise RuntimeError(f"ffmpeg failed: {' '.join(extra)}")
    return last - t0, time.perf_counter() - last, os.path.getsize(out)


def moving_frames(w, h, n):
    # Frames an encoder can predict: smooth drifting colour fields, a disc moving across, a little grain.
    import numpy as np
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    rng = np.random.default_rng(0)
    out = np.empty((n, h, w, 3), np.uint8)
    for i in range(n):
        r = 127 + 100 * np.sin((x + 3 * i) / 97.0)
        g = 127 + 100 * np.sin((y - 2 * i) / 61.0 + x / 300.0)
        b = 127 + 80 * np.cos((x + y + 5 * i) / 130.0)
        disc = ((x - (100 + 5 * i) % w) ** 2 + (y - h / 2) ** 2) < 60 ** 2
        frame = np.stack([r, g, b], -1)
        frame[disc] = (240, 60, 40)
        frame += rng.normal(0, 4, frame.shape)
        out[i] = np.clip(frame, 0, 255).astype(np.uint8)
    return out.tobytes()


def psnr(ff, mp4, raw, w, h):
    # The encoded file's PSNR against the frames it was given, both in the writer's own YUV (the frames
    # converted as it converts them), so that only the encoder's loss counts (ffmpeg's psnr filter,
    # the average over frames and planes).
    r = subprocess.run([ff, "-hide_banner", "-nostats", "-i", mp4, "-f", "rawvideo", "-pix_fmt", "rgb24", "-video_size", f"{w}x{h}",
                        "-framerate", "24", "-i", raw, "-lavfi", "[1:v]" + TO_YUV + "[ref];[0:v][ref]psnr", "-f", "null", "-"],
                       capture_output=True, text=True)
    m = re.search(r"average:([0-9.inf]+)", r.stderr)
    return m.group(1) if m else "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ffmpeg", required=True)
    ap.add_argument("--fps", type=float, default=65)
    ap.add_argument("--size", default="832x480x124")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--content", choices=["noise", "moving"], default="noise",
                    help="noise (random weights' worst case) or moving (frames with structure; needs numpy; adds the PSNR)")
    ap.add_argument("--out", default="/tmp/x264_tail.mp4")
    args = ap.parse_args()
    w, h, n = map(int, args.size.split("x"))
    frames = os.urandom(w * h * 3 * n) if args.content == "noise" else moving_frames(w, h, n)
    raw = args.out + ".rgb"
    if args.content == "moving":
        with open(raw, "wb") as fh:
            fh.write(frames)
    print(f"{args.size} {args.content} at {args.fps:g} frames/s (ideal last frame at {(n - 1) / args.fps:.2f} s), {os.cpu_count()} cores")
    for name, extra in VARIANTS.items():
        rows = [run(args.ffmpeg, frames, w, h, n, args.fps, extra, args.out) for _ in range(args.rounds)]
        tails = sorted(r[1] for r in rows)
        quality = f"  PSNR {psnr(args.ffmpeg, args.out, raw, w, h)} dB" if args.content == "moving" else ""
        print(f"{name:33s} last frame {max(r[0] for r in rows):.2f} s  tail " + " / ".join(f"{r[1]:.2f}" for r in rows) +
              f" s (median {tails[len(tails) // 2]:.2f})  {rows[-1][2] / 1e6:.2f} MB{quality}", flush=True)
    os.remove(args.out)
    if args.content == "moving":
        os.remove(raw)


if __name__ == "__main__":
    main()
