package wan

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"fastvideo/dit/wan/geometry"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
)

// Two-stage refine of the DMD students, as FastVideo's Apple-Silicon runtime does it
// (fastvideo/mlx_runtime/refine.py, run_two_pass_dmd; examples/inference/basic/mlx_wan_prompt_to_video.py):
// the DMD ladder at the requested size divided by the scale, its clean latents upsampled over H and W
// (bilinear, torch's align_corners=False, or nearest) and re-noised to the sigma of the first stage-2
// timestep, x = (1−σ_h)·up + σ_h·ε, then the stage-2 ladder (by default the stage-1 rungs without
// the leading ones at σ = 1: 1000, 757, 522 → 757, 522) at the requested size; decoded once.

// Refine upsampling modes (Request.RefineUpsample).
const (
	RefineBilinear = "bilinear"
	RefineNearest  = "nearest"
)

// RefinePlan is the two-stage refine of a Wan run (PlanDetails.Refine): both stages' sizes, latent
// grids and ladders, and the hand-off.
type RefinePlan struct {
	Scale        int   `json:"scale"`
	Stage1Height int   `json:"stage1_height"`
	Stage1Width  int   `json:"stage1_width"`
	TargetHeight int   `json:"target_height"`
	TargetWidth  int   `json:"target_width"`
	Stage1Latent []int `json:"stage1_latent"` // [C, T, H, W]
	Stage2Latent []int `json:"stage2_latent"`
	Stage1Tokens int   `json:"stage1_tokens"`
	Stage2Tokens int   `json:"stage2_tokens"`
	// Stage1Steps / Stage2Steps are the raw DMD rungs, Stage*Timesteps what the DiT is fed (warped
	// when the run warps), Stage*Sigmas their noise levels.
	Stage1Steps      []int     `json:"stage1_dmd_denoising_steps"`
	Stage1Timesteps  []float32 `json:"stage1_timesteps"`
	Stage1Sigmas     []float32 `json:"stage1_sigmas"`
	Stage2Steps      []int     `json:"stage2_dmd_denoising_steps"`
	Stage2Timesteps  []float32 `json:"stage2_timesteps"`
	Stage2Sigmas     []float32 `json:"stage2_sigmas"`
	Stage2StepsGiven bool      `json:"stage2_steps_given"`
	// Sigma is the hand-off sigma σ_h (GridSigma, the sigma of the first stage-2 rung, unless
	// Request.RefineSigma replaced it); the stage-1 result weighs 1−σ_h.
	Sigma     float64 `json:"handoff_sigma"`
	GridSigma float64 `json:"grid_sigma"`
	AddNoise  bool    `json:"add_noise"`
	Upsample  string  `json:"upsample"`
	// Seeds of the noise: stage 1 the run's seed (VideoNoise stream, as without refine), the
	// hand-off seed+1 and stage 2's re-noise seed+2 (familykit.RefineNoise stream).
	HandoffSeed int64 `json:"handoff_seed"`
	Stage2Seed  int64 `json:"stage2_seed"`
	// Warnings are what the run reports without stopping (refine over the spatial fast mode, a
	// hand-off sigma off the grid).
	Warnings []string `json:"warnings,omitempty"`
}

// refineRun is a resolved refine: the plan, the stage-1 geometry and the stage-2 ladder (the
// stage-1 ladder is resolved.steps; resolved.Geometry is the stage-2, output, geometry).
type refineRun struct {
	plan   RefinePlan
	stage1 geometry.Geometry
	ladder *ladder
}

// refineSizes is plan_refine_resolutions' RefinePlan.
type refineSizes struct {
	TargetHeight, TargetWidth, Stage1Height, Stage1Width, Scale, LatentFrames int
	Stage1Latent, Stage2Latent                                                [2]int
}

// planRefineResolutions is fastvideo/mlx_runtime/refine.py's plan_refine_resolutions with its
// messages (label "Refine" or "fast-spatial" prefixes the scale and patch ones): the target and
// stage-1 sizes, checked against the VAE's compression and the DiT's patch.
func planRefineResolutions(height, width, frames, scale, vaeSpatial, vaeTemporal int, patch [3]int, enabled bool, label string) (refineSizes, error) {
	var p refineSizes
	switch {
	case height <= 0 || width <= 0:
		return p, fmt.Errorf("height/width must be positive, got %dx%d", height, width)
	case scale < 1:
		return p, fmt.Errorf("spatial_scale must be >= 1, got %d", scale)
	case frames <= 0:
		return p, fmt.Errorf("num_frames must be positive, got %d", frames)
	case vaeSpatial < 1 || vaeTemporal < 1:
		return p, errors.New("VAE compression factors must be positive")
	case height%vaeSpatial != 0 || width%vaeSpatial != 0:
		return p, fmt.Errorf("height/width must be divisible by vae_spatial_compression=%d (got %dx%d).", vaeSpatial, height, width)
	case (frames-1)%vaeTemporal != 0:
		return p, fmt.Errorf("num_frames must be 1 modulo vae_temporal_compression=%d (got %d).", vaeTemporal, frames)
	}
	p = refineSizes{TargetHeight: height, TargetWidth: width, Stage1Height: height, Stage1Width: width, Scale: 1,
		LatentFrames: (frames-1)/vaeTemporal + 1}
	if enabled && scale != 1 {
		if height%scale != 0 || width%scale != 0 {
			return refineSizes{}, fmt.Errorf("%s requires height/width divisible by spatial_scale=%d (got %dx%d).", label, scale, height, width)
		}
		p.Stage1Height, p.Stage1Width, p.Scale = height/scale, width/scale, scale
		if p.Stage1Height%vaeSpatial != 0 || p.Stage1Width%vaeSpatial != 0 {
			return refineSizes{}, fmt.Errorf("%s requires height/width divisible by %d (got %dx%d, vae_spatial=%d).",
				label, scale*vaeSpatial, height, width, vaeSpatial)
		}
	}
	p.Stage1Latent = [2]int{p.Stage1Height / vaeSpatial, p.Stage1Width / vaeSpatial}
	p.Stage2Latent = [2]int{height / vaeSpatial, width / vaeSpatial}
	for _, st := range []struct {
		name string
		grid [2]int
	}{{"stage1", p.Stage1Latent}, {"stage2", p.Stage2Latent}} {
		if st.grid[0]%patch[1] != 0 || st.grid[1]%patch[2] != 0 {
			return refineSizes{}, fmt.Errorf("%s %s latent grid %dx%d is not divisible by patch spatial size %dx%d.",
				label, st.name, st.grid[0], st.grid[1], patch[1], patch[2])
		}
		if p.LatentFrames%patch[0] != 0 {
			return refineSizes{}, fmt.Errorf("%s latent_frames=%d is not divisible by patch temporal size %d.", label, p.LatentFrames, patch[0])
		}
	}
	return p, nil
}

// UpsampleLatents is upsample_latents_spatial (fastvideo/mlx_runtime/refine.py, its NumPy path) on one
// latent [C][T][H][W]: H and W times scale, C and T untouched. "nearest" repeats each value;
// "bilinear" is torch's align_corners=False in float32 with NumPy's operation order, per axis
// src = clamp((i+0.5)·in/out − 0.5, 0, in−1), i0 = ⌊src⌋, i1 = min(i0+1, in−1).
func UpsampleLatents(x []float32, c, t, h, w, scale int, mode string) ([]float32, error) {
	if scale < 1 {
		return nil, fmt.Errorf("scale must be >= 1, got %d", scale)
	}
	if c < 1 || t < 1 || h < 1 || w < 1 || len(x) != c*t*h*w {
		return nil, fmt.Errorf("wan: %d latent values for a [%d][%d][%d][%d] latent", len(x), c, t, h, w)
	}
	if mode != RefineBilinear && mode != RefineNearest {
		return nil, fmt.Errorf("Unsupported upsample mode: %s", mode)
	}
	if scale == 1 {
		return append([]float32(nil), x...), nil
	}
	oh, ow := h*scale, w*scale
	out := make([]float32, c*t*oh*ow)
	y0, y1, wy := axisTaps(h, oh)
	x0, x1, wx := axisTaps(w, ow)
	for m := 0; m < c*t; m++ {
		src, dst := x[m*h*w:(m+1)*h*w], out[m*oh*ow:(m+1)*oh*ow]
		for i := 0; i < oh; i++ {
			row := dst[i*ow : (i+1)*ow]
			if mode == RefineNearest {
				for j := range row {
					row[j] = src[(i/scale)*w+j/scale]
				}
				continue
			}
			r0, r1, fy := src[y0[i]*w:(y0[i]+1)*w], src[y1[i]*w:(y1[i]+1)*w], wy[i]
			for j := range row {
				fx := wx[j]
				// NumPy's broadcast order: wa=(1-wy)(1-wx), wb=(1-wy)wx, wc=wy(1-wx), wd=wy·wx;
				// wa·Ia + wb·Ib + wc·Ic + wd·Id left to right, every operation rounded to float32
				// (the conversions keep Go from fusing them).
				wa, wb := float32((1-fy)*(1-fx)), float32((1-fy)*fx)
				wc, wd := float32(fy*(1-fx)), float32(fy*fx)
				v := float32(wa*r0[x0[j]]) + float32(wb*r0[x1[j]])
				v = float32(v) + float32(wc*r1[x0[j]])
				row[j] = float32(v) + float32(wd*r1[x1[j]])
			}
		}
	}
	return out, nil
}

// axisTaps are one axis' bilinear taps from in to out samples, in float32 as NumPy computes
// (np.arange(out, float32) + 0.5) * (in/out) - 0.5, clipped.
func axisTaps(in, out int) (i0, i1 []int, frac []float32) {
	ratio := float32(float64(in) / float64(out))
	i0, i1, frac = make([]int, out), make([]int, out), make([]float32, out)
	for i := range out {
		s := float32(float32(float32(i)+0.5)*ratio) - 0.5
		s = min(max(s, 0), float32(in-1))
		f := int(math.Floor(float64(s)))
		i0[i], i1[i], frac[i] = f, min(f+1, in-1), s-float32(f)
	}
	return i0, i1, frac
}

// RefineHandoff re-noises the upsampled latents in place, add_noise of
// fastvideo/mlx_runtime/sampling.py in float32: up = (1−σ)·up + σ·ε.
func RefineHandoff(up, eps []float32, sigma float64) error {
	if len(eps) != len(up) {
		return fmt.Errorf("wan: refine hand-off noise has %d values, the latents %d", len(eps), len(up))
	}
	keep, s := float32(1-sigma), float32(sigma)
	for i := range up {
		up[i] = float32(keep*up[i]) + float32(s*eps[i])
	}
	return nil
}

// defaultRefineSteps is default_refine_timesteps: the stage-1 rungs without the leading ones whose
// sigma is 1 (full noise, which would weigh stage 1 at zero).
func defaultRefineSteps(steps []int, sigmas []float32) ([]int, error) {
	first := 0
	for first < len(steps) && sigmas[first] >= 1 {
		first++
	}
	if first == len(steps) {
		return nil, fmt.Errorf("No usable refine timesteps in %v: every entry is at sigma >= 1 (full noise), which would "+
			"discard the stage-1 result. Pass explicit stage-2 timesteps below the full-noise step.", steps)
	}
	return append([]int(nil), steps[first:]...), nil
}

// preferRefine applies upstream's precedence, refine > fast-spatial > off (resolve_spatial_mode):
// with both asked, the spatial fast mode and its pixel knobs are dropped with a note.
func preferRefine(req api.Request) (api.Request, string, error) {
	if !req.Refine || !req.FastSpatial {
		return req, "", nil
	}
	if s := req.FastSpatialScale; s != 0 && s < 2 {
		return req, "", &api.RequestError{Field: "fast_spatial_scale", Value: s,
			Allowed: "an integer >= 2 (the fast-spatial scale must be >= 2 when fast_spatial is set)"}
	}
	req.FastSpatial, req.FastSpatialScale, req.Upsample = false, 0, ""
	if !req.Fast {
		req.Sharpen = nil
	}
	return req, "[fast-spatial] note: refine is set; refine wins (quality path). The fast_spatial upsample-only path " +
		"(and its upsample/sharpen knobs) is skipped.", nil
}

// resolveRefine validates the refine knobs and plans the two stages (after the sampler: refine
// needs the DMD ladder).
func (r *resolved) resolveRefine(req api.Request) error {
	if field, value := familykit.RefineKnob(req); field != "" && !req.Refine {
		return &api.RequestError{Field: field, Value: value, Allowed: "unset unless refine is on"}
	}
	if !req.Refine {
		return nil
	}
	if r.image != nil {
		return &api.RequestError{Field: "refine", Value: true,
			Allowed: "false with a condition image (the MLX runtime's refine is text-to-video only)"}
	}
	if r.Sampler != SamplerDMD {
		return &api.RequestError{Field: "refine", Value: true, Allowed: fmt.Sprintf(
			"false for %s preset %s, which samples with %s: refine currently requires a DMD model (the MLX runtime's "+
				"--denoising-mode dmd); it runs on %s", r.spec.Name, r.preset.Name, r.Sampler, familykit.RefineModels)}
	}
	rf := &refineRun{}
	if err := r.refineGeometry(req, rf); err != nil {
		return err
	}
	if err := r.refineLadder(req, rf); err != nil {
		return err
	}
	if err := r.refineHandoffKnobs(req, rf); err != nil {
		return err
	}
	if r.opts.RenoiseNoise != nil {
		return &api.RequestError{Field: "renoise_noise", Value: fmt.Sprintf("%d values", len(r.opts.RenoiseNoise)),
			Allowed: "nil with refine (its stages draw their noise from the seed)"}
	}
	if req.VideoNoise != nil {
		return &api.RequestError{Field: "video_noise", Value: fmt.Sprintf("%d values", len(req.VideoNoise)),
			Allowed: "nil with refine (its stage-1 noise is drawn from the seed)"}
	}
	r.refine = rf
	r.Steps = len(r.steps.timesteps) + len(rf.ladder.timesteps)
	return nil
}

// refineGeometry checks the scale and the sizes (plan_refine_resolutions) and derives stage 1's
// geometry; the output's, r.Geometry, is stage 2's.
func (r *resolved) refineGeometry(req api.Request, rf *refineRun) error {
	scale := familykit.OrPreset(req.RefineScale, 2)
	if scale < 2 {
		return &api.RequestError{Field: "refine_scale", Value: scale, Allowed: "an integer >= 2 (Refine scale must be >= 2 when refine is set)"}
	}
	g := r.Geometry
	sizes, err := planRefineResolutions(g.Height, g.Width, g.NumFrames, scale, g.VAE.SpatialRatio, g.VAE.TemporalRatio, g.Patch, true, "Refine")
	if err != nil {
		allowed := fmt.Sprintf("a scale dividing the size onto the VAE and patch grid (%v)", err)
		if scale <= min(g.Height, g.Width) { // a hint that cannot overflow
			m := scale * g.VAE.SpatialRatio * max(g.Patch[1], g.Patch[2])
			allowed += fmt.Sprintf("; at scale %d ask for a size that is a multiple of %d, such as %dx%d", scale, m, roundUp(g.Height, m), roundUp(g.Width, m))
		}
		return &api.RequestError{Field: "refine_scale", Value: scale, Allowed: allowed}
	}
	if rf.stage1, err = geometry.New(g.VAE, sizes.Stage1Height, sizes.Stage1Width, g.NumFrames, g.Patch); err != nil {
		return &api.RequestError{Field: "refine_scale", Value: scale, Allowed: err.Error()}
	}
	s1 := rf.stage1
	c := g.VAE.LatentChannels
	rf.plan = RefinePlan{Scale: scale, Stage1Height: s1.Height, Stage1Width: s1.Width, TargetHeight: g.Height, TargetWidth: g.Width,
		Stage1Latent: []int{c, s1.LatentFrames, s1.LatentHeight, s1.LatentWidth},
		Stage2Latent: []int{c, g.LatentFrames, g.LatentHeight, g.LatentWidth},
		Stage1Tokens: s1.Tokens, Stage2Tokens: g.Tokens, HandoffSeed: r.Seed + 1, Stage2Seed: r.Seed + 2}
	return nil
}

// refineLadder builds the stage-2 ladder: the given rungs or the derived ones, warped like stage 1's.
func (r *resolved) refineLadder(req api.Request, rf *refineRun) error {
	l1 := r.steps
	var dmd1 []int
	if l1.dmd != nil {
		dmd1 = l1.dmd.Timesteps
	}
	steps := req.RefineSteps
	switch {
	case steps != nil && len(steps) == 0:
		return &api.RequestError{Field: "refine_steps", Value: steps, Allowed: "nil (derived from the DMD rungs) or a non-empty list: refine_timesteps must be non-empty when refine is enabled"}
	case steps == nil:
		var err error
		if steps, err = defaultRefineSteps(dmd1, l1.sigmas); err != nil {
			return &api.RequestError{Field: "refine_steps", Value: steps, Allowed: "explicit stage-2 timesteps: " + err.Error()}
		}
	default:
		rf.plan.Stage2StepsGiven = true
	}
	stage2 := *r
	stage2.DMDSteps = steps
	l2, err := stage2.newLadder()
	if err != nil {
		return &api.RequestError{Field: "refine_steps", Value: steps, Allowed: err.Error()}
	}
	rf.ladder = l2
	p := &rf.plan
	p.Stage1Steps, p.Stage1Timesteps, p.Stage1Sigmas = dmd1, l1.timesteps, l1.sigmas
	p.Stage2Steps, p.Stage2Timesteps, p.Stage2Sigmas = steps, l2.timesteps, l2.sigmas
	return nil
}

// refineHandoffKnobs resolves the hand-off: σ_h (the grid's or the request's, in [0, 1]; with noise
// on below 1), the noise switch and the upsampling mode.
func (r *resolved) refineHandoffKnobs(req api.Request, rf *refineRun) error {
	p := &rf.plan
	p.Upsample = req.RefineUpsample
	switch p.Upsample {
	case "":
		p.Upsample = RefineBilinear
	case RefineBilinear, RefineNearest:
	default:
		return &api.RequestError{Field: "refine_upsample", Value: req.RefineUpsample, Allowed: "bilinear (the default) or nearest"}
	}
	p.AddNoise = req.RefineAddNoise == nil || *req.RefineAddNoise
	p.GridSigma = float64(rf.ladder.sigmas[0])
	p.Sigma = p.GridSigma
	field := "refine_steps"
	if s := req.RefineSigma; s != nil {
		field, p.Sigma = "refine_sigma", *s
		if !(p.Sigma >= 0 && p.Sigma <= 1) {
			return &api.RequestError{Field: field, Value: p.Sigma, Allowed: fmt.Sprintf("a sigma in [0, 1] (sigma must be in [0, 1], got %g)", p.Sigma)}
		}
		if math.Abs(p.Sigma-p.GridSigma) > 1e-6 {
			p.Warnings = append(p.Warnings, fmt.Sprintf("Refine: refine_sigma=%.4f overrides the schedule's %.4f for timestep %g; "+
				"the DiT is told a timestep that no longer matches the noise it receives.", p.Sigma, p.GridSigma, rf.ladder.timesteps[0]))
		}
	}
	if p.AddNoise && p.Sigma >= 1 {
		return &api.RequestError{Field: field, Value: p.Sigma, Allowed: fmt.Sprintf(
			"a hand-off below full noise: Refine hand-off sigma=%.4f (from stage-2 timestep %g) discards the stage-1 result entirely: "+
				"the upsampled latents are weighted (1 - sigma) = 0. Start the stage-2 grid below the full-noise timestep, "+
				"or turn refine_add_noise off to hand off the clean upsample.", p.Sigma, rf.ladder.timesteps[0])}
	}
	return nil
}

// refineDenoise runs the two stages from stage 1's initial noise x: the stage-1 ladder at the
// reduced size, the hand-off (upsample, shape check, re-noise from the seed+1 stream) and the
// stage-2 ladder at the output size (re-noise from the seed+2 stream). Each part is a timing phase
// and its step events name it.
func (p *run) refineDenoise(ctx context.Context, st *sampler, x []float32) ([]float32, error) {
	rf, r, res := p.r.refine, p.r, p.s.Result
	for _, w := range rf.plan.Warnings {
		res.Warnings = append(res.Warnings, w)
		p.s.Emit(api.Event{Kind: api.Warning, Message: w})
	}
	n1, n2 := len(r.steps.timesteps), len(rf.ladder.timesteps)
	g1, g2 := rf.stage1, r.Geometry
	t0 := time.Now()
	err := p.s.DenoisePhase(ctx, family.DenoisePhase{Name: fmt.Sprintf("refine stage 1 (%dx%d)", g1.Height, g1.Width), Steps: n1, Total: n1 + n2},
		func(k int) error { return st.step(ctx, k, &x) })
	res.Timings.AddPhase("refine_stage1", time.Since(t0))
	if err != nil {
		return nil, err
	}
	t0 = time.Now()
	c := g1.VAE.LatentChannels
	up, err := UpsampleLatents(x, c, g1.LatentFrames, g1.LatentHeight, g1.LatentWidth, rf.plan.Scale, rf.plan.Upsample)
	if err != nil {
		return nil, fmt.Errorf("fastvideo: refine hand-off: %w", err)
	}
	if want := latentLen(g2); len(up) != want {
		return nil, fmt.Errorf("fastvideo: Refine upsample produced %dx%d latents, expected %dx%d for target %dx%d",
			g1.LatentHeight*rf.plan.Scale, g1.LatentWidth*rf.plan.Scale, g2.LatentHeight, g2.LatentWidth, g2.Height, g2.Width)
	}
	if rf.plan.AddNoise && rf.plan.Sigma > 0 {
		eps := make([]float32, len(up))
		familykit.NewGaussianStream(rf.plan.HandoffSeed, familykit.RefineNoise).Fill(eps)
		if err := RefineHandoff(up, eps, rf.plan.Sigma); err != nil {
			return nil, err
		}
	}
	res.Timings.AddPhase("refine_handoff", time.Since(t0))
	t0 = time.Now()
	st2 := *st
	st2.ladder, st2.geo, st2.offset = rf.ladder, g2, n1
	st2.noise = familykit.NewGaussianStream(rf.plan.Stage2Seed, familykit.RefineNoise)
	err = p.s.DenoisePhase(ctx, family.DenoisePhase{Name: fmt.Sprintf("refine stage 2 (%dx%d)", g2.Height, g2.Width), Offset: n1, Steps: n2, Total: n1 + n2},
		func(k int) error { return st2.step(ctx, k, &up) })
	res.Timings.AddPhase("refine_stage2", time.Since(t0))
	return up, err
}
