#!/usr/bin/env bash
# The GPU build: every binary (t2va, t2v, serve, convert, bench) with our go-xla patches (and one to
# GoMLX, for the Triton custom call) applied at build time to the pinned module versions, so that a
# user gets the fast paths the plain build lacks:
#
#   bash bench/build_gpu.sh OUTDIR                     # every binary of examples/ into OUTDIR
#   bash bench/build_gpu.sh OUTPUT PACKAGE             # one binary, e.g. .gpu/bench ./examples/bench
#   bash bench/build_gpu.sh -test OUTPUT PACKAGE       # a test binary (go test -c)
#   bash bench/build_gpu.sh -gotest PACKAGE...         # go test the patched variant (CI does, on CPU)
#
# `<binary> -version` says which fast features a binary has. The patches, applied to copies of the
# modules from the module cache through a temporary go.mod (-modfile), never to the repository's
# go.mod: plain `go build`/`go test` stay as they are. No copy of their source is kept here.
#
# bench/goxla-f8.patch: go-xla v0.4.1 (the version GoMLX v0.28.2 uses) has the float8 dtypes in its
# PJRT buffer enums but writes no f8 type into the StableHLO text it hands to PJRT (internal/utils
# DTypeToStableHLO) and does not declare them in the backend's capabilities; github.com/gomlx/compute
# v0.1.2 gives them no Go type, so a Bitcast to F8E4M3FN panics in its shape inference (DType.Bits ->
# Size -> GoType). The patch adds the three (a dozen lines); the FP8 linears (quant.FP8Native, `-dtype
# fp8`) then run as FP8 GEMMs on Hopper. Run them with XLA_FLAGS=--xla_gpu_enable_triton_gemm=false:
# with Triton GEMMs on, XLA's autotuner had not finished compiling one FP8 joint block of the release
# shape after 100 s; with them off the block compiles in ~2.4 s (BENCHMARKS.md).
#
# bench/goxla-memstats.patch: the XLA allocator's bytes in use and their peak (PJRT_Device_MemoryStats;
# go-xla v0.4.1 does not call it): the peak device memory of BENCHMARKS.md's rows, which nvidia-smi
# cannot give (XLA's pool grows by doubling regions and keeps them).
#
# bench/goxla-pinned.patch: PJRT_Client_DmaMap/DmaUnmap (declared in go-xla v0.4.1's C header, not
# wrapped) and xla.Backend.PinHostMemory. A device-to-host copy into pageable memory is staged by the
# CUDA driver at ~7.5 GB/s on the H200 host and does not overlap with the programs running; into memory
# registered with DmaMap it is one DMA that does. internal/graphexec.Take copies large outputs through
# such a staging area (BENCHMARKS.md, the TAEHV rows).
#
# bench/goxla-convprecision.patch: go-xla's `tf32=false` asks DotGeneral for the highest precision on
# CUDA but leaves ConvGeneral at the default, with which cuDNN runs float32 convolutions in TF32: the
# TAEHV GPU parity test's float32 frames were 1.0-1.2e-4 off (CPU: 2e-7). With it, tf32=false means
# float32 for convolutions too; the default (TF32 on) is unchanged.
#
# bench/goxla-compilecache.patch: a persistent compile cache (go-xla v0.4.1 neither serializes nor
# loads executables): PJRT_Executable_Serialize / DeserializeAndLoad, a cache key over the program, the
# compile options, the plugin, the device kinds and XLA_FLAGS, and a hook in Builder.Compile through
# which internal/compilecache loads a program compiled by an earlier process instead of compiling it
# (-compile-cache DIR|off; the patch's header says why each piece exists). A plain build compiles
# every program in every process.
#
# bench/goxla-triton.patch + bench/gomlx-backendcall.patch: a Triton kernel inside a GoMLX graph, as
# XLA's `__gpu$xla.gpu.triton` custom call (the route block-sparse attention needs). GoMLX's graph has no
# way to a backend op that compute.Function does not declare, so the gomlx patch adds one, small and
# generic: Graph.BackendCall(name, inputs, func(compute.Function, []compute.Value)) adds a node whose
# outputs the callback builds on the backend Function directly (no gradient). The go-xla patch adds
# xla.Function.TritonCall(name, ir, grid, numWarps, numStages, operands, outputs) (CUDA plugin only)
# and stablehlo.TritonCall, which writes the one form measured to work on the H200's plugin:
# `backend_config = ""` plus the kernel's dictionary in `mhlo.backend_config`, no api_version (2, what
# stablehlo.CustomCallV2 writes, and the dictionary as a string both crash the plugin), the IR bytes
# escaped as MLIR prints them (`\0D`), row-major layouts. The same patch adds xla.Function.MosaicGPUCall
# and stablehlo.MosaicGPUCall: a Mosaic GPU kernel (JAX's Pallas, backend="mosaic_gpu") as the
# `mosaic_gpu_v2` custom call in the form JAX's lowering writes (the same dictionary form, with the
# module's bytecode and its SHA-256), whose handler JAX links into its CUDA plugin. The methods take plain
# types so that internal/xlaext finds them by type assertion; a plain build reports that it cannot call
# GPU kernels from a graph.
#
# bench/goxla-async.patch: go-xla's Execute awaits each program's completion events before it returns,
# so the host launches the next program only after the GPU has finished the last one and the GPU idles
# for the launch: ~1.4 ms between FastWan's joint-block programs, 40 ms of a 349 ms VSA forward. The
# patch queues the program and returns, as JAX dispatches (pjrt_c_api.h allows null completion events):
# what reads an output waits on the output's own ready event, an error of the program comes back from
# that read, and a buffer freed while a queued program still uses it is released after the program
# (PJRT's deletion semantics, which JAX relies on). It also adds pjrt.LoadedExecutable.
# QueuesWithoutWaiting, by which a binary reports that it has the patch.
set -euo pipefail
mode=build
patches=(bench/goxla-f8.patch bench/goxla-memstats.patch bench/goxla-pinned.patch bench/goxla-convprecision.patch
  bench/goxla-compilecache.patch bench/goxla-triton.patch bench/gomlx-backendcall.patch bench/goxla-async.patch)
while [ $# -gt 0 ]; do
  case $1 in
  -test) mode=testbin ;;
  -gotest) mode=gotest ;;
  *) break ;;
  esac
  shift
done
[ $# -gt 0 ] || { echo "usage: build_gpu.sh [-test|-gotest] OUTDIR | OUTPUT PACKAGE | PACKAGE..." >&2; exit 2; }
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
cp go.mod "$work/go.mod"
cp go.sum "$work/go.sum"
for m in go-xla:v0.4.1 compute:v0.1.2 gomlx:v0.28.2; do
  name=${m%%:*} want=${m##*:}
  path=github.com/gomlx/$name
  version=$(go list -m -f '{{.Version}}' "$path")
  if [ "$version" != "$want" ]; then
    echo "build_gpu: the patches were written against $path $want, go.mod has $version: update them" >&2
    exit 1
  fi
  cp -r "$(go list -m -f '{{.Dir}}' "$path")" "$work/$name"
  chmod -R u+w "$work/$name"
  echo "replace $path => $work/$name" >>"$work/go.mod"
done
for p in "${patches[@]}"; do
  patch -s --forward -d "$work" -p1 <"$p" || { echo "build_gpu: $p no longer applies" >&2; exit 1; }
done
flags=(-modfile "$work/go.mod" -ldflags='-s -w')
case $mode in
gotest) go test -modfile "$work/go.mod" "$@" ;;
testbin) go test -c "${flags[@]}" -o "$(realpath -m "$1")" "${2:?a package}" ;;
build)
  if [ $# -ge 2 ]; then
    go build "${flags[@]}" -o "$(realpath -m "$1")" "$2"
  else
    out=$(realpath -m "$1")
    mkdir -p "$out"
    for b in t2va t2v serve convert bench; do
      go build "${flags[@]}" -o "$out/$b" "./examples/$b"
    done
    echo "build_gpu: $(ls "$out" | tr '\n' ' ')in $out"
  fi
  ;;
esac
