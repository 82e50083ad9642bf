package fastvideo

import (
	"fmt"
	"math"
	"strings"
	"unicode"

	"fastvideo/dit/h3/packing"
	"fastvideo/dit/wan/geometry"
)

// Request is one text-to-video+audio generation, mirroring FastVideo's
// GenerationRequest / SamplingParam fields that apply to MiniMax H3.
//
// Unset means "the preset's value": numeric fields use 0 for unset (0 is
// never a valid size, frame count, fps, step count or guidance scale), Seed
// uses nil because 0 is a valid seed. This is FastVideo's behaviour for
// requests parsed from a mapping ("only explicit fields override the
// preset"), applied uniformly.
type Request struct {
	// Prompt is tokenized verbatim after trimming surrounding white space (no
	// chat template); H3 speech markup such as
	// "(S1) A presenter says <d>[English] Hello.</d>" is plain text.
	Prompt string
	// NegativePrompt must stay empty for H3: the model is guidance-distilled
	// and upstream rejects a negative prompt. (Classifier-free guidance would
	// need GuidanceScale > 1 and a model that allows it; no H3 checkpoint does,
	// so every step runs exactly one DiT forward.)
	//
	// Wan: the text of the unconditional forward of classifier-free guidance
	// (trimmed); empty means the preset's (Wan2.1: the English, Wan2.2: the
	// Chinese standard negative prompt). It is rejected where it would have no
	// effect: with a DMD student or a guidance scale of at most 1.
	NegativePrompt string

	// Height, Width are the output size in pixels; both or neither. H3:
	// positive multiples of 32. Wan: multiples of the VAE ratio times the
	// DiT patch, 16 (Wan2.1 VAE) or 32 (Wan2.2 VAE).
	Height, Width int
	// NumFrames is the requested frame count. H3: it is aligned up to 17n+5
	// (the causal video VAE's chunking), and the aligned clip must fit the
	// model's window: 5-15 s for the released models, up to 345 frames for
	// tiny-h3. Wan: it must be 4n+1 (the VAE decodes 4n+1 frames from n+1
	// latent frames; upstream would silently return fewer).
	NumFrames int
	// FPS is the output rate: H3 generates 24 fps only; for Wan it is the
	// container rate (16 or 24 in the presets), 1 to 120.
	FPS int
	// NumInferenceSteps counts DiT forwards (the MLX example's --steps):
	// FastH3 runs 4, the base model's preset 49. FastVideo's CUDA
	// num_inference_steps counts sigma-grid points, i.e. this value plus one.
	// Wan: UniPC steps (each one or, with guidance, two forwards); a FastWan
	// DMD student runs its trained rungs, so only that count (3) is accepted.
	NumInferenceSteps int
	// GuidanceScale: H3 accepts only 1.0 (no classifier-free guidance). Wan
	// base models: a positive scale, with classifier-free guidance when above
	// 1 (preset 3.0 or 5.0); FastWan DMD students: 1.0 only.
	GuidanceScale float64
	Seed          *int64 // nil: the preset's seed (0 for H3, 1024 for Wan)
	// OutputPath is the .mp4 file to write, or a folder in which the file is
	// named after the prompt (FastVideo's rule: its first 100 characters
	// without \ / : * ? " < > |). Empty means DefaultOutputPath ("outputs/").
	// Folders are created; an existing file is never replaced: the name gets
	// _1, _2, ... instead.
	OutputPath string
	Preset     string // "" selects the model's default preset

	// PromptTokens is the prompt's length in tokens when already known (from
	// the tokenizer or a prompt cache); 0 lets Plan estimate it from the text.
	PromptTokens int

	// Fast enables the temporal fast mode: denoise and decode
	// align(ceil((frames-1)/FastFactor)+1) frames on the full timeline, then
	// interpolate to the requested count (MLX --fast). Plan only for now:
	// Generate rejects it (the RIFE interpolator is not in the SDK).
	Fast       bool
	FastFactor int // 0: 2
	// FastSpatial enables the spatial fast mode: denoise and decode on the
	// smallest 32-aligned canvas covering size/FastSpatialScale, then resample
	// in pixel space (MLX --fast-spatial). Plan only for now, like Fast.
	FastSpatial      bool
	FastSpatialScale int // 0: 2

	// SkipSave generates without writing a file (FastVideo's save_video=false); set at least one of
	// the Return fields then. A decoder whose output nothing uses is not run: a latents-only request
	// stops after the denoising loop.
	SkipSave bool
	// ReturnFrames puts the decoded frames in Result.Frames (RGB24), ReturnAudio the decoded
	// waveform in Result.Audio, ReturnLatents the final denoised latents in Result.Latents.
	ReturnFrames, ReturnAudio, ReturnLatents bool

	// VideoNoise replaces the initial video noise drawn from Seed: C·T·Hl·Wl float32 values in the
	// latent layout [C][T][Hl][Wl] (batch 1, the layout of PyTorch's randn(1, C, T, Hl, Wl)).
	// GenerationPlan.VideoNoiseLen gives the length. Inject the reference's noise to reproduce a
	// PyTorch run: GaussianNoise cannot reproduce torch.randn.
	VideoNoise []float32
	// AudioNoise replaces the initial audio noise: 2·C·N values in the stereo latent layout [2][C][N]
	// (GenerationPlan.AudioNoiseLen values).
	AudioNoise []float32
	// RenoiseNoise (Wan DMD samplers only) replaces the fresh noise drawn before every DMD step after
	// the first: (steps-1)·C·T·Hl·Wl float32 values, one [C][T][Hl][Wl] block per step, in order
	// (GenerationPlan.RenoiseNoiseLen). nil continues the seed's video noise stream after the
	// initial noise, as FastVideo draws both from one generator.
	RenoiseNoise []float32
	// WarpDenoisingSteps (Wan DMD samplers only) feeds the DMD rungs warped onto the model's
	// flow-shift training grid, t' = grid[1000 - t] (1000, 757, 522 -> 1000, 939.67, 845.21 at shift
	// 5), instead of the raw integers. FastVideo's torch DMD stage and the published FastWan
	// distillation recipes do not warp; its Apple MLX runtime warps for Wan2.2-5B (FastMetal-5B), and
	// upstream calls the better choice for 5B unresolved (wan.md §6.4), so both are offered. nil:
	// the model's default (false for every FastWan checkpoint).
	WarpDenoisingSteps *bool

	// Progress, when set, receives phase, step and decode events on the generating goroutine, while
	// the generator is held: it must return quickly and must not call the generator.
	Progress ProgressFunc
}

// Ptr returns a pointer to v, for optional fields such as Request.Seed.
func Ptr[T any](v T) *T { return &v }

// RequestError reports invalid input: which field, the value given and what
// is allowed. Callers tell bad input from runtime failures with errors.As.
type RequestError struct {
	Field   string // snake_case name as in FastVideo requests, e.g. "num_frames"
	Value   any    // the offending value
	Allowed string // what would be accepted
}

func (e *RequestError) Error() string {
	v := fmt.Sprint(e.Value)
	if s, ok := e.Value.(string); ok {
		v = fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("invalid %s %s: allowed %s", e.Field, v, e.Allowed)
}

// ResolvedRequest is a validated request with every preset default applied
// and its geometry derived.
type ResolvedRequest struct {
	Model  *ModelSpec
	Preset Preset
	Family string // the model's family

	Prompt     string
	OutputPath string
	Seed       int64
	FPS        int
	Steps      int // DiT forwards
	Guidance   float64

	Height, Width   int // output size
	RequestedFrames int
	NumFrames       int // aligned output frames

	// Denoise is the geometry the DiT and VAEs run at (MiniMax H3): the
	// output geometry, or the reduced one of the fast modes.
	Denoise            packing.Geometry
	VideoTemporalScale float64 // 1, or the temporal fast mode's stretch

	FastTemporal *packing.FastTemporalPlan
	FastSpatial  *packing.FastSpatialPlan

	PromptTokens          int
	PromptTokensEstimated bool

	// Wan only (see WanSpec):
	//
	// NegativePrompt is the unconditional text when CFG is on, else "".
	NegativePrompt string
	// CFG is classifier-free guidance: two DiT forwards per step, v = v_u + g·(v_c − v_u).
	CFG                bool
	Sampler            Sampler
	DMDSteps           []int // the raw DMD rungs (SamplerDMD)
	WarpDenoisingSteps bool
	FlowShift          float64
	// WanGeometry is the latent and token grid of the clip.
	WanGeometry *geometry.Geometry
}

// Validate checks a generation request against a model ("fasth3", "h3",
// "tiny-h3" or a model folder) without loading anything heavy; unlike Plan it
// also requires a prompt.
func Validate(model string, req Request) error {
	spec, err := LookupModel(model)
	if err != nil {
		return err
	}
	_, err = spec.Resolve(req, true)
	return err
}

// Resolve applies the preset and validates req with the released H3 rules
// (the same ones as FastVideo's MiniMax-H3 input preparation stage). With
// needPrompt false the prompt may be empty (planning).
func (m *ModelSpec) Resolve(req Request, needPrompt bool) (*ResolvedRequest, error) {
	if m.Family == FamilyWan {
		return m.resolveWan(req, needPrompt)
	}
	preset, r, err := m.resolveCommon(req, needPrompt)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.NegativePrompt) != "" {
		return nil, &RequestError{Field: "negative_prompt", Value: req.NegativePrompt,
			Allowed: "an empty string (MiniMax-H3 is guidance-distilled and takes no negative prompt)"}
	}
	if req.RenoiseNoise != nil {
		return nil, &RequestError{Field: "renoise_noise", Value: fmt.Sprintf("%d values", len(req.RenoiseNoise)),
			Allowed: "nil (MiniMax H3 draws no noise after the initial one)"}
	}
	if req.WarpDenoisingSteps != nil {
		return nil, &RequestError{Field: "warp_denoising_steps", Value: *req.WarpDenoisingSteps,
			Allowed: "unset (a Wan DMD option; MiniMax H3 has its own ladders)"}
	}

	// Size: both or neither, positive multiples of 32.
	if r.Height, r.Width, err = requestSize(req, preset, sizeAllowed); err != nil {
		return nil, err
	}
	if r.Height%packing.CanvasMultiple != 0 {
		return nil, &RequestError{Field: "height", Value: r.Height, Allowed: sizeAllowed + nearest32(r.Height)}
	}
	if r.Width%packing.CanvasMultiple != 0 {
		return nil, &RequestError{Field: "width", Value: r.Width, Allowed: sizeAllowed + nearest32(r.Width)}
	}
	ratio := m.VAE.SpatialRatio()
	if ratio <= 0 || r.Height%ratio != 0 || r.Width%ratio != 0 {
		return nil, &RequestError{Field: "height", Value: r.Height, Allowed: fmt.Sprintf("a size divisible by the VAE ratio %d", ratio)}
	}

	// Frames: aligned to 17n+5, then the model's duration window.
	r.RequestedFrames = orPreset(req.NumFrames, preset.NumFrames)
	lo, hi := m.frameRange()
	aligned, err := packing.AlignNumFrames(r.RequestedFrames)
	if err != nil || aligned < m.MinAlignedFrames || aligned > m.MaxAlignedFrames {
		return nil, &RequestError{Field: "num_frames", Value: r.RequestedFrames, Allowed: fmt.Sprintf(
			"%d to %d (aligned up to 17n+5: %d..%d frames, %.3g-%.3g s at %d fps)", lo, hi,
			m.MinAlignedFrames, m.MaxAlignedFrames, float64(m.MinAlignedFrames)/packing.FPS,
			float64(m.MaxAlignedFrames)/packing.FPS, packing.FPS)}
	}
	r.NumFrames = aligned

	r.FPS = orPreset(req.FPS, preset.FPS)
	if r.FPS != packing.FPS {
		return nil, &RequestError{Field: "fps", Value: r.FPS, Allowed: fmt.Sprintf("%d (MiniMax-H3 generates a fixed %d fps)", packing.FPS, packing.FPS)}
	}

	r.Steps = orPreset(req.NumInferenceSteps, preset.Steps)
	if r.Steps < 1 || r.Steps > MaxSteps {
		return nil, &RequestError{Field: "num_inference_steps", Value: r.Steps,
			Allowed: fmt.Sprintf("1 to %d DiT forwards (FastH3: %d, base preset: %d)", MaxSteps, 4, 49)}
	}
	if n := len(m.DMDRungs); n > 0 && r.Steps != n {
		return nil, &RequestError{Field: "num_inference_steps", Value: r.Steps,
			Allowed: fmt.Sprintf("%d (the checkpoint's fastvideo_inference.json trains %d forwards)", n, n)}
	}

	r.Guidance = orPreset(req.GuidanceScale, preset.GuidanceScale)
	if r.Guidance != 1 {
		return nil, &RequestError{Field: "guidance_scale", Value: r.Guidance,
			Allowed: "1.0 (MiniMax-H3 is guidance-distilled: no classifier-free guidance)"}
	}

	if req.PromptTokens < 0 {
		return nil, &RequestError{Field: "prompt_tokens", Value: req.PromptTokens, Allowed: "0 (estimate) or the prompt's token count"}
	}
	r.PromptTokens = req.PromptTokens
	if r.PromptTokens == 0 && req.Prompt != "" {
		r.PromptTokens, r.PromptTokensEstimated = EstimatePromptTokens(req.Prompt), true
	}

	if err := r.planGeometry(req); err != nil {
		return nil, err
	}
	g := r.Denoise
	if err := checkNoise("video_noise", req.VideoNoise, m.DiT.InChannels*g.LatentFrames*g.LatentHeight*g.LatentWidth,
		fmt.Sprintf("[%d][%d][%d][%d] (C, T, Hl, Wl)", m.DiT.InChannels, g.LatentFrames, g.LatentHeight, g.LatentWidth)); err != nil {
		return nil, err
	}
	if err := checkNoise("audio_noise", req.AudioNoise, packing.AudioChannels*m.DiT.AudioInChannels*g.AudioLatents,
		fmt.Sprintf("[%d][%d][%d] (stereo, C, N)", packing.AudioChannels, m.DiT.AudioInChannels, g.AudioLatents)); err != nil {
		return nil, err
	}
	return r, nil
}

// resolveCommon starts a resolution for either family: the preset, the prompt requirement, the seed
// and the fields copied as they are.
func (m *ModelSpec) resolveCommon(req Request, needPrompt bool) (Preset, *ResolvedRequest, error) {
	preset, err := m.preset(req.Preset)
	if err != nil {
		return Preset{}, nil, err
	}
	if needPrompt && strings.TrimSpace(req.Prompt) == "" {
		return Preset{}, nil, &RequestError{Field: "prompt", Value: req.Prompt, Allowed: "a non-empty text prompt"}
	}
	r := &ResolvedRequest{Model: m, Preset: preset, Family: m.Family, Prompt: req.Prompt, OutputPath: req.OutputPath,
		Seed: preset.Seed}
	if req.Seed != nil {
		r.Seed = *req.Seed // a pointer: 0 is a seed, not "unset"
	}
	return preset, r, nil
}

// orPreset is a request field, or the preset's value when the field is left at zero (unset).
func orPreset[T comparable](requested, preset T) T {
	var unset T
	if requested != unset {
		return requested
	}
	return preset
}

// requestSize applies "both or neither" to the requested size and falls back to the preset's;
// the family checks the multiples. allowed describes a valid size.
func requestSize(req Request, preset Preset, allowed string) (h, w int, err error) {
	switch {
	case req.Height < 0:
		return 0, 0, &RequestError{Field: "height", Value: req.Height, Allowed: allowed}
	case req.Width < 0:
		return 0, 0, &RequestError{Field: "width", Value: req.Width, Allowed: allowed}
	case req.Height == 0 && req.Width != 0:
		return 0, 0, &RequestError{Field: "height", Value: req.Height, Allowed: "a value together with width (pass both or neither)"}
	case req.Width == 0 && req.Height != 0:
		return 0, 0, &RequestError{Field: "width", Value: req.Width, Allowed: "a value together with height (pass both or neither)"}
	}
	if req.Height != 0 {
		return req.Height, req.Width, nil
	}
	return preset.Height, preset.Width, nil
}

// checkNoise validates injected initial noise: nil (draw from the seed) or exactly n finite values.
func checkNoise(field string, v []float32, n int, layout string) error {
	if v == nil {
		return nil
	}
	if len(v) != n {
		return &RequestError{Field: field, Value: fmt.Sprintf("%d values", len(v)),
			Allowed: fmt.Sprintf("nil (noise from the seed) or %d float32 values in the layout %s", n, layout)}
	}
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return &RequestError{Field: field, Value: fmt.Sprintf("%v at index %d", x, i), Allowed: "finite values"}
		}
	}
	return nil
}

// MaxSteps bounds NumInferenceSteps (upstream has no bound; beyond this the
// ladder only repeats float32 values).
const MaxSteps = 1000

const sizeAllowed = "a positive multiple of 32"

func nearest32(v int) string { return nearestMultiple(v, packing.CanvasMultiple) }

// nearestMultiple suggests the multiples of m around v.
func nearestMultiple(v, m int) string {
	lo := v / m * m
	if lo <= 0 {
		return fmt.Sprintf(" (e.g. %d)", m)
	}
	return fmt.Sprintf(" (e.g. %d or %d)", lo, lo+m)
}

// frameRange is the span of requested counts that align into the window.
func (m *ModelSpec) frameRange() (lo, hi int) {
	lo = m.MinAlignedFrames
	for lo > 1 {
		if a, _ := packing.AlignNumFrames(lo - 1); a != m.MinAlignedFrames {
			break
		}
		lo--
	}
	return lo, m.MaxAlignedFrames
}

// planGeometry derives the denoise geometry, applying the fast modes.
func (r *ResolvedRequest) planGeometry(req Request) error {
	h, w, frames := r.Height, r.Width, r.NumFrames
	r.VideoTemporalScale = 1
	if req.FastFactor != 0 && !req.Fast {
		return &RequestError{Field: "fast_factor", Value: req.FastFactor, Allowed: "0 unless the temporal fast mode is on"}
	}
	if req.FastSpatialScale != 0 && !req.FastSpatial {
		return &RequestError{Field: "fast_spatial_scale", Value: req.FastSpatialScale, Allowed: "0 unless the spatial fast mode is on"}
	}
	if req.FastSpatial {
		scale := req.FastSpatialScale
		if scale == 0 {
			scale = 2
		}
		p, err := packing.PlanFastSpatial(r.Height, r.Width, scale)
		if err != nil {
			return &RequestError{Field: "fast_spatial_scale", Value: scale,
				Allowed: fmt.Sprintf("an integer >= 2 whose canvas is smaller than %dx%d", r.Height, r.Width)}
		}
		r.FastSpatial = &p
		h, w = p.CanvasHeight, p.CanvasWidth
	}
	g, err := packing.NewGeometry(h, w, frames)
	if err != nil {
		return fmt.Errorf("fastvideo: geometry: %w", err)
	}
	if req.Fast {
		factor := req.FastFactor
		if factor == 0 {
			factor = 2
		}
		p, err := packing.PlanFastTemporal(frames, factor)
		if err != nil {
			return &RequestError{Field: "fast_factor", Value: factor,
				Allowed: fmt.Sprintf("an integer >= 2 that shortens the %d-frame clip", frames)}
		}
		r.FastTemporal = &p
		// Audio keeps every latent of the full clip; only video is shortened.
		g.NumFrames, g.LatentFrames = p.SourceFrames, p.SourceLatentFrames
		r.VideoTemporalScale = p.VideoTemporalScale
	}
	g.PatchSize = [3]int{patchAxis(r.Model.DiT.PatchSize, 0), patchAxis(r.Model.DiT.PatchSize, 1), patchAxis(r.Model.DiT.PatchSize, 2)}
	r.Denoise = g
	return nil
}

func patchAxis(p []int, i int) int {
	if len(p) == 3 {
		return p[i]
	}
	return packing.DefaultPatchSize[i]
}

// LayoutRequest is the packing request of this generation for a prompt of
// the given token tags (nil: PromptTokens text tokens).
func (r *ResolvedRequest) LayoutRequest(textTags []uint8) packing.Request {
	n := r.PromptTokens
	if textTags != nil {
		n = len(textTags)
	}
	q := r.Denoise.Request(textTags, n)
	q.VideoTemporalScale = r.VideoTemporalScale
	return q
}

// EstimatePromptTokens approximates the Qwen3 token count of a prompt without
// the tokenizer: it counts the pieces of the byte-level BPE pre-tokenizer
// (the Qwen2 split pattern: contractions, letter runs with one optional
// leading symbol, single digits, symbol runs with an optional leading space,
// newline runs, whitespace). Common English words are one token each in
// Qwen's 151k vocabulary, so this is close for prose and a lower bound
// otherwise; Plan marks it as an estimate.
func EstimatePromptTokens(prompt string) int {
	rs := []rune(prompt)
	isL := func(i int) bool { return i < len(rs) && unicode.IsLetter(rs[i]) }
	isN := func(i int) bool { return i < len(rs) && unicode.IsNumber(rs[i]) }
	isS := func(i int) bool { return i < len(rs) && unicode.IsSpace(rs[i]) }
	isNL := func(i int) bool { return i < len(rs) && (rs[i] == '\r' || rs[i] == '\n') }
	isSym := func(i int) bool { return i < len(rs) && !isL(i) && !isN(i) && !isS(i) }
	n := 0
	for i := 0; i < len(rs); n++ {
		switch {
		case rs[i] == '\'' && contraction(rs[i+1:]) > 0:
			i += 1 + contraction(rs[i+1:])
		case isL(i) || (!isNL(i) && !isN(i) && isL(i+1)): // [^\r\n\p{L}\p{N}]?\p{L}+
			i++
			for isL(i) {
				i++
			}
		case isN(i): // \p{N}
			i++
		case isSym(i) || (rs[i] == ' ' && isSym(i+1)): // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
			if rs[i] == ' ' {
				i++
			}
			for isSym(i) {
				i++
			}
			for isNL(i) {
				i++
			}
		default: // whitespace: \s*[\r\n]+, then \s+(?!\S), then \s+
			j := i
			for isS(j) {
				j++
			}
			lastNL := -1
			for k := i; k < j; k++ {
				if isNL(k) {
					lastNL = k
				}
			}
			switch {
			case lastNL >= 0:
				i = lastNL + 1
			case j < len(rs) && j-i > 1:
				i = j - 1 // leave one space to prefix the next piece
			default:
				i = j
			}
		}
	}
	return n
}

// contraction is the length of 's, 't, 're, 've, 'm, 'll or 'd (any case)
// after an apostrophe, or 0.
func contraction(rs []rune) int {
	lower := strings.ToLower(string(rs[:min(2, len(rs))]))
	for _, c := range []string{"re", "ve", "ll"} {
		if strings.HasPrefix(lower, c) {
			return 2
		}
	}
	if lower != "" && strings.ContainsRune("stmd", rune(lower[0])) {
		return 1
	}
	return 0
}
