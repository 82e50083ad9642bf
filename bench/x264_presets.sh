#!/usr/bin/env bash
# How fast the H.264 encoder takes frames on this host, per libx264 preset, with the MP4 writer's own
# arguments (internal/media/writer.go) on the worst case a random-weight run produces: noise frames.
# The pipeline's default preset is the slowest one that keeps pace with the decoders (BENCHMARKS.md).
#   FF=/path/to/ffmpeg OUT=dir bash bench/x264_presets.sh [WxHxFRAMES ...]   (default 832x480x124 832x480x81)
set -u
: "${FF:?set FF to ffmpeg}" "${OUT:?set OUT}"
sizes=${*:-"832x480x124 832x480x81"}
python3 - "$OUT" $sizes <<'PY'
import os, sys
out = sys.argv[1]
for s in sys.argv[2:]:
    w, h, n = map(int, s.split("x"))
    with open(os.path.join(out, f"noise_{s}.rgb"), "wb") as f:
        f.write(os.urandom(w * h * 3 * n))
PY
for s in $sizes; do
  IFS=x read -r w h n <<<"$s"
  for p in medium fast faster veryfast superfast; do
    t0=$(date +%s.%N)
    "$FF" -hide_banner -nostats -loglevel error -f rawvideo -pix_fmt rgb24 -video_size "${w}x${h}" -framerate 24 -i "$OUT/noise_$s.rgb" -an \
      -vf scale=out_color_matrix=bt709:out_range=tv:flags=accurate_rnd+full_chroma_int,format=yuv420p \
      -c:v libx264 -preset "$p" -crf 18 -f mp4 -y "$OUT/x264_$p.mp4" || echo "ffmpeg failed ($p)"
    t1=$(date +%s.%N)
    awk -v s="$s" -v p="$p" -v a="$t0" -v b="$t1" -v n="$n" -v sz="$(stat -c %s "$OUT/x264_$p.mp4")" \
      'BEGIN { printf "x264 %s %-9s %.2f s  %.0f frames/s  %.1f MB\n", s, p, b - a, n / (b - a), sz / 1e6 }'
  done
  rm -f "$OUT/noise_$s.rgb" "$OUT"/x264_*.mp4
done
