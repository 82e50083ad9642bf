package wan

import (
	"context"
	"errors"
	"fmt"
	"sync"

	wandit "fastvideo/dit/wan"
	"fastvideo/dit/wan/geometry"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/internal/textenc"
	"fastvideo/internal/textenc/umt5"
	"fastvideo/vae/taehv"
	wanvae "fastvideo/vae/wan"
)

// run is one Wan generation's stages and what they hand each other.
type run struct {
	c *components
	s *family.Session
	r *resolved

	cond, uncond []float32 // prompt embeddings [TextLen, text_dim], zero-padded (uncond: CFG only)
	// imageLatent is the first-frame condition [C, 1, H, W], normalized (image-to-video only).
	imageLatent []float32
	latents     []float32 // the final latent [C, T, H, W]
}

// Start has nothing to check against the components: every Wan constraint is in the request.
func (c *components) Start(res family.Resolution, s *family.Session) (family.Stages, error) {
	r := res.(*resolved)
	if err := c.checkTiny(r); err != nil {
		return nil, err
	}
	return &run{c: c, s: s, r: r}, nil
}

// Condition encodes the prompt and, with classifier-free guidance, the negative prompt (or reads
// them from the prompt cache), each zero-padded to the DiT's TextLen rows.
func (p *run) Condition(ctx context.Context) error {
	c, r, res := p.c, p.r, p.s.Result
	cond, err := family.Acquire(p.s, &c.cond, "tokenizer", func() (*textenc.Conditioner, error) { return c.conditioner(p.s) })
	if err != nil {
		return err
	}
	p.preload(ctx)
	var cached bool
	if p.cond, res.PromptTokens, cached, err = p.encode(ctx, cond, r.Prompt); err != nil {
		return err
	}
	res.PromptCached = cached
	if r.CFG {
		if err := p.s.Canceled(ctx); err != nil {
			return err
		}
		if p.uncond, _, cached, err = p.encode(ctx, cond, r.NegativePrompt); err != nil {
			return fmt.Errorf("fastvideo: the negative prompt: %w", err)
		}
		res.PromptCached = res.PromptCached && cached
	}
	r.PromptTokens = res.PromptTokens
	if err := p.encodeImage(ctx); err != nil {
		return err
	}
	res.Plan, err = r.Plan(c.Engine.RunDType())
	return err
}

// encodeImage preprocesses the first-frame image, encodes it with the VAE encoder (the posterior
// mean) and normalizes it: (z − mean)·(1/std), as DenoisingStage does with the VAE's shift and
// scaling factors (fastvideo/pipelines/stages/denoising.py).
func (p *run) encodeImage(ctx context.Context) error {
	img := p.r.image
	if img == nil {
		return nil
	}
	if err := p.s.Canceled(ctx); err != nil {
		return err
	}
	pixels, err := Preprocess(img.keyframe.Pixels, img.width, img.height)
	if err != nil {
		return fmt.Errorf("fastvideo: preprocessing the image: %w", err)
	}
	c := p.c
	enc, err := family.Acquire(p.s, &c.enc, "video_vae_encoder", func() (*wanvae.Decoder, error) { return c.Src.loadEncoder(c.Engine) })
	if err != nil {
		return err
	}
	mean, _, shape, err := enc.Encode(ctx, pixels, []int{1, 3, 1, img.height, img.width})
	if err != nil {
		return fmt.Errorf("fastvideo: encoding the image: %w", err)
	}
	p.imageLatent, err = c.spec.VAE.NormalizeLatents(mean, shape)
	return err
}

// encode conditions one text and zero-pads it to TextLen rows.
func (p *run) encode(ctx context.Context, cond *textenc.Conditioner, text string) ([]float32, int, bool, error) {
	s := p.c.spec
	out, err := cond.Condition(ctx, text)
	if err != nil {
		return nil, 0, false, err
	}
	if len(out.Shape) != 2 || out.Shape[1] != s.DiT.TextDim || out.Shape[0] < 1 || out.Shape[0] > s.TextLen {
		return nil, 0, false, fmt.Errorf("fastvideo: the text encoder returned shape %v, the DiT takes [1..%d, %d]",
			out.Shape, s.TextLen, s.DiT.TextDim)
	}
	padded, _, err := umt5.ZeroPadded(out.Hidden, out.Shape, nil, s.TextLen)
	return padded, out.Shape[0], out.Cached, err
}

// Denoise loads the DiT (unless resident), runs its text embedder on each prompt once, and runs
// the sampling loop: UniPC (one forward per step, two with CFG) or the DMD ladder (x0 prediction,
// then re-noise with the seed's stream).
func (p *run) Denoise(ctx context.Context) error {
	c := p.c
	p.warnWindow()
	dit, err := family.Acquire(p.s, &c.dit, family.CompDiT, c.loadDiT)
	if err != nil {
		return err
	}
	uncondDiT := dit
	if p.cfgParallel() {
		uncondDiT, err = family.Acquire(p.s, &c.replica, "dit_replica", func() (*wandit.Model, error) { return dit.Replica(c.uncondDevice()) })
		if err != nil {
			return err
		}
	}
	text, negText, err := p.prepareText(dit, uncondDiT)
	if err != nil {
		return err
	}
	geo := p.r.Geometry
	if rf := p.r.refine; rf != nil {
		geo = rf.stage1
	}
	// Initial noise: injected, or the start of the seed's video stream, which the DMD re-noise
	// draws continue (FastVideo draws both from one generator).
	noise := familykit.NewGaussianStream(p.r.Seed, familykit.VideoNoise)
	x := make([]float32, latentLen(geo))
	noise.Fill(x)
	if v := p.s.Request.VideoNoise; v != nil {
		copy(x, v)
	}
	if p.imageLatent != nil && p.r.steps.unipc != nil {
		roundBF16(x) // upstream blends the condition into latents cast to bfloat16
	}
	p.pin(x)
	st := &sampler{run: p, dit: dit, uncondDiT: uncondDiT, text: text, negText: negText, ladder: p.r.steps, noise: noise, geo: geo}
	if p.r.Preview {
		if st.preview, err = c.loadTiny(p.s); err != nil {
			return err
		}
	}
	if p.r.refine != nil {
		x, err = p.refineDenoise(ctx, st, x)
	} else {
		err = p.s.DenoiseLoop(ctx, p.r.Steps, func(k int) error { return st.step(ctx, k, &x) })
	}
	if err != nil {
		return err
	}
	p.latents = x
	if p.s.Request.ReturnLatents {
		g := p.r.Geometry
		p.s.Result.Latents = &api.Latents{Video: x, VideoShape: []int{g.VAE.LatentChannels, g.LatentFrames, g.LatentHeight, g.LatentWidth}}
	}
	return nil
}

// preload starts loading the DiT and the VAE Decode will run, those the memory policy keeps, beside
// the prompt's encoding (family.Preload; Denoise and Decode then wait for them), and the VAE's
// decode compiles as soon as it has loaded (docs/architecture.md, "Decoder prewarm").
func (p *run) preload(ctx context.Context) {
	c := p.c
	family.Preload(p.s, &c.dit, family.CompDiT, c.loadDiT)
	if p.decodesVideo() {
		shape := p.latentShape()
		family.Preload(p.s, &c.vae, family.CompVideoVAE, c.loadVAE)
		family.PrewarmPreloaded(ctx, p.s, family.CompVideoVAE, func(ctx context.Context, d *wanvae.Decoder) error { return d.Prepare(ctx, shape) })
	}
}

func (c *components) loadDiT() (*wandit.Model, error) { return c.Src.loadDiT(c.Engine, c.LoRA) }

func (c *components) loadVAE() (*wanvae.Decoder, error) { return c.Src.loadVAE(c.Engine) }

// decodesVideo reports whether Decode runs the full VAE: frames are wanted and the tiny decoder
// does not make them.
func (p *run) decodesVideo() bool {
	return family.WantsFrames(p.s.Request) && p.r.Decoder != api.DecoderTiny
}

// latentShape is the shape of the final latents [1, C, T, Hl, Wl] the VAE decodes.
func (p *run) latentShape() []int {
	g := p.r.Geometry
	return []int{1, g.VAE.LatentChannels, g.LatentFrames, g.LatentHeight, g.LatentWidth}
}

// latentLen is C·T·Hl·Wl of a geometry.
func latentLen(g geometry.Geometry) int {
	return g.VAE.LatentChannels * g.LatentFrames * g.LatentHeight * g.LatentWidth
}

// prepareText runs the DiT's text embedder on the prompt and, with CFG, the negative prompt, each on
// the DiT of its forwards (uncondDiT: the replica of a CFG-parallel run, else dit).
func (p *run) prepareText(dit, uncondDiT *wandit.Model) (text, negText *wandit.TextState, err error) {
	for _, t := range []struct {
		emb []float32
		dit *wandit.Model
		dst **wandit.TextState
	}{{p.cond, dit, &text}, {p.uncond, uncondDiT, &negText}} {
		if t.emb == nil {
			continue
		}
		ts, err := t.dit.PrepareText(t.emb)
		if err != nil {
			return nil, nil, err
		}
		*t.dst = ts
		p.s.OnRelease(func() error { ts.Close(); return nil })
	}
	p.cond, p.uncond = nil, nil // the host copies are no longer needed
	return text, negText, nil
}

// sampler is the state of one Wan sampling loop.
type sampler struct {
	*run
	// dit runs the conditional forwards, uncondDiT the unconditional ones: dit itself, or its replica
	// on another device in a CFG-parallel run (the two forwards of a step then run at once).
	dit, uncondDiT *wandit.Model
	text, negText  *wandit.TextState
	ladder         *ladder
	noise          *familykit.GaussianStream
	// geo is the grid the loop runs at (refine: stage 1's, then the output's); offset counts the
	// steps of the ladders run before this one (refine stage 2: stage 1's), for VSA's dense steps.
	geo     geometry.Geometry
	offset  int
	preview *taehv.Decoder // the tiny decoder of Request.Preview
}

// previewStep attaches step k's preview (of this ladder; the preview's step counts the ladders run
// before it): the x0 estimate x − σ_k·v (the flow prediction's clean latents, as UniPC and the DMD
// ladder compute them) decoded by the tiny decoder.
func (st *sampler) previewStep(ctx context.Context, k int, v, x []float32) error {
	sigma := st.ladder.sigmas[k]
	x0 := make([]float32, len(x))
	for i := range x {
		x0[i] = x[i] - sigma*v[i]
	}
	g := st.geo // the grid this ladder runs at (refine: stage 1's, then the output's)
	shape := []int{1, g.VAE.LatentChannels, g.LatentFrames, g.LatentHeight, g.LatentWidth}
	return familykit.Preview(ctx, st.s, st.preview, st.offset+k+1, x0, shape)
}

// forward is one forward of dit at timestep t.
func (st *sampler) forward(ctx context.Context, dit *wandit.Model, k int, x []float32, t float32, text *wandit.TextState) ([]float32, error) {
	if err := st.s.Canceled(ctx); err != nil {
		return nil, err
	}
	geo := st.geo
	// One timestep for every token in text-to-video: Wan2.2 TI2V's per-token timesteps are then all
	// equal, which is the same computation. An image gives the first frame's tokens 0.
	ts := []float32{t}
	if st.imageLatent != nil {
		if st.ladder.unipc != nil {
			t = bf16(t) // upstream's mask is bfloat16, and so is mask·t
		}
		ts = tokenTimesteps(t, geo.TokenHeight*geo.TokenWidth, geo.Tokens)
	}
	v, err := dit.Forward(wandit.ForwardInputs{
		Latent: x, Frames: geo.LatentFrames, Height: geo.LatentHeight, Width: geo.LatentWidth,
		Timesteps: ts, TextState: text, VSA: vsaForStep(st.r.vsa, st.offset+k), Window: st.r.window,
	})
	if err != nil {
		return nil, fmt.Errorf("fastvideo: denoising step %d of %d: %w", st.offset+k+1, st.r.Steps, err)
	}
	return v, nil
}

// step advances *x by sampling step k.
func (st *sampler) step(ctx context.Context, k int, x *[]float32) error {
	r := st.r
	t := st.ladder.timesteps[k]
	v, err := st.velocity(ctx, k, *x, t)
	if err != nil {
		return err
	}
	if st.preview != nil {
		if err := st.previewStep(ctx, k, v, *x); err != nil {
			return err
		}
	}
	if st.ladder.unipc != nil {
		*x, err = st.ladder.unipc.Step(v, *x)
		st.pin(*x)
		return err
	}
	if err := st.ladder.dmd.PredictX0(k, v, *x, *x); err != nil {
		return err
	}
	st.pin(*x)
	if k+1 == st.ladder.dmd.Steps() {
		return nil
	}
	n := len(*x)
	eps := make([]float32, n)
	if rn := r.opts.RenoiseNoise; rn != nil {
		copy(eps, rn[k*n:(k+1)*n])
	} else {
		st.noise.Fill(eps)
	}
	if err := st.ladder.dmd.Renoise(k, *x, eps, *x); err != nil {
		return err
	}
	st.pin(*x)
	return nil
}

// velocity is step k's DiT prediction at timestep t: one forward, or with CFG the conditional and
// the unconditional forward guided (the two at once when the unconditional one has its own device).
func (st *sampler) velocity(ctx context.Context, k int, x []float32, t float32) ([]float32, error) {
	if !st.r.CFG || st.ladder.unipc == nil {
		return st.forward(ctx, st.dit, k, x, t, st.text)
	}
	var vu []float32
	var errU error
	uncond := func() { vu, errU = st.forward(ctx, st.uncondDiT, k, x, t, st.negText) }
	var wg sync.WaitGroup
	if st.uncondDiT != st.dit {
		wg.Go(uncond)
	}
	v, err := st.forward(ctx, st.dit, k, x, t, st.text)
	if st.uncondDiT == st.dit {
		if err != nil {
			return nil, err
		}
		uncond()
	}
	wg.Wait()
	if err := errors.Join(err, errU); err != nil {
		return nil, err
	}
	guide(v, vu, float32(st.r.Guidance))
	return v, nil
}

// pin puts the image condition back into the first latent frame (no-op for text-to-video).
func (p *run) pin(x []float32) {
	if p.imageLatent != nil {
		g := p.r.Geometry
		pinFirstFrame(x, p.imageLatent, g.VAE.LatentChannels, g.LatentFrames)
	}
}

// guide is classifier-free guidance in float32, in the reference's operation order:
// v = v_u + g·(v_c − v_u), written into vc.
func guide(vc, vu []float32, g float32) {
	for i := range vc {
		vc[i] = vu[i] + g*(vc[i]-vu[i])
	}
}

// DecodeAudio returns nil: Wan makes no audio.
func (p *run) DecodeAudio(context.Context) ([][]float32, error) { return nil, nil }

// Decode runs the Wan VAE one latent frame at a time (1 frame, then 4 per latent frame) into sink.
func (p *run) Decode(ctx context.Context, sink family.FrameSink) error {
	p.s.AwaitPrewarm()
	if sink == nil {
		return nil
	}
	c, shape := p.c, p.latentShape()
	if p.r.Decoder == api.DecoderTiny {
		tiny, err := c.loadTiny(p.s)
		if err != nil {
			return err
		}
		defer func() { p.latents = nil }()
		return familykit.TinyDecode(ctx, tiny, p.latents, shape, sink)
	}
	dec, err := family.Acquire(p.s, &c.vae, family.CompVideoVAE, c.loadVAE)
	if err != nil {
		return err
	}
	defer func() { p.latents = nil }()
	return dec.Decode(ctx, p.latents, shape, func(f wanvae.Frames) error {
		return sink(family.Frames{Width: f.Width, Height: f.Height, Count: f.Count, RGB: f.RGB24(nil)})
	})
}
