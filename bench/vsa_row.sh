#!/usr/bin/env bash
# Issue 32's acceptance lines in one device command of under 10 minutes on one H200 (on an H100 the six steps
# other than the clip took 194 s in session 27; the clip's cold and warm calls took 36 and 7 s in session 22);
# each step has its own time limit, so one that fails or hangs leaves the others' results. Logs under $OUT
# (at the end packed into $OUT/logs.tgz beside summary.md by bench/pack_out.sh: the device returns 8 files
# a call):
#   parity.log      the kernels on the GPU against upstream's output, float32 and the gathered path
#                   (attention.test -test.run OnGPU)
#   fine.log        the fine stage against upstream's Triton forward on the same inputs in the same run,
#                   at the issue's two geometries (bench/vsa_fine_variants.py --only base, three rounds), and
#                   at FastH3's and FastWan's tilings with uniform random lists (the traces' yardstick)
#   vsa_*.log       the whole VSA attention (coarse stage, selection, fine stage, gate) against dense
#                   cuDNN attention, four attentions chained in a program as in a DiT, each with its own
#                   tile-structured inputs: FastH3's tiling and the issue's packed H3 at 0.9, FastWan's
#                   tiling and the issue's packed Wan 1.3B at 0.8
#   h3dit.log       FastH3's DiT forward, dense and VSA 0.9, with the AdaLN step cache the pipeline uses
#                   (the issue's dense 1.52 s is that forward's; `-h3dit-cached=false`, which earlier
#                   VSA rows ran, adds the per-step AdaLN projections to every forward)
#   h3dit_mosaic.log  (opt-in step h3ditmosaic) the same forwards with the Mosaic GPU fine stage
#   h3dit_torch.log   (opt-in step h3dittorch, run after the clip) the VSA forward's same-math PyTorch baseline,
#                   upstream's fine kernel under torch.compile (bench/h3_dit_torch.py --vsa 0.9 --compile)
#   h3_clip.log, h3_torch.log   FastH3 with default flags, prompt to MP4: a cold and a warm call (the compile
#                   cache starting empty, as bench/clip_row.sh's first variant), then the same-math PyTorch
#                   chain (bench/h3_clip_torch.py); the whole FastH3 clip does not fit an 80 GB card (New refuses it there)
#   wan_clip.log, wan_torch.log   not an issue line: FastWan's default clip row (bench/clip_row.sh's first
#                   variant, cold and warm) and its PyTorch chain, so that one call gives both families' rows
#   wandit.log      FastWan 1.3B's 3-step denoise, dense and VSA 0.8
#   trace_h3.csv, trace_wan.csv, breakdown_*.txt   the kernels of one FastH3 and one FastWan VSA forward
#                   (bench/kerneltrace.c over the forward the bench brackets): where the forward's time
#                   goes beside the attention, and the fine kernel's time a call on the DiT's own routing
#                   against uniform lists at the same tiling (fine.log)
#   smi.csv, marks.txt   nvidia-smi every 100 ms and the time each step began: the clocks and power a step
#                   (bench/power_phases.py; on an H100 the forwards run at the 700 W cap, BENCHMARKS.md session 37)
#   summary.md      the issue's lines from those logs, each with its figures and whether it holds
#                   (bench/vsa_row_summary.py), then the clocks and power table
#
# On the dev machine (repo root):
#   bash bench/build_gpu.sh .gpu/bench ./examples/bench
#   bash bench/build_gpu.sh -test .gpu/attention.test ./attention
#   xz -T0 -9 -f .gpu/bench .gpu/attention.test
#   mkdir -p .gpu/up   # upstream's kernel, imported unchanged by the fine-stage bench:
#   git --git-dir=<FastVideo mirror> show HEAD:fastvideo-kernel/python/fastvideo_kernel/triton_kernels/block_sparse_attn_triton.py \
#     > .gpu/up/block_sparse_attn_triton.py
#   bash bench/stage_ffmpeg.sh   # .gpu/ffmpeg.xz, the clip step's encoder
# On the GPU machine (carry .gpu/bench.xz, .gpu/attention.test.xz, .gpu/ffmpeg.xz and .gpu/up: with the tracked
# files, about 63 of the 64 MiB a call carries):
#   OUT=$OUT bash bench/vsa_row.sh
# On an 80 GB card, leave the FastH3 clip out: STEPS="parity fine vsa h3dit wanclip wandit trace" (FastH3's DiT forward alone
# fits there). Optional: BIN (the folder of the .xz binaries), UPSTREAM (upstream's kernel, default .gpu/up),
# BUDGET_S (default 585), FINE_VARIANTS (the fine step's variants of bench/vsa_fine_variants.py, comma-separated;
# default base, the committed kernel), KERNEL_FILES (below). Steps outside the default: h3ditmosaic times FastH3's forwards again with the Mosaic
# GPU fine stage in the VSA one (-h3dit-vsa-kernel mosaic; the vsa step times it beside the Triton kernel
# wherever it can run); tracedense traces FastH3's dense forward (AdaLN cached) as trace traces the VSA one,
# kernel for kernel (session 32, one H100: the same GEMM kernels at the same speed, the VSA forward's extra
# 1.56 ms a block its gate projection; BENCHMARKS.md); traceh3 is trace without FastWan's forward; tracemosaic
# traces FastH3's VSA forward with the Mosaic GPU fine stage (trace_h3_mosaic.csv); h3dittorch times the DiT line's
# same-math baseline (h3dit_torch.log, about 35 s; needs UPSTREAM); gemm runs first and times FastH3's block GEMMs
# forward after forward in four weight forms (bench/gemm_sustained.py, gemm.log, about 30 s): with the clocks table,
# what the card sustains against what the forward gets.
set -u
: "${OUT:?set OUT to the output folder}"
STEPS=${STEPS:-"parity fine vsa h3dit clip wanclip wandit trace"}
BIN=${BIN:-.gpu}
UPSTREAM=${UPSTREAM:-.gpu/up}
mkdir -p "$OUT" /tmp/vsarow
export PYTHONUNBUFFERED=1 # a step killed at its limit keeps what it printed
end=$((SECONDS + ${BUDGET_S:-585}))
left() { local l=$((end - SECONDS)); [ "$l" -gt "$1" ] && echo "$1" || echo $((l > 5 ? l : 5)); }
unpack() { xz -dc "$BIN/$1.xz" >"/tmp/vsarow/$1" && chmod +x "/tmp/vsarow/$1"; }
has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
has_any() { local s; for s; do has "$s" && return 0; done; return 1; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
# The card's clocks and power a step (bench/power_phases.py): under sustained load the forwards run at the
# card's power cap, and their figures with it.
smi_query=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$smi_query --format=csv,noheader >/dev/null 2>&1 || smi_query=${smi_query/clocks_event/clocks_throttle}
nvidia-smi --query-gpu=$smi_query --format=csv,noheader -lms 100 >"$OUT/smi.csv" 2>&1 &
smi_pid=$!
mark() { echo "$1 $(date +%s.%N)" >>"$OUT/marks.txt"; }
step() { has "$1" && mark "$1"; } # a step of STEPS begins: its clocks are counted from here
BENCH_STEPS="vsa h3dit h3ditmosaic clip wanclip wandit trace traceh3 tracemosaic tracedense" # the steps that run the bench binary
has_any gemm parity fine h3dittorch $BENCH_STEPS || { echo "STEPS=\"$STEPS\" names no step"; exit 2; }
if has_any $BENCH_STEPS; then unpack bench; fi
BENCH=/tmp/vsarow/bench
# KERNEL_FILES (optional): kernel files a generator has just written, run by every bench step in place of
# the embedded files of their names (bench -kernel-files), so that one call can generate and time a kernel.
KF=()
if [ -n "${KERNEL_FILES:-}" ]; then KF=(-kernel-files "$KERNEL_FILES"); fi
# The clip steps' encoder and a compile cache that starts empty (a cold call compiles as a user's first
# run), set up once for whichever of them runs first.
clip_ready=
clip_env() {
  [ -n "$clip_ready" ] && return
  clip_ready=1
  unpack ffmpeg
  export FASTVIDEO_FFMPEG=/tmp/vsarow/ffmpeg XDG_CACHE_HOME=$(mktemp -d /tmp/vsarow-cache.XXXXXX)
}

if step gemm; then
  timeout "$(left 90)" python3 bench/gemm_sustained.py --forwards 2 >"$OUT/gemm.log" 2>&1
  echo "gemm rc $? at $SECONDS s"; grep -E "^forward|rror" "$OUT/gemm.log" | cut -c1-200
fi
if step parity; then
  unpack attention.test
  (cd attention && FASTVIDEO_GPU_TEST=1 timeout "$(left 150)" /tmp/vsarow/attention.test -test.run OnGPU -test.v) >"$OUT/parity.log" 2>&1
  echo "parity rc $? at $SECONDS s"; grep -E "^(--- |ok|FAIL|PASS)|steps|max abs|panic" "$OUT/parity.log" | head -30 | cut -c1-250
fi
if step fine; then
  timeout "$(left 120)" python3 bench/vsa_fine_variants.py --upstream "$UPSTREAM" --rounds 3 --only "${FINE_VARIANTS:-base}" h3 wan0.8 h3_tiling wan_tiling \
    >"$OUT/fine.log" 2>&1
  echo "fine rc $? at $SECONDS s"; grep -v Warning "$OUT/fine.log" | tail -12 | cut -c1-250
fi
if step vsa; then
  for g in "h3" "h3-packed" "wan -vsa-sparsity 0.8" "wan-packed -vsa-sparsity 0.8"; do
    name=${g%% *}
    timeout "$(left 45)" "$BENCH" ${KF[@]+"${KF[@]}"} -what vsa -backend xla:cuda -vsa-chain 4 -vsa-geometry $g >"$OUT/vsa_$name.log" 2>&1
    echo "vsa $g rc $? at $SECONDS s"; grep -E "summary|median|rror|panic" "$OUT/vsa_$name.log" | tail -6 | cut -c1-300
  done
fi
if step h3dit; then
  # Dense with the AdaLN cache is the issue's 1.52 s; the VSA forward runs with the same cache.
  timeout "$(left 150)" "$BENCH" ${KF[@]+"${KF[@]}"} -what h3dit -backend xla:cuda -warmup 1 -iters 3 -h3dit-vsa 0.9 >"$OUT/h3dit.log" 2>&1
  echo "h3dit rc $? at $SECONDS s"; grep -E "summary|forward min|fine stage|allocator|rror|panic" "$OUT/h3dit.log" | cut -c1-300 | head -16
fi
if step h3ditmosaic; then
  # Opt-in: the same forwards with the Mosaic GPU fine stage (attention.SparseMosaic) in the VSA one.
  timeout "$(left 150)" "$BENCH" ${KF[@]+"${KF[@]}"} -what h3dit -backend xla:cuda -warmup 1 -iters 3 -h3dit-vsa 0.9 -h3dit-vsa-kernel mosaic >"$OUT/h3dit_mosaic.log" 2>&1
  echo "h3ditmosaic rc $? at $SECONDS s"; grep -E "summary|forward min|fine stage|rror|panic" "$OUT/h3dit_mosaic.log" | cut -c1-300 | tail -8
fi
if step clip; then
  # Issue 32's clip line: FastH3 with default flags, prompt to MP4, a cold and a warm call in one process over a
  # compile cache that starts empty (bench/clip_row.sh's first variant), then the same-math PyTorch chain.
  clip_env
  timeout "$(left 150)" "$BENCH" ${KF[@]+"${KF[@]}"} -what clip -backend xla:cuda -warmup 0 -iters 1 -clip-variants default >"$OUT/h3_clip.log" 2>&1
  echo "clip rc $? at $SECONDS s"; grep -E "clip record|rror|panic" "$OUT/h3_clip.log" | cut -c1-300
  timeout "$(left 150)" python3 bench/h3_clip_torch.py --text 22 --iters 1 --ffmpeg "$FASTVIDEO_FFMPEG" >"$OUT/h3_torch.log" 2>&1
  echo "clip torch rc $? at $SECONDS s"; grep -E "clip record|rror" "$OUT/h3_torch.log" | cut -c1-300
fi
if step h3dittorch; then
  # Not a line of its own: the DiT line's same-math baseline, FastH3's VSA forward in PyTorch on upstream's own fine
  # kernel (torch.compile per block), after the clip so that the clip keeps its time.
  timeout "$(left 90)" python3 bench/h3_dit_torch.py --adaln-cache --vsa 0.9 --upstream "$UPSTREAM" --iters 3 --compile >"$OUT/h3dit_torch.log" 2>&1
  echo "h3dittorch rc $? at $SECONDS s"; grep -E "VSA attention|forward min|peak memory|rror" "$OUT/h3dit_torch.log" | cut -c1-300 | tail -4
fi
if step wanclip; then
  # Not an issue-32 line: FastWan's default row of bench/clip_row.sh (its first variant, cold and warm, then the
  # same-math PyTorch chain), so that one call also gives the whole-clip row of both families.
  clip_env
  timeout "$(left 90)" "$BENCH" ${KF[@]+"${KF[@]}"} -what clip -backend xla:cuda -warmup 0 -iters 1 -clip-model fastwan2.1-t2v-1.3b \
    -clip-height 480 -clip-width 832 -clip-frames 81 -clip-variants default >"$OUT/wan_clip.log" 2>&1
  echo "wan clip rc $? at $SECONDS s"; grep -E "clip record|rror|panic" "$OUT/wan_clip.log" | cut -c1-300
  timeout "$(left 90)" python3 bench/wan_clip_torch.py --iters 1 --ffmpeg "$FASTVIDEO_FFMPEG" >"$OUT/wan_torch.log" 2>&1
  echo "wan torch rc $? at $SECONDS s"; grep -E "clip record|rror" "$OUT/wan_torch.log" | cut -c1-300
fi
if step wandit; then
  timeout "$(left 100)" "$BENCH" ${KF[@]+"${KF[@]}"} -what wandit -backend xla:cuda -warmup 1 -iters 3 -wandit-vsa 0.8 >"$OUT/wandit.log" 2>&1
  echo "wandit rc $? at $SECONDS s"; grep -E "summary|denoise|rror|panic" "$OUT/wandit.log" | cut -c1-300 | head -16
fi
if has_any trace traceh3 tracemosaic tracedense; then
  mark trace
  # One VSA forward of each DiT (trace), or FastH3's dense one (tracedense), under bench/kerneltrace.c (CUPTI
  # inside the process, injected at cuInit), after the timed runs; each table's wall time is the same
  # process's median. FastH3's run with the AdaLN step cache (in trace, the dense forwards before it only
  # warm up); FastWan's skips the denoise loop.
  KT_SO=$(cd "$OUT" && pwd)/kerneltrace.so
  if KT_LIB=$(bash bench/kerneltrace_build.sh "$KT_SO" 2>"$OUT/kerneltrace_build.log"); then
    trace() { # name, time limit, bench arguments...
      local name=$1 limit=$2; shift 2
      CUDA_INJECTION64_PATH="$KT_SO" KERNELTRACE_CUPTI="$KT_LIB" KERNELTRACE_OUT="$OUT/$name.csv" \
        timeout "$(left "$limit")" "$BENCH" ${KF[@]+"${KF[@]}"} -backend xla:cuda -warmup 1 -iters 3 "$@" >"$OUT/$name.log" 2>&1
      echo "$name rc $? at $SECONDS s"; grep -E "kerneltrace:|profile window|rror|panic" "$OUT/$name.log" | cut -c1-300
      local wall
      wall=$(grep -o -- '--wall-ms [0-9.]*' "$OUT/$name.log" | tail -1 | cut -d' ' -f2)
      [ -s "$OUT/$name.csv" ] && python3 bench/kernel_breakdown.py --trace "$OUT/$name.csv${wall:+@$wall}" --top 20 | tee "$OUT/breakdown_$name.txt"
    }
    if has_any trace traceh3; then trace trace_h3 150 -what h3dit -h3dit-vsa 0.9 -profile-window 'h3dit[vsa 0.9 E64]'; fi
    if has trace; then trace trace_wan 100 -what wandit -wandit-vsa 0.8 -wandit-steps "" -profile-window 'wandit[vsa 0.8]'; fi
    if has tracemosaic; then
      trace trace_h3_mosaic 150 -what h3dit -h3dit-vsa 0.9 -h3dit-vsa-kernel mosaic -profile-window 'h3dit[vsa 0.9 E64 mosaic]'
    fi
    if has tracedense; then trace trace_h3_dense 120 -what h3dit -profile-window 'h3dit[adaln cached]'; fi
  else
    echo "trace: kerneltrace not built"; cat "$OUT/kerneltrace_build.log"
  fi
fi
# The issue's lines from whatever this call measured (the other call's say "not measured"; run
# bench/vsa_row_summary.py on a folder holding both calls' logs for the whole table).
mark end
kill "$smi_pid" 2>/dev/null
python3 bench/vsa_row_summary.py "$OUT" | tee "$OUT/summary.md"
{ echo; echo "Clocks and power a step (bench/power_phases.py, busy samples):"; echo
  python3 bench/power_phases.py "$OUT/smi.csv" "$OUT/marks.txt"; } | tee -a "$OUT/summary.md"
bash bench/pack_out.sh "$OUT" summary.md
echo "vsa_row done at $SECONDS s"
