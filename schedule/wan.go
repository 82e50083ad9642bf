package schedule

import (
	"fmt"
	"math"

	"fastvideo/internal/hostmath"
)

// Flow shifts of FastVideo's Wan pipeline configs (fastvideo/configs/pipelines/wan.py), for
// NewUniPC (the base models' solver) and NewFlowMatchEuler.
const (
	Wan21T2V480PShift = 3.0  // Wan2.1-T2V-1.3B, 50 steps
	Wan21T2V720PShift = 5.0  // Wan2.1-T2V-14B, 50 steps
	Wan22TI2V5BShift  = 5.0  // Wan2.2-TI2V-5B, 50 steps
	Wan22T2VA14BShift = 12.0 // Wan2.2-T2V-A14B, 40 steps
	Wan22I2VA14BShift = 5.0  // Wan2.2-I2V-A14B, 40 steps
	FastWanShift      = 8.0  // FastWan configs; the DMD loop does not use it

	// Wan2.2 A14B runs the high-noise expert while t >= boundary*1000.
	Wan22T2VA14BBoundary = 0.875
	Wan22I2VA14BBoundary = 0.900
)

const (
	WanTrainTimesteps = 1000
	// DMDGridShift is the shift of the training grid FastVideo's DMD stage
	// looks sigmas up in: it builds FlowMatchEulerDiscreteScheduler(shift=8)
	// regardless of the pipeline's flow_shift.
	DMDGridShift = 8.0
)

// FastWanDMDSteps are the raw timesteps of the FastWan students
// (dmd_denoising_steps of both FastWan pipeline configs).
var FastWanDMDSteps = []int{1000, 757, 522}

// HighNoiseExpert says whether Wan2.2 A14B runs its high-noise expert
// (transformer/) rather than the low-noise one (transformer_2/) at timestep
// t: t >= boundaryRatio*1000, as FastVideo's denoising stage compares.
func HighNoiseExpert(t int64, boundaryRatio float64) bool {
	return float64(t) >= boundaryRatio*WanTrainTimesteps
}

// FlowShift is s*x/(1+(s-1)*x) in float64.
func FlowShift(shift, x float64) float64 { return shiftF64(shift, x) }

// flowMatchTrainGrid is FlowMatchEulerDiscreteScheduler's training table:
// timesteps 1000..1 (float32), sigma = shift(t/1000) in float32, and the
// timesteps the grid is searched by, sigma*1000 in float32.
func flowMatchTrainGrid(shift float64) (sigmas, timesteps []float32) {
	sigmas = make([]float32, WanTrainTimesteps)
	timesteps = make([]float32, WanTrainTimesteps)
	for i := range sigmas {
		t := float32(WanTrainTimesteps - i)
		s := shiftF32(shift, t/WanTrainTimesteps)
		sigmas[i] = s
		timesteps[i] = s * WanTrainTimesteps
	}
	return sigmas, timesteps
}

// FlowMatchEuler is FlowMatchEulerDiscreteScheduler (no dynamic shifting,
// final sigma 0): x_{k+1} = x_k + (sigma_{k+1} - sigma_k)*v.
type FlowMatchEuler struct {
	Shift     float64
	Sigmas    []float32 // Steps()+1 values ending at 0
	Timesteps []float32 // fed to the DiT: 1000*sigma in float32
}

// NewFlowMatchEuler is set_timesteps(steps): t = linspace(1000*sigma_max,
// 1000*sigma_min, steps) in float64 over the training range, sigma =
// shift(t/1000) in float64 (the training table already shifted the ends once),
// rounded to float32.
func NewFlowMatchEuler(shift float64, steps int) (*FlowMatchEuler, error) {
	if !(shift > 0) || math.IsInf(shift, 0) {
		return nil, fmt.Errorf("schedule: shift must be positive and finite, got %g", shift)
	}
	if steps < 1 {
		return nil, fmt.Errorf("schedule: steps must be >= 1, got %d", steps)
	}
	train, _ := flowMatchTrainGrid(shift)
	tMax := float64(train[0]) * WanTrainTimesteps
	tMin := float64(train[len(train)-1]) * WanTrainTimesteps
	ts := hostmath.Linspace(tMax, tMin, steps)
	f := &FlowMatchEuler{Shift: shift, Sigmas: make([]float32, steps+1), Timesteps: make([]float32, steps)}
	for i, t := range ts {
		s := float32(shiftF64(shift, t/WanTrainTimesteps))
		f.Sigmas[i] = s
		f.Timesteps[i] = s * WanTrainTimesteps
	}
	return f, nil
}

// Steps is the number of DiT forwards.
func (f *FlowMatchEuler) Steps() int { return len(f.Timesteps) }

// Step updates float32 rows: out = x + dt*v with dt = sigma[k+1]-sigma[k].
// out may alias sample.
func (f *FlowMatchEuler) Step(k int, velocity, sample, out []float32) error {
	if err := checkStep(k, f.Steps(), velocity, sample, out); err != nil {
		return err
	}
	dt := f.Sigmas[k+1] - f.Sigmas[k]
	elementwise(len(sample), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = sample[i] + float32(dt*velocity[i])
		}
	})
	return nil
}

// DMDLadder is FastVideo's DmdDenoisingStage: the DiT is fed raw integer
// timesteps; each step predicts x0 = x - sigma(t_k)*v (float64 math, cast to
// float32) and, except after the last step, re-noises
// x_{k+1} = (1 - sigma(t_{k+1}))*x0 + sigma(t_{k+1})*noise_k with fresh noise.
// sigma(t) is the nearest entry of the shift-8 training grid (first index on
// ties). There is no classifier-free guidance.
type DMDLadder struct {
	Timesteps []int     // raw timesteps fed to the DiT, e.g. 1000, 757, 522
	Sigmas    []float32 // sigma(t_k) looked up on the training grid
	// WarpedTimesteps is set by NewWarpedDMDLadder: the float timesteps fed
	// instead of the raw integers.
	WarpedTimesteps []float32
	sigma64         []float64 // float64 view used by the x0 prediction
}

// NewDMDLadder looks each raw timestep up on the DMD grid (shift 8): for
// FastWan 1000, 757, 522 -> sigma 1, 0.75675672, 0.52173913.
func NewDMDLadder(timesteps []int) (*DMDLadder, error) {
	if len(timesteps) == 0 {
		return nil, fmt.Errorf("schedule: DMD needs at least one timestep")
	}
	for i, t := range timesteps {
		if t <= 0 || t > WanTrainTimesteps || (i > 0 && t >= timesteps[i-1]) {
			return nil, fmt.Errorf("schedule: DMD timesteps must be strictly decreasing integers in (0, 1000], got %v", timesteps)
		}
	}
	sig, grid := flowMatchTrainGrid(DMDGridShift)
	d := &DMDLadder{Timesteps: append([]int(nil), timesteps...)}
	for _, t := range timesteps {
		// pred_noise_to_pred_video searches in float64 (the add_noise path in
		// float32 picks the same index for every integer t: grid points are
		// far from midpoints between integers).
		best, bestD := 0, math.Inf(1)
		for i, g := range grid {
			if dd := math.Abs(float64(g) - float64(t)); dd < bestD {
				best, bestD = i, dd
			}
		}
		d.Sigmas = append(d.Sigmas, sig[best])
		d.sigma64 = append(d.sigma64, float64(sig[best]))
	}
	return d, nil
}

// NewWarpedDMDLadder is the MLX Wan2.2-5B recipe (warp_denoising_step): the
// fed timestep is the shift-`shift` training timestep at index 1000 - t, and
// sigma is that grid's sigma. shift 5 on 1000, 757, 522 gives 1000, 939.6724,
// 845.2073.
func NewWarpedDMDLadder(timesteps []int, shift float64) (*DMDLadder, error) {
	d, err := NewDMDLadder(timesteps)
	if err != nil {
		return nil, err
	}
	sig, grid := flowMatchTrainGrid(shift)
	d.WarpedTimesteps = make([]float32, len(timesteps))
	for k, t := range timesteps {
		i := WanTrainTimesteps - t
		d.WarpedTimesteps[k] = grid[i]
		d.Sigmas[k] = sig[i]
		d.sigma64[k] = float64(sig[i])
	}
	return d, nil
}

// Steps is the number of DiT forwards.
func (d *DMDLadder) Steps() int { return len(d.Timesteps) }

// PredictX0 is pred_noise_to_pred_video for step k: x0 = x - sigma*v in
// float64, rounded to float32. out may alias x.
func (d *DMDLadder) PredictX0(k int, velocity, x, out []float32) error {
	if err := checkStep(k, d.Steps(), velocity, x, out); err != nil {
		return err
	}
	s := d.sigma64[k]
	elementwise(len(x), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = float32(float64(x[i]) - float64(s*float64(velocity[i])))
		}
	})
	return nil
}

// Renoise is the transition into step k+1 (k < Steps()-1):
// out = (1 - sigma_{k+1})*x0 + sigma_{k+1}*noise in float32. out may alias x0.
func (d *DMDLadder) Renoise(k int, x0, noise, out []float32) error {
	if k < 0 || k+1 >= d.Steps() {
		return fmt.Errorf("schedule: no re-noise after step %d of %d", k, d.Steps())
	}
	if len(noise) != len(x0) || len(out) != len(x0) {
		return fmt.Errorf("schedule: x0 (%d), noise (%d) and out (%d) lengths differ", len(x0), len(noise), len(out))
	}
	s := d.Sigmas[k+1]
	keep := 1 - s
	elementwise(len(x0), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = float32(keep*x0[i]) + float32(s*noise[i])
		}
	})
	return nil
}
