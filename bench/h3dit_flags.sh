#!/usr/bin/env bash
# XLA's Triton GEMMs and command buffers for the bf16 H3 DiT forward in one device command,
# torch.compile before and after the Go rows (BENCHMARKS.md, "Triton GEMMs and go-xla's wait"; the rows
# without go-xla's wait came from an -async build, which is the GPU build since session 14).
# 832x480x124, 50 blocks, 5 per program, median of 5.
#
#   bash bench/build_gpu.sh .gpu/bench ./examples/bench
#   OUT=/some/dir bash bench/h3dit_flags.sh     # repo root as cwd; about 6 minutes on one H200
set -u
: "${OUT:?set OUT to the output folder}"
mkdir -p "$OUT"
torch() {
  timeout 80 python3 bench/h3_dit_torch.py --iters 5 --warmup 1 --adaln-cache --compile >"$OUT/$1.log" 2>&1
  echo "$1 rc $? at $SECONDS s"; grep -E "median|peak" "$OUT/$1.log"
}
CB0="--xla_gpu_enable_command_buffer="
NT="--xla_gpu_enable_triton_gemm=false"
run() { # name, XLA_FLAGS, binary
  XLA_FLAGS="$2" timeout 70 "$3" -what h3dit -backend xla:cuda -warmup 1 -iters 5 -h3dit-group 5 >"$OUT/$1.log" 2>&1
  echo "$1 rc $? at $SECONDS s"; grep -E "summary|compile ~" "$OUT/$1.log" | cut -c1-200
}
torch torch_compile
run bf16_default "" .gpu/bench
run bf16_cb0 "$CB0" .gpu/bench
run bf16_notriton "$NT" .gpu/bench
run bf16_cb0_notriton "$CB0 $NT" .gpu/bench
torch torch_compile_after
