package h3

import (
	"context"
	"fmt"

	h3dit "fastvideo/dit/h3"
	"fastvideo/dit/h3/packing"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/internal/imageops"
	"fastvideo/internal/textenc"
	"fastvideo/vae/h3audio"
	"fastvideo/vae/h3video"
	"fastvideo/vae/taehv"
)

// run is one H3 generation's stages and what they hand each other.
type run struct {
	c *components
	s *family.Session
	r *resolved

	hidden textenc.Result  // the conditioned prompt
	layout *packing.Layout // the packed sequence, built once for the exact prompt length

	frames     []imageops.Image // the keyframes fitted to the canvas, until encoded
	keyLatents [][]float32      // their normalized latents [C, 1, h, w]

	videoLatents []float32 // final latents [1, C, T, Hl, Wl]
	videoShape   []int
	audioRows    []float32 // final audio rows [2N, C]

	preview *taehv.Decoder // the tiny decoder of Request.Preview, while denoising
}

// Start checks the AdaLN-cache contract of a converted checkpoint against the run's ladders.
func (c *components) Start(res family.Resolution, s *family.Session) (family.Stages, error) {
	r := res.(*resolved)
	if err := c.checkTiny(r); err != nil {
		return nil, err
	}
	if err := h3dit.CheckAdaLNLadder(c.spec.AdaLN, r.Steps, r.sched.Video.Timesteps, r.sched.Audio.Timesteps); err != nil {
		return nil, &api.RequestError{Field: "num_inference_steps", Value: r.Steps, Allowed: err.Error()}
	}
	return &run{c: c, s: s, r: r}, nil
}

// Condition encodes the prompt (or reads it from the prompt cache), then plans the run for the
// exact prompt length.
func (p *run) Condition(ctx context.Context) error {
	c, r := p.c, p.r
	cond, err := family.Acquire(p.s, &c.cond, "tokenizer", func() (*textenc.Conditioner, error) { return c.conditioner(p.s) })
	if err != nil {
		return err
	}
	ids, err := cond.Tokenizer.Encode(r.Prompt)
	if err != nil {
		return err
	}
	r.PromptTokens, r.PromptTokensEstimated = len(ids), false
	if err := checkPromptTokens(len(ids), len(r.estimatedTextTags()), r.Prompt); err != nil {
		return err
	}
	p.preload(ctx)
	var out textenc.Result
	if len(r.keyframes) == 0 {
		out, err = cond.Condition(ctx, r.Prompt)
	} else {
		out, err = p.conditionKeyframes(ctx, cond, ids)
	}
	if err != nil {
		return err
	}
	if len(out.Shape) != 2 || out.Shape[1] != c.spec.DiT.TextDim || out.Shape[0] < 1 {
		return fmt.Errorf("fastvideo: the text encoder returned shape %v, the DiT takes [S, %d]", out.Shape, c.spec.DiT.TextDim)
	}
	res := p.s.Result
	res.PromptTokens, res.PromptCached = out.Shape[0], out.Cached
	if p.layout, err = packing.Build(r.layoutRequest()); err != nil {
		return fmt.Errorf("fastvideo: packing: %w", err)
	}
	if res.Plan, err = r.planWith(p.layout, c.Engine.RunDType()); err != nil {
		return err
	}
	p.hidden = out
	return p.encodeKeyframes(ctx)
}

// Denoise loads the DiT (unless resident), refines the prompt, computes the AdaLN tables of the
// visited timesteps once, and runs the sampling loop: one forward per step, video and audio
// updated by their own ladders.
func (p *run) Denoise(ctx context.Context) error {
	c := p.c
	dit, err := family.Acquire(p.s, &c.dit, family.CompDiT, c.loadDiT)
	if err != nil {
		return err
	}
	in, err := p.forwardInputs(dit)
	if err != nil {
		return err
	}
	// Upstream draws the condition rows' noise before the video noise; the streams here are
	// independent, so only the row order matters.
	cond, err := p.conditionRows()
	if err != nil {
		return err
	}
	xv, xa, err := p.initialNoise()
	if err != nil {
		return err
	}
	xv = append(cond, xv...)
	if p.r.Preview {
		if p.preview, err = c.loadTiny(p.s); err != nil {
			return err
		}
	}
	if err := p.sample(ctx, dit, in, xv, xa); err != nil {
		return err
	}
	return p.keepLatents(xv[:len(cond)], xv[len(cond):], xa)
}

// preload starts loading the DiT and the decoders DecodeAudio and Decode will run, those the memory
// policy keeps, beside the prompt's encoding (family.Preload; the stages that use them then wait for
// them), and each decoder's compiles as soon as it has loaded (docs/architecture.md, "Decoder
// prewarm"), so that they overlap the encoding, the DiT's load and the denoise. A decoder the run
// does not need (no waveform wanted, no frames wanted, the tiny decoder) is left alone.
func (p *run) preload(ctx context.Context) {
	c := p.c
	family.Preload(p.s, &c.dit, family.CompDiT, c.loadDiT)
	if p.needsAudio() {
		n := p.r.Denoise.AudioLatents
		family.Preload(p.s, &c.audio, family.CompAudioVAE, c.loadAudioVAE)
		family.PrewarmPreloaded(ctx, p.s, family.CompAudioVAE, func(ctx context.Context, d *h3audio.Decoder) error { return d.PrepareRows(ctx, n) })
	}
	if p.decodesVideo() {
		shape := p.latentShape()
		family.Preload(p.s, &c.video, family.CompVideoVAE, c.loadVideoVAE)
		family.PrewarmPreloaded(ctx, p.s, family.CompVideoVAE, func(ctx context.Context, d *h3video.Decoder) error { return d.Prepare(ctx, shape) })
	}
}

func (c *components) loadDiT() (*h3dit.Model, error) {
	return c.Src.loadDiT(c.Engine, h3dit.Options{DType: c.Engine.DType, AdaLNManifest: c.spec.AdaLN,
		Attention: c.Engine.Attention, Dispatch: c.Engine.QuantDispatch, FP8: c.Engine.FP8, Shards: c.Engine.Devices}, c.LoRA)
}

func (c *components) loadAudioVAE() (*h3audio.Decoder, error) { return c.Src.loadAudioVAE(c.Engine) }

func (c *components) loadVideoVAE() (*h3video.Decoder, error) { return c.Src.loadVideoVAE(c.Engine) }

// decodesVideo reports whether Decode runs the full video VAE: frames are wanted and the tiny
// decoder does not make them.
func (p *run) decodesVideo() bool {
	return family.WantsFrames(p.s.Request) && p.r.Decoder != api.DecoderTiny
}

// needsAudio reports whether DecodeAudio runs the audio VAE: for the file's audio track or the caller.
func (p *run) needsAudio() bool {
	req := p.s.Request
	return !req.SkipSave || req.ReturnAudio
}

// latentShape is the shape of the final video latents [1, C, T, Hl, Wl] the video VAE decodes.
func (p *run) latentShape() []int {
	cfg, geo := p.c.spec.DiT, p.r.Denoise
	return []int{1, cfg.InChannels, geo.LatentFrames, geo.LatentHeight, geo.LatentWidth}
}

// forwardInputs prepares what every forward shares: the refined prompt, the AdaLN tables (unless
// the checkpoint carries a fixed cache) and the packed layout's tags, positions and indices.
func (p *run) forwardInputs(dit *h3dit.Model) (h3dit.ForwardInputs, error) {
	text, err := dit.PrepareText(p.hidden.Hidden)
	if err != nil {
		return h3dit.ForwardInputs{}, err
	}
	p.s.OnRelease(func() error { text.Close(); return nil })
	p.hidden = textenc.Result{} // the host copy is no longer needed
	in := h3dit.ForwardInputs{TextState: text, VideoIndices: p.layout.VideoIndices, AudioIndices: p.layout.AudioIndices,
		TextIndices: p.layout.TextIndices}
	if p.c.spec.AdaLN == nil {
		// Every (timestep, modality) modulation of the run, once, instead of once per step and block.
		sched := p.r.sched
		adaln, err := dit.PrepareAdaLN(sched.Video.Timesteps, sched.Audio.Timesteps, p.conditionLadder())
		if err != nil {
			return h3dit.ForwardInputs{}, err
		}
		p.s.OnRelease(func() error { adaln.Close(); return nil })
		in.AdaLN = adaln
	}
	lay := p.layout
	in.TokenTags = make([]int32, lay.SequenceLength)
	for i, v := range lay.TokenTags {
		in.TokenTags[i] = int32(v)
	}
	in.PositionIDs = make([]float64, 0, 3*lay.SequenceLength)
	for _, q := range lay.PositionIDs {
		in.PositionIDs = append(in.PositionIDs, q[0], q[1], q[2])
	}
	return in, nil
}

// initialNoise returns the patchified video rows and packed audio rows of the initial noise:
// injected, or drawn from the seed in the same layouts.
func (p *run) initialNoise() (xv, xa []float32, err error) {
	r, cfg, geo := p.r, p.c.spec.DiT, p.r.Denoise
	c, t, hl, wl := cfg.InChannels, geo.LatentFrames, geo.LatentHeight, geo.LatentWidth
	ca, n := cfg.AudioInChannels, geo.AudioLatents
	vn := p.s.Request.VideoNoise
	if vn == nil {
		vn = familykit.GaussianNoise(r.Seed, familykit.VideoNoise, c*t*hl*wl)
	}
	an := r.opts.AudioNoise
	if an == nil {
		an = familykit.GaussianNoise(r.Seed, familykit.AudioNoise, packing.AudioChannels*ca*n)
	}
	if xv, err = packing.PatchifyVideo(vn, c, t, hl, wl, geo.PatchSize); err != nil {
		return nil, nil, err
	}
	xa, err = packing.PackAudio(an, ca, n)
	return xv, xa, err
}

// sample runs the steps in place on xv and xa.
func (p *run) sample(ctx context.Context, dit *h3dit.Model, in h3dit.ForwardInputs, xv, xa []float32) error {
	sched := p.r.sched
	steps := sched.Steps()
	idx := make([]int32, p.layout.SequenceLength)
	cut := p.layout.NumConditionVideoRows * rowWidth(p.c.spec.DiT.InChannels, p.layout.PatchSize)
	return p.s.DenoiseLoop(ctx, steps, func(k int) error {
		tv, ta := sched.Video.Timesteps[k], sched.Audio.Timesteps[k]
		// Text and target video rows take the video time, audio rows the audio time, FL2VA's
		// condition rows max(tv, 0.999) (there are no condition audio rows).
		uniq, rowIdx := packing.RowTimesteps(p.layout, tv, ta, packing.ConditionVideoTimestep(tv), ta)
		for i, v := range rowIdx {
			idx[i] = int32(v)
		}
		in.VideoRows, in.AudioRows, in.Timesteps, in.TimestepIndices = xv, xa, uniq, idx
		in.VSA = vsaForStep(p.r.vsa, p.layout, k)
		out, err := dit.Forward(in)
		if err != nil {
			return fmt.Errorf("fastvideo: denoising step %d of %d: %w", k+1, steps, err)
		}
		if p.preview != nil {
			if err := p.previewStep(ctx, k, 1-tv, out.Video[cut:], xv[cut:]); err != nil {
				return err
			}
		}
		// The condition rows stay as they are: only the target rows step.
		if err := sched.Video.Step(k, out.Video[cut:], xv[cut:], xv[cut:]); err != nil {
			return err
		}
		return sched.Audio.Step(k, out.Audio, xa, xa)
	})
}

// previewStep attaches step k's preview: the x0 estimate x + σ·v of the target rows (the ladder's
// own x0, MiniMaxH3Scheduler.step) decoded by the tiny decoder.
func (p *run) previewStep(ctx context.Context, k int, sigma float32, v, x []float32) error {
	x0 := make([]float32, len(x))
	for i := range x {
		x0[i] = x[i] + sigma*v[i]
	}
	cfg, geo := p.c.spec.DiT, p.r.Denoise
	c, t, hl, wl := cfg.InChannels, geo.LatentFrames, geo.LatentHeight, geo.LatentWidth
	lat, err := packing.UnpatchifyVideo(x0, c, t, hl, wl, geo.PatchSize)
	if err != nil {
		return err
	}
	return familykit.Preview(ctx, p.s, p.preview, k+1, lat, []int{1, c, t, hl, wl})
}

// keepLatents unpatchifies the final latents for the decoders (and the result, when asked, with
// the condition rows as sampling left them).
func (p *run) keepLatents(cond, xv, xa []float32) error {
	cfg, geo := p.c.spec.DiT, p.r.Denoise
	c, t, hl, wl := cfg.InChannels, geo.LatentFrames, geo.LatentHeight, geo.LatentWidth
	var err error
	if p.videoLatents, err = packing.UnpatchifyVideo(xv, c, t, hl, wl, geo.PatchSize); err != nil {
		return err
	}
	p.videoShape = p.latentShape()
	p.audioRows = xa
	if p.s.Request.ReturnLatents {
		al, err := packing.UnpackAudio(xa, cfg.AudioInChannels, geo.AudioLatents)
		if err != nil {
			return err
		}
		lat := &api.Latents{Video: p.videoLatents, VideoShape: []int{c, t, hl, wl},
			Audio: al, AudioShape: []int{packing.AudioChannels, cfg.AudioInChannels, geo.AudioLatents}}
		if k := len(p.r.keyframes); k > 0 {
			if lat.Condition, err = packing.UnpatchifyVideo(cond, c, k, hl, wl, geo.PatchSize); err != nil {
				return err
			}
			lat.ConditionShape = []int{c, k, hl, wl}
		}
		p.s.Result.Latents = lat
	}
	return nil
}

// DecodeAudio runs the audio VAE on the stereo rows when the file or the caller needs the
// waveform. The audio VAE is released before returning unless the memory policy keeps it, so that
// it is gone before Decode loads the video VAE.
func (p *run) DecodeAudio(ctx context.Context) ([][]float32, error) {
	c := p.c
	p.s.AwaitPrewarm()
	rows := p.audioRows
	p.audioRows = nil
	if !p.needsAudio() {
		return nil, nil
	}
	dec, err := family.Acquire(p.s, &c.audio, family.CompAudioVAE, c.loadAudioVAE)
	if err != nil {
		return nil, err
	}
	wave, err := dec.DecodeRows(ctx, rows, p.r.Denoise.AudioLatents)
	if err != nil {
		return nil, err
	}
	// Release closes only what the engine does not keep: a kept audio VAE stays for the next run.
	if err := p.s.Release(); err != nil {
		return nil, err
	}
	if p.s.Request.ReturnAudio {
		p.s.Result.Audio = wave
	}
	return wave, nil
}

// Decode decodes the video latents clip by clip into sink (nothing when sink is nil), with the
// video VAE or the tiny decoder.
func (p *run) Decode(ctx context.Context, sink family.FrameSink) error {
	p.s.AwaitPrewarm() // already awaited by DecodeAudio, unless a caller skipped it
	if sink == nil {
		return nil
	}
	c := p.c
	if p.r.Decoder == api.DecoderTiny {
		tiny, err := c.loadTiny(p.s)
		if err != nil {
			return err
		}
		defer func() { p.videoLatents = nil }()
		return familykit.TinyDecode(ctx, tiny, p.videoLatents, p.videoShape, sink)
	}
	dec, err := family.Acquire(p.s, &c.video, family.CompVideoVAE, c.loadVideoVAE)
	if err != nil {
		return err
	}
	defer func() { p.videoLatents = nil }()
	return dec.Decode(ctx, p.videoLatents, p.videoShape, func(f h3video.Frames) error {
		return sink(family.Frames{Width: f.Width, Height: f.Height, Count: f.Count, RGB: f.RGB24(nil)})
	})
}

// rowWidth is the width of one patchified video row: channels times the patch volume.
func rowWidth(channels int, patch [3]int) int { return channels * patch[0] * patch[1] * patch[2] }
