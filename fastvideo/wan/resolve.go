package wan

import (
	"fmt"
	"math"
	"strings"

	"fastvideo/attention"
	"fastvideo/dit/wan/geometry"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/fastvideo/framefilter"
)

// MaxFPS bounds a Wan request's frame rate: the rate only labels the container (the model has no
// notion of time), and ffmpeg handles any rate, so this merely catches typos.
const MaxFPS = 120

// resolved is a validated Wan request: the common fields, the latent and token grid, and the
// sampler's knobs.
type resolved struct {
	family.Resolved
	spec   *Spec
	preset Preset
	opts   Options

	// CFG is classifier-free guidance: two DiT forwards per step, v = v_u + g·(v_c − v_u).
	CFG                bool
	Sampler            Sampler
	DMDSteps           []int // the raw DMD rungs (SamplerDMD)
	WarpDenoisingSteps bool
	FlowShift          float64
	// Geometry is the latent and token grid the DiT and VAE run at: the output's, or the reduced
	// one of the fast modes.
	Geometry     geometry.Geometry
	FastTemporal *FastTemporalPlan
	FastSpatial  *FastSpatialPlan
	// refine is the two-stage refine (nil: one stage); Geometry is then its stage 2's.
	refine *refineRun
	// image is the first-frame condition (Wan2.2 TI2V), nil for text-to-video.
	image *imageCondition
	// vsa is the run's Video Sparse Attention (nil: dense).
	vsa *familykit.VSA
	// window is the run's attention window (nil: none, or one that covers every forward's tokens).
	window *attention.Window
	// attentionWhy says why a VSA-trained model runs dense attention, or which window runs (the plan's
	// attention row).
	attentionWhy string
	// steps is the sampling ladder, built once: the plan shows it and the run's loop steps it (a
	// UniPC solver is stateful, and every run resolves its request afresh).
	steps *ladder
}

func (r *resolved) Common() *family.Resolved { return &r.Resolved }

// Resolve applies the preset and validates req for a Wan model. Upstream only checks that the
// size is a multiple of 8, so bad shapes fail deep inside the pipeline or, for the frame count,
// silently produce fewer frames; here every constraint is checked before anything loads: sizes are
// multiples of the VAE ratio times the DiT patch, frame counts are 4n+1, and the sampler's knobs
// are only accepted where they do something.
func (s *Spec) Resolve(req api.Request, needPrompt bool) (family.Resolution, error) {
	_, common, err := family.ResolveCommon(s.ModelInfo, req, needPrompt)
	if err != nil {
		return nil, err
	}
	r := &resolved{Resolved: *common, spec: s, preset: s.presets[common.Preset], FlowShift: s.FlowShift}
	if o, ok := req.Options.(*Options); ok && o != nil {
		r.opts = *o
	}
	if err := r.resolveImage(&req); err != nil {
		return nil, err
	}
	req, note, err := preferRefine(req)
	if err != nil {
		return nil, err
	}
	for _, step := range []func(api.Request) error{
		r.resolveGrid, r.resolveFilters, r.resolveSampler, r.resolveRefine, r.checkNoise, r.resolveWindow, r.resolveVSA,
	} {
		if err := step(req); err != nil {
			return nil, err
		}
	}
	if note != "" {
		r.refine.plan.Warnings = append([]string{note}, r.refine.plan.Warnings...)
	}
	return r, nil
}

// resolveGrid checks the size (both or neither, multiples of the VAE ratio times the patch), the
// frame count (4n+1, bounded; any count with the temporal fast mode, whose source clip is 4n+1),
// the fast modes' reduced grid, a token grid the RoPE tables cover, and the rate.
func (r *resolved) resolveGrid(req api.Request) error {
	s, preset := r.spec, r.preset
	vae := geometryVAE(s.VAE)
	patch := [3]int{s.DiT.PatchSize[0], s.DiT.PatchSize[1], s.DiT.PatchSize[2]}
	var err error
	rule := familykit.SizeRule{
		HeightMultiple: vae.SpatialRatio * patch[1], WidthMultiple: vae.SpatialRatio * patch[2], MaxSide: s.MaxSide,
		Why: fmt.Sprintf("the %s VAE's %dx compression times the DiT's patch", vae.Name, vae.SpatialRatio)}
	if r.Height, r.Width, err = familykit.ResolveSize(req, preset.Preset, rule); err != nil {
		return err
	}
	r.NumFrames = familykit.OrPreset(req.NumFrames, preset.NumFrames)
	r.RequestedFrames = r.NumFrames
	frames, err := r.sourceFrames(req, vae.TemporalRatio)
	if err != nil {
		return err
	}
	h, w, err := r.stage1Size(req, rule)
	if err != nil {
		return err
	}
	if r.Geometry, err = geometry.New(vae, h, w, frames, patch); err != nil {
		return &api.RequestError{Field: "num_frames", Value: r.NumFrames, Allowed: err.Error()}
	}
	if err := r.checkRope(); err != nil {
		return err
	}
	r.FPS = familykit.OrPreset(req.FPS, preset.FPS)
	if r.FPS < 1 || r.FPS > MaxFPS {
		return &api.RequestError{Field: "fps", Value: r.FPS, Allowed: fmt.Sprintf("1 to %d frames per second (the Wan presets use 16 or 24)", MaxFPS)}
	}
	return nil
}

// sourceFrames is the frame count the VAE decodes: the output's, 4n+1; or, with the temporal fast
// mode, the MLX runtime's source clip for the target (examples/inference/basic/mlx_wan_prompt_to_video.py:
// aligned_keyframe_count, then RIFE's factor-x schedule cut to the target), which must be shorter
// than the target (upstream runs a longer one and drops frames; here that is a request to fix).
func (r *resolved) sourceFrames(req api.Request, tr int) (int, error) {
	n, maxFrames := r.NumFrames, r.spec.MaxFrames
	if req.FastFactor != 0 && !req.Fast {
		return 0, &api.RequestError{Field: "fast_factor", Value: req.FastFactor, Allowed: "0 unless the temporal fast mode is on"}
	}
	if !req.Fast {
		if n < 1 || n > maxFrames || (n-1)%tr != 0 {
			lo := max(1, (min(n, maxFrames)-1)/tr*tr+1)
			return 0, &api.RequestError{Field: "num_frames", Value: n, Allowed: fmt.Sprintf(
				"%dn+1 frames up to %d (e.g. %d or %d): the VAE decodes 1 + %d·(latent frames - 1) frames",
				tr, maxFrames, lo, min(lo+tr, maxFrames), tr)}
		}
		return n, nil
	}
	if n < 2 || n > maxFrames {
		return 0, &api.RequestError{Field: "num_frames", Value: n, Allowed: fmt.Sprintf(
			"2 to %d frames with the temporal fast mode (RIFE makes them from a %dn+1-frame source clip)", maxFrames, tr)}
	}
	factor := familykit.OrPreset(req.FastFactor, 2)
	if factor < 2 || factor > maxFrames {
		return 0, &api.RequestError{Field: "fast_factor", Value: factor, Allowed: fmt.Sprintf("an integer from 2 to %d", maxFrames)}
	}
	source := framefilter.AlignedKeyframeCount(n, factor, tr)
	if source >= n {
		field, value := "fast_factor", any(factor)
		if req.FastFactor == 0 {
			field, value = "fast", any(true)
		}
		return 0, &api.RequestError{Field: field, Value: value, Allowed: fmt.Sprintf(
			"a temporal fast mode that shortens the clip: %d frames at factor %d need a %d-frame source clip "+
				"(1 + a multiple of %d), no shorter; ask for more frames or a larger factor", n, factor, source, tr)}
	}
	r.FastTemporal = &FastTemporalPlan{TargetFrames: n, SourceFrames: source, Factor: factor, SourceLatentFrames: (source-1)/tr + 1}
	return source, nil
}

// stage1Size is the size the DiT and VAE run at: the output's, or with the spatial fast mode the
// output divided by the scale, without a crop (fastvideo/mlx_runtime/refine.py,
// plan_refine_resolutions: both sizes divisible by the scale and on the VAE and patch grid).
func (r *resolved) stage1Size(req api.Request, rule familykit.SizeRule) (h, w int, err error) {
	if req.FastSpatialScale != 0 && !req.FastSpatial {
		return 0, 0, &api.RequestError{Field: "fast_spatial_scale", Value: req.FastSpatialScale, Allowed: "0 unless the spatial fast mode is on"}
	}
	if !req.FastSpatial {
		return r.Height, r.Width, nil
	}
	if r.image != nil {
		return 0, 0, &api.RequestError{Field: "fast_spatial", Value: true,
			Allowed: "false with a condition image (the MLX runtime's spatial fast mode is text-to-video only)"}
	}
	scale := familykit.OrPreset(req.FastSpatialScale, 2)
	h, w = r.Height/max(scale, 1), r.Width/max(scale, 1)
	if scale < 2 || r.Height%scale != 0 || r.Width%scale != 0 || h%rule.HeightMultiple != 0 || w%rule.WidthMultiple != 0 {
		// A fix that works: the nearest size at least as large that this scale divides onto the grid.
		fh, fw := roundUp(r.Height, scale*rule.HeightMultiple), roundUp(r.Width, scale*rule.WidthMultiple)
		return 0, 0, &api.RequestError{Field: "fast_spatial_scale", Value: scale, Allowed: fmt.Sprintf(
			"an integer >= 2 dividing %dx%d into a size that is a multiple of %dx%d (%s); at scale %d ask for a size such as %dx%d (height %d, width %d)",
			r.Height, r.Width, rule.HeightMultiple, rule.WidthMultiple, rule.Why, max(scale, 2), fh, fw, fh, fw)}
	}
	r.FastSpatial = &FastSpatialPlan{TargetHeight: r.Height, TargetWidth: r.Width, Stage1Height: h, Stage1Width: w, Scale: scale}
	return h, w, nil
}

// resolveFilters validates the fast modes' pixel knobs and adds the frame filters in the MLX
// runtime's order (examples/inference/basic/mlx_wan_prompt_to_video.py, _postprocess_video): RIFE
// at the reduced size, the resize to the requested size, one unsharp pass at the larger strength.
func (r *resolved) resolveFilters(req api.Request) error {
	k, err := framefilter.ResolveFastPixelKnobs(req)
	if err != nil {
		return err
	}
	var pixel framefilter.PixelSteps
	if fs := r.FastSpatial; fs != nil {
		pixel = framefilter.PixelSteps{Width: fs.TargetWidth, Height: fs.TargetHeight, Interpolation: k.Upsample}
	}
	var temporal family.FrameFilter
	if ft := r.FastTemporal; ft != nil {
		sources, err := framefilter.FactorSources(ft.SourceFrames, ft.TargetFrames, ft.Factor)
		if err != nil {
			return err
		}
		if temporal, err = framefilter.NewTemporalFilter(sources, ft.SourceFrames); err != nil {
			return err
		}
	}
	r.Filters, err = framefilter.FastFilters(pixel, temporal, k.Sharpen)
	return err
}

// checkRope checks that every axis of the token grid is within the DiT's rope_max_seq_len.
func (r *resolved) checkRope() error {
	maxPos, geo := r.spec.DiT.RopeMaxSeqLen, r.Geometry
	if maxPos <= 0 {
		return nil
	}
	for _, a := range []struct {
		field  string
		value  int
		tokens int
	}{{"num_frames", r.NumFrames, geo.TokenFrames}, {"height", r.Height, geo.TokenHeight}, {"width", r.Width, geo.TokenWidth}} {
		if a.tokens > maxPos {
			return &api.RequestError{Field: a.field, Value: a.value, Allowed: fmt.Sprintf(
				"a value giving at most %d tokens along the axis (the DiT's rope_max_seq_len); this one gives %d", maxPos, a.tokens)}
		}
	}
	return nil
}

// resolveSampler sets the sampler, steps, guidance and negative prompt from the preset.
func (r *resolved) resolveSampler(req api.Request) error {
	r.Sampler = r.preset.Sampler
	var err error
	switch r.Sampler {
	case SamplerDMD:
		err = r.resolveDMD(req)
	case SamplerUniPC:
		err = r.resolveUniPC(req)
	default:
		return fmt.Errorf("fastvideo: preset %s of %s has no Wan sampler (%q)", r.preset.Name, r.spec.Name, r.Sampler)
	}
	if err != nil {
		return err
	}
	if r.steps, err = r.newLadder(); err != nil {
		return &api.RequestError{Field: "num_inference_steps", Value: r.Steps, Allowed: err.Error()}
	}
	return nil
}

// resolveDMD: a DMD student runs its trained rungs, one forward each, without guidance.
func (r *resolved) resolveDMD(req api.Request) error {
	r.DMDSteps = append([]int(nil), r.preset.DMDSteps...)
	r.Steps = len(r.DMDSteps)
	if req.NumInferenceSteps != 0 && req.NumInferenceSteps != r.Steps {
		return &api.RequestError{Field: "num_inference_steps", Value: req.NumInferenceSteps, Allowed: fmt.Sprintf(
			"%d or unset (the DMD student runs its trained rungs %v, one forward each)", r.Steps, r.DMDSteps)}
	}
	if req.GuidanceScale != 0 && req.GuidanceScale != 1 {
		return &api.RequestError{Field: "guidance_scale", Value: req.GuidanceScale,
			Allowed: "1.0 or unset (DMD students run without classifier-free guidance)"}
	}
	r.Guidance = 1
	if strings.TrimSpace(req.NegativePrompt) != "" {
		return &api.RequestError{Field: "negative_prompt", Value: req.NegativePrompt,
			Allowed: "an empty string (DMD students run without classifier-free guidance, so a negative prompt has no effect)"}
	}
	r.WarpDenoisingSteps = r.spec.WarpDenoisingSteps
	if r.opts.WarpDenoisingSteps != nil {
		r.WarpDenoisingSteps = *r.opts.WarpDenoisingSteps
	}
	return nil
}

// resolveUniPC: the base pipelines, with classifier-free guidance above a guidance scale of 1.
func (r *resolved) resolveUniPC(req api.Request) error {
	r.Steps = familykit.OrPreset(req.NumInferenceSteps, r.preset.Steps)
	if r.Steps < 1 || r.Steps > family.MaxSteps {
		return &api.RequestError{Field: "num_inference_steps", Value: r.Steps,
			Allowed: fmt.Sprintf("1 to %d UniPC steps (the presets run 50)", family.MaxSteps)}
	}
	r.Guidance = familykit.OrPreset(req.GuidanceScale, r.preset.GuidanceScale)
	if !(r.Guidance > 0) || math.IsInf(r.Guidance, 0) {
		return &api.RequestError{Field: "guidance_scale", Value: r.Guidance,
			Allowed: "a positive number; above 1 turns classifier-free guidance on (presets: 3.0 or 5.0)"}
	}
	r.CFG = r.Guidance > 1
	negative := strings.TrimSpace(req.NegativePrompt)
	switch {
	case r.CFG && negative == "":
		negative = strings.TrimSpace(r.preset.NegativePrompt)
		if negative == "" {
			return &api.RequestError{Field: "negative_prompt", Value: req.NegativePrompt,
				Allowed: "a non-empty text: classifier-free guidance (guidance_scale > 1) needs one, and the preset has none"}
		}
	case !r.CFG && negative != "":
		return &api.RequestError{Field: "negative_prompt", Value: req.NegativePrompt, Allowed: fmt.Sprintf(
			"an empty string: with guidance_scale %g (at most 1) there is no classifier-free guidance, so a negative prompt has no effect", r.Guidance)}
	}
	if r.CFG {
		r.NegativePrompt = negative
	}
	if r.opts.WarpDenoisingSteps != nil {
		return &api.RequestError{Field: "warp_denoising_steps", Value: *r.opts.WarpDenoisingSteps,
			Allowed: "unset: warping applies to DMD students (FastWan), this preset samples with UniPC"}
	}
	if r.opts.RenoiseNoise != nil {
		return &api.RequestError{Field: "renoise_noise", Value: fmt.Sprintf("%d values", len(r.opts.RenoiseNoise)),
			Allowed: "nil: UniPC draws no noise after the initial one"}
	}
	return nil
}

// latentLen is C·T·Hl·Wl, one latent's length.
func (r *resolved) latentLen() int {
	g := r.Geometry
	return g.VAE.LatentChannels * g.LatentFrames * g.LatentHeight * g.LatentWidth
}

// checkNoise validates injected noise against the latent geometry.
func (r *resolved) checkNoise(req api.Request) error {
	g, n := r.Geometry, r.latentLen()
	layout := fmt.Sprintf("[%d][%d][%d][%d] (C, T, Hl, Wl)", g.VAE.LatentChannels, g.LatentFrames, g.LatentHeight, g.LatentWidth)
	if err := familykit.CheckNoise("video_noise", req.VideoNoise, n, layout); err != nil {
		return err
	}
	if r.Sampler != SamplerDMD || r.refine != nil {
		return nil
	}
	return familykit.CheckNoise("renoise_noise", r.opts.RenoiseNoise, (r.Steps-1)*n,
		fmt.Sprintf("%d blocks of %s, one per step after the first", r.Steps-1, layout))
}

// roundUp is n rounded up to a multiple of m (m > 0).
func roundUp(n, m int) int { return (n + m - 1) / m * m }
