package h3

import (
	"fmt"
	"io"

	h3dit "fastvideo/dit/h3"
	"fastvideo/dit/h3/packing"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/schedule"
)

// PlanDetails are MiniMax H3's plan fields: the audio latents, the packed rows of a DiT forward,
// the audio ladder, the AdaLN timesteps and the fast modes.
type PlanDetails struct {
	AudioLatentFrames int `json:"audio_latent_frames"` // per stereo channel
	// AudioLatentChannels is the audio latent width (32 released).
	AudioLatentChannels int       `json:"audio_latent_channels"`
	AudioSamples        int       `json:"audio_samples"` // decoded samples per channel
	Rows                RowCounts `json:"rows"`

	AudioSigmas    []float32 `json:"audio_sigmas"`
	AudioTimesteps []float32 `json:"audio_timesteps"`
	// AdaLNTimesteps is every distinct timestep the DiT sees: the keys of an AdaLN step cache.
	AdaLNTimesteps []float32 `json:"adaln_timesteps"`

	FastTemporal *packing.FastTemporalPlan `json:"fast_temporal,omitempty"`
	FastSpatial  *packing.FastSpatialPlan  `json:"fast_spatial,omitempty"`
	// FullDiTTFLOPsTotal is, when a fast mode is on, what the DiT would cost over the whole
	// denoise without it (the output canvas, every frame): the saving is this against
	// Plan.DiTTFLOPsTotal.
	FullDiTTFLOPsTotal float64 `json:"full_dit_tflops_total,omitempty"`
	// VSA is the Video Sparse Attention of the run (nil: dense attention).
	VSA *VSAPlan `json:"vsa,omitempty"`
	// Attention says which attention a VSA-trained model runs when VSA is off, and why.
	Attention string `json:"attention,omitempty"`
	// Keyframes are FL2VA's condition images (none for T2VA); KeyframeDiTTFLOPsTotal is what their
	// rows (condition video rows, labels and vision tokens) add to the DiT's total.
	Keyframes              []KeyframePlan `json:"keyframes,omitempty"`
	KeyframeDiTTFLOPsTotal float64        `json:"keyframe_dit_tflops_total,omitempty"`
}

// KeyframePlan is one keyframe's way onto the canvas and into the prompt.
type KeyframePlan struct {
	Anchor string `json:"anchor"` // "first" or "last"
	Source string `json:"source"` // the file, or "image" for an image.Image
	// ImageWidth x ImageHeight is resized (PIL Lanczos) to ResizeWidth x ResizeHeight, then
	// cropped at (CropLeft, CropTop) to the canvas; an image of the canvas size is used as is.
	ImageWidth   int `json:"image_width"`
	ImageHeight  int `json:"image_height"`
	ResizeWidth  int `json:"resize_width"`
	ResizeHeight int `json:"resize_height"`
	CropLeft     int `json:"crop_left"`
	CropTop      int `json:"crop_top"`
	// VisionTokens is how many Qwen3-VL vision tokens the keyframe adds to the prompt.
	VisionTokens int `json:"vision_tokens"`
}

// AudioNoiseLen is the length of Options.AudioNoise: 2·C·N (stereo).
func (d *PlanDetails) AudioNoiseLen() int {
	return packing.AudioChannels * d.AudioLatentChannels * d.AudioLatentFrames
}

// RowCounts is the packed sequence of one DiT forward, by kind.
type RowCounts struct {
	Text int `json:"text"`
	// TextEstimated is set when Text was estimated from the prompt's text (Request.PromptTokens
	// unset); the exact count needs the tokenizer.
	TextEstimated  bool `json:"text_estimated"`
	ConditionVideo int  `json:"condition_video"`
	Audio          int  `json:"audio"` // both channels
	Video          int  `json:"video"` // target video rows
	Total          int  `json:"total"`
}

// Plan computes the plan of a resolved request for its exact or estimated prompt length.
func (r *resolved) Plan(dtype api.DType) (*api.Plan, error) {
	l, err := packing.Build(r.layoutRequest())
	if err != nil {
		return nil, fmt.Errorf("fastvideo: packing: %w", err)
	}
	return r.planWith(l, dtype)
}

// planWith is Plan over a layout already built (a run builds it once, for the plan and the loop).
func (r *resolved) planWith(l *packing.Layout, dtype api.DType) (*api.Plan, error) {
	s, g, sched := r.spec, r.Denoise, r.sched
	p := r.NewPlan([4]int{s.VAE.LatentChannels, g.LatentFrames, g.LatentHeight, g.LatentWidth},
		sched.Video.Sigmas, sched.Video.Timesteps)
	p.CanvasHeight, p.CanvasWidth = g.Height, g.Width
	d := &PlanDetails{
		AudioLatentFrames: g.AudioLatents, AudioLatentChannels: s.DiT.AudioInChannels,
		AudioSamples: g.AudioLatents * s.AudioVAE.HopLength(),
		Rows: RowCounts{
			Text: l.NumTextRows, TextEstimated: r.PromptTokensEstimated, ConditionVideo: l.NumConditionVideoRows,
			Audio: l.NumAudioRows, Video: l.NumVideoRows, Total: l.SequenceLength,
		},
		AudioSigmas: sched.Audio.Sigmas, AudioTimesteps: sched.Audio.Timesteps,
		AdaLNTimesteps: sched.VisitedTimesteps(r.conditions()),
		FastTemporal:   r.FastTemporal, FastSpatial: r.FastSpatial,
	}
	p.Details = d
	var err error
	d.Attention = r.attentionWhy
	if d.VSA, err = vsaPlan(r.vsa, l, len(sched.Video.Timesteps), s.DiT.NumLayers, s.DiT.NumAttentionHeads, s.DiT.AttentionHeadDim); err != nil {
		return nil, err
	}
	if d.VSA != nil {
		d.VSA.FineStage = r.vsa.FineStage(dtype)
	}
	p.DiTTFLOPsPerStep, p.DiTTFLOPsTotal = r.ditTFLOPs(l)
	if err := r.planKeyframes(d, p.DiTTFLOPsTotal); err != nil {
		return nil, err
	}
	if r.FastSpatial != nil || r.FastTemporal != nil {
		full, err := r.fullLayout()
		if err != nil {
			return nil, err
		}
		_, d.FullDiTTFLOPsTotal = r.ditTFLOPs(full)
	}
	for _, f := range r.Filters {
		p.FrameFilters = append(p.FrameFilters, f.Name())
	}
	p.DiTParams = ditParams(s.DiT, s.VSAGates)
	p.WeightsDType = familykit.OrPreset(dtype, s.WeightsDType)
	if p.WeightsBytes, err = ditWeightBytes(s.DiT, s.VSAGates, p.WeightsDType); err != nil {
		return nil, err
	}
	p.Memory = family.ForDecoder(family.Undecided(componentSizes(s, s.builtinTextConfig(), p.WeightsDType.Compute(), p.WeightsDType)), r.Decoder, r.Preview)
	if r.Decoder == api.DecoderTiny || r.Preview {
		p.TinyDecoder = TinyVariant
	}
	return p, nil
}

// ditWeightBytes is the DiT's weight memory in dtype. FP8 (h3.Options.FP8) keeps the six core linears
// of every joint block as one-byte codes with a float32 scale per output channel and the rest in bf16,
// the compute dtype of the accelerators it is for.
func ditWeightBytes(c h3dit.Config, vsaGates bool, dtype api.DType) (int64, error) {
	fp32, half := ditParamGroups(c, vsaGates)
	if dtype != api.FP8 {
		return familykit.WeightBytes(fp32, half, dtype)
	}
	rest, err := familykit.WeightBytes(fp32, half, api.BF16)
	if err != nil {
		return 0, err
	}
	H, I, F := int64(c.HiddenSize), int64(c.InnerDim()), int64(c.FFNDim)
	weights := 4*H*I + H*2*F + F*H // Q, K, V, out, SwiGLU in and out
	outs := 3*I + H + 2*F + H
	return rest + int64(c.NumLayers)*(4*outs-weights), nil // 2 bytes a weight become 1
}

// ditTFLOPs is the DiT's cost over the denoise of layout l: its costliest step and the total,
// in TFLOP.
func (r *resolved) ditTFLOPs(l *packing.Layout) (perStep, total float64) {
	s, sched := r.spec, r.sched
	for k := 0; k < sched.Steps(); k++ {
		f := ditForwardFLOPs(s.DiT, l.NumTextRows, l.NumVideoRows+l.NumConditionVideoRows, l.NumAudioRows,
			len(sched.StepTimesteps(k, r.conditions())), s.VSAGates)
		total += f
		perStep = max(perStep, f)
	}
	return perStep / 1e12, total / 1e12
}

// conditions are the condition rows the run's forwards carry.
func (r *resolved) conditions() schedule.Conditions {
	return schedule.Conditions{Video: len(r.keyframes) > 0}
}

// planKeyframes lists the keyframes and their extra DiT cost against the same request without them.
func (r *resolved) planKeyframes(d *PlanDetails, total float64) error {
	if len(r.keyframes) == 0 {
		return nil
	}
	for _, k := range r.keyframes {
		src := k.image.Source
		if src == "" {
			src = "image"
		}
		d.Keyframes = append(d.Keyframes, KeyframePlan{Anchor: string(k.anchor), Source: src,
			ImageWidth: k.image.Pixels.Width, ImageHeight: k.image.Pixels.Height, ResizeWidth: k.resize.ResizeWidth,
			ResizeHeight: k.resize.ResizeHeight, CropLeft: k.resize.CropLeft, CropTop: k.resize.CropTop, VisionTokens: r.visionTokens})
	}
	plain := *r
	plain.keyframes, plain.textTags = nil, nil
	l, err := packing.Build(plain.layoutRequest())
	if err != nil {
		return fmt.Errorf("fastvideo: packing: %w", err)
	}
	_, without := plain.ditTFLOPs(l)
	d.KeyframeDiTTFLOPsTotal = total - without
	return nil
}

// fullLayout is the packed sequence the request would have without its fast modes.
func (r *resolved) fullLayout() (*packing.Layout, error) {
	g, err := r.geometry(r.Height, r.Width)
	if err != nil {
		return nil, err
	}
	l, err := packing.Build(g.Request(nil, r.PromptTokens))
	if err != nil {
		return nil, fmt.Errorf("fastvideo: packing: %w", err)
	}
	return l, nil
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
func ditForwardFLOPs(c h3dit.Config, S, Rv, Ra, nT int, vsaGates bool) float64 {
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
func ditParamGroups(c h3dit.Config, vsaGates bool) (fp32, half int64) {
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
func ditParams(c h3dit.Config, vsaGates bool) int64 {
	a, b := ditParamGroups(c, vsaGates)
	return a + b
}

// WriteTable prints the plan as a readable table.
func (d *PlanDetails) WriteTable(w io.Writer, p *api.Plan) error {
	tw, row := api.NewTable(w)
	row("model", "%s (preset %s)", p.Model, p.Preset)
	row("output", "%dx%d (HxW), %d frames (requested %d) at %d fps = %.3f s", p.Height, p.Width, p.NumFrames,
		p.RequestedFrames, p.FPS, p.DurationSeconds)
	row("canvas", "%dx%d", p.CanvasHeight, p.CanvasWidth)
	if fs := d.FastSpatial; fs != nil {
		row("fast spatial", "scale %d: stage 1 %dx%d on a %dx%d canvas, resampled to %dx%d", fs.Scale,
			fs.Stage1Height, fs.Stage1Width, fs.CanvasHeight, fs.CanvasWidth, fs.TargetHeight, fs.TargetWidth)
	}
	if ft := d.FastTemporal; ft != nil {
		row("fast temporal", "factor %d: %d source frames (%d latents) interpolated to %d, time scale %.6f",
			ft.Factor, ft.SourceFrames, ft.SourceLatentFrames, ft.TargetFrames, ft.VideoTemporalScale)
	}
	for i, f := range p.FrameFilters {
		row(map[bool]string{true: "frame filters", false: ""}[i == 0], "%d. %s", i+1, f)
	}
	row("video latent", "%d x %d x %d x %d (C x T x H x W)", p.LatentChannels, p.VideoLatentFrames, p.LatentHeight, p.LatentWidth)
	row("audio latent", "2 x %d (stereo), %d samples per channel", d.AudioLatentFrames, d.AudioSamples)
	est := ""
	if d.Rows.TextEstimated {
		est = " (estimated)"
	}
	row("rows", "%d total = %d text%s + %d condition + %d audio + %d video", d.Rows.Total, d.Rows.Text, est,
		d.Rows.ConditionVideo, d.Rows.Audio, d.Rows.Video)
	for _, k := range d.Keyframes {
		row("keyframe "+k.Anchor, "%s %dx%d -> %dx%d, crop at (%d, %d); %d vision tokens", k.Source, k.ImageWidth, k.ImageHeight,
			k.ResizeWidth, k.ResizeHeight, k.CropLeft, k.CropTop, k.VisionTokens)
	}
	if len(d.Keyframes) > 0 {
		row("keyframe cost", "%.1f TFLOP of DiT compute (plus the vision tower and the VAE encoder)", d.KeyframeDiTTFLOPsTotal)
	}
	row("steps", "%d, seed %d", p.Steps, p.Seed)
	row("video sigmas", "%s", familykit.Floats(p.VideoSigmas))
	row("audio sigmas", "%s", familykit.Floats(d.AudioSigmas))
	row("adaln timesteps", "%s", familykit.Floats(d.AdaLNTimesteps))
	row("dit compute", "%.1f TFLOP per step, %.1f TFLOP total", p.DiTTFLOPsPerStep, p.DiTTFLOPsTotal)
	if full := d.FullDiTTFLOPsTotal; full > 0 {
		row("fast saving", "%.1f TFLOP without the fast modes: %.2fx the DiT compute of this plan", full, full/p.DiTTFLOPsTotal)
	}
	if d.Attention != "" {
		row("attention", "%s", d.Attention)
	}
	if v := d.VSA; v != nil {
		row("attention", "VSA sparsity %g, %d-row tiles (%s): %d prefix + %d video tiles, top-%d video key tiles, fine stage %s; %.1f TFLOP of attention skipped",
			v.Sparsity, v.TileSize, v.Mode, v.PrefixTiles, v.VideoTiles, v.TopK, v.FineStage, v.AttentionTFLOPsSaved)
	}
	api.ResourceRows(row, p)
	if dp := p.Devices; dp != nil {
		row("devices", "%d, DiT tensor-parallel (%d heads and FFN %d each; shard k on device k, one SPMD program per joint block, 2 all-reduces), "+
			"video VAE clip i on device i mod %d (a decoder replica on each); per device %s", dp.Devices, dp.LocalHeads, dp.LocalFFN, dp.Devices, dp.Breakdown())
	}
	return tw.Flush()
}
