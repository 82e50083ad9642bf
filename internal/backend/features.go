package backend

import (
	"reflect"

	"github.com/gomlx/compute/dtypes"
)

// GPUBuildHint says how to get what a plain build lacks.
const GPUBuildHint = "bash bench/build_gpu.sh OUTDIR builds it"

// Features are what this binary's backends can do beyond a plain build: the GPU build
// (bench/build_gpu.sh) patches go-xla, compute and GoMLX for native float8, the allocator's
// statistics, page-locked host memory, the compile cache, Triton and Mosaic GPU kernels and queued execution; GOEXPERIMENT=simd gives
// the pure-Go backend its SIMD matmuls.
type Features struct {
	// XLA: the binary has the XLA backend (cgo, not -tags noxla).
	XLA bool
	// NativeFP8: StableHLO gets float8 types, so FP8 linears run as FP8 GEMMs (else emulated).
	NativeFP8 bool
	// AllocatorStats: the XLA allocator's bytes in use and peak can be read (else NVML's pool size).
	AllocatorStats bool
	// PinnedHost: host memory can be registered for DMA, so large outputs cross to the host through
	// page-locked staging, overlapping with the programs running (else pageable copies).
	PinnedHost bool
	// CompileCache: compiled programs can be serialized and loaded by a later process (the GPU
	// build's bench/goxla-compilecache.patch; see Plan.CompileCacheDir).
	CompileCache bool
	// TritonCall: graphs can call Triton kernels as XLA's `__gpu$xla.gpu.triton` custom call
	// (internal/xlaext.TritonCall; CUDA only): the GPU build's bench/goxla-triton.patch and
	// bench/gomlx-backendcall.patch.
	TritonCall bool
	// MosaicGPUCall: graphs can call Mosaic GPU kernels as the `mosaic_gpu_v2` custom call whose handler
	// JAX links into its CUDA plugin (internal/xlaext.MosaicGPUCall; CUDA only): the same two patches.
	MosaicGPUCall bool
	// QueuedExecute: running a program queues it and returns without awaiting its completion, so the
	// host launches the next one while the GPU runs (the GPU build's bench/goxla-async.patch).
	QueuedExecute bool
	// CPUSIMD: the pure-Go backend's matmuls use AVX2/AVX-512 kernels (a build with GOEXPERIMENT=simd
	// on amd64).
	CPUSIMD bool
}

// BuildFeatures reports this binary's Features.
func BuildFeatures() Features {
	f := xlaFeatures()
	f.CPUSIMD = cpuSIMD
	return f
}

// hasGoType reports whether compute gives dt a Go type (the GPU build's patch does for float8; the
// plain module panics).
func hasGoType(dt dtypes.DType) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return dt.GoType() != reflect.Type(nil)
}
