#!/usr/bin/env bash
# Issue 32's kernel probes in one device command (each step on its own, with its own time limit, so one
# that fails leaves the others' results), logs under $OUT (at the end packed into $OUT/logs.tgz by
# bench/pack_out.sh, the fixture beside it: the device returns 8 files a call):
#   1. parity.log   the committed kernels on the GPU: attention.test -test.run OnGPU, and fusedops.test (the
#                   q/k kernel against its graph form) when .gpu/fusedops.test.xz is carried
#   2. fine.log     candidate inner loops of the Triton fine kernel against the committed one and upstream's
#                   (bench/vsa_fine_variants.py)
#   3. mosaic.log   Mosaic GPU: JAX makes the fixture (an add, its FlashAttention-3 forward for Hopper) and
#                   times that kernel against cuDNN (internal/xlaext/testdata/gen_mosaic_gpu.py --bench);
#                   then the Go binary runs both kernels through xlaext.MosaicGPUCall (TestMosaicGPUCallOnGPU)
#                   and the draft fine stage's template at a geometry it was not made from (TestMosaicTemplateOnGPU)
#   4. draft_gmem.log, draft_smem.log   VSA's fine stage as a Mosaic GPU kernel (bench/vsa_mosaic_draft.py;
#                   first run in session 31), once a way its loops get the key lists (--index-from gmem, smem), each
#                   on its own so that one that fails leaves the other's result; draft_lane.log when both
#                   failed without hanging (a lowering error, not a deadlock): the GMEM one under Lane semantics;
#                   draft_pingpong.log when the GMEM one ran: its compute warpgroups taking turns (--pingpong)
#   5. x264.log     the encoder's tail at the decoder's pace on this host, on noise and on frames with structure
#                   (bench/x264_tail.py; the latter with the PSNR each setting keeps), when FF is set
#   6. pairq.log    the fine kernel with query tiles 2p and 2p+1 listing the same key tiles: the committed walk
#                   against one program a pair that reads each K/V tile once for both (bench/vsa_fine_variants.py
#                   --paired-lists): whether reading K/V or computing bounds the fine stage
#   7. qrows.log    the fine kernel reading its query tile in place (qrows) against the committed one, and the
#                   pack kernel against its means alone (pool), at the issue's H3, FastH3's tiling and Wan 0.8:
#                   what the q copy a block's pack makes costs (bench/vsa_fine_variants.py)
#   8. vsa_mosaic.log   the Mosaic fine stage for the graph as a template (attention/testdata/gen_vsa_mosaic.py
#                   --bench, first run in session 32): fitted on six lowerings, checked at FastH3's tiling, run
#                   at another geometry against float32 and upstream, timed at the geometries; its
#                   template and fixture come back in $OUT (vsa_mosaic.json.gz, vsa_mosaic.{safetensors,json})
# The fixture the Go test reads lands in internal/xlaext/testdata/ and is copied to $OUT (commit it when it
# passes).
#
# On the dev machine (repo root):
#   bash bench/build_gpu.sh -test .gpu/attention.test ./attention
#   bash bench/build_gpu.sh -test .gpu/xlaext.test ./internal/xlaext
#   bash bench/build_gpu.sh -test .gpu/fusedops.test ./internal/fusedops
#   xz -T0 -9 -f .gpu/attention.test .gpu/xlaext.test .gpu/fusedops.test
# On the GPU machine (carry .gpu/attention.test.xz, .gpu/xlaext.test.xz and the folder with upstream's
# block_sparse_attn_triton.py, fastvideo-kernel's, which gen_vsa_triton.py takes; FF: the static ffmpeg
# of bench/stage_ffmpeg.sh, unpacked):
#   OUT=$OUT UPSTREAM=DIR [FF=/path/to/ffmpeg] [STEPS="1 2 3 4 5 6 7"] bash bench/kernel_probes.sh
# The carry limit (64 MiB with the tracked files, about 45 MB) holds the two test binaries (about 5 MB each
# xz'd), the static ffmpeg (2 MB xz'd) and the bench binary (8 MB) in one call. A device command runs at most
# 600 s and step 4 alone may take 300 s (a hung draft spends its
# whole limit), so run STEPS="1 2 3" and STEPS="4" as two calls.
set -u
: "${OUT:?set OUT to the output folder}" "${UPSTREAM:?set UPSTREAM to the folder with block_sparse_attn_triton.py}"
STEPS=${STEPS:-"1 2 3 4 5 6 7"}
BIN=${BIN:-.gpu}
mkdir -p "$OUT" /tmp/probes
export PYTHONUNBUFFERED=1 # a step killed at its limit keeps what it printed
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
unpack() { xz -dc "$BIN/$1.xz" > "/tmp/probes/$1" && chmod +x "/tmp/probes/$1"; }
# The draft's first run: two geometries, so that a slow Mosaic compile fits the 100 s (each geometry compiles
# the kernel and upstream's again); h3_tiling's 289 query tiles (odd) run the pair with no partner.
DRAFT_GEOMETRIES=${DRAFT_GEOMETRIES:-"h3 h3_tiling"}
draft_report() { # a lowering error is long: its first lines name the cause, the tail the timings
  grep -m8 -E "Error|NotImplemented|not supported|Traceback" "$1" | cut -c1-400
  grep -v Warning "$1" | tail -12 | cut -c1-400
}
for s in $STEPS; do
  case $s in
  1) unpack attention.test && (cd attention && FASTVIDEO_GPU_TEST=1 timeout 150 /tmp/probes/attention.test -test.run OnGPU -test.v) > "$OUT/parity.log" 2>&1
     echo "1 parity rc $?"; grep -E "^(--- |ok|FAIL|PASS)|max abs|panic" "$OUT/parity.log" | head -30 | cut -c1-250
     if [ -f "$BIN/fusedops.test.xz" ]; then
       unpack fusedops.test && (cd internal/fusedops && FASTVIDEO_GPU_TEST=1 timeout 60 /tmp/probes/fusedops.test -test.run OnGPU -test.v) >> "$OUT/parity.log" 2>&1
       echo "1 fusedops parity rc $?"; grep -E "equal|^--- .*QKNorm|panic" "$OUT/parity.log" | tail -6 | cut -c1-250
     fi ;;
  2) timeout 200 python3 bench/vsa_fine_variants.py --upstream "$UPSTREAM" > "$OUT/fine.log" 2>&1
     echo "2 fine variants rc $?"; grep -v Warning "$OUT/fine.log" | tail -48 | cut -c1-250 ;;
  3) timeout 150 python3 internal/xlaext/testdata/gen_mosaic_gpu.py --bench > "$OUT/mosaic.log" 2>&1
     echo "3 mosaic fixture and bench rc $?"; tail -12 "$OUT/mosaic.log" | cut -c1-300
     cp internal/xlaext/testdata/mosaic_gpu_kernels.json "$OUT/" 2>/dev/null
     unpack xlaext.test && (cd internal/xlaext && FASTVIDEO_GPU_TEST=1 timeout 120 /tmp/probes/xlaext.test -test.run 'OnGPU' -test.v) >> "$OUT/mosaic.log" 2>&1
     echo "3 Go kernel calls rc $?"; grep -E "^(--- |ok|FAIL|PASS)|equal|max\||panic" "$OUT/mosaic.log" | tail -12 | cut -c1-250 ;;
  4) rcs=""
     for from in gmem smem; do
       timeout 100 python3 bench/vsa_mosaic_draft.py --upstream "$UPSTREAM" --index-from $from $DRAFT_GEOMETRIES > "$OUT/draft_$from.log" 2>&1
       rc=$?; rcs="$rcs $rc"
       echo "4 mosaic VSA draft, lists from $from rc $rc"; draft_report "$OUT/draft_$from.log"
     done
     case "$rcs " in
     " 0 "*) timeout 100 python3 bench/vsa_mosaic_draft.py --upstream "$UPSTREAM" --pingpong $DRAFT_GEOMETRIES > "$OUT/draft_pingpong.log" 2>&1
        echo "4 mosaic VSA draft, lists from gmem, warpgroups taking turns rc $?"; draft_report "$OUT/draft_pingpong.log" ;;
     *" 0 "*|*" 124 "*) ;;
     *) timeout 100 python3 bench/vsa_mosaic_draft.py --upstream "$UPSTREAM" --semantics lane $DRAFT_GEOMETRIES > "$OUT/draft_lane.log" 2>&1
        echo "4 mosaic VSA draft, lists from gmem, Lane semantics rc $?"; draft_report "$OUT/draft_lane.log" ;;
     esac ;;
  6) timeout 150 python3 bench/vsa_fine_variants.py --upstream "$UPSTREAM" --paired-lists --only base,pairq_w4s3,pairq_w8s3,pairq_w8s4 \
       h3 wan0.8 > "$OUT/pairq.log" 2>&1
     echo "6 paired lists rc $?"; grep -v Warning "$OUT/pairq.log" | tail -20 | cut -c1-250 ;;
  7) timeout 150 python3 bench/vsa_fine_variants.py --upstream "$UPSTREAM" --only base,qrows,pack,pool h3 h3_tiling wan0.8 > "$OUT/qrows.log" 2>&1
     echo "7 q read in place rc $?"; grep -v Warning "$OUT/qrows.log" | tail -24 | cut -c1-250 ;;
  8) mkdir -p /tmp/probes/mosaic/testdata
     timeout 300 python3 attention/testdata/gen_vsa_mosaic.py --upstream "$UPSTREAM" --bench --out /tmp/probes/mosaic > "$OUT/vsa_mosaic.log" 2>&1
     echo "8 mosaic fine stage rc $?"; grep -v -i warn "$OUT/vsa_mosaic.log" | grep -E "template|fixture|mosaic|Error|assert" | tail -14 | cut -c1-300
     cp /tmp/probes/mosaic/vsa_mosaic.json.gz /tmp/probes/mosaic/testdata/vsa_mosaic.* "$OUT/" 2>/dev/null ;;
  5) if [ -n "${FF:-}" ]; then
       for content in noise moving; do
         timeout 150 python3 bench/x264_tail.py --ffmpeg "$FF" --fps 65 --content $content >> "$OUT/x264.log" 2>&1
         echo "5 x264 tail ($content) rc $?"
       done
       cat "$OUT/x264.log"
     fi ;;
  esac
done
bash bench/pack_out.sh "$OUT" mosaic_gpu_kernels.json vsa_mosaic.json.gz vsa_mosaic.safetensors vsa_mosaic.json
