package h3

import (
	"fmt"
	"strings"

	"fastvideo/dit/h3/packing"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/fastvideo/framefilter"
	"fastvideo/internal/tokenizer"
	"fastvideo/schedule"
)

// resolved is a validated H3 request: the common fields, the geometry the DiT and VAEs run at,
// and the two ladders, derived once and used by the plan and the run alike.
type resolved struct {
	family.Resolved
	spec *Spec
	opts Options

	// Denoise is the geometry the DiT and VAEs run at: the output geometry, or the reduced one of
	// the fast modes.
	Denoise            packing.Geometry
	VideoTemporalScale float64 // 1, or the temporal fast mode's stretch
	FastTemporal       *packing.FastTemporalPlan
	FastSpatial        *packing.FastSpatialPlan

	sched *schedule.H3Schedule
	vsa   *familykit.VSA // nil: dense attention
	// attentionWhy says why a VSA-trained model runs dense attention (the plan's attention row).
	attentionWhy string

	// keyframes are FL2VA's condition images (none: T2VA), each becoming visionTokens vision
	// tokens; textTags are the prompt rows' tags once the condition stage has tokenized them.
	keyframes    []keyframe
	visionTokens int
	textTags     []uint8
}

func (r *resolved) Common() *family.Resolved { return &r.Resolved }

// Resolve applies the preset and validates req with the released H3 rules (FastVideo's
// MiniMax-H3 input preparation stage, fastvideo/pipelines/stages/minimax_h3/), stricter where
// upstream would fail late: every bound is checked before anything loads.
func (s *Spec) Resolve(req api.Request, needPrompt bool) (family.Resolution, error) {
	preset, common, err := family.ResolveCommon(s.ModelInfo, req, needPrompt)
	if err != nil {
		return nil, err
	}
	r := &resolved{Resolved: *common, spec: s}
	if o, ok := req.Options.(*Options); ok && o != nil {
		r.opts = *o
	}
	for _, step := range []func(api.Request, family.Preset) error{
		r.resolveGuidance, r.resolveSize, r.resolveFrames, r.resolveSteps, r.resolveGeometry, r.resolveKeyframes, r.resolveFilters, r.checkNoise, r.resolveVSA,
	} {
		if err := step(req, preset); err != nil {
			return nil, err
		}
	}
	if r.PromptTokens == 0 && req.Prompt != "" {
		r.PromptTokens, r.PromptTokensEstimated = tokenizer.EstimateQwenTokens(req.Prompt), true
	}
	// The estimate never exceeds the real count, so a prompt over the limit by estimate is over it.
	if err := checkPromptTokens(r.PromptTokens, len(r.estimatedTextTags()), req.Prompt); err != nil {
		return nil, err
	}
	return r, nil
}

// resolveGuidance: MiniMax H3 is guidance-distilled: no negative prompt, guidance 1.
func (r *resolved) resolveGuidance(req api.Request, preset family.Preset) error {
	if strings.TrimSpace(req.NegativePrompt) != "" {
		return &api.RequestError{Field: "negative_prompt", Value: req.NegativePrompt,
			Allowed: "an empty string (MiniMax-H3 is guidance-distilled and takes no negative prompt)"}
	}
	r.Guidance = familykit.OrPreset(req.GuidanceScale, preset.GuidanceScale)
	if r.Guidance != 1 {
		return &api.RequestError{Field: "guidance_scale", Value: r.Guidance,
			Allowed: "1.0 (MiniMax-H3 is guidance-distilled: no classifier-free guidance)"}
	}
	return nil
}

// resolveSize: both or neither (with a keyframe and neither, the keyframe's aspect picks them), positive multiples of 32 (the VAE's 16x compression times the
// DiT's 2x2 patch), bounded by the model's largest side.
func (r *resolved) resolveSize(req api.Request, preset family.Preset) error {
	if err := r.keyframeCanvas(&req); err != nil {
		return err
	}
	var err error
	r.Height, r.Width, err = familykit.ResolveSize(req, preset, familykit.SizeRule{
		HeightMultiple: packing.CanvasMultiple, WidthMultiple: packing.CanvasMultiple, MaxSide: r.spec.MaxSide,
		Why: fmt.Sprintf("the canvas of %s", r.spec.Name)})
	if err != nil {
		return err
	}
	if ratio := r.spec.VAE.SpatialRatio(); ratio <= 0 || r.Height%ratio != 0 || r.Width%ratio != 0 {
		return &api.RequestError{Field: "height", Value: r.Height, Allowed: fmt.Sprintf("a size divisible by the VAE ratio %d", ratio)}
	}
	return nil
}

// resolveFrames aligns the frame count up to 17n+5 and checks the model's duration window, and
// the rate (H3 generates a fixed 24 fps).
func (r *resolved) resolveFrames(req api.Request, preset family.Preset) error {
	s := r.spec
	r.RequestedFrames = familykit.OrPreset(req.NumFrames, preset.NumFrames)
	lo, hi := s.frameRange()
	aligned := 0
	if r.RequestedFrames >= 1 && r.RequestedFrames <= hi {
		aligned, _ = packing.AlignNumFrames(r.RequestedFrames)
	}
	if aligned < s.MinAlignedFrames || aligned > s.MaxAlignedFrames {
		return &api.RequestError{Field: "num_frames", Value: r.RequestedFrames, Allowed: fmt.Sprintf(
			"%d to %d (aligned up to 17n+5: %d..%d frames, %.3g-%.3g s at %d fps)", lo, hi,
			s.MinAlignedFrames, s.MaxAlignedFrames, float64(s.MinAlignedFrames)/packing.FPS,
			float64(s.MaxAlignedFrames)/packing.FPS, packing.FPS)}
	}
	r.NumFrames = aligned
	r.FPS = familykit.OrPreset(req.FPS, preset.FPS)
	if r.FPS != packing.FPS {
		return &api.RequestError{Field: "fps", Value: r.FPS, Allowed: fmt.Sprintf("%d (MiniMax-H3 generates a fixed %d fps)", packing.FPS, packing.FPS)}
	}
	return nil
}

// frameRange is the span of requested counts that align into the window.
func (s *Spec) frameRange() (lo, hi int) {
	lo = s.MinAlignedFrames
	for lo > 1 {
		if a, _ := packing.AlignNumFrames(lo - 1); a != s.MinAlignedFrames {
			break
		}
		lo--
	}
	return lo, s.MaxAlignedFrames
}

// resolveSteps checks the DiT forward count and builds both ladders, once: the checkpoint's
// trained DMD rungs when its fastvideo_inference.json declares them, else the uniform ladder.
func (r *resolved) resolveSteps(req api.Request, preset family.Preset) error {
	s := r.spec
	r.Steps = familykit.OrPreset(req.NumInferenceSteps, preset.Steps)
	if r.Steps < 1 || r.Steps > family.MaxSteps {
		return &api.RequestError{Field: "num_inference_steps", Value: r.Steps,
			Allowed: fmt.Sprintf("1 to %d DiT forwards (FastH3: %d, base preset: %d)", family.MaxSteps, schedule.FastH3Steps, schedule.H3BaseSteps)}
	}
	if n := len(s.DMDRungs); n > 0 && r.Steps != n {
		return &api.RequestError{Field: "num_inference_steps", Value: r.Steps,
			Allowed: fmt.Sprintf("%d (the checkpoint's fastvideo_inference.json trains %d forwards)", n, n)}
	}
	ladder := func(shift float64) (*schedule.H3Ladder, error) {
		if s.DMDRungs != nil {
			return schedule.NewH3LadderFromDMDSteps(shift, s.DMDRungs)
		}
		return schedule.NewH3Ladder(shift, r.Steps)
	}
	v, err := ladder(s.VideoShift)
	if err != nil {
		return err
	}
	a, err := ladder(s.AudioShift)
	if err != nil {
		return err
	}
	r.sched = &schedule.H3Schedule{Video: v, Audio: a}
	return nil
}

// resolveGeometry derives the denoise geometry, applying the fast modes.
func (r *resolved) resolveGeometry(req api.Request, _ family.Preset) error {
	h, w := r.Height, r.Width
	r.VideoTemporalScale = 1
	if field, value := familykit.RefineKnob(req); field != "" {
		return &api.RequestError{Field: field, Value: value, Allowed: "unset: two-stage refine runs on " + familykit.RefineModels +
			"; FastVideo's refine (fastvideo/mlx_runtime/refine.py) has no MiniMax H3 variant"}
	}
	if req.FastFactor != 0 && !req.Fast {
		return &api.RequestError{Field: "fast_factor", Value: req.FastFactor, Allowed: "0 unless the temporal fast mode is on"}
	}
	if req.FastSpatialScale != 0 && !req.FastSpatial {
		return &api.RequestError{Field: "fast_spatial_scale", Value: req.FastSpatialScale, Allowed: "0 unless the spatial fast mode is on"}
	}
	if req.FastSpatial {
		scale := familykit.OrPreset(req.FastSpatialScale, 2)
		p, err := packing.PlanFastSpatial(r.Height, r.Width, scale)
		if err != nil {
			return &api.RequestError{Field: "fast_spatial_scale", Value: scale,
				Allowed: fmt.Sprintf("an integer >= 2 whose canvas is smaller than %dx%d (%v)", r.Height, r.Width, err)}
		}
		r.FastSpatial = &p
		h, w = p.CanvasHeight, p.CanvasWidth
	}
	g, err := r.geometry(h, w)
	if err != nil {
		return err
	}
	if req.Fast {
		factor := familykit.OrPreset(req.FastFactor, 2)
		p, err := packing.PlanFastTemporal(r.NumFrames, factor)
		if err != nil {
			if req.FastFactor == 0 {
				return &api.RequestError{Field: "fast", Value: true, Allowed: fmt.Sprintf(
					"false for this %d-frame clip: the default factor 2 does not shorten it (%v); ask for more frames%s",
					r.NumFrames, err, r.fastFramesHint(factor))}
			}
			return &api.RequestError{Field: "fast_factor", Value: factor, Allowed: fmt.Sprintf(
				"an integer >= 2 that shortens the %d-frame clip to fewer aligned frames; this one does not (%v): "+
					"ask for more frames or a larger factor", r.NumFrames, err)}
		}
		r.FastTemporal = &p
		// Audio keeps every latent of the full clip; only video is shortened.
		g.NumFrames, g.LatentFrames = p.SourceFrames, p.SourceLatentFrames
		r.VideoTemporalScale = p.VideoTemporalScale
	}
	r.Denoise = g
	return nil
}

// geometry is the packing geometry of the clip at h x w with the DiT's patch.
func (r *resolved) geometry(h, w int) (packing.Geometry, error) {
	g, err := packing.NewGeometry(h, w, r.NumFrames)
	if err != nil {
		return g, fmt.Errorf("fastvideo: geometry: %w", err)
	}
	for i := range g.PatchSize {
		g.PatchSize[i] = packing.DefaultPatchSize[i]
		if len(r.spec.DiT.PatchSize) == 3 {
			g.PatchSize[i] = r.spec.DiT.PatchSize[i]
		}
	}
	return g, nil
}

// resolveFilters validates the fast modes' pixel knobs and adds the frame filters that turn the
// decoded frames into the requested ones, in the MLX runtime's order: center-crop the canvas to
// the stage-1 size, interpolate the source frames to the target count (RIFE at the reduced size),
// resize to the target size, then one unsharp pass (fastvideo/mlx_runtime/fast_spatial.py,
// apply_fast_spatial_upsample; examples/inference/basic/mlx_wan_prompt_to_video.py,
// _postprocess_video).
func (r *resolved) resolveFilters(req api.Request, _ family.Preset) error {
	k, err := framefilter.ResolveFastPixelKnobs(req)
	if err != nil {
		return err
	}
	r.Filters = nil
	var pixel framefilter.PixelSteps
	if fs := r.FastSpatial; fs != nil {
		pixel = framefilter.PixelSteps{Width: fs.TargetWidth, Height: fs.TargetHeight, Interpolation: k.Upsample}
		if fs.Stage1Width != fs.CanvasWidth || fs.Stage1Height != fs.CanvasHeight {
			pixel.CropWidth, pixel.CropHeight = fs.Stage1Width, fs.Stage1Height
		}
	}
	var temporal family.FrameFilter
	if ft := r.FastTemporal; ft != nil {
		if temporal, err = framefilter.NewTemporalFilter(framefilter.PositionSources(ft.InterpolationPositions(), ft.SourceFrames), ft.SourceFrames); err != nil {
			return err
		}
	}
	r.Filters, err = framefilter.FastFilters(pixel, temporal, k.Sharpen)
	return err
}

// checkNoise validates injected initial noise against the denoise geometry.
func (r *resolved) checkNoise(req api.Request, _ family.Preset) error {
	s, g := r.spec, r.Denoise
	if err := familykit.CheckNoise("video_noise", req.VideoNoise, s.DiT.InChannels*g.LatentFrames*g.LatentHeight*g.LatentWidth,
		fmt.Sprintf("[%d][%d][%d][%d] (C, T, Hl, Wl)", s.DiT.InChannels, g.LatentFrames, g.LatentHeight, g.LatentWidth)); err != nil {
		return err
	}
	return familykit.CheckNoise("audio_noise", r.opts.AudioNoise, packing.AudioChannels*s.DiT.AudioInChannels*g.AudioLatents,
		fmt.Sprintf("[%d][%d][%d] (stereo, C, N)", packing.AudioChannels, s.DiT.AudioInChannels, g.AudioLatents))
}

// checkPromptTokens refuses prompts longer than the model's text length: the prompt's own tokens
// against MaxPromptTokens, and the whole sequence the text encoder sees (with keyframes: each
// picture label and vision block, then the prompt) against packing.MaxTextTokens, Qwen3-VL's
// position range, which packing.Build would otherwise refuse only after the text encoder ran.
func checkPromptTokens(textTokens, rows int, prompt string) error {
	if textTokens > MaxPromptTokens {
		return &api.RequestError{Field: "prompt", Value: fmt.Sprintf("%d tokens", textTokens),
			Allowed: fmt.Sprintf("at most %d tokens (MiniMax H3's text length); shorten the prompt %.40q...", MaxPromptTokens, prompt)}
	}
	if rows > packing.MaxTextTokens {
		return &api.RequestError{Field: "prompt", Value: fmt.Sprintf("%d tokens with the keyframes' labels and vision tokens (%d of the prompt)", rows, textTokens),
			Allowed: fmt.Sprintf("at most %d tokens in all (Qwen3-VL's positions); use fewer keyframes, a smaller canvas, or a processor/ whose size.shortest_edge does not enlarge the keyframes", packing.MaxTextTokens)}
	}
	return nil
}

// layoutRequest is the packing request of this generation for its (exact or estimated) prompt.
func (r *resolved) layoutRequest() packing.Request {
	if len(r.keyframes) == 0 {
		q := r.Denoise.Request(nil, r.PromptTokens)
		q.VideoTemporalScale = r.VideoTemporalScale
		return q
	}
	tags := r.textTags
	if tags == nil {
		tags = r.estimatedTextTags()
	}
	return r.Denoise.Request(tags, 0, r.anchors()...)
}

// fastFramesHint names the shortest aligned clip longer than this one that factor shortens: a
// request the error's reader can send as it is.
func (r *resolved) fastFramesHint(factor int) string {
	for n := r.NumFrames + 1; n <= r.spec.MaxAlignedFrames; n++ {
		if (n-5)%17 != 0 {
			continue // H3 clips are 17k+5 frames
		}
		if _, err := packing.PlanFastTemporal(n, factor); err == nil {
			return fmt.Sprintf(", e.g. num_frames %d", n)
		}
	}
	return ""
}
