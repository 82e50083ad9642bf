#!/usr/bin/env bash
# Builds a binary whose XLA backend writes float8 types into StableHLO, so that the FP8 linears
# (quant.FP8Native, `-h3dit-fp8 native`/`auto`) run as FP8 GEMMs on Hopper:
#
#   bash bench/build_native_fp8.sh OUTPUT [PACKAGE]        # default package ./examples/bench
#   bash bench/build_native_fp8.sh -test OUTPUT PACKAGE    # a test binary (go test -c)
#   bash bench/build_native_fp8.sh -async OUTPUT [PACKAGE]  # also bench/goxla-async.patch (below)
#
# go-xla v0.4.1 (the version GoMLX v0.28.2 uses) has the float8 dtypes in its PJRT buffer enums but
# writes no f8 type into the StableHLO text it hands to PJRT (internal/utils DTypeToStableHLO) and
# does not declare them in the backend's capabilities; github.com/gomlx/compute v0.1.2 gives them no
# Go type, so a Bitcast to F8E4M3FN panics in its shape inference (DType.Bits -> Size -> GoType).
# bench/goxla-f8.patch adds the three (a dozen lines). Rather than fork the modules, this build
# copies both from the module cache, applies the patch and points a temporary go.mod (-modfile) at
# the copies: the repository's go.mod stays as it is and every other build (tests, CI, users) keeps
# the emulated FP8 graph that auto picks without the dtype.
#
# bench/goxla-memstats.patch (always applied) lets the bench read the XLA allocator's bytes in use and
# their peak (PJRT_Device_MemoryStats; go-xla v0.4.1 does not call it): the peak device memory of
# BENCHMARKS.md's rows, which nvidia-smi cannot give (XLA's pool grows by doubling regions and keeps
# them).
#
# -async adds an experiment for the bf16 gap (BENCHMARKS.md, "Where the time goes"): go-xla's Execute
# then returns once a program is queued instead of awaiting its completion events, so the host
# launches the next joint-block program while the current one runs, as JAX dispatches. Not measured
# yet; the flags can be combined (-test -async).
#
# Run the native graph with XLA_FLAGS=--xla_gpu_enable_triton_gemm=false: with Triton GEMMs on, XLA's
# autotuner had not finished compiling one FP8 joint block of the release shape after 100 s (the
# fixtures' tiny shapes compile at once); with them off the block compiles in ~2.4 s (BENCHMARKS.md).
set -euo pipefail
build=(go build)
patches=(bench/goxla-f8.patch bench/goxla-memstats.patch)
while [ $# -gt 0 ]; do
  case $1 in
  -test) build=(go test -c) ;;
  -async) patches+=(bench/goxla-async.patch) ;;
  *) break ;;
  esac
  shift
done
out=$(realpath -m "${1:?usage: build_native_fp8.sh [-test] [-async] OUTPUT [PACKAGE]}")
pkg=${2:-./examples/bench}
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
cp go.mod "$work/go.mod"
cp go.sum "$work/go.sum"
for m in go-xla:v0.4.1 compute:v0.1.2; do
  name=${m%%:*} want=${m##*:}
  path=github.com/gomlx/$name
  version=$(go list -m -f '{{.Version}}' "$path")
  [ "$version" = "$want" ] || echo "build_native_fp8: the patch was written against $path $want, go.mod has $version" >&2
  cp -r "$(go list -m -f '{{.Dir}}' "$path")" "$work/$name"
  chmod -R u+w "$work/$name"
  echo "replace $path => $work/$name" >>"$work/go.mod"
done
for p in "${patches[@]}"; do
  patch -s -d "$work" -p1 <"$p"
done
"${build[@]}" -modfile "$work/go.mod" -ldflags='-s -w' -o "$out" "$pkg"
