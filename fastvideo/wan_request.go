package fastvideo

import (
	"fmt"
	"math"
	"strings"

	"fastvideo/dit/wan/geometry"
)

// MaxWanFPS bounds a Wan request's frame rate: the rate only labels the container (the model has
// no notion of time), and ffmpeg handles any rate, so this merely catches typos.
const MaxWanFPS = 120

// resolveWan applies the preset and validates req for a Wan model. Upstream only checks that the
// size is a multiple of 8, so bad shapes fail deep inside the pipeline or, for the frame count,
// silently produce fewer frames (wan.md §2); here every constraint is checked before anything
// loads: sizes are multiples of the VAE ratio times the DiT patch, frame counts are 4n+1, and the
// sampler's knobs are only accepted where they do something.
func (m *ModelSpec) resolveWan(req Request, needPrompt bool) (*ResolvedRequest, error) {
	ws := m.Wan
	preset, r, err := m.resolveCommon(req, needPrompt)
	if err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		set  bool
		v    any
	}{
		{"fast", req.Fast, req.Fast}, {"fast_factor", req.FastFactor != 0, req.FastFactor},
		{"fast_spatial", req.FastSpatial, req.FastSpatial}, {"fast_spatial_scale", req.FastSpatialScale != 0, req.FastSpatialScale},
	} {
		if f.set {
			return nil, &RequestError{Field: f.name, Value: f.v, Allowed: "unset: the fast modes are not available for Wan models"}
		}
	}
	if req.AudioNoise != nil {
		return nil, &RequestError{Field: "audio_noise", Value: fmt.Sprintf("%d values", len(req.AudioNoise)),
			Allowed: "nil (Wan models generate video only)"}
	}

	// Size: both or neither, multiples of the VAE ratio times the patch.
	vae := wanGeometryVAE(ws.VAE)
	patch := [3]int{ws.DiT.PatchSize[0], ws.DiT.PatchSize[1], ws.DiT.PatchSize[2]}
	mh, mw := vae.SpatialRatio*patch[1], vae.SpatialRatio*patch[2]
	allowed := func(mult int) string {
		return fmt.Sprintf("a positive multiple of %d (the %s VAE's %dx compression times the DiT's patch)", mult, vae.Name, vae.SpatialRatio)
	}
	if r.Height, r.Width, err = requestSize(req, preset, allowed(mh)); err != nil {
		return nil, err
	}
	if r.Height <= 0 || r.Height%mh != 0 {
		return nil, &RequestError{Field: "height", Value: r.Height, Allowed: allowed(mh) + nearestMultiple(r.Height, mh)}
	}
	if r.Width <= 0 || r.Width%mw != 0 {
		return nil, &RequestError{Field: "width", Value: r.Width, Allowed: allowed(mw) + nearestMultiple(r.Width, mw)}
	}

	// Frames: 4n+1, and a token grid the RoPE tables cover.
	r.NumFrames = orPreset(req.NumFrames, preset.NumFrames)
	r.RequestedFrames = r.NumFrames
	if tr := vae.TemporalRatio; r.NumFrames < 1 || (r.NumFrames-1)%tr != 0 {
		lo := max(1, (r.NumFrames-1)/tr*tr+1)
		return nil, &RequestError{Field: "num_frames", Value: r.NumFrames, Allowed: fmt.Sprintf(
			"%dn+1 frames (e.g. %d or %d): the VAE decodes 1 + %d·(latent frames - 1) frames", tr, lo, lo+tr, tr)}
	}
	geo, err := geometry.New(vae, r.Height, r.Width, r.NumFrames, patch)
	if err != nil {
		return nil, &RequestError{Field: "num_frames", Value: r.NumFrames, Allowed: err.Error()}
	}
	if maxPos := ws.DiT.RopeMaxSeqLen; maxPos > 0 {
		for _, a := range []struct {
			field  string
			value  int
			tokens int
		}{{"num_frames", r.NumFrames, geo.TokenFrames}, {"height", r.Height, geo.TokenHeight}, {"width", r.Width, geo.TokenWidth}} {
			if a.tokens > maxPos {
				return nil, &RequestError{Field: a.field, Value: a.value, Allowed: fmt.Sprintf(
					"a value giving at most %d tokens along the axis (the DiT's rope_max_seq_len); this one gives %d", maxPos, a.tokens)}
			}
		}
	}
	r.WanGeometry = &geo

	r.FPS = orPreset(req.FPS, preset.FPS)
	if r.FPS < 1 || r.FPS > MaxWanFPS {
		return nil, &RequestError{Field: "fps", Value: r.FPS, Allowed: fmt.Sprintf("1 to %d frames per second (the Wan presets use 16 or 24)", MaxWanFPS)}
	}

	// Sampler, steps, guidance, negative prompt.
	r.Sampler, r.FlowShift = preset.Sampler, ws.FlowShift
	negative := strings.TrimSpace(req.NegativePrompt)
	switch r.Sampler {
	case SamplerDMD:
		r.DMDSteps = append([]int(nil), preset.DMDSteps...)
		r.Steps = len(r.DMDSteps)
		if req.NumInferenceSteps != 0 && req.NumInferenceSteps != r.Steps {
			return nil, &RequestError{Field: "num_inference_steps", Value: req.NumInferenceSteps, Allowed: fmt.Sprintf(
				"%d or unset (the DMD student runs its trained rungs %v, one forward each)", r.Steps, r.DMDSteps)}
		}
		if req.GuidanceScale != 0 && req.GuidanceScale != 1 {
			return nil, &RequestError{Field: "guidance_scale", Value: req.GuidanceScale,
				Allowed: "1.0 or unset (DMD students run without classifier-free guidance)"}
		}
		r.Guidance = 1
		if negative != "" {
			return nil, &RequestError{Field: "negative_prompt", Value: req.NegativePrompt,
				Allowed: "an empty string (DMD students run without classifier-free guidance, so a negative prompt has no effect)"}
		}
		r.WarpDenoisingSteps = ws.WarpDenoisingSteps
		if req.WarpDenoisingSteps != nil {
			r.WarpDenoisingSteps = *req.WarpDenoisingSteps
		}
	case SamplerUniPC:
		r.Steps = orPreset(req.NumInferenceSteps, preset.Steps)
		if r.Steps < 1 || r.Steps > MaxSteps {
			return nil, &RequestError{Field: "num_inference_steps", Value: r.Steps,
				Allowed: fmt.Sprintf("1 to %d UniPC steps (the presets run 50)", MaxSteps)}
		}
		r.Guidance = orPreset(req.GuidanceScale, preset.GuidanceScale)
		if !(r.Guidance > 0) || math.IsInf(r.Guidance, 0) {
			return nil, &RequestError{Field: "guidance_scale", Value: r.Guidance,
				Allowed: "a positive number; above 1 turns classifier-free guidance on (presets: 3.0 or 5.0)"}
		}
		r.CFG = r.Guidance > 1
		switch {
		case r.CFG && negative == "":
			negative = strings.TrimSpace(preset.NegativePrompt)
			if negative == "" {
				return nil, &RequestError{Field: "negative_prompt", Value: req.NegativePrompt,
					Allowed: "a non-empty text: classifier-free guidance (guidance_scale > 1) needs one, and the preset has none"}
			}
		case !r.CFG && negative != "":
			return nil, &RequestError{Field: "negative_prompt", Value: req.NegativePrompt, Allowed: fmt.Sprintf(
				"an empty string: with guidance_scale %g (at most 1) there is no classifier-free guidance, so a negative prompt has no effect", r.Guidance)}
		}
		if !r.CFG {
			negative = ""
		}
		if req.WarpDenoisingSteps != nil {
			return nil, &RequestError{Field: "warp_denoising_steps", Value: *req.WarpDenoisingSteps,
				Allowed: "unset: warping applies to DMD students (FastWan), this preset samples with UniPC"}
		}
		if req.RenoiseNoise != nil {
			return nil, &RequestError{Field: "renoise_noise", Value: fmt.Sprintf("%d values", len(req.RenoiseNoise)),
				Allowed: "nil: UniPC draws no noise after the initial one"}
		}
	default:
		return nil, fmt.Errorf("fastvideo: preset %s of %s has no Wan sampler (%q)", preset.Name, m.Name, r.Sampler)
	}
	r.NegativePrompt = negative
	if _, err := r.wanLadder(); err != nil {
		return nil, &RequestError{Field: "num_inference_steps", Value: r.Steps, Allowed: err.Error()}
	}

	if req.PromptTokens < 0 {
		return nil, &RequestError{Field: "prompt_tokens", Value: req.PromptTokens, Allowed: "0 (unknown) or the prompt's token count"}
	}
	r.PromptTokens = req.PromptTokens

	n := geo.VAE.LatentChannels * geo.LatentFrames * geo.LatentHeight * geo.LatentWidth
	layout := fmt.Sprintf("[%d][%d][%d][%d] (C, T, Hl, Wl)", geo.VAE.LatentChannels, geo.LatentFrames, geo.LatentHeight, geo.LatentWidth)
	if err := checkNoise("video_noise", req.VideoNoise, n, layout); err != nil {
		return nil, err
	}
	if r.Sampler == SamplerDMD {
		if err := checkNoise("renoise_noise", req.RenoiseNoise, (r.Steps-1)*n,
			fmt.Sprintf("%d blocks of %s, one per step after the first", r.Steps-1, layout)); err != nil {
			return nil, err
		}
	}
	return r, nil
}
