package wan

import (
	"fmt"
	"io"
	"strings"

	wandit "fastvideo/dit/wan"
	"fastvideo/dit/wan/geometry"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/schedule"
	wanvae "fastvideo/vae/wan"
)

// PlanDetails are Wan's plan fields: the DiT's token grid (T', H', W') after the (1, 2, 2) patch,
// its product Tokens (the self-attention length), TextTokens (the zero-padded prompt rows of the
// cross-attention) and the sampler.
type PlanDetails struct {
	TokenGrid  []int `json:"token_grid"`
	Tokens     int   `json:"tokens"`
	TextTokens int   `json:"text_tokens"`

	Sampler        Sampler `json:"sampler"`
	FlowShift      float64 `json:"flow_shift"`
	NegativePrompt string  `json:"negative_prompt,omitempty"`
	// DMDSteps are the raw rungs of a DMD sampler; WarpDenoisingSteps says whether the DiT is fed
	// them warped (the plan's VideoTimesteps are what it is fed either way).
	DMDSteps           []int `json:"dmd_denoising_steps,omitempty"`
	WarpDenoisingSteps bool  `json:"warp_denoising_steps,omitempty"`
	// Image is the first-frame condition of image-to-video; nil for text-to-video.
	Image *ImagePlan `json:"image_condition,omitempty"`
	// VSA is the Video Sparse Attention of the run (nil: dense attention).
	VSA *VSAPlan `json:"vsa,omitempty"`
	// Attention says which attention a VSA-trained model runs when VSA is off, and why.
	Attention string `json:"attention,omitempty"`

	FastTemporal *FastTemporalPlan `json:"fast_temporal,omitempty"`
	FastSpatial  *FastSpatialPlan  `json:"fast_spatial,omitempty"`
	// Refine is the two-stage refine (nil: one stage). The plan's latent is then stage 2's (the
	// output's), Steps and the video ladder are both stages' forwards in order, and
	// DiTTFLOPsPerStep is a stage-2 forward's.
	Refine *RefinePlan `json:"refine,omitempty"`
	// FullDiTTFLOPsTotal is, when a fast mode or refine is on, what the DiT would cost without it (the
	// output size, the output's frames aligned up to 4n+1, one ladder): the saving is this against
	// Plan.DiTTFLOPsTotal.
	FullDiTTFLOPsTotal float64 `json:"full_dit_tflops_total,omitempty"`

	renoiseLen int
}

// FastTemporalPlan is the temporal fast mode of a Wan run (the MLX runtime's --fast): the DiT and
// VAE make SourceFrames, RIFE puts Factor-1 frames between each two, and the first TargetFrames are
// kept.
type FastTemporalPlan struct {
	TargetFrames       int `json:"target_frames"`
	SourceFrames       int `json:"source_frames"`
	Factor             int `json:"factor"`
	SourceLatentFrames int `json:"source_latent_frames"`
}

// FastSpatialPlan is the spatial fast mode of a Wan run (the MLX runtime's --fast-spatial): the DiT
// and VAE run at the target size divided by Scale, and the decoded frames are resized to the
// target.
type FastSpatialPlan struct {
	TargetHeight int `json:"target_height"`
	TargetWidth  int `json:"target_width"`
	Stage1Height int `json:"stage1_height"`
	Stage1Width  int `json:"stage1_width"`
	Scale        int `json:"scale"`
}

// ImagePlan is what an image condition adds to a run: the image's way to the canvas, the latent
// frames and tokens it fixes (fed at timestep 0, restored after every step), and the extra
// component, the VAE encoder, run once over one frame.
type ImagePlan struct {
	Source                  string `json:"source"` // the file, or "image" for an image.Image
	ImageWidth              int    `json:"image_width"`
	ImageHeight             int    `json:"image_height"`
	ScaledWidth             int    `json:"scaled_width"` // after the Lanczos resize, before the center crop
	ScaledHeight            int    `json:"scaled_height"`
	ConditionedLatentFrames int    `json:"conditioned_latent_frames"`
	ConditionedTokens       int    `json:"conditioned_tokens"`
	EncoderParams           int64  `json:"encoder_params"` // run in float32
}

// RenoiseNoiseLen is the length of Options.RenoiseNoise: (steps-1)·C·T·Hl·Wl for a DMD sampler,
// else 0.
func (d *PlanDetails) RenoiseNoiseLen() int { return d.renoiseLen }

// ladder is a Wan run's denoising ladder: one of the two samplers, and what the plan shows of
// it. The UniPC solver is stateful, so every run builds a fresh ladder.
type ladder struct {
	unipc *schedule.UniPC
	dmd   *schedule.DMDLadder
	// timesteps are fed to the DiT; sigmas are the ladder's noise levels (UniPC: steps+1 values
	// ending at 0; DMD: one per rung).
	timesteps, sigmas []float32
}

func (r *resolved) newLadder() (*ladder, error) {
	l := &ladder{}
	switch r.Sampler {
	case SamplerUniPC:
		u, err := schedule.NewUniPC(r.FlowShift, r.Steps)
		if err != nil {
			return nil, err
		}
		l.unipc, l.sigmas = u, append([]float32(nil), u.Sigmas...)
		for _, t := range u.Timesteps {
			l.timesteps = append(l.timesteps, float32(t))
		}
	case SamplerDMD:
		var d *schedule.DMDLadder
		var err error
		if r.WarpDenoisingSteps {
			d, err = schedule.NewWarpedDMDLadder(r.DMDSteps, r.FlowShift)
		} else {
			d, err = schedule.NewDMDLadder(r.DMDSteps)
		}
		if err != nil {
			return nil, err
		}
		l.dmd, l.sigmas = d, append([]float32(nil), d.Sigmas...)
		if r.WarpDenoisingSteps {
			l.timesteps = append([]float32(nil), d.WarpedTimesteps...)
		} else {
			for _, t := range d.Timesteps {
				l.timesteps = append(l.timesteps, float32(t))
			}
		}
	default:
		return nil, fmt.Errorf("fastvideo: unknown Wan sampler %q", r.Sampler)
	}
	return l, nil
}

// Plan computes the plan of a resolved request.
func (r *resolved) Plan(dtype api.DType) (*api.Plan, error) {
	s, g := r.spec, r.Geometry
	l := r.steps
	sigmas, timesteps := l.sigmas, l.timesteps
	if rf := r.refine; rf != nil {
		// The DiT's whole sequence of forwards: stage 1's rungs, then stage 2's.
		sigmas = append(append([]float32(nil), sigmas...), rf.ladder.sigmas...)
		timesteps = append(append([]float32(nil), timesteps...), rf.ladder.timesteps...)
	}
	p := r.NewPlan([4]int{g.VAE.LatentChannels, g.LatentFrames, g.LatentHeight, g.LatentWidth}, sigmas, timesteps)
	p.CanvasHeight, p.CanvasWidth = g.Height, g.Width
	if r.CFG {
		p.CFG, p.ForwardsPerStep = true, 2
	}
	d := &PlanDetails{
		TokenGrid: []int{g.TokenFrames, g.TokenHeight, g.TokenWidth}, Tokens: g.Tokens, TextTokens: s.TextLen,
		Sampler: r.Sampler, FlowShift: r.FlowShift, NegativePrompt: r.NegativePrompt, DMDSteps: r.DMDSteps,
		WarpDenoisingSteps: r.WarpDenoisingSteps, FastTemporal: r.FastTemporal, FastSpatial: r.FastSpatial,
	}
	if r.Sampler == SamplerDMD && r.refine == nil {
		d.renoiseLen = (r.Steps - 1) * r.latentLen()
	}
	if rf := r.refine; rf != nil {
		rp := rf.plan
		d.Refine = &rp
	}
	if r.image != nil {
		var err error
		if d.Image, err = r.imagePlan(); err != nil {
			return nil, err
		}
	}
	var err error
	d.Attention = r.attentionRow(dtype)
	if d.VSA, err = r.vsaPlanOfRun(p.ForwardsPerStep); err != nil {
		return nil, err
	}
	if d.VSA != nil {
		d.VSA.FineStage = r.vsa.FineStage(dtype)
	}
	p.Details = d
	perStep := float64(p.ForwardsPerStep) * s.DiT.ForwardFLOPs(g.Tokens, s.TextLen)
	p.DiTTFLOPsPerStep, p.DiTTFLOPsTotal = perStep/1e12, perStep*float64(r.Steps)/1e12
	baseSteps := len(l.timesteps) // the steps of one ladder (refine: stage 1's)
	if rf := r.refine; rf != nil {
		// Per step: the largest, a stage-2 forward; the total counts each stage at its own size.
		stage1 := float64(p.ForwardsPerStep) * s.DiT.ForwardFLOPs(rf.stage1.Tokens, s.TextLen)
		p.DiTTFLOPsTotal = (stage1*float64(baseSteps) + perStep*float64(len(rf.ladder.timesteps))) / 1e12
	}
	if r.FastTemporal != nil || r.FastSpatial != nil || r.refine != nil {
		tr := g.VAE.TemporalRatio
		full, err := geometry.New(g.VAE, r.Height, r.Width, (r.NumFrames-1+tr-1)/tr*tr+1, g.Patch)
		if err != nil {
			return nil, err
		}
		d.FullDiTTFLOPsTotal = float64(p.ForwardsPerStep) * s.DiT.ForwardFLOPs(full.Tokens, s.TextLen) * float64(baseSteps) / 1e12
	}
	for _, f := range r.Filters {
		p.FrameFilters = append(p.FrameFilters, f.Name())
	}
	f32, half, err := paramGroups(s.DiT)
	if err != nil {
		return nil, err
	}
	p.DiTParams = f32 + half
	if dtype == api.FP8 {
		return nil, errNoFP8
	}
	p.WeightsDType = familykit.OrPreset(dtype, s.WeightsDType)
	if p.WeightsBytes, err = familykit.WeightBytes(f32, half, p.WeightsDType); err != nil {
		return nil, err
	}
	p.Memory = family.ForDecoder(family.Undecided(componentSizes(s, p.WeightsDType.Compute())), r.Decoder, r.Preview)
	if r.Decoder == api.DecoderTiny || r.Preview {
		p.TinyDecoder, _ = s.tinyDecoder()
	}
	return p, nil
}

// vsaPlanOfRun is the VSA plan of the run's forwards: the output grid's tiling; with refine the
// saving adds stage 1's forwards on its own grid (dense first steps count across both ladders).
func (r *resolved) vsaPlanOfRun(forwardsPerStep int) (*VSAPlan, error) {
	g, s := r.Geometry, r.spec
	grid := [3]int{g.TokenFrames, g.TokenHeight, g.TokenWidth}
	rf := r.refine
	if rf == nil || r.vsa == nil {
		return vsaPlan(r.vsa, grid, r.Steps, forwardsPerStep, s.DiT)
	}
	n1, n2 := len(r.steps.timesteps), len(rf.ladder.timesteps)
	// vsaPlan counts steps − DenseFirstSteps sparse steps; stage 2's dense ones are those left after stage 1.
	v, err := vsaPlan(r.vsa, grid, n2+min(r.vsa.DenseFirstSteps, n1), forwardsPerStep, s.DiT)
	if err != nil {
		return nil, err
	}
	g1 := rf.stage1
	v1, err := vsaPlan(r.vsa, [3]int{g1.TokenFrames, g1.TokenHeight, g1.TokenWidth}, n1, forwardsPerStep, s.DiT)
	if err != nil {
		return nil, err
	}
	v.AttentionTFLOPsSaved += v1.AttentionTFLOPsSaved
	return v, nil
}

func (r *resolved) imagePlan() (*ImagePlan, error) {
	img, g := r.image, r.Geometry
	enc, err := wanvae.EncoderParams(r.spec.VAE)
	if err != nil {
		return nil, err
	}
	ip := &ImagePlan{Source: img.keyframe.Source, ImageWidth: img.keyframe.Pixels.Width, ImageHeight: img.keyframe.Pixels.Height,
		ScaledWidth: img.scaledWidth, ScaledHeight: img.scaledHeight, ConditionedLatentFrames: 1,
		ConditionedTokens: g.TokenHeight * g.TokenWidth}
	if ip.Source == "" {
		ip.Source = "image"
	}
	for _, t := range enc {
		n := int64(1)
		for _, d := range t.Shape {
			n *= int64(d)
		}
		ip.EncoderParams += n
	}
	return ip, nil
}

// paramGroups splits the DiT's parameters (dit/wan's table, biases included) by the precision
// the model keeps them in: the boundary modules (patch embedding, time embedder, proj_out) and
// every vector the reference computes with in float32 (norm weights, scale_shift_tables) stay
// float32; the rest takes the compute dtype.
func paramGroups(cfg wandit.Config) (f32, half int64, err error) {
	params, err := wandit.Params(cfg)
	if err != nil {
		return 0, 0, err
	}
	for _, t := range params {
		name, n := t.Name, int64(1)
		for _, d := range t.Shape {
			n *= int64(d)
		}
		switch {
		case strings.HasPrefix(name, "patch_embedding."), strings.HasPrefix(name, "condition_embedder.time_embedder."),
			strings.HasPrefix(name, "proj_out."), strings.HasSuffix(name, "scale_shift_table"),
			strings.HasSuffix(name, "norm_q.weight"), strings.HasSuffix(name, "norm_k.weight"),
			strings.HasSuffix(name, "norm2.weight"), strings.HasSuffix(name, "norm2.bias"):
			f32 += n
		default:
			half += n
		}
	}
	return f32, half, nil
}

// WriteTable prints the plan as a readable table.
func (d *PlanDetails) WriteTable(w io.Writer, p *api.Plan) error {
	tw, row := api.NewTable(w)
	row("model", "%s (preset %s)", p.Model, p.Preset)
	row("output", "%dx%d (HxW), %d frames at %d fps = %.3f s, video only", p.Height, p.Width, p.NumFrames, p.FPS, p.DurationSeconds)
	if p.CanvasHeight != p.Height || p.CanvasWidth != p.Width {
		row("canvas", "%dx%d", p.CanvasHeight, p.CanvasWidth)
	}
	if fs := d.FastSpatial; fs != nil {
		row("fast spatial", "scale %d: denoised and decoded at %dx%d, resampled to %dx%d", fs.Scale,
			fs.Stage1Height, fs.Stage1Width, fs.TargetHeight, fs.TargetWidth)
	}
	if rf := d.Refine; rf != nil {
		rf.writeRows(row)
	}
	if ft := d.FastTemporal; ft != nil {
		row("fast temporal", "factor %d: %d source frames (%d latents) interpolated to %d",
			ft.Factor, ft.SourceFrames, ft.SourceLatentFrames, ft.TargetFrames)
	}
	for i, f := range p.FrameFilters {
		row(map[bool]string{true: "frame filters", false: ""}[i == 0], "%d. %s", i+1, f)
	}
	row("latent", "%d x %d x %d x %d (C x T x H x W)", p.LatentChannels, p.VideoLatentFrames, p.LatentHeight, p.LatentWidth)
	row("tokens", "%d = %d x %d x %d, cross-attention over %d text rows", d.Tokens, d.TokenGrid[0], d.TokenGrid[1], d.TokenGrid[2], d.TextTokens)
	switch d.Sampler {
	case SamplerDMD:
		warp := "raw"
		if d.WarpDenoisingSteps {
			warp = fmt.Sprintf("warped onto the shift-%g grid", d.FlowShift)
		}
		row("sampler", "DMD, rungs %v (%s), no guidance; seed %d", d.DMDSteps, warp, p.Seed)
	default:
		cfg := "no guidance"
		if p.CFG {
			cfg = fmt.Sprintf("CFG %g (2 forwards per step)", p.GuidanceScale)
		}
		row("sampler", "UniPC, %d steps at shift %g, %s; seed %d", p.Steps, d.FlowShift, cfg, p.Seed)
	}
	if im := d.Image; im != nil {
		row("condition", "first frame from %s (%dx%d, Lanczos to %dx%d, center crop %dx%d): %d latent frame, %d of %d tokens at timestep 0",
			im.Source, im.ImageWidth, im.ImageHeight, im.ScaledWidth, im.ScaledHeight, p.Width, p.Height,
			im.ConditionedLatentFrames, im.ConditionedTokens, d.Tokens)
		row("extra", "VAE encoder, %.1f M params in f32, one pass over 1 frame", float64(im.EncoderParams)/1e6)
	}
	row("timesteps", "%s", familykit.Floats(p.VideoTimesteps))
	row("sigmas", "%s", familykit.Floats(p.VideoSigmas))
	row("dit compute", "%.1f TFLOP per step, %.1f TFLOP total", p.DiTTFLOPsPerStep, p.DiTTFLOPsTotal)
	if full := d.FullDiTTFLOPsTotal; full > 0 {
		name, what := "fast saving", "without the fast modes"
		if d.Refine != nil {
			name, what = "refine compute", "for one ladder at the output size without refine"
		}
		row(name, "%.1f TFLOP %s: %.2fx the DiT compute of this plan", full, what, full/p.DiTTFLOPsTotal)
	}
	if d.Attention != "" {
		row("attention", "%s", d.Attention)
	}
	if v := d.VSA; v != nil {
		row("attention", "VSA sparsity %g, %d-row tiles: %d tiles, top-%d key tiles, fine stage %s; %.1f TFLOP of attention skipped",
			v.Sparsity, v.TileSize, v.Tiles, v.TopK, v.FineStage, v.AttentionTFLOPsSaved)
	}
	api.ResourceRows(row, p)
	if dp := p.Devices; dp != nil {
		row("devices", "%d, CFG-parallel (conditional forwards on device 0, unconditional at the same time on device 1 with a DiT replica); per device %s",
			dp.Devices, dp.Breakdown())
	}
	return tw.Flush()
}

// writeRows writes the refine rows of the plan table: both stages, their ladders and the hand-off.
func (rf *RefinePlan) writeRows(row func(key, format string, a ...any)) {
	row("refine", "scale %d, %s upsample: stage 1 at %dx%d (latent %v, %d tokens), stage 2 at %dx%d (latent %v, %d tokens)",
		rf.Scale, rf.Upsample, rf.Stage1Height, rf.Stage1Width, rf.Stage1Latent[1:], rf.Stage1Tokens,
		rf.TargetHeight, rf.TargetWidth, rf.Stage2Latent[1:], rf.Stage2Tokens)
	row("", "stage 1 rungs %v: timesteps %s, sigmas %s", rf.Stage1Steps, familykit.Floats(rf.Stage1Timesteps), familykit.Floats(rf.Stage1Sigmas))
	row("", "stage 2 rungs %v: timesteps %s, sigmas %s", rf.Stage2Steps, familykit.Floats(rf.Stage2Timesteps), familykit.Floats(rf.Stage2Sigmas))
	noise := fmt.Sprintf("x = (1-σ_h)·up + σ_h·ε, stage-1 weight %.4f, noise seed %d (stage-2 re-noise seed %d)", 1-rf.Sigma, rf.HandoffSeed, rf.Stage2Seed)
	if !rf.AddNoise {
		noise = "the clean upsample (no re-noise)"
	}
	row("", "hand-off sigma %.4f: %s", rf.Sigma, noise)
	for _, w := range rf.Warnings {
		row("", "warning: %s", w)
	}
}

// attentionRow is the plan's attention row: why a VSA-trained model runs dense, or which window runs
// and how its key tiles are attended at dtype.
func (r *resolved) attentionRow(dtype api.DType) string {
	if r.window != nil {
		return r.attentionWhy + "; key tiles " + familykit.WindowFineStage(dtype)
	}
	return r.attentionWhy
}
