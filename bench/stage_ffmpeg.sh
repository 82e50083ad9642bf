#!/usr/bin/env bash
# Makes .gpu/ffmpeg.xz, the static ffmpeg that bench/clip_row.sh and bench/kernel_probes.sh (step 5) carry
# to the GPU machine, which has no ffmpeg and no network. It is built here from Debian bookworm's ffmpeg
# 5.1.9 source and Debian's static libx264 (0.164), with only what media.MP4Writer, bench/clipkit.py and
# the media tests ask for: raw RGB and float32 PCM in, the scale/format filters, libx264 and the native AAC
# encoder, the MP4 muxer, and the MP4 demuxer with the H.264 and AAC decoders for the tests that read a
# clip back; and the psnr filter with the null muxer, for bench/x264_tail.py's quality column. About 2 MB xz'd, where a general static build (the npm @ffmpeg-installer 4.1.0 one the rows
# before session 21 used) is 16 MB: with it the bench binary, ffmpeg and a test binary fit one call's
# carry (64 MiB with the tracked tree), so the clip row needs no second call inside the warm window.
# The sources are pinned by SHA-256; the Go writer and the PyTorch chains encode with the same binary.
#
#   bash bench/stage_ffmpeg.sh [OUT]      # OUT: the .xz to write (default .gpu/ffmpeg.xz)
# Needs gcc, make, nasm (apt-get install nasm), curl, and about 1 minute on 2 cores.
set -euo pipefail
out=$(realpath -m "${1:-.gpu/ffmpeg.xz}")
pool=http://deb.debian.org/debian/pool/main
version=5.1.9
src=ffmpeg_$version.orig.tar.xz
src_sha=d9b593bb2ba93d4b50f74177e0cdcd41747e708596367deed0c30348a71dd176
x264=libx264-dev_0.164.3095+gitbaee400-3_amd64.deb
x264_sha=d884b8961502263879ca0fd9e16fbd4527405fcb1a58a9eb1235e81381f6f4f0
command -v nasm >/dev/null || { echo "stage_ffmpeg: nasm not found (apt-get install nasm): ffmpeg's x86 code needs it" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
curl -fsSL -o "$src" "$pool/f/ffmpeg/$src"
curl -fsSL -o x264.deb "$pool/x/x264/$x264"
sha256sum -c <<<"$src_sha  $src
$x264_sha  x264.deb"
dpkg -x x264.deb x264
tar xJf "$src"
# Debian's x264.pc names /usr; this one names the unpacked package.
mkdir pc
lib="$work/x264/usr/lib/x86_64-linux-gnu"
printf 'Name: x264\nDescription: x264\nVersion: 0.164.3095\nLibs: -L%s -lx264\nLibs.private: -lpthread -lm -ldl\nCflags: -I%s\n' \
  "$lib" "$work/x264/usr/include" >pc/x264.pc
cd "ffmpeg-$version"
PKG_CONFIG_PATH="$work/pc" ./configure --pkg-config-flags=--static --extra-ldflags=-static \
  --disable-everything --disable-autodetect --disable-network --disable-doc --disable-debug \
  --disable-ffplay --disable-ffprobe --disable-shared --enable-static --enable-gpl --enable-libx264 \
  --enable-protocol=file,pipe \
  --enable-demuxer=rawvideo,pcm_f32le,mov --enable-decoder=rawvideo,pcm_f32le,h264,aac --enable-parser=h264,aac \
  --enable-encoder=libx264,aac,rawvideo,pcm_f32le,wrapped_avframe --enable-muxer=mp4,mov,rawvideo,pcm_f32le,null \
  --enable-filter=scale,format,aformat,aresample,null,anull,buffer,buffersink,abuffer,abuffersink,trim,atrim,setpts,asetpts,psnr \
  --enable-swscale --enable-swresample >configure.log 2>&1 || { tail -20 configure.log >&2; exit 1; }
make -j"$(nproc)" ffmpeg >make.log 2>&1 || { tail -20 make.log >&2; exit 1; }
ff="$work/ffmpeg-$version/ffmpeg"
encoders=$("$ff" -hide_banner -encoders 2>/dev/null)
for enc in libx264 aac; do
  grep -q " $enc " <<<"$encoders" || { echo "stage_ffmpeg: the build has no $enc encoder" >&2; exit 1; }
done
mkdir -p "$(dirname "$out")"
xz -T0 -9 -c "$ff" >"$out.tmp"
mv "$out.tmp" "$out"
echo "$out: $("$ff" -hide_banner -version | head -1 | cut -d' ' -f1-3), $(du -h "$out" | cut -f1) xz'd"
