package familykit

import (
	"encoding/binary"
	"math"
	"math/bits"
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

// Fill writes the stream's next len(out) values. The generator is one sequence, but its state after any
// number of draws is a jump away (pcgAfter), so every core starts where its range of value pairs does and
// draws and transforms those (FastH3's 2.8 M latent values took about 60 ms on one core before the first
// step, the GPU idle meanwhile); each value is the same as one at a time.
func (g *GaussianStream) Fill(out []float32) {
	if g.hasSpare && len(out) > 0 {
		out[0], g.hasSpare = g.spare, false
		out = out[1:]
	}
	if len(out) == 0 {
		return
	}
	start := pcgState(g.src)
	pairs, n := (len(out)+1)/2, len(out)
	parallel.Ranges(pairs, 1<<14, func(lo, hi int) {
		src := pcgAfter(start, uint64(2*lo))
		for p := lo; p < hi; p++ {
			a, b := boxMuller(src.Uint64(), src.Uint64())
			out[2*p] = a
			if 2*p+1 < n {
				out[2*p+1] = b
			} else {
				g.spare, g.hasSpare = b, true
			}
		}
	})
	g.src = pcgAfter(start, uint64(2*pairs))
}

// u128 is a 128-bit unsigned integer, the state of math/rand/v2's PCG.
type u128 struct{ hi, lo uint64 }

func (a u128) times(b u128) u128 {
	hi, lo := bits.Mul64(a.lo, b.lo)
	return u128{hi + a.hi*b.lo + a.lo*b.hi, lo}
}

func (a u128) plus(b u128) u128 {
	lo, c := bits.Add64(a.lo, b.lo, 0)
	hi, _ := bits.Add64(a.hi, b.hi, c)
	return u128{hi, lo}
}

// The LCG math/rand/v2's PCG steps its state with before each draw: state·pcgMul + pcgInc mod 2^128
// (its next(); TestPCGAfter holds these to it).
var (
	pcgMul = u128{2549297995355413924, 4865540595714422341}
	pcgInc = u128{6364136223846793005, 1442695040888963407}
)

// pcgState reads src's 128-bit state (its binary form: "pcg:", then the high and low words big-endian).
func pcgState(src *rand.PCG) u128 {
	b, _ := src.MarshalBinary() // never fails
	return u128{binary.BigEndian.Uint64(b[4:]), binary.BigEndian.Uint64(b[12:])}
}

// pcgAfter is a PCG in the state one started at state reaches after n draws: the LCG's n steps composed
// in O(log n) (F. Brown, "Random number generation with arbitrary strides", 1994).
func pcgAfter(state u128, n uint64) *rand.PCG {
	accMul, accInc := u128{0, 1}, u128{}
	mul, inc := pcgMul, pcgInc
	for ; n > 0; n >>= 1 {
		if n&1 == 1 {
			accMul, accInc = accMul.times(mul), accInc.times(mul).plus(inc)
		}
		inc = mul.plus(u128{0, 1}).times(inc)
		mul = mul.times(mul)
	}
	state = accMul.times(state).plus(accInc)
	b := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64([]byte("pcg:"), state.hi), state.lo)
	src := new(rand.PCG)
	_ = src.UnmarshalBinary(b) // the form MarshalBinary writes
	return src
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
