package schedule

import (
	"fmt"
	"math"
	"sort"

	"fastvideo/internal/hostmath"
	"fastvideo/internal/parallel"
)

// MiniMax H3 scheduler constants.
const (
	H3VideoShift = 12.0 // scheduler/scheduler_config.json
	H3AudioShift = 3.0  // audio_scheduler/scheduler_config.json

	// FastH3Steps is the distilled student's ladder: 4 DiT forwards on the
	// 5-point grid (FastVideo's num_inference_steps=5).
	FastH3Steps = 4
	// H3BaseSteps is the base model's preset: 49 forwards on the 50-point grid
	// (FastVideo's num_inference_steps=50).
	H3BaseSteps = 49

	// H3CleanTimestep is the clean-condition time (Ref2VA audio condition rows;
	// the MLX AdaLN cache always includes it).
	H3CleanTimestep float32 = 1.0
)

// H3Ladder is one rectified-flow ladder in H3's clean-time convention: the
// DiT is fed t = 1 - sigma (t = 0 is pure noise) and predicts a data-ward
// velocity. Video and audio each use their own ladder with the same number
// of steps.
type H3Ladder struct {
	Shift     float64
	Sigmas    []float32 // Steps()+1 values, strictly decreasing, ending at 0
	Timesteps []float32 // Steps() values, 1 - Sigmas[k] in float32
}

// H3GridSigmas is MiniMaxH3Scheduler.set_timesteps(points) (FastVideo/CUDA):
// base = torch.linspace(1, 0, points) in float32,
// sigma = shift*base/(1+(shift-1)*base) in float32, consecutive duplicates
// removed. points counts sigma-grid points, so points-1 forwards run.
func H3GridSigmas(shift float64, points int) ([]float32, error) {
	if !(shift > 0) || math.IsInf(shift, 0) {
		return nil, fmt.Errorf("schedule: shift must be positive and finite, got %g", shift)
	}
	if points < 2 {
		return nil, fmt.Errorf("schedule: an H3 sigma grid needs at least 2 points (1 step), got %d", points)
	}
	base := hostmath.TorchLinspaceF32(1, 0, points)
	sig := make([]float32, 0, points)
	for _, b := range base {
		s := shiftF32(shift, b)
		if len(sig) > 0 && sig[len(sig)-1] == s {
			continue
		}
		sig = append(sig, s)
	}
	return sig, nil
}

// NewH3Ladder builds the ladder of `steps` DiT forwards (the grid has
// steps+1 points), bit-exact to the reference for any step count.
// NewH3Ladder(12, 4) is FastH3's video ladder: sigma 1, 36/37, 12/13, 0.8, 0.
func NewH3Ladder(shift float64, steps int) (*H3Ladder, error) {
	if steps < 1 {
		return nil, fmt.Errorf("schedule: steps must be >= 1, got %d", steps)
	}
	sig, err := H3GridSigmas(shift, steps+1)
	if err != nil {
		return nil, err
	}
	return newH3Ladder(shift, sig), nil
}

// NewH3LadderFromSigmas is set_timesteps(sigmas=...): at least two strictly
// decreasing values ending at 0, rounded to float32.
func NewH3LadderFromSigmas(sigmas []float64) (*H3Ladder, error) {
	sig := make([]float32, len(sigmas))
	for i, s := range sigmas {
		sig[i] = float32(s)
	}
	ok := len(sig) >= 2 && sig[len(sig)-1] == 0
	for i := 1; ok && i < len(sig); i++ {
		ok = sig[i] < sig[i-1]
	}
	if !ok {
		return nil, fmt.Errorf("schedule: sigmas must hold at least two strictly decreasing values ending at 0.0, got %v", sigmas)
	}
	return newH3Ladder(0, sig), nil
}

// NewH3LadderFromDMDSteps builds the ladder a FastH3 inference contract
// (the MLX runtime's fastvideo_inference.json with scheduler shifts) declares:
// rungs are strictly decreasing integers in (0, 1000]; base = rungs/1000 and
// a final 0 in float64, sigma64 = shift*base/(1+(shift-1)*base),
// sigma = f32(sigma64) and t = f32(1 - sigma64) — the subtraction happens
// before rounding, which is what the shipped AdaLN caches are keyed on.
func NewH3LadderFromDMDSteps(shift float64, rungs []int) (*H3Ladder, error) {
	if !(shift > 0) || math.IsInf(shift, 0) {
		return nil, fmt.Errorf("schedule: shift must be positive and finite, got %g", shift)
	}
	if len(rungs) == 0 {
		return nil, fmt.Errorf("schedule: FastH3 DMD rungs must be a non-empty list")
	}
	for i, r := range rungs {
		if r <= 0 || r > 1000 || (i > 0 && r >= rungs[i-1]) {
			return nil, fmt.Errorf("schedule: FastH3 DMD rungs must be strictly decreasing integers in (0, 1000], got %v", rungs)
		}
	}
	l := &H3Ladder{Shift: shift, Sigmas: make([]float32, len(rungs)+1), Timesteps: make([]float32, len(rungs))}
	for i, r := range rungs {
		s := shiftF64(shift, float64(r)/1000.0)
		l.Sigmas[i] = float32(s)
		l.Timesteps[i] = float32(1 - s)
	}
	return l, nil
}

func newH3Ladder(shift float64, sig []float32) *H3Ladder {
	l := &H3Ladder{Shift: shift, Sigmas: sig, Timesteps: make([]float32, len(sig)-1)}
	for i := range l.Timesteps {
		l.Timesteps[i] = 1 - sig[i]
	}
	return l
}

// Steps is the number of DiT forwards.
func (l *H3Ladder) Steps() int { return len(l.Timesteps) }

// Step is MiniMaxH3Scheduler.step for step k on float32 rows:
// x0 = x + (1 - t_k)*v (sigma re-derived from the float32 timestep on
// purpose), r = sigma[k+1]/sigma[k], out = r*x + (1 - r)*x0, each operation
// rounded to float32 as the reference does. out may alias sample.
func (l *H3Ladder) Step(k int, velocity, sample, out []float32) error {
	if err := checkStep(k, l.Steps(), velocity, sample, out); err != nil {
		return err
	}
	sigmaT := 1 - l.Timesteps[k]
	ratio := l.Sigmas[k+1] / l.Sigmas[k]
	keep := 1 - ratio
	elementwise(len(sample), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x := sample[i]
			x0 := x + float32(sigmaT*velocity[i])
			out[i] = float32(ratio*x) + float32(keep*x0)
		}
	})
	return nil
}

// elementwise runs fn over [0, n) on every core: a step's update of a release-size latent (millions
// of values) is what the host does between two DiT forwards while the device waits. Each element is
// computed as one core would, so the numbers are the same.
func elementwise(n int, fn func(lo, hi int)) { parallel.Ranges(n, 1<<15, fn) }

// checkStep checks that k is one of steps steps and that velocity, sample and out have one length.
func checkStep(k, steps int, velocity, sample, out []float32) error {
	if k < 0 || k >= steps {
		return fmt.Errorf("schedule: step %d out of range [0, %d)", k, steps)
	}
	if len(velocity) != len(sample) || len(out) != len(sample) {
		return fmt.Errorf("schedule: velocity (%d), sample (%d) and out (%d) lengths differ", len(velocity), len(sample), len(out))
	}
	return nil
}

// ScaleNoise is scale_noise(clean, t, noise) = t*clean + (1-t)*noise in
// float32 (FL2VA condition rows use t = 0.999). out may alias either input.
func ScaleNoise(clean, noise []float32, t float32, out []float32) error {
	if len(clean) != len(noise) || len(out) != len(clean) {
		return fmt.Errorf("schedule: clean (%d), noise (%d) and out (%d) lengths differ", len(clean), len(noise), len(out))
	}
	rest := 1 - t
	elementwise(len(clean), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = float32(t*clean[i]) + float32(rest*noise[i])
		}
	})
	return nil
}

// H3Schedule pairs the video and audio ladders of one run.
type H3Schedule struct {
	Video, Audio *H3Ladder
}

// NewH3Schedule builds both released ladders (video shift 12, audio shift 3)
// for `steps` forwards.
func NewH3Schedule(steps int) (*H3Schedule, error) {
	v, err := NewH3Ladder(H3VideoShift, steps)
	if err != nil {
		return nil, err
	}
	a, err := NewH3Ladder(H3AudioShift, steps)
	if err != nil {
		return nil, err
	}
	return &H3Schedule{Video: v, Audio: a}, nil
}

// Steps is the number of DiT forwards.
func (s *H3Schedule) Steps() int { return s.Video.Steps() }

// Conditions says which condition rows a run packs.
type Conditions struct {
	Video bool // FL2VA keyframe rows, fed max(t_video, 0.999)
	Audio bool // Ref2VA audio reference rows, fed 1.0
}

// StepTimesteps is the DiT's `timestep` input at step k: the sorted distinct
// row timesteps (text and video rows take the video time, audio rows the
// audio time, condition rows their clean times).
func (s *H3Schedule) StepTimesteps(k int, cond Conditions) []float32 {
	vals := []float32{s.Video.Timesteps[k], s.Audio.Timesteps[k]}
	if cond.Video {
		vals = append(vals, float32(math.Max(float64(s.Video.Timesteps[k]), 0.999)))
	}
	if cond.Audio {
		vals = append(vals, H3CleanTimestep)
	}
	return sortedUnique(vals)
}

// VisitedTimesteps is every distinct timestep the DiT sees over the run: the
// keys an AdaLN step cache must hold.
func (s *H3Schedule) VisitedTimesteps(cond Conditions) []float32 {
	var all []float32
	for k := 0; k < s.Steps(); k++ {
		all = append(all, s.StepTimesteps(k, cond)...)
	}
	return sortedUnique(all)
}

// AdaLNCacheTimesteps is the MLX runtime's cache key set: the T2VA visited
// timesteps plus the clean time 1.0. For the 4-step ladder: 0,
// 0.027027011, 0.07692307, 0.10000002, 0.19999999, 0.25, 0.5, 1.
func (s *H3Schedule) AdaLNCacheTimesteps() []float32 {
	return sortedUnique(append(s.VisitedTimesteps(Conditions{}), H3CleanTimestep))
}

// CachePositions maps a step's distinct timesteps to rows of a cache key set
// (searchsorted, each match within 1e-6), e.g. FastH3 step 1 -> [1, 3].
func CachePositions(keys, unique []float32) ([]int, error) {
	out := make([]int, len(unique))
	for i, u := range unique {
		j := sort.Search(len(keys), func(j int) bool { return keys[j] >= u })
		best := -1
		for _, c := range []int{j - 1, j} {
			if c >= 0 && c < len(keys) && math.Abs(float64(keys[c])-float64(u)) <= 1e-6 {
				if best < 0 || math.Abs(float64(keys[c])-float64(u)) < math.Abs(float64(keys[best])-float64(u)) {
					best = c
				}
			}
		}
		if best < 0 {
			return nil, fmt.Errorf("schedule: timestep %v is not in the cached ladder %v", u, keys)
		}
		out[i] = best
	}
	return out, nil
}

func sortedUnique(v []float32) []float32 {
	s := append([]float32(nil), v...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != out[len(out)-1] {
			out = append(out, x)
		}
	}
	return out
}
