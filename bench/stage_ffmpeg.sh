#!/usr/bin/env bash
# Makes .gpu/ffmpeg.xz, the static ffmpeg that bench/clip_row.sh and bench/kernel_probes.sh (step 5) carry
# to the GPU machine, which has no ffmpeg and no network. The binary is the x86-64 static build that the
# npm package @ffmpeg-installer/linux-x64 ships inside its tarball (libx264 and the native AAC encoder,
# what media.MP4Writer and bench/clipkit.py ask for); npm pack fetches the tarball without running any of
# its install scripts. The Go writer and the PyTorch chains then encode with the same ffmpeg.
#
#   bash bench/stage_ffmpeg.sh [OUT]      # OUT: the .xz to write (default .gpu/ffmpeg.xz)
set -euo pipefail
out=${1:-.gpu/ffmpeg.xz}
pkg=@ffmpeg-installer/linux-x64@4.1.0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$pkg" >/dev/null && tar xzf ./*.tgz)
ff="$work/package/ffmpeg"
[ -f "$ff" ] && [ ! -L "$ff" ] || { echo "stage_ffmpeg: $pkg holds no ffmpeg binary at package/ffmpeg" >&2; exit 1; }
chmod +x "$ff"
encoders=$("$ff" -hide_banner -encoders 2>/dev/null)
for enc in libx264 aac; do
  grep -q " $enc " <<<"$encoders" || { echo "stage_ffmpeg: $pkg's ffmpeg has no $enc encoder" >&2; exit 1; }
done
mkdir -p "$(dirname "$out")"
xz -T0 -9 -c "$ff" >"$out.tmp"
mv "$out.tmp" "$out"
echo "$out: $("$ff" -hide_banner -version | head -1 | cut -d' ' -f1-3), $(du -h "$out" | cut -f1) xz'd"
