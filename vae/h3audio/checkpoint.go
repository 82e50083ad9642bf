package h3audio

import (
	"math"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// Params is the checkpoint parameter table of the audio VAE's decoder for cfg, in graph order
// (weight-normed convs as their weight_g/weight_v pair, as the release stores them).
func Params(cfg Config) (weights.Shapes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return weights.ShapesOf(declareDecoder(cfg, weights.NewSet(""), emptySource{})), nil
}

// EncoderParams is the checkpoint parameter table of the encoder (Options.Encoder), in graph order.
func EncoderParams(cfg Config) (weights.Shapes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return weights.ShapesOf(declareEncoder(cfg, weights.NewSet(""), emptySource{})), nil
}

type emptySource struct{}

func (emptySource) Names() []string                        { return nil }
func (emptySource) Tensor(string) (safetensors.Info, bool) { return safetensors.Info{}, false }

// KaiserSincFilter is BigVGAN's low-pass filter (kaiser_sinc_filter1d):
// a Kaiser-windowed sinc normalized to sum 1. The release ships these as
// buffers and Decode reads them from the checkpoint; this is for building
// checkpoints (benchmarks, converters). Activation1d uses
// KaiserSincFilter(0.25, 0.3, 12) for both its up- and down-sampler.
func KaiserSincFilter(cutoff, halfWidth float64, taps int) []float32 {
	half := taps / 2
	att := 2.285*float64(half-1)*math.Pi*(4*halfWidth) + 7.95
	var beta float64
	switch {
	case att > 50:
		beta = 0.1102 * (att - 8.7)
	case att >= 21:
		beta = 0.5842*math.Pow(att-21, 0.4) + 0.07886*(att-21)
	}
	// Computed in float32 like torch (kaiser_window, sinc and the sum are f32 ops).
	f := make([]float32, taps)
	var sum float32
	for n := range taps {
		var t float32
		if taps%2 == 0 {
			t = float32(n-half) + 0.5
		} else {
			t = float32(n - half)
		}
		// torch.kaiser_window(periodic=False): I0(β·sqrt(1-(2n/(N-1)-1)²)) / I0(β).
		r := 2*float64(n)/float64(taps-1) - 1
		w := float32(besselI0(beta*math.Sqrt(max(0, 1-r*r))) / besselI0(beta))
		x := 2 * float32(cutoff) * t
		sinc := float32(1)
		if x != 0 {
			px := math.Pi * float64(x)
			sinc = float32(math.Sin(px) / px)
		}
		f[n] = 2 * float32(cutoff) * w * sinc
		sum += f[n]
	}
	for n := range f {
		f[n] /= sum
	}
	return f
}

// besselI0 is the modified Bessel function of the first kind, order 0 (power series).
func besselI0(x float64) float64 {
	sum, term := 1.0, 1.0
	for k := 1; k < 100; k++ {
		term *= (x / 2) / float64(k)
		sum += term * term
		if term*term < sum*1e-17 {
			break
		}
	}
	return sum
}
