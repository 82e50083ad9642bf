package backend

import (
	"reflect"

	"github.com/gomlx/compute/dtypes"
)

// Features are what this binary's XLA backend can do beyond the plain modules: the GPU build
// (bench/build_gpu.sh) patches go-xla and compute for native float8 and the allocator's statistics.
type Features struct {
	// XLA: the binary has the XLA backend (cgo, not -tags noxla).
	XLA bool
	// NativeFP8: StableHLO gets float8 types, so FP8 linears run as FP8 GEMMs (else emulated).
	NativeFP8 bool
	// AllocatorStats: the XLA allocator's bytes in use and peak can be read (else NVML's pool size).
	AllocatorStats bool
}

// BuildFeatures reports this binary's Features.
func BuildFeatures() Features { return xlaFeatures() }

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
