package api

import "github.com/gomlx/compute/dtypes"

// DType is the compute precision of the heavy components.
type DType string

// DTypeOf names a compute dtype.
func DTypeOf(dt dtypes.DType) DType {
	if dt == dtypes.BFloat16 {
		return BF16
	}
	return F32
}

// Compute is the compute dtype a weight dtype runs in: float32 for F32, else bfloat16 (FP8's
// non-linear weights and activations included).
func (d DType) Compute() dtypes.DType {
	if d == F32 {
		return dtypes.Float32
	}
	return dtypes.BFloat16
}

const (
	// DTypeAuto picks bf16 on accelerators and f32 on the pure-Go backend, which is both faster
	// and exact in f32 (its half-precision kernels are slow).
	DTypeAuto DType = ""
	F32       DType = "f32"
	BF16      DType = "bf16"
	// FP8 computes as DTypeAuto does, with the MiniMax H3 DiT's six core linears of every joint
	// block in float8 e4m3 (per-output-channel weight scales, per-token activation scales): half
	// the linear weights' memory, FP8 GEMMs where the backend emits them. Opt-in, H3 only.
	FP8 DType = "fp8"
)
