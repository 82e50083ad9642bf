package packing

import "math"

// RoPE time unit: one audio latent (25 ms). A video frame at 24 fps spans 5/3
// units, and the latents of a 17-frame chunk cover 1, 4, 4, 4, 4 frames.
const FrameRescale = 5.0 / 3.0

// FramesPerLatent lists how many pixel frames each latent of a chunk covers.
var FramesPerLatent = [5]int{1, 4, 4, 4, 4}

// ropeSpatialScale multiplies the normalized spatial grid.
const ropeSpatialScale = 32.0

// SpatialGrid is the RoPE coordinate of each patch along one latent axis of
// length dim: NumPy's linspace(left, left+ratio, dim/patch, endpoint=False)*32
// with ratio = dim/sqrtArea and left = (1-ratio)/2, in NumPy's evaluation
// order (step = delta/n, value = i*step + start, then *32).
func SpatialGrid(dim, patch int, sqrtArea float64) []float64 {
	ratio := float64(dim) / sqrtArea
	left := (1.0 - ratio) / 2.0
	stop := left + ratio
	n := dim / patch
	out := make([]float64, n)
	if n == 0 {
		return out
	}
	delta := stop - left
	step := delta / float64(n)
	for i := range out {
		var v float64
		if step == 0 { // NumPy's denormal branch: (i/n)*delta
			v = float64(float64(i)/float64(n)) * delta
		} else {
			v = float64(float64(i) * step)
		}
		v = v + left
		out[i] = v * ropeSpatialScale
	}
	return out
}

// SqrtArea is the normalizer of the spatial grids, sqrt(Hl*Wl) in float64.
func SqrtArea(latentHeight, latentWidth int) float64 {
	return math.Sqrt(float64(latentHeight * latentWidth))
}

// latentSpan is the RoPE time covered by latent j.
func latentSpan(j int) float64 {
	return FrameRescale * float64(FramesPerLatent[j%len(FramesPerLatent)])
}

// TemporalGrid is the RoPE time of each latent frame: the sequential float64
// cumulative sum of the latent spans, starting at 0, times scale, plus origin.
// With scale 1 this is the reference's origin + cumsum (x*1 is exact); other
// scales stretch a shortened clip over the full timeline (MLX fast mode:
// grid(0)*scale + origin).
func TemporalGrid(latentFrames int, origin, scale float64) []float64 {
	out := make([]float64, latentFrames)
	acc := 0.0
	for j := range out {
		if j > 0 {
			acc = acc + latentSpan(j-1)
		}
		v := acc
		if scale != 1 {
			v = float64(v * scale)
		}
		out[j] = origin + v
	}
	return out
}

// TemporalSpan is the total RoPE time of latentFrames latents, summed the way
// NumPy's ndarray.sum does (pairwise, 8-way unrolled below 128 elements); the
// last-keyframe anchor depends on that exact rounding (37 latents:
// 206.66666666666663, while a sequential sum gives 206.66666666666657).
func TemporalSpan(latentFrames int) float64 {
	spans := make([]float64, latentFrames)
	for j := range spans {
		spans[j] = latentSpan(j)
	}
	// np.add.reduce starts from the identity 0 and adds the pairwise sum.
	return 0 + pairwiseSum(spans)
}

// pairwiseSum is NumPy's pairwise_sum for float64 (PW_BLOCKSIZE 128).
func pairwiseSum(a []float64) float64 {
	n := len(a)
	switch {
	case n < 8:
		res := 0.0
		for _, v := range a {
			res += v
		}
		return res
	case n <= 128:
		var r [8]float64
		copy(r[:], a[:8])
		i := 8
		for ; i < n-n%8; i += 8 {
			for k := range r {
				r[k] += a[i+k]
			}
		}
		res := ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
		for ; i < n; i++ {
			res += a[i]
		}
		return res
	default:
		n2 := n / 2
		n2 -= n2 % 8
		return pairwiseSum(a[:n2]) + pairwiseSum(a[n2:])
	}
}
