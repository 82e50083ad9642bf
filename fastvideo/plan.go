package fastvideo

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"fastvideo/dit/h3"
	"fastvideo/dit/h3/packing"
	"fastvideo/schedule"
)

// GenerationPlan is what a request will run, derived without loading any
// weights: geometry, packed rows, both sigma ladders and the cost of a DiT
// forward. Its JSON names are stable (snake_case).
//
// The two families share the geometry, ladder and cost fields. MiniMax H3 plans also fill the audio
// and packed-row fields; Wan plans (video only) fill the token grid, the sampler and guidance
// fields instead and leave the audio ones out of the JSON.
type GenerationPlan struct {
	Model  string `json:"model"`
	Preset string `json:"preset"`
	Family string `json:"family"`

	Height          int     `json:"height"` // output size
	Width           int     `json:"width"`
	CanvasHeight    int     `json:"canvas_height"` // size the DiT and VAE run at
	CanvasWidth     int     `json:"canvas_width"`
	RequestedFrames int     `json:"requested_frames"`
	NumFrames       int     `json:"num_frames"` // output frames, aligned to 17n+5
	FPS             int     `json:"fps"`
	DurationSeconds float64 `json:"duration_seconds"`
	Steps           int     `json:"steps"` // DiT forwards
	Seed            int64   `json:"seed"`

	VideoLatentFrames int `json:"video_latent_frames"`
	AudioLatentFrames int `json:"audio_latent_frames,omitempty"` // per stereo channel
	LatentHeight      int `json:"latent_height"`
	LatentWidth       int `json:"latent_width"`
	LatentChannels    int `json:"latent_channels"`
	// LatentShape is the video latent [C, T, H, W].
	LatentShape []int `json:"latent_shape"`
	// AudioLatentChannels is the audio latent width (32 released).
	AudioLatentChannels int `json:"audio_latent_channels,omitempty"`
	AudioSamples        int `json:"audio_samples,omitempty"` // decoded samples per channel

	Rows RowCounts `json:"rows,omitzero"`

	// Wan: the DiT's token grid (T', H', W') after the (1, 2, 2) patch, its product Tokens (the
	// self-attention length) and TextTokens, the zero-padded prompt rows of the cross-attention.
	TokenGrid  []int `json:"token_grid,omitempty"`
	Tokens     int   `json:"tokens,omitempty"`
	TextTokens int   `json:"text_tokens,omitempty"`

	// Sampler is the Wan denoising loop (unipc or dmd); empty for MiniMax H3, whose two ladders
	// follow.
	Sampler       Sampler `json:"sampler,omitempty"`
	FlowShift     float64 `json:"flow_shift,omitempty"`
	GuidanceScale float64 `json:"guidance_scale"`
	// CFG is classifier-free guidance: ForwardsPerStep is then 2 (prompt and negative prompt).
	CFG             bool   `json:"cfg"`
	ForwardsPerStep int    `json:"forwards_per_step"`
	NegativePrompt  string `json:"negative_prompt,omitempty"`
	// DMDSteps are the raw rungs of a DMD sampler; WarpDenoisingSteps says whether the DiT is fed
	// them warped (VideoTimesteps are what it is fed either way).
	DMDSteps           []int `json:"dmd_denoising_steps,omitempty"`
	WarpDenoisingSteps bool  `json:"warp_denoising_steps,omitempty"`

	// VideoSigmas and VideoTimesteps are the video ladder: the sigma and the timestep fed to the DiT
	// at each step (UniPC appends the final sigma 0; a DMD ladder lists its rungs' sigmas).
	VideoSigmas    []float32 `json:"video_sigmas"`
	AudioSigmas    []float32 `json:"audio_sigmas,omitempty"`
	VideoTimesteps []float32 `json:"video_timesteps"`
	AudioTimesteps []float32 `json:"audio_timesteps,omitempty"`
	// AdaLNTimesteps is every distinct timestep the DiT sees: the keys of an
	// AdaLN step cache.
	AdaLNTimesteps []float32 `json:"adaln_timesteps,omitempty"`

	// DiTTFLOPsPerStep counts every forward of a step (both with CFG).
	DiTTFLOPsPerStep float64 `json:"dit_tflops_per_step"`
	DiTTFLOPsTotal   float64 `json:"dit_tflops_total"`
	DiTParams        int64   `json:"dit_params"`
	WeightsDType     string  `json:"weights_dtype"`
	// WeightsBytes is the DiT's weight memory in WeightsDType: the largest
	// component and the one resident while denoising.
	WeightsBytes int64 `json:"weights_bytes"`

	FastTemporal *packing.FastTemporalPlan `json:"fast_temporal,omitempty"`
	FastSpatial  *packing.FastSpatialPlan  `json:"fast_spatial,omitempty"`
}

// VideoNoiseLen is the length of Request.VideoNoise: C·T·Hl·Wl.
func (p *GenerationPlan) VideoNoiseLen() int {
	return p.LatentChannels * p.VideoLatentFrames * p.LatentHeight * p.LatentWidth
}

// AudioNoiseLen is the length of Request.AudioNoise: 2·C·N (stereo); 0 for Wan.
func (p *GenerationPlan) AudioNoiseLen() int {
	return packing.AudioChannels * p.AudioLatentChannels * p.AudioLatentFrames
}

// RenoiseNoiseLen is the length of Request.RenoiseNoise: (steps-1)·C·T·Hl·Wl for a DMD sampler,
// else 0.
func (p *GenerationPlan) RenoiseNoiseLen() int {
	if p.Sampler != SamplerDMD {
		return 0
	}
	return (p.Steps - 1) * p.VideoNoiseLen()
}

// RowCounts is the packed sequence of one DiT forward, by kind.
type RowCounts struct {
	Text int `json:"text"`
	// TextEstimated is set when Text was estimated from the prompt's text
	// (Request.PromptTokens unset); the exact count needs the tokenizer.
	TextEstimated  bool `json:"text_estimated"`
	ConditionVideo int  `json:"condition_video"`
	Audio          int  `json:"audio"` // both channels
	Video          int  `json:"video"` // target video rows
	Total          int  `json:"total"`
}

// Plan resolves a request against a model ("fasth3", "h3", "tiny-h3" or a
// model folder) and returns what it will run. It validates like Generate
// (RequestError on bad input) but accepts an empty prompt. Options may set
// the weight dtype (WithDType) used for WeightsBytes; the default is the
// checkpoint's own precision.
func Plan(model string, req Request, opts ...Option) (*GenerationPlan, error) {
	spec, err := LookupModel(model)
	if err != nil {
		return nil, err
	}
	o, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	r, err := spec.Resolve(req, false)
	if err != nil {
		return nil, err
	}
	return r.Plan(o.DType)
}

// Plan computes the plan of a resolved request; dtype DTypeAuto sizes the
// weights at the checkpoint's precision.
func (r *ResolvedRequest) Plan(dtype DType) (*GenerationPlan, error) {
	if r.Model.Family == FamilyWan {
		return r.wanPlan(dtype)
	}
	m, g := r.Model, r.Denoise
	sched, err := r.Schedule()
	if err != nil {
		return nil, err
	}
	l, err := packing.Build(r.LayoutRequest(nil))
	if err != nil {
		return nil, fmt.Errorf("fastvideo: packing: %w", err)
	}
	p := &GenerationPlan{
		Model: m.Name, Preset: r.Preset.Name, Family: m.Family,
		LatentShape:   []int{m.VAE.LatentChannels, g.LatentFrames, g.LatentHeight, g.LatentWidth},
		GuidanceScale: r.Guidance, ForwardsPerStep: 1,
		Height: r.Height, Width: r.Width, CanvasHeight: g.Height, CanvasWidth: g.Width,
		RequestedFrames: r.RequestedFrames, NumFrames: r.NumFrames, FPS: r.FPS,
		DurationSeconds: float64(r.NumFrames) / float64(r.FPS), Steps: r.Steps, Seed: r.Seed,
		VideoLatentFrames: g.LatentFrames, AudioLatentFrames: g.AudioLatents,
		LatentHeight: g.LatentHeight, LatentWidth: g.LatentWidth, LatentChannels: m.VAE.LatentChannels,
		AudioLatentChannels: m.DiT.AudioInChannels,
		AudioSamples:        g.AudioLatents * m.AudioVAE.HopLength(),
		Rows: RowCounts{
			Text: l.NumTextRows, TextEstimated: r.PromptTokensEstimated, ConditionVideo: l.NumConditionVideoRows,
			Audio: l.NumAudioRows, Video: l.NumVideoRows, Total: l.SequenceLength,
		},
		VideoSigmas: sched.Video.Sigmas, AudioSigmas: sched.Audio.Sigmas,
		VideoTimesteps: sched.Video.Timesteps, AudioTimesteps: sched.Audio.Timesteps,
		AdaLNTimesteps: sched.VisitedTimesteps(schedule.Conditions{}),
		FastTemporal:   r.FastTemporal, FastSpatial: r.FastSpatial,
	}
	total := 0.0
	perStep := 0.0
	for k := 0; k < sched.Steps(); k++ {
		f := ditForwardFLOPs(m.DiT, l.NumTextRows, l.NumVideoRows+l.NumConditionVideoRows, l.NumAudioRows,
			len(sched.StepTimesteps(k, schedule.Conditions{})), m.VSAGates)
		total += f
		perStep = max(perStep, f)
	}
	p.DiTTFLOPsPerStep, p.DiTTFLOPsTotal = perStep/1e12, total/1e12
	p.DiTParams = ditParams(m.DiT, m.VSAGates)
	if dtype == DTypeAuto {
		dtype = m.WeightsDType
	}
	p.WeightsDType = string(dtype)
	p.WeightsBytes, err = ditWeightBytes(m.DiT, dtype, m.VSAGates)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Schedule builds the run's video and audio ladders: the checkpoint's trained DMD rungs when its
// fastvideo_inference.json declares them, else the uniform ladder of r.Steps.
func (r *ResolvedRequest) Schedule() (*schedule.H3Schedule, error) {
	m := r.Model
	ladder := func(shift float64) (*schedule.H3Ladder, error) {
		if m.DMDRungs != nil {
			return schedule.NewH3LadderFromDMDSteps(shift, m.DMDRungs)
		}
		return schedule.NewH3Ladder(shift, r.Steps)
	}
	v, err := ladder(m.VideoShift)
	if err != nil {
		return nil, err
	}
	a, err := ladder(m.AudioShift)
	if err != nil {
		return nil, err
	}
	return &schedule.H3Schedule{Video: v, Audio: a}, nil
}

// ditForwardFLOPs counts one DiT forward over S text rows, Rv video rows
// (condition rows included), Ra audio rows and nT distinct timesteps:
//
//	every GEMM (M x K) by (K x N) costs 2*M*N*K;
//	attention costs 4*L^2*D*heads (QK^T and PV, each 2*L^2*D per head, D = head_dim);
//	norms, activations, softmax and RoPE are ignored.
//
// With L = S + Rv + Ra, hidden H, attention width I = heads*D, FFN width F,
// time width E (or the AdaLN rank), text width T, patch width P = C*pt*ph*pw:
//
//	time MLP       2*nT*(freq*Eh + Eh*E)
//	AdaLN          blocks * 2*nT*E*18H, norm_out 2*nT*E*2H (rank r: E -> r, plus the basis 2*nT*E*r)
//	text           2*S*T*H, refiner blocks * (2*S*H*(3I + I + 3F) + 4*S^2*D*heads)
//	inputs         2*Rv*P*H + 2*Ra*Ca*H
//	joint blocks   blocks * (2*L*H*(3I + I + 3F) + 4*L^2*D*heads)   (+2*L*H*I with FastH3's VSA gate)
//	outputs        2*Rv*H*P + 2*Ra*H*Ca  (heads applied to their own rows only)
//
// At 832x480x124 with a 93-token prompt (L = 14,937) the released DiT costs
// 895.6 TFLOP: 1.13 s at 790 TFLOP/s, the compute floor quoted upstream.
func ditForwardFLOPs(c h3.Config, S, Rv, Ra, nT int, vsaGates bool) float64 {
	f := func(v int) float64 { return float64(v) }
	L := f(S + Rv + Ra)
	H, I, F := f(c.HiddenSize), f(c.InnerDim()), f(c.FFNDim)
	D, heads := f(c.AttentionHeadDim), f(c.NumAttentionHeads)
	E, Eh, T := f(c.TimeEmbedDim), f(c.TimeEmbedHiddenDim), f(c.TextDim)
	P := f(c.VideoPatchDim())
	Ca, blocks, nt, s, rv, ra := f(c.AudioInChannels), f(c.NumLayers), f(nT), f(S), f(Rv), f(Ra)

	gemmPerRow := 2 * H * (3*I + I + 3*F) // QKV, out projection, SwiGLU in (2F) and out (F)
	total := 2 * nt * (f(c.FreqDim)*Eh + Eh*E)
	adaIn := f(c.AdaLNInDim())
	if c.AdaLNRank > 0 {
		total += 2 * nt * E * adaIn
	}
	total += blocks*2*nt*adaIn*18*H + 2*nt*adaIn*2*H
	total += 2*s*T*H + f(c.NumRefinerLayers)*(s*gemmPerRow+4*s*s*D*heads)
	total += 2*rv*P*H + 2*ra*Ca*H
	block := L*gemmPerRow + 4*L*L*D*heads
	if vsaGates {
		block += 2 * L * H * I
	}
	total += blocks * block
	total += 2*rv*H*P + 2*ra*H*Ca
	return total
}

// ditParamGroups splits the DiT's parameters by storage precision in the
// release: the five boundary modules (proj_in, audio_proj_in, time_embedder,
// proj_out, audio_proj_out) are FP32, the rest BF16 (FP16 for the rank-r
// AdaLN variant, the same size).
func ditParamGroups(c h3.Config, vsaGates bool) (fp32, half int64) {
	i := func(v int) int64 { return int64(v) }
	H, I, F := i(c.HiddenSize), i(c.InnerDim()), i(c.FFNDim)
	E, Eh, T, hd := i(c.TimeEmbedDim), i(c.TimeEmbedHiddenDim), i(c.TextDim), i(c.AttentionHeadDim)
	P, Ca := i(c.VideoPatchDim()), i(c.AudioInChannels)

	core := 4*H*I + 2*hd + // Q, K, V, out (no bias) and the two QK norms
		H*2*F + F*H + // SwiGLU
		2*H // norm1, norm2
	adaIn := i(c.AdaLNInDim())
	var basis int64
	if c.AdaLNRank > 0 {
		basis = adaIn * E
	}
	adaln := adaIn*18*H + 18*H
	half = i(c.NumLayers)*(core+adaln) +
		i(c.NumRefinerLayers)*core + H + // refiner blocks + final norm
		T*H + H + // context_embedder
		H + adaIn*2*H + 2*H + // norm_out norm and linear
		basis
	if vsaGates {
		half += i(c.NumLayers) * H * I
	}
	fp32 = P*H + H + Ca*H + H + // proj_in, audio_proj_in
		i(c.FreqDim)*Eh + Eh + Eh*E + E + // time_embedder
		H*P + P + H*Ca + Ca // proj_out, audio_proj_out
	return fp32, half
}

// ditParams is the DiT's parameter count (33,122,992,896 released; FastH3 adds
// 1,926,758,400 for its VSA gates).
func ditParams(c h3.Config, vsaGates bool) int64 {
	a, b := ditParamGroups(c, vsaGates)
	return a + b
}

// ditWeightBytes is the DiT's weight memory: BF16 keeps the release's mixed
// precision (FP32 boundary modules), F32 stores everything in FP32.
func ditWeightBytes(c h3.Config, dtype DType, vsaGates bool) (int64, error) {
	fp32, half := ditParamGroups(c, vsaGates)
	switch dtype {
	case BF16:
		return 4*fp32 + 2*half, nil
	case F32:
		return 4 * (fp32 + half), nil
	}
	return 0, &RequestError{Field: "dtype", Value: string(dtype), Allowed: `"bf16" or "f32"`}
}

// WriteTable prints the plan as a readable table.
func (p *GenerationPlan) WriteTable(w io.Writer) error {
	if p.Family == FamilyWan {
		return p.writeWanTable(w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	row("model", "%s (preset %s)", p.Model, p.Preset)
	row("output", "%dx%d (HxW), %d frames (requested %d) at %d fps = %.3f s", p.Height, p.Width, p.NumFrames,
		p.RequestedFrames, p.FPS, p.DurationSeconds)
	row("canvas", "%dx%d", p.CanvasHeight, p.CanvasWidth)
	if p.FastSpatial != nil {
		row("fast spatial", "scale %d: stage 1 %dx%d on a %dx%d canvas, resampled to %dx%d", p.FastSpatial.Scale,
			p.FastSpatial.Stage1Height, p.FastSpatial.Stage1Width, p.FastSpatial.CanvasHeight, p.FastSpatial.CanvasWidth,
			p.FastSpatial.TargetHeight, p.FastSpatial.TargetWidth)
	}
	if p.FastTemporal != nil {
		row("fast temporal", "factor %d: %d source frames (%d latents) interpolated to %d, time scale %.6f",
			p.FastTemporal.Factor, p.FastTemporal.SourceFrames, p.FastTemporal.SourceLatentFrames,
			p.FastTemporal.TargetFrames, p.FastTemporal.VideoTemporalScale)
	}
	row("video latent", "%d x %d x %d x %d (C x T x H x W)", p.LatentChannels, p.VideoLatentFrames, p.LatentHeight, p.LatentWidth)
	row("audio latent", "2 x %d (stereo), %d samples per channel", p.AudioLatentFrames, p.AudioSamples)
	est := ""
	if p.Rows.TextEstimated {
		est = " (estimated)"
	}
	row("rows", "%d total = %d text%s + %d condition + %d audio + %d video", p.Rows.Total, p.Rows.Text, est,
		p.Rows.ConditionVideo, p.Rows.Audio, p.Rows.Video)
	row("steps", "%d, seed %d", p.Steps, p.Seed)
	row("video sigmas", "%s", floats(p.VideoSigmas))
	row("audio sigmas", "%s", floats(p.AudioSigmas))
	row("adaln timesteps", "%s", floats(p.AdaLNTimesteps))
	row("dit compute", "%.1f TFLOP per step, %.1f TFLOP total", p.DiTTFLOPsPerStep, p.DiTTFLOPsTotal)
	row("dit weights", "%.2f B params, %.2f GiB in %s", float64(p.DiTParams)/1e9, float64(p.WeightsBytes)/(1<<30), p.WeightsDType)
	return tw.Flush()
}

func floats(v []float32) string {
	const max = 12
	var b strings.Builder
	for i, x := range v {
		if i == max {
			fmt.Fprintf(&b, " ... (%d values)", len(v))
			break
		}
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%.7g", x)
	}
	return b.String()
}
