// Package hostmath holds the small host-side tables several models compute the same way, following
// the reference's rounding step by step so their bits match it (plain Go, no graphs; schedule/ may use
// it too).
package hostmath

import "math"

// Linspace is NumPy's linspace(start, stop, num) with endpoint=True, in float64:
// step = (stop−start)/(num−1), value i = i·step + start, the last value exactly stop.
func Linspace(start, stop float64, num int) []float64 {
	out := make([]float64, num)
	if num == 0 {
		return out
	}
	if num == 1 {
		out[0] = start
		return out
	}
	div := float64(num - 1)
	delta := stop - start
	step := delta / div
	for i := range out {
		if step == 0 {
			out[i] = float64(float64(i)/div)*delta + start
		} else {
			out[i] = float64(float64(i)*step) + start
		}
	}
	out[num-1] = stop
	return out
}

// TimestepSinusoid is the sinusoidal timestep embedding [len(timesteps), freqDim] of diffusers'
// Timesteps(flip_sin_to_cos=True, downscale_freq_shift=0): freq_i = exp(−ln(10000)·i/half) and
// e = [cos(t·freq), sin(t·freq)] (cosine half first), in float32 as the reference computes it (each
// product rounded to float32, the elementary functions evaluated in float64 and rounded once).
// The timesteps are used as given (H3 passes t ∈ [0, 1], Wan raw timesteps such as 1000).
func TimestepSinusoid(timesteps []float32, freqDim int) []float32 {
	half := freqDim / 2
	freqs := make([]float32, half)
	negLog := float32(-math.Log(10000))
	for i := range freqs {
		e := float32(negLog*float32(i)) / float32(half)
		freqs[i] = float32(math.Exp(float64(e)))
	}
	out := make([]float32, len(timesteps)*freqDim)
	for r, t := range timesteps {
		for i, f := range freqs {
			a := float64(float32(t * f))
			out[r*freqDim+i] = float32(math.Cos(a))
			out[r*freqDim+half+i] = float32(math.Sin(a))
		}
	}
	return out
}

// TorchLinspaceF32 is torch.linspace(start, end, steps, dtype=float32) on CPU:
// step = (end-start)/(steps-1) in float32, then the first half counts up from
// start and the second half down from end. PyTorch's compiled kernel contracts
// start + step*i into one fused multiply-add (verified bit for bit against the
// 50-point H3 grids), so the products are not rounded separately here.
func TorchLinspaceF32(start, end float32, steps int) []float32 {
	out := make([]float32, steps)
	if steps == 1 {
		out[0] = start
		return out
	}
	step := (end - start) / float32(steps-1)
	half := steps / 2
	for i := range out {
		if i < half {
			out[i] = fmaF32(step, float32(i), start)
		} else {
			out[i] = fmaF32(-step, float32(steps-i-1), end)
		}
	}
	return out
}

// fmaF32 is a float32 fused multiply-add: the exact product of two float32 values fits a float64,
// and math.FMA rounds once.
func fmaF32(a, b, c float32) float32 {
	return float32(math.FMA(float64(a), float64(b), float64(c)))
}

// SNRdB is the signal-to-noise ratio of got against the reference ref, in decibels:
// 10·log10(Σ ref² / Σ (got − ref)²) (+Inf when they are equal).
func SNRdB(got, ref []float32) float64 {
	var s, n float64
	for i := range ref {
		d := float64(got[i]) - float64(ref[i])
		s += float64(ref[i]) * float64(ref[i])
		n += d * d
	}
	return 10 * math.Log10(s/n)
}
