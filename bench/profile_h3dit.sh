#!/usr/bin/env bash
# Kernel-level profile of the H3 DiT forward (832x480x124, 93 prompt tokens, bf16, AdaLN cache on)
# for Go/XLA and for torch eager and torch.compile, in one device command of under 10 minutes:
#
#   OUT=/some/dir LAYERS=8 bash bench/profile_h3dit.sh      # repo root as cwd, .gpu/bench built
#
# XLA_FLAGS from the caller apply to every Go run. GO_EXTRA adds bench flags to every Go run (e.g. "-h3dit-fp8 native" with a binary from
# bench/build_gpu.sh, BENCH=that binary); TORCH=0 leaves the torch runs out.
# LAYERS joint blocks (default 8: ~300 kernels per forward, which ncu's kernel replay of one
# single-pass metric handles in well under a minute; per-block figures scale to the 50 blocks).
# Writes under $OUT: go_plain.log (timings without a profiler attached, and the XLA dump hlo.tgz),
# go_trace.log/go_trace.csv (bench/kerneltrace.c: CUPTI inside the bench records the kernels of
# exactly one forward, the -profile-window's), torch_{eager,compile}.{log,csv} (torch.profiler over
# one forward), breakdown.txt, hlo_summary.txt. Only when the trace gave no CSV does ncu run instead
# (go_ncu.log/go_h3dit.ncu-rep/go_h3dit_ncu.csv): ncu crashed this Go process before its window.
# -iters 3 is the least the h3dit bench takes (it reports the median of the timed runs).
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
go_args=(-what h3dit -backend xla:cuda -h3dit-layers "$LAYERS" -warmup 1 -iters 3 -profile-window "$TAG" ${GO_EXTRA:-})

# 1. Go without a profiler: the wall time, and the optimized HLO of every module.
XLA_FLAGS="${XLA_FLAGS:-} --xla_dump_to=$OUT/hlo --xla_dump_hlo_as_text" timeout 120 "$BENCH" "${go_args[@]}" >"$OUT/go_plain.log" 2>&1
echo "go plain: rc $?"; grep -E 'summary|profile window' "$OUT/go_plain.log"
python3 bench/hlo_summary.py "$OUT/hlo" >"$OUT/hlo_summary.txt" 2>&1; head -4 "$OUT/hlo_summary.txt"
tar -czf "$OUT/hlo.tgz" -C "$OUT" hlo && rm -rf "$OUT/hlo"

# 2. Go under bench/kerneltrace.c, injected by the CUDA driver at cuInit: it records the kernels
#    between cuProfilerStart and cuProfilerStop as they run and writes go_trace.csv at the stop.
rm -f "$OUT/go_trace.csv" "$OUT/go_h3dit_ncu.csv"  # a stale table from an earlier run must not count
trace_rc=none
KT_SO=$(cd "$OUT" && pwd)/kerneltrace.so  # the driver dlopens it: an absolute path, whatever the cwd
if KT_LIB=$(bash bench/kerneltrace_build.sh "$KT_SO" 2>"$OUT/kerneltrace_build.log"); then
  CUDA_INJECTION64_PATH="$KT_SO" KERNELTRACE_CUPTI="$KT_LIB" KERNELTRACE_OUT="$OUT/go_trace.csv" \
    timeout 150 "$BENCH" "${go_args[@]}" >"$OUT/go_trace.log" 2>&1
  trace_rc=$?
  echo "go trace: rc $trace_rc"; grep -E 'kerneltrace:|profile window' "$OUT/go_trace.log"
else
  echo "go trace: not built"; cat "$OUT/kerneltrace_build.log"
fi

# 3. Fallback, only without a trace (and not after a trace that ran out of time: both would not fit
#    in one device command): Go under ncu, collecting only the forward between cuProfilerStart and
#    cuProfilerStop; clocks and caches left as they run (no base-clock lock, no cache flush between
#    kernels). GODEBUG=asyncpreemptoff=1 is a guess at the earlier segfault (it came in pure Go code,
#    where the runtime's preemption signals are the only thing that meets ncu's injected hooks).
if [ ! -s "$OUT/go_trace.csv" ] && [ "$trace_rc" != 124 ] && [ -n "$NCU" ]; then
  GODEBUG=asyncpreemptoff=1 timeout 200 "$NCU" --profile-from-start off --metrics gpu__time_duration.sum --clock-control none \
    --cache-control none -f -o "$OUT/go_h3dit" "$BENCH" "${go_args[@]}" >"$OUT/go_ncu.log" 2>&1
  echo "go ncu: rc $?"; grep -E '==ERROR==|==WARNING==|profile window' "$OUT/go_ncu.log" | head -5
  "$NCU" --import "$OUT/go_h3dit.ncu-rep" --csv --page raw --print-units base --print-kernel-base demangled \
    >"$OUT/go_h3dit_ncu.csv" 2>"$OUT/ncu_import.err" ||
    "$NCU" --import "$OUT/go_h3dit.ncu-rep" --csv --page raw >"$OUT/go_h3dit_ncu.csv" 2>>"$OUT/ncu_import.err"
fi

# 4. torch eager and torch.compile: one forward each under torch.profiler after the timed runs.
for mode in eager compile; do
  [ "${TORCH:-1}" = 0 ] && break
  flag=""; [ "$mode" = compile ] && flag=--compile
  timeout $([ "$mode" = compile ] && echo 150 || echo 100) python3 bench/h3_dit_torch.py --layers "$LAYERS" --adaln-cache --iters 3 --warmup 1 $flag \
    --profile "$OUT/torch_$mode.csv" >"$OUT/torch_$mode.log" 2>&1
  echo "torch $mode: rc $?"; grep -E 'median|profile:' "$OUT/torch_$mode.log"
done

# 5. One table per source; the Go wall time is the unprofiled process's median.
args=()
[ -s "$OUT/go_trace.csv" ] && args+=(--trace "$OUT/go_trace.csv@$(wall "$OUT/go_plain.log")")
[ -s "$OUT/go_h3dit_ncu.csv" ] && args+=(--ncu "$OUT/go_h3dit_ncu.csv@$(wall "$OUT/go_plain.log")")
for mode in eager compile; do
  [ -s "$OUT/torch_$mode.csv" ] && args+=(--torch "$OUT/torch_$mode.csv@$(wall "$OUT/torch_$mode.log")")
done
if [ ${#args[@]} -gt 0 ]; then
  python3 bench/kernel_breakdown.py "${args[@]}" --top 15 | tee "$OUT/breakdown.txt"
else
  echo "no profile came back: see the logs under $OUT"
fi
