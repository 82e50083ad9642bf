package h3

import (
	"math"
)

// Host-side tables. They are small (L×96) and their exact bits matter more than their speed, so
// they are computed in Go following the reference's float32 rounding at each step (with the elementary
// functions evaluated in float64 and rounded once) rather than in the graph.

// RopeInvFreq returns the per-axis inverse frequencies 1/theta^(2k/(2F)), k = 0..F-1, as the reference
// builds them in float32 (f32 arange / 2F, f32 pow, f32 reciprocal).
func RopeInvFreq(freqDim int, theta float64) []float32 {
	inv := make([]float32, freqDim)
	for k := range inv {
		e := float32(2*k) / float32(2*freqDim)
		p := float32(math.Pow(theta, float64(e)))
		inv[k] = float32(1 / float64(p))
	}
	return inv
}

// RopeTables returns cos and sin [L, 6F] for packed positions [L, 3] (t, h, w), laid out like the
// reference: angles = [t·inv, h·inv, w·inv] (3F values) repeated twice. The positions are rounded to
// float32 first (the DiT converts position_ids to float32 before the product), the product is rounded to
// float32, and cos/sin are evaluated in float64 on that float32 angle, then rounded.
func RopeTables(positions []float64, freqDim int, theta float64) (cos, sin []float32) {
	inv := RopeInvFreq(freqDim, theta)
	l := len(positions) / 3
	w := 6 * freqDim
	cos = make([]float32, l*w)
	sin = make([]float32, l*w)
	for r := 0; r < l; r++ {
		for axis := 0; axis < 3; axis++ {
			p := float32(positions[3*r+axis])
			for k, f := range inv {
				a := float64(float32(p * f))
				c, s := float32(math.Cos(a)), float32(math.Sin(a))
				i := r*w + axis*freqDim + k
				cos[i], sin[i] = c, s
				cos[i+3*freqDim], sin[i+3*freqDim] = c, s
			}
		}
	}
	return cos, sin
}
