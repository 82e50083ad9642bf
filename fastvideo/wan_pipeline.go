package fastvideo

import (
	"fmt"
	"time"

	wandit "fastvideo/dit/wan"
	"fastvideo/internal/textenc"
	"fastvideo/internal/textenc/umt5"
	wanvae "fastvideo/vae/wan"
)

// A Wan run's phases (validate and mux are shared with MiniMax H3):
//
//	validate      request, output path, ffmpeg, model files: nothing loaded yet
//	condition     Unigram tokenizer -> UMT5 -> prompt cache, for the prompt and (CFG) the negative
//	              prompt; each zero-padded to 512 rows; encoder released
//	load_dit      DiT weights; the text embedder run once per prompt
//	denoise       UniPC (one forward per step, two with CFG) or the DMD ladder (x0 prediction, then
//	              re-noise with the seed's stream); DiT released
//	video_decode  the causal Wan VAE one latent frame at a time, each chunk's frames piped to the
//	              H.264 encoder; released
//	mux           finish the H.264 stream (no audio), move the file to its final name

// wanRunState is what a Wan run carries between phases.
type wanRunState struct {
	cond, uncond  []float32 // prompt embeddings [TextLen, text_dim], zero-padded (uncond: CFG only)
	dit           *wandit.Model
	text, negText *wandit.TextState
	latents       []float32 // the final latent [C, T, H, W]
}

// validateWan is validate's Wan part: the run-level flags the family does not support.
func (p *pipelineRun) validateWan(r *ResolvedRequest) error {
	req := p.req
	if req.ReturnAudio {
		return &RequestError{Field: "return_audio", Value: true, Allowed: "false (Wan models generate video only)"}
	}
	if req.SkipSave && !req.ReturnFrames && !req.ReturnLatents {
		return &RequestError{Field: "skip_save", Value: true,
			Allowed: "false, or true together with ReturnFrames or ReturnLatents (else nothing is produced)"}
	}
	return nil
}

// wanCondition encodes the prompt and, with classifier-free guidance, the negative prompt (or reads
// them from the prompt cache), each zero-padded to the DiT's TextLen rows.
func (p *pipelineRun) wanCondition() error {
	g, r, ws := p.g, p.r, p.g.spec.Wan
	defer p.begin(PhaseCondition, &p.res.Timings.Condition)()
	cond, release, err := p.conditioner(func() (*textenc.Conditioner, error) {
		return newWanConditioner(g.wcomp, ws, g.backend, g.dtype, g.opts.PromptCacheDir, g.resident(), g.noteLoad)
	})
	if err != nil {
		return err
	}
	defer release()
	encode := func(text string) ([]float32, int, bool, error) {
		out, err := cond.Condition(p.ctx, text)
		if err != nil {
			return nil, 0, false, err
		}
		if len(out.Shape) != 2 || out.Shape[1] != ws.DiT.TextDim || out.Shape[0] < 1 || out.Shape[0] > ws.TextLen {
			return nil, 0, false, fmt.Errorf("fastvideo: the text encoder returned shape %v, the DiT takes [1..%d, %d]",
				out.Shape, ws.TextLen, ws.DiT.TextDim)
		}
		padded, _, err := umt5.ZeroPadded(out.Hidden, out.Shape, nil, ws.TextLen)
		return padded, out.Shape[0], out.Cached, err
	}
	var cached bool
	if p.wan.cond, p.res.PromptTokens, cached, err = encode(r.Prompt); err != nil {
		return err
	}
	p.res.PromptCached = cached
	if r.CFG {
		if err := p.checkCtx(); err != nil {
			return err
		}
		if p.wan.uncond, _, cached, err = encode(r.NegativePrompt); err != nil {
			return fmt.Errorf("fastvideo: the negative prompt: %w", err)
		}
		p.res.PromptCached = p.res.PromptCached && cached
	}
	r.PromptTokens = p.res.PromptTokens
	if p.res.Plan, err = r.Plan(dtypeName(g.dtype)); err != nil {
		return err
	}
	return p.checkCtx()
}

// wanLoadDiT loads the DiT (unless resident) and runs its text embedder on each prompt once.
func (p *pipelineRun) wanLoadDiT() error {
	g, w := p.g, p.wan
	defer p.begin(PhaseLoadDiT, &p.res.Timings.LoadDiT)()
	dit, err := acquire(p, &g.wanDiT, "dit", func() (*wandit.Model, error) { return g.wcomp.loadDiT(g.backend, g.dtype) })
	if err != nil {
		return err
	}
	w.dit = dit
	for _, t := range []struct {
		emb []float32
		dst **wandit.TextState
	}{{w.cond, &w.text}, {w.uncond, &w.negText}} {
		if t.emb == nil {
			continue
		}
		ts, err := dit.PrepareText(t.emb)
		if err != nil {
			return err
		}
		*t.dst = ts
		p.onRelease(ts.Close)
	}
	w.cond, w.uncond = nil, nil // the host copies are no longer needed
	return p.checkCtx()
}

// wanDenoise runs the sampling loop, then releases the DiT.
func (p *pipelineRun) wanDenoise() error {
	r, w, geo := p.r, p.wan, p.r.WanGeometry
	defer p.begin(PhaseDenoise, &p.res.Timings.Denoise)()
	t0 := time.Now()
	ladder, err := r.wanLadder()
	if err != nil {
		return err
	}
	n := geo.VAE.LatentChannels * geo.LatentFrames * geo.LatentHeight * geo.LatentWidth

	// Initial noise: injected, or the start of the seed's video stream, which the DMD re-noise
	// draws continue (FastVideo draws both from one generator).
	noise := newGaussianStream(r.Seed, VideoNoise)
	x := make([]float32, n)
	noise.fill(x)
	if p.req.VideoNoise != nil {
		copy(x, p.req.VideoNoise)
	}
	forward := func(k int, x []float32, t float32, text *wandit.TextState) ([]float32, error) {
		if err := p.checkCtx(); err != nil {
			return nil, err
		}
		v, err := w.dit.Forward(wandit.ForwardInputs{
			Latent: x, Frames: geo.LatentFrames, Height: geo.LatentHeight, Width: geo.LatentWidth,
			// One timestep for every token: in text-to-video Wan2.2 TI2V's per-token timesteps are all
			// equal (only an image condition gives frame 0 its own), which is the same computation.
			Timesteps: []float32{t}, TextState: text,
		})
		if err != nil {
			return nil, fmt.Errorf("fastvideo: denoising step %d of %d: %w", k+1, r.Steps, err)
		}
		return v, nil
	}
	err = p.denoiseLoop(t0, r.Steps, func(k int) error {
		t := ladder.timesteps[k]
		v, err := forward(k, x, t, w.text)
		if err != nil {
			return err
		}
		switch {
		case ladder.unipc != nil:
			if r.CFG {
				vu, err := forward(k, x, t, w.negText)
				if err != nil {
					return err
				}
				guide(v, vu, float32(r.Guidance))
			}
			if x, err = ladder.unipc.Step(v, x); err != nil {
				return err
			}
		default:
			if err := ladder.dmd.PredictX0(k, v, x, x); err != nil {
				return err
			}
			if k+1 < r.Steps {
				eps := make([]float32, n)
				if p.req.RenoiseNoise != nil {
					copy(eps, p.req.RenoiseNoise[k*n:(k+1)*n])
				} else {
					noise.fill(eps)
				}
				if err := ladder.dmd.Renoise(k, x, eps, x); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	w.dit, w.text, w.negText = nil, nil, nil
	if err := p.releaseAll(); err != nil { // the DiT goes before the VAE comes
		return err
	}
	w.latents = x
	if p.req.ReturnLatents {
		p.res.Latents = &Latents{Video: x, VideoShape: []int{geo.VAE.LatentChannels, geo.LatentFrames, geo.LatentHeight, geo.LatentWidth}}
	}
	return p.checkCtx()
}

// guide is classifier-free guidance in float32, in the reference's operation order:
// v = v_u + g·(v_c − v_u), written into vc.
func guide(vc, vu []float32, g float32) {
	for i := range vc {
		vc[i] = vu[i] + g*(vc[i]-vu[i])
	}
}

// wanDecodeVideo runs the Wan VAE one latent frame at a time (1 frame, then 4 per latent frame),
// piping each chunk's frames into the H.264 encoder as soon as they exist.
func (p *pipelineRun) wanDecodeVideo() error {
	g, geo := p.g, p.r.WanGeometry
	var dec *wanvae.Decoder
	load := func() (err error) {
		dec, err = acquire(p, &g.wanVAE, "video_vae", func() (*wanvae.Decoder, error) { return g.wcomp.loadVAE(g.backend, g.dtype) })
		return err
	}
	return p.decodeVideoPhase(0, 0, load, func(sink frameSink) error {
		defer func() { p.wan.latents = nil }()
		shape := []int{1, geo.VAE.LatentChannels, geo.LatentFrames, geo.LatentHeight, geo.LatentWidth}
		return dec.Decode(p.ctx, p.wan.latents, shape, func(f wanvae.Frames) error {
			return sink(f.RGB24, f.Count, f.Height, f.Width)
		})
	})
}
