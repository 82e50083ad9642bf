package familykit

import (
	"math"
	"math/rand/v2"

	"fastvideo/internal/parallel"
)

// NoiseStream names an independent Gaussian stream derived from one seed, so that
// the video noise does not shift when the audio length changes and vice versa.
type NoiseStream uint64

const (
	VideoNoise NoiseStream = 1
	AudioNoise NoiseStream = 2
	// KeyframeNoise is the noise mixed into H3's FL2VA condition rows (drawn from the request seed,
	// one keyframe after the other); KeyframeSampleNoise samples a keyframe's VAE posterior and is
	// seeded with a fixed value, restarted for every keyframe, as upstream does.
	KeyframeNoise       NoiseStream = 3
	KeyframeSampleNoise NoiseStream = 4
	// RefineNoise is Wan's two-stage refine after stage 1 (whose initial noise and re-noise are the
	// VideoNoise stream of the seed, as without refine): the hand-off noise from seed+1 and the
	// stage-2 re-noise from seed+2, the MLX runtime's seed offsets (fastvideo/mlx_runtime/refine.py,
	// run_two_pass_dmd, which draws them from NumPy's default_rng(seed+1) and (seed+2)).
	RefineNoise NoiseStream = 5
)

// GaussianNoise fills n standard-normal float32 values for (seed, stream).
//
// The generator is PCG-DXSM (math/rand/v2's NewPCG, whose output the Go
// project specifies) seeded with (seed, stream), turned into normals by our own
// Box-Muller transform in float64, so the values are fixed by this code and not
// by a library's choice of normal sampler. It cannot reproduce PyTorch's
// torch.randn stream: a Go run and a Python run with the same seed start from
// different noise. To reproduce a Python latent exactly, inject its noise through
// Request.VideoNoise / h3.Options.AudioNoise.
//
// The first n values of a longer draw are the n values of a shorter one: a Wan DMD
// run takes its initial noise and then its re-noise draws from one VideoNoise
// stream, so its initial noise equals GaussianNoise(seed, VideoNoise, n).
func GaussianNoise(seed int64, stream NoiseStream, n int) []float32 {
	out := make([]float32, n)
	NewGaussianStream(seed, stream).Fill(out)
	return out
}

// GaussianStream continues one (seed, stream) sequence across calls, exactly as a
// single GaussianNoise call of the total length would produce it.
type GaussianStream struct {
	src      *rand.PCG
	spare    float32
	hasSpare bool
}

func NewGaussianStream(seed int64, stream NoiseStream) *GaussianStream {
	return &GaussianStream{src: rand.NewPCG(uint64(seed), uint64(stream)*0x9e3779b97f4a7c15)}
}

// noiseBlock bounds the uniform draws buffered at once (pairs of values: 16 MiB of bits).
const noiseBlock = 1 << 20

// Fill writes the stream's next len(out) values. The generator is sequential, so its draws are taken
// first; the Box-Muller transforms, nearly all of the time (about 50 ms for FastH3's 2.8 M latent values
// on one core, the GPU idle meanwhile), then run over the cores, each value the same as one at a time.
func (g *GaussianStream) Fill(out []float32) {
	if g.hasSpare && len(out) > 0 {
		out[0], g.hasSpare = g.spare, false
		out = out[1:]
	}
	bits := make([]uint64, 2*min(noiseBlock, (len(out)+1)/2))
	for len(out) > 0 {
		pairs := min(noiseBlock, (len(out)+1)/2)
		for i := range 2 * pairs {
			bits[i] = g.src.Uint64()
		}
		n := min(len(out), 2*pairs)
		parallel.Ranges(pairs, 1<<14, func(lo, hi int) {
			for p := lo; p < hi; p++ {
				a, b := boxMuller(bits[2*p], bits[2*p+1])
				out[2*p] = a
				if 2*p+1 < n {
					out[2*p+1] = b
				} else {
					g.spare, g.hasSpare = b, true
				}
			}
		})
		out = out[n:]
	}
}

// boxMuller turns two uniform draws into two standard normals, in float64.
func boxMuller(x1, x2 uint64) (float32, float32) {
	// u1 in (0, 1] keeps the logarithm finite.
	u1 := (float64(x1>>11) + 1) / (1 << 53)
	u2 := float64(x2>>11) / (1 << 53)
	r := math.Sqrt(-2 * math.Log(u1))
	s, c := math.Sincos(2 * math.Pi * u2)
	return float32(r * c), float32(r * s)
}
