#!/usr/bin/env bash
# The whole-clip row (BENCHMARKS.md, "Whole clip with default flags") in one device command, under 10
# minutes on one H200: what a user waits for, prompt to MP4, bf16 random weights at release size.
#   1. FastH3 832x480x124 through the public API in one process (`bench -what clip`, memory policy
#      auto, prompt cache on): the default flags, dense forced, VSA forced, `-fast -fast-spatial`; a
#      cold (first) and a warm call of each, with stage times, loads, programs compiled and peak memory.
#   2. FastWan2.1 1.3B 480x832x81 the same way: the default flags, dense forced and the two-stage
#      refine (`-refine`: 3 DMD steps at 240x416, upsample + re-noise, 757/522 at 480x832).
#   3. The decoders alone (bench -what h3vae, wanvae) at the same sizes: the decode stage's overhead.
#   4. The same-math PyTorch chains (bench/h3_clip_torch.py, bench/wan_clip_torch.py), same ffmpeg.
#   5. A fresh `t2va -model fasth3 -random-weights` process, timed whole (wall seconds), twice over a compile
#      cache of its own: a user's very first run, then one with that cache warm.
#   6. PARTS=fp8 (not in the default list): FastH3 with -clip-dtype fp8 (GPU build), default and dense.
#   7. PARTS=tiny (not in the default list): the TAEHV tiny decoder. FastH3 whole clip with the tiny
#      decoder (`-clip-variants tiny,fast+spatial+tiny,tiny+preview`), then `bench -what taehv` at
#      480x832 (taew2_1 21 latents, taeh3 37) beside the full decoders, and with TAEHV_UPSTREAM=<a
#      madebyollin/taehv checkout> upstream's module on the same sizes (bench/taehv_torch.py, fp16 and bf16).
# The logs come back packed in $OUT/logs.tgz (bench/pack_out.sh: the device returns 8 files a call).
# Every change to the pipeline, the memory policy, attention, a DiT or a VAE reruns it before it is
# called done.
#
# On the dev machine (repo root), the GPU build (a plain build lacks the VSA kernel, queued execution and
# the compile cache, so its row is not the default path a user of the GPU build gets):
#   bash bench/build_gpu.sh .gpu/bench ./examples/bench && bash bench/build_gpu.sh .gpu/t2va ./examples/t2va
#   xz -T0 .gpu/bench .gpu/t2va
#   bash bench/stage_ffmpeg.sh      # .gpu/ffmpeg.xz: a static ffmpeg with libx264 (ffprobe is not needed)
# On the GPU machine (carry .gpu):
#   OUT=$OUT bash bench/clip_row.sh
# Optional: PARTS="h3 fp8 wan vae torch t2va tiny" (the default: all but fp8 and tiny), BENCH/T2VA for other binaries.
set -u
: "${OUT:?set OUT to the output folder}"
PARTS=${PARTS:-"h3 wan vae torch t2va"}
mkdir -p "$OUT" /tmp/cliprow
end=$((SECONDS + 585))
left() { local l=$((end - SECONDS)); [ "$l" -gt "$1" ] && echo "$1" || echo $((l > 5 ? l : 5)); }
unpack() { # .gpu/NAME(.xz) -> /tmp/cliprow/NAME
  if [ -f ".gpu/$1.xz" ]; then xz -dc ".gpu/$1.xz" >"/tmp/cliprow/$1"; else cp ".gpu/$1" "/tmp/cliprow/$1"; fi
  chmod +x "/tmp/cliprow/$1"
}
for b in bench t2va ffmpeg; do unpack $b; done
BENCH=${BENCH:-/tmp/cliprow/bench}
T2VA=${T2VA:-/tmp/cliprow/t2va}
export FASTVIDEO_FFMPEG=/tmp/cliprow/ffmpeg
# The compile cache (on by default in the GPU build, under the user cache folder) starts empty, so that
# a cold call compiles as a user's first run does; t2va's second run in a warm cache is BENCHMARKS'
# compile-cache table.
export XDG_CACHE_HOME=${CLIPROW_CACHE_HOME:-$(mktemp -d /tmp/cliprow-cache.XXXXXX)}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
records() { grep -E "clip record|opened in|summary|panic|rror" "$1" | cut -c1-400; }

if has h3; then
  timeout "$(left 240)" "$BENCH" -what clip -backend xla:cuda -warmup 0 -iters 1 \
    -clip-variants default,dense,vsa,fast+spatial >"$OUT/h3_clip.log" 2>&1
  echo "h3 clip rc $? at $SECONDS s"; records "$OUT/h3_clip.log"
fi
if has fp8; then
  # FastH3 with the DiT's core linears in FP8 (the GPU build's native float8 GEMMs; Open turns XLA's
  # Triton GEMMs off for such a run), the default attention and dense.
  timeout "$(left 200)" "$BENCH" -what clip -backend xla:cuda -warmup 0 -iters 1 -clip-dtype fp8 \
    -clip-variants default,dense >"$OUT/h3_fp8_clip.log" 2>&1
  echo "h3 fp8 clip rc $? at $SECONDS s"; records "$OUT/h3_fp8_clip.log"
fi
if has wan; then
  timeout "$(left 160)" "$BENCH" -what clip -backend xla:cuda -warmup 0 -iters 1 -clip-model fastwan2.1-t2v-1.3b \
    -clip-height 480 -clip-width 832 -clip-frames 81 -clip-variants default,dense,refine >"$OUT/wan_clip.log" 2>&1
  echo "wan clip rc $? at $SECONDS s"; records "$OUT/wan_clip.log"
fi
if has vae; then
  timeout "$(left 60)" "$BENCH" -what h3vae -backend xla:cuda -warmup 1 -iters 2 -h3vae-frames 124 >"$OUT/h3vae.log" 2>&1
  echo "h3vae rc $? at $SECONDS s"; grep -E "summary|median|rror" "$OUT/h3vae.log" | cut -c1-300 | head -5
  timeout "$(left 60)" "$BENCH" -what wanvae -backend xla:cuda -warmup 1 -iters 2 >"$OUT/wanvae.log" 2>&1
  echo "wanvae rc $? at $SECONDS s"; grep -E "summary|median|rror" "$OUT/wanvae.log" | cut -c1-300 | head -5
fi
if has torch; then
  PYTHONUNBUFFERED=1 timeout "$(left 120)" python3 bench/h3_clip_torch.py --text 22 --iters 1 --ffmpeg "$FASTVIDEO_FFMPEG" >"$OUT/h3_torch.log" 2>&1
  echo "h3 torch rc $? at $SECONDS s"; grep -E "clip record|rror" "$OUT/h3_torch.log" | cut -c1-400
  PYTHONUNBUFFERED=1 timeout "$(left 90)" python3 bench/wan_clip_torch.py --iters 1 --ffmpeg "$FASTVIDEO_FFMPEG" >"$OUT/wan_torch.log" 2>&1
  echo "wan torch rc $? at $SECONDS s"; grep -E "clip record|rror" "$OUT/wan_torch.log" | cut -c1-400
fi
if has t2va; then
  # Issue 30's two lines: a user's very first run (a compile cache of its own, empty), then the same
  # command again in that now warm cache. Wall seconds of the whole process.
  t2va_cache=$(mktemp -d /tmp/cliprow-t2va.XXXXXX)
  for run in first warm; do
    t0=$(date +%s.%N)
    XDG_CACHE_HOME=$t2va_cache timeout "$(left 150)" "$T2VA" -model fasth3 -random-weights -backend xla:cuda \
      -prompt "A red fox trots through fresh snow at dawn." -out /tmp/cliprow/t2va.mp4 -json >"$OUT/t2va_$run.log" 2>&1
    rc=$?
    echo "t2va $run run (fresh process, $run compile cache) rc $rc wall $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s"
    grep -E "timings|loads|compiled|memory|done in|rror" "$OUT/t2va_$run.log" | cut -c1-300
  done
fi
if has tiny; then
  timeout "$(left 200)" "$BENCH" -what clip -backend xla:cuda -warmup 0 -iters 1 \
    -clip-variants tiny,fast+spatial+tiny,tiny+preview >"$OUT/h3_clip_tiny.log" 2>&1
  echo "h3 clip tiny rc $? at $SECONDS s"; records "$OUT/h3_clip_tiny.log"
  for v in "taew2_1 21" "taeh3 37"; do
    set -- $v
    timeout "$(left 120)" "$BENCH" -what taehv -backend xla:cuda -warmup 1 -iters 5 -taehv-variant "$1" -taehv-latents "$2" \
      -taehv-dtypes bf16 >"$OUT/taehv_$1.log" 2>&1
    echo "taehv $1 rc $? at $SECONDS s"; grep -E "decoder record|frames;|rror" "$OUT/taehv_$1.log" | cut -c1-300
    if [ -n "${TAEHV_UPSTREAM:-}" ]; then
      for dt in fp16 bf16; do
        PYTHONUNBUFFERED=1 timeout "$(left 60)" python3 bench/taehv_torch.py --upstream "$TAEHV_UPSTREAM" --variant "$1" \
          --latents "$2" --dtype "$dt" >"$OUT/taehv_torch_$1_$dt.log" 2>&1
        echo "taehv torch $1 $dt rc $? at $SECONDS s"; grep -E "decoder record|median|rror" "$OUT/taehv_torch_$1_$dt.log" | cut -c1-300
      done
    fi
  done
fi
bash bench/pack_out.sh "$OUT"
echo "clip_row done at $SECONDS s"
