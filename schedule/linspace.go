// Package schedule holds the diffusion samplers as plain Go math over
// []float32 rows: MiniMax H3's rectified-flow scheduler (clean-time
// convention, video shift 12 / audio shift 3), and for Wan the FlowUniPC
// multistep solver, FlowMatch Euler and the FastWan DMD few-step ladder.
//
// Ladders reproduce FastVideo's arithmetic dtype by dtype: where the
// reference computes a grid in float32 (torch) this package does each float32
// operation in the same order, and where it computes in float64 (NumPy) it
// does so in float64 and rounds once, so sigma grids are bit-identical to the
// reference. Products that feed a sum are wrapped in explicit conversions
// (float32(a*b)) because the Go spec lets the compiler fuse x*y+z into an FMA
// otherwise, which would change last bits on some architectures.
package schedule

import "math"

func fmaF32(a, b, c float32) float32 {
	// The exact product of two float32 values fits a float64, and an FMA in
	// float64 followed by rounding to float32 equals a float32 FMA except for
	// double-rounding cases that math.FMA (exact) avoids.
	return float32(math.FMA(float64(a), float64(b), float64(c)))
}

// shiftF32 is the flow shift s*x/(1+(s-1)*x) evaluated in float32 as torch
// does on a float32 tensor with a Python-float shift: shift and shift-1 are
// Python (float64) values, each rounded to float32 as a scalar operand.
func shiftF32(shift float64, x float32) float32 {
	num := float32(float32(shift) * x)
	den := 1 + float32(float32(shift-1)*x)
	return num / den
}

// shiftF64 is the same shift evaluated in float64 (NumPy).
func shiftF64(shift, x float64) float64 {
	num := float64(shift * x)
	den := 1 + float64((shift-1)*x)
	return num / den
}
