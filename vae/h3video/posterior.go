package h3video

import (
	"fmt"
	"math"

	"github.com/x448/float16"
)

// Sample draws from the posterior with the given standard-normal noise (one value per latent,
// Mean's layout): mean + exp(logvar/2)·noise in float32, the reference's
// DiagonalGaussianDistribution.sample (fastvideo/models/vaes/minimax_h3_video.py). The caller
// owns the noise stream (FL2VA keyframes draw it from a generator seeded
// packing.KeyframeEncodeSeed).
func (p Posterior) Sample(noise []float32) ([]float32, error) {
	if len(noise) != len(p.Mean) || len(p.LogVar) != len(p.Mean) {
		return nil, fmt.Errorf("h3video: posterior of %d latents sampled with %d noise values", len(p.Mean), len(noise))
	}
	out := make([]float32, len(p.Mean))
	for i, m := range p.Mean {
		std := float32(math.Exp(float64(float32(0.5) * p.LogVar[i])))
		out[i] = m + float32(std*noise[i])
	}
	return out, nil
}

// RoundTripF16 rounds every value to float16 and back (round to nearest even), in place: the
// latent preparation stage passes keyframe samples through float16 before normalizing them, and
// the condition rows inherit that rounding.
func RoundTripF16(v []float32) {
	for i, x := range v {
		v[i] = float16.Fromfloat32(x).Float32()
	}
}
