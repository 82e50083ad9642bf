#!/usr/bin/env bash
# Kernel-level profile of the H3 DiT forward (832x480x124, 93 prompt tokens, bf16, AdaLN cache on)
# for Go/XLA and for torch eager and torch.compile, in one device command of under 10 minutes:
#
#   OUT=/some/dir LAYERS=8 bash bench/profile_h3dit.sh      # repo root as cwd, .gpu/bench built
#
# LAYERS joint blocks (default 8: ~300 kernels per forward, which ncu's kernel replay of one
# single-pass metric handles in well under a minute; per-block figures scale to the 50 blocks).
# Writes under $OUT: go_plain.log (timings without a profiler attached, and the XLA dump hlo.tgz),
# go_ncu.log/go_h3dit.ncu-rep/go_h3dit_ncu.csv (ncu over exactly one forward, -profile-window),
# torch_{eager,compile}.{log,csv} (torch.profiler over one forward), breakdown.txt, hlo_summary.txt.
set -u
: "${OUT:?set OUT to the output folder}"
LAYERS=${LAYERS:-8}
BENCH=${BENCH:-.gpu/bench}
TAG='h3dit[adaln cached]'
mkdir -p "$OUT"
NCU=$(command -v ncu || ls -d /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | sort -V | tail -1)
echo "ncu: ${NCU:-not found}"
# The last "--wall-ms X" a log prints: the timed median outside any profiler range.
wall() { grep -o -- '--wall-ms [0-9.]*' "$1" | tail -1 | cut -d' ' -f2; }
go_args=(-what h3dit -backend xla:cuda -h3dit-layers "$LAYERS" -warmup 1 -iters 3 -profile-window "$TAG")

# 1. Go without a profiler: the wall time, and the optimized HLO of every module.
XLA_FLAGS="--xla_dump_to=$OUT/hlo --xla_dump_hlo_as_text" timeout 120 "$BENCH" "${go_args[@]}" >"$OUT/go_plain.log" 2>&1
echo "go plain: rc $?"; grep -E 'summary|profile window' "$OUT/go_plain.log"
python3 bench/hlo_summary.py "$OUT/hlo" >"$OUT/hlo_summary.txt" 2>&1; head -4 "$OUT/hlo_summary.txt"
tar -czf "$OUT/hlo.tgz" -C "$OUT" hlo && rm -rf "$OUT/hlo"

# 2. Go under ncu: only the forward between cuProfilerStart and cuProfilerStop is collected;
#    clocks and caches left as they run (no base-clock lock, no cache flush between kernels).
if [ -n "$NCU" ]; then
  timeout 200 "$NCU" --profile-from-start off --metrics gpu__time_duration.sum --clock-control none \
    --cache-control none -f -o "$OUT/go_h3dit" "$BENCH" "${go_args[@]}" >"$OUT/go_ncu.log" 2>&1
  echo "go ncu: rc $?"; grep -E '==ERROR==|==WARNING==|profile window' "$OUT/go_ncu.log" | head -5
  "$NCU" --import "$OUT/go_h3dit.ncu-rep" --csv --page raw --print-units base --print-kernel-base demangled \
    >"$OUT/go_h3dit_ncu.csv" 2>"$OUT/ncu_import.err" ||
    "$NCU" --import "$OUT/go_h3dit.ncu-rep" --csv --page raw >"$OUT/go_h3dit_ncu.csv" 2>>"$OUT/ncu_import.err"
fi

# 3. torch eager and torch.compile: one forward each under torch.profiler after the timed runs.
for mode in eager compile; do
  flag=""; [ "$mode" = compile ] && flag=--compile
  timeout $([ "$mode" = compile ] && echo 150 || echo 100) python3 bench/h3_dit_torch.py --layers "$LAYERS" --adaln-cache --iters 3 --warmup 1 $flag \
    --profile "$OUT/torch_$mode.csv" >"$OUT/torch_$mode.log" 2>&1
  echo "torch $mode: rc $?"; grep -E 'median|profile:' "$OUT/torch_$mode.log"
done

# 4. One table per source; the Go wall time is the unprofiled process's median.
args=()
[ -s "$OUT/go_h3dit_ncu.csv" ] && args+=(--ncu "$OUT/go_h3dit_ncu.csv@$(wall "$OUT/go_plain.log")")
for mode in eager compile; do
  [ -s "$OUT/torch_$mode.csv" ] && args+=(--torch "$OUT/torch_$mode.csv@$(wall "$OUT/torch_$mode.log")")
done
if [ ${#args[@]} -gt 0 ]; then
  python3 bench/kernel_breakdown.py "${args[@]}" --top 15 | tee "$OUT/breakdown.txt"
else
  echo "no profile came back: see the logs under $OUT"
fi
