#!/usr/bin/env bash
# Issue 18's row in one device command (under 10 minutes on one H200): PyTorch eager and torch.compile
# (bench/h3_dit_torch.py, AdaLN step cache), our bf16 forward with 5 and 1 joint blocks per XLA program
# and with XLA's command buffers on and off, our FP8 forward (native graph), then the kernel trace of
# the default bf16 forward (bench/profile_h3dit.sh, 8 blocks). 832x480x124 with a 93-token prompt
# (14,937 rows), 50 blocks, median of 3. Both binaries come from bench/build_gpu.sh: its go-xla
# patches give the FP8 graph its dtype and every row its XLA allocator peak (the peak memory column;
# the bf16 rows run no FP8 and are the same program as a plain build's).
#
#   bash bench/build_gpu.sh .gpu/bench ./examples/bench
#   OUT=/some/dir BENCH=.gpu/bench bash bench/h3dit_row.sh     # repo root as cwd
#
# Optional: BLOCK_GROUPS="10 25" adds bf16 rows with that many joint blocks per program;
# NOTRITON=1 a bf16 row with XLA's Triton GEMMs off (the FP8 block compiles in 2.4 s that way: does
# bf16 compile faster, and run as fast?); PROFILE=0 leaves out the kernel trace.
set -u
: "${OUT:?set OUT to the output folder}"
BENCH=${BENCH:-.gpu/bench}
mkdir -p "$OUT"
end=$((SECONDS + 585))
left() { local l=$((end - SECONDS)); [ "$l" -gt "$1" ] && echo "$1" || echo $((l > 5 ? l : 5)); }
CB0="--xla_gpu_enable_command_buffer="
for mode in eager compile; do
  flag=""; [ "$mode" = compile ] && flag=--compile
  timeout "$(left $([ "$mode" = compile ] && echo 150 || echo 70))" python3 bench/h3_dit_torch.py --iters 3 --warmup 1 --adaln-cache $flag >"$OUT/torch_$mode.log" 2>&1
  echo "torch $mode rc $? at $SECONDS s"; grep -E "median|peak" "$OUT/torch_$mode.log" | head -3
done
run() { # name, XLA_FLAGS, binary, bench flags...
  local name=$1 flags=$2 bin=$3; shift 3
  XLA_FLAGS="$flags" timeout "$(left "${T:-75}")" "$bin" -what h3dit -backend xla:cuda -warmup 1 -iters 3 "$@" >"$OUT/$name.log" 2>&1
  echo "$name rc $? at $SECONDS s"; grep -E "summary|compile ~|SNR|allocator|panic|rror" "$OUT/$name.log" | cut -c1-260 | head -8
}
run bf16_g5_cb0 "$CB0" "$BENCH" -h3dit-group 5
run bf16_g5_cb1 "" "$BENCH" -h3dit-group 5
run bf16_g1_cb0 "$CB0" "$BENCH" -h3dit-group 1
# Triton GEMMs off: XLA's autotuner did not finish compiling the FP8 block of this shape with them on.
# No dense reference model in this process (-h3dit-fp8-snr=false): it would set the allocator's peak.
T=150 run fp8_native "$CB0 --xla_gpu_enable_triton_gemm=false" "$BENCH" -h3dit-group 5 -h3dit-fp8 native -h3dit-fp8-snr=false
grep -q "summary \[fp8" "$OUT/fp8_native.log" || T=90 run fp8_emulated "$CB0" "$BENCH" -h3dit-group 5 -h3dit-fp8 emulated -h3dit-fp8-snr=false
for g in ${BLOCK_GROUPS:-}; do
  run "bf16_g${g}_cb0" "$CB0" "$BENCH" -h3dit-group "$g"
done
if [ "${NOTRITON:-0}" = 1 ]; then
  run bf16_g5_notriton "$CB0 --xla_gpu_enable_triton_gemm=false" "$BENCH" -h3dit-group 5
fi
[ "${PROFILE:-1}" = 1 ] || exit 0
XLA_FLAGS="$CB0" OUT=$OUT/prof_after LAYERS=8 BENCH=$BENCH TORCH=0 GO_EXTRA="-h3dit-group 5" timeout "$(left 100)" bash bench/profile_h3dit.sh >"$OUT/prof_after.log" 2>&1
echo "profile rc $? at $SECONDS s"; grep -A9 "^== trace" "$OUT/prof_after.log"
