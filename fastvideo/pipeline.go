package fastvideo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"fastvideo/dit/h3"
	"fastvideo/dit/h3/packing"
	"fastvideo/internal/media"
	"fastvideo/internal/textenc"
	"fastvideo/schedule"
	"fastvideo/vae/h3audio"
	"fastvideo/vae/h3video"
)

// run is one generation (g.mu held). The MiniMax H3 phases, in order (Wan's: wan_pipeline.go):
//
//	validate      request, output path, ffmpeg, model files: nothing loaded yet
//	condition     tokenizer -> Qwen3-VL (streamed) -> prompt cache; encoder released
//	load_dit      DiT weights, refined prompt, AdaLN tables of the visited timesteps
//	denoise       one DiT forward per step, video and audio updated by their own ladders; DiT released
//	audio_decode  audio VAE on the stereo rows (small); released
//	video_decode  video VAE clip by clip, each clip's frames piped to the H.264 encoder; released
//	mux           finish the H.264 stream, mux the AAC track, move the file to its final name
type pipelineRun struct {
	g        *VideoGenerator
	ctx      context.Context
	req      Request
	progress ProgressFunc
	mem      *memSampler
	phase    Phase
	start    time.Time

	r     *ResolvedRequest
	sched *schedule.H3Schedule
	res   *Result

	hidden       textenc.Result // the conditioned prompt
	dit          *h3.Model
	text         *h3.TextState
	adaln        *h3.AdaLNCache // nil for a checkpoint with a fixed AdaLN cache
	videoLatents []float32      // final latents [1, C, T, Hl, Wl]
	videoShape   []int
	audioRows    []float32 // final audio rows [2N, C]
	audioLatents int       // N
	audio        [][]float32

	wan *wanRunState // Wan runs only

	target  string // final output path
	staging string // the writer's finished file before placeFile
	writer  *media.MP4Writer
	decoded int            // frames decoded so far
	closers []func() error // non-resident components to release, last first
}

func (g *VideoGenerator) run(ctx context.Context, req Request) (res *Result, err error) {
	p := &pipelineRun{g: g, ctx: ctx, req: req, progress: req.Progress, mem: newMemSampler(), start: time.Now(),
		res: &Result{PeakDeviceBytes: -1}}
	defer func() {
		p.mem.finish()
		if rec := recover(); rec != nil {
			err = fmt.Errorf("fastvideo: internal error during %s: %v\n%s", p.phase, rec, debug.Stack())
		}
		if cerr := p.cleanup(err != nil); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			res = nil
			if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
				// A component may report the cancellation in its own words; make it matchable.
				err = fmt.Errorf("fastvideo: generation cancelled during %s: %w (%v)", p.phase, cerr, err)
			}
		}
	}()
	steps := []func() error{p.validate, p.condition, p.loadDiT, p.denoise, p.decodeAudio, p.decodeVideo, p.mux}
	if g.spec.Family == FamilyWan {
		p.wan = &wanRunState{}
		steps = []func() error{p.validate, p.wanCondition, p.wanLoadDiT, p.wanDenoise, p.wanDecodeVideo, p.mux}
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	p.res.Timings.Total = time.Since(p.start)
	p.res.PeakHostBytes = p.mem.finish()
	return p.res, nil
}

// emit samples memory and forwards an event to the request's callback.
func (p *pipelineRun) emit(e Event) {
	p.mem.take()
	if p.progress != nil {
		p.progress(e)
	}
}

// begin starts a phase and returns the function that ends it, recording its duration in *into.
func (p *pipelineRun) begin(ph Phase, into *time.Duration) func() {
	p.phase = ph
	t0 := time.Now()
	p.emit(Event{Kind: PhaseStart, Phase: ph})
	return func() {
		d := time.Since(t0)
		if into != nil {
			*into += d
		}
		p.emit(Event{Kind: PhaseEnd, Phase: ph, Elapsed: d})
	}
}

// checkCtx returns ctx's error, wrapped with the phase.
func (p *pipelineRun) checkCtx() error {
	if err := p.ctx.Err(); err != nil {
		return fmt.Errorf("fastvideo: generation cancelled during %s: %w", p.phase, err)
	}
	return nil
}

// releaseAll closes the non-resident components loaded so far.
func (p *pipelineRun) releaseAll() error {
	var errs []error
	for i := len(p.closers) - 1; i >= 0; i-- {
		errs = append(errs, p.closers[i]())
	}
	p.closers = nil
	return errors.Join(errs...)
}

// onRelease registers free to run when the run releases its non-resident components.
func (p *pipelineRun) onRelease(free func()) {
	p.closers = append(p.closers, func() error { free(); return nil })
}

// component is a loaded model part that the generator may keep resident.
type component interface {
	comparable
	Close() error
}

// acquire returns the resident component in *slot or loads one (reporting name to the load hook):
// kept in *slot when the generator keeps components resident, else released with the run.
func acquire[T component](p *pipelineRun, slot *T, name string, load func() (T, error)) (T, error) {
	var zero T
	if *slot != zero {
		return *slot, nil
	}
	p.g.noteLoad(name)
	c, err := load()
	if err != nil {
		return zero, err
	}
	if p.g.resident() {
		*slot = c
	} else {
		p.closers = append(p.closers, c.Close)
	}
	return c, nil
}

// conditioner returns the resident text conditioner or builds one with build; release closes a
// non-resident one, which the caller defers so the encoder goes before the DiT comes.
func (p *pipelineRun) conditioner(build func() (*textenc.Conditioner, error)) (cond *textenc.Conditioner, release func(), err error) {
	g := p.g
	if g.cond != nil {
		return g.cond, func() {}, nil
	}
	c, err := build()
	if err != nil {
		return nil, nil, err
	}
	if g.resident() {
		g.cond = c
		return c, func() {}, nil
	}
	return c, func() { c.Close() }, nil
}

// denoiseLoop runs the sampling steps of the denoise phase (started at t0), each after a
// cancellation check, and reports each finished step as a DenoiseStep event.
func (p *pipelineRun) denoiseLoop(t0 time.Time, steps int, step func(k int) error) error {
	for k := 0; k < steps; k++ {
		if err := p.checkCtx(); err != nil {
			return err
		}
		if err := step(k); err != nil {
			return err
		}
		p.emit(Event{Kind: DenoiseStep, Phase: PhaseDenoise, Step: k + 1, Steps: steps, Elapsed: time.Since(t0)})
	}
	return nil
}

// endPhase releases the run's non-resident components (the model of a phase goes before the next
// phase's comes) and checks for cancellation.
func (p *pipelineRun) endPhase() error {
	if err := p.releaseAll(); err != nil {
		return err
	}
	return p.checkCtx()
}

// frameSink takes count decoded frames of height x width (rgb24 appends them as packed RGB).
type frameSink func(rgb24 func([]byte) []byte, count, height, width int) error

// decodeVideoPhase is the video_decode phase of either family: unless nothing needs frames, it opens
// the H.264 writer (audioRate 0: video only), loads the decoder with load, and runs decode, whose
// frames go to the writer and Result.Frames as soon as they exist, so a long clip is never held whole.
func (p *pipelineRun) decodeVideoPhase(audioRate, audioChannels int, load func() error, decode func(sink frameSink) error) error {
	if p.req.SkipSave && !p.req.ReturnFrames {
		return nil
	}
	defer p.begin(PhaseVideoDecode, &p.res.Timings.VideoDecode)()
	if err := p.openWriter(audioRate, audioChannels); err != nil {
		return err
	}
	if err := load(); err != nil {
		return err
	}
	err := decode(func(rgb24 func([]byte) []byte, count, height, width int) error {
		if err := p.checkCtx(); err != nil {
			return err
		}
		return p.sinkFrames(rgb24, count, height, width)
	})
	if err := p.endVideoDecode(err); err != nil {
		return err
	}
	return p.endPhase()
}

// cleanup releases what this run loaded (unless resident) and, after a failure, every partial
// output. It returns the release errors.
func (p *pipelineRun) cleanup(failed bool) error {
	err := p.releaseAll()
	if failed {
		if p.writer != nil {
			p.writer.Abort() // synchronous: ffmpeg is gone and its temporaries removed on return
		}
		if p.staging != "" {
			os.Remove(p.staging)
		}
	}
	return err
}

// validate resolves the request and checks everything a run needs, for either family, before
// anything is loaded.
func (p *pipelineRun) validate() error {
	g, req := p.g, p.req
	defer p.begin(PhaseValidate, &p.res.Timings.Validate)()
	r, err := g.spec.Resolve(req, true)
	if err != nil {
		return err
	}
	if g.spec.Family == FamilyWan {
		err = p.validateWan(r)
	} else {
		err = p.validateH3(r)
	}
	if err != nil {
		return err
	}
	r.Prompt = strings.TrimSpace(r.Prompt)
	if !req.SkipSave {
		if p.target, err = outputTarget(req.OutputPath, r.Prompt); err != nil {
			return err
		}
		if err := g.media.Check(); err != nil {
			return fmt.Errorf("fastvideo: %w", err)
		}
	}
	if err := g.files.check(); err != nil {
		return err
	}
	p.r = r
	res := p.res
	res.Prompt, res.Seed, res.Width, res.Height, res.NumFrames, res.FPS = r.Prompt, r.Seed, r.Width, r.Height, r.NumFrames, r.FPS
	if g.spec.Family == FamilyH3 {
		res.SampleRate = g.spec.AudioVAE.SamplingRate
	}
	res.Backend, res.DType = g.Backend()
	if g.backendKind == "go" {
		p.res.DeviceMemory = "not reported: the go backend computes in host memory, counted in peak_host_bytes"
	} else {
		p.res.DeviceMemory = fmt.Sprintf("not reported by the %s backend (GoMLX exposes no device memory statistics)", g.backendKind)
	}
	return p.checkCtx()
}

// validateH3 is validate's MiniMax H3 part: the run-level flags and the AdaLN-cache contract.
func (p *pipelineRun) validateH3(r *ResolvedRequest) error {
	req := p.req
	if req.Fast {
		return &RequestError{Field: "fast", Value: true, Allowed: "false: the temporal fast mode needs the RIFE frame " +
			"interpolator, which this SDK does not ship yet (Plan shows its geometry)"}
	}
	if req.FastSpatial {
		return &RequestError{Field: "fast_spatial", Value: true, Allowed: "false: the spatial fast mode's pixel-space " +
			"upsampler is not in this SDK yet (Plan shows its geometry)"}
	}
	if req.SkipSave && !req.ReturnFrames && !req.ReturnAudio && !req.ReturnLatents {
		return &RequestError{Field: "skip_save", Value: true,
			Allowed: "false, or true together with ReturnFrames, ReturnAudio or ReturnLatents (else nothing is produced)"}
	}
	var err error
	if p.sched, err = r.Schedule(); err != nil {
		return err
	}
	if err := h3.CheckAdaLNLadder(p.g.comp.adalnManifest(), r.Steps, p.sched.Video.Timesteps, p.sched.Audio.Timesteps); err != nil {
		return &RequestError{Field: "num_inference_steps", Value: r.Steps, Allowed: err.Error()}
	}
	return nil
}

// condition encodes the prompt (or reads it from the prompt cache).
func (p *pipelineRun) condition() error {
	g := p.g
	defer p.begin(PhaseCondition, &p.res.Timings.Condition)()
	cond, release, err := p.conditioner(func() (*textenc.Conditioner, error) {
		return newConditioner(g.comp, g.backend, g.dtype, g.opts.PromptCacheDir, g.resident(), g.noteLoad)
	})
	if err != nil {
		return err
	}
	defer release()
	out, err := cond.Condition(p.ctx, p.r.Prompt)
	if err != nil {
		return err
	}
	if len(out.Shape) != 2 || out.Shape[1] != g.spec.DiT.TextDim || out.Shape[0] < 1 {
		return fmt.Errorf("fastvideo: the text encoder returned shape %v, the DiT takes [S, %d]", out.Shape, g.spec.DiT.TextDim)
	}
	p.res.PromptTokens, p.res.PromptCached = out.Shape[0], out.Cached
	p.r.PromptTokens, p.r.PromptTokensEstimated = out.Shape[0], false
	if p.res.Plan, err = p.r.Plan(dtypeName(g.dtype)); err != nil {
		return err
	}
	p.hidden = out
	return p.checkCtx()
}

// loadDiT loads the DiT (unless resident), refines the prompt and computes the AdaLN tables.
func (p *pipelineRun) loadDiT() error {
	g := p.g
	defer p.begin(PhaseLoadDiT, &p.res.Timings.LoadDiT)()
	dit, err := acquire(p, &g.dit, "dit", func() (*h3.Model, error) { return g.comp.loadDiT(g.backend, g.dtype) })
	if err != nil {
		return err
	}
	p.dit = dit
	text, err := dit.PrepareText(p.hidden.Hidden)
	if err != nil {
		return err
	}
	p.text = text
	p.onRelease(text.Close)
	p.hidden = textenc.Result{} // the host copy is no longer needed
	if g.comp.adalnManifest() == nil {
		// Every (timestep, modality) modulation of the run, once, instead of once per step and block.
		adaln, err := dit.PrepareAdaLN(p.sched.Video.Timesteps, p.sched.Audio.Timesteps)
		if err != nil {
			return err
		}
		p.adaln = adaln
		p.onRelease(adaln.Close)
	}
	return p.checkCtx()
}

// denoise runs the sampling loop, then releases the DiT.
func (p *pipelineRun) denoise() error {
	g, r, dit, text, adaln := p.g, p.r, p.dit, p.text, p.adaln
	defer p.begin(PhaseDenoise, &p.res.Timings.Denoise)()
	t0 := time.Now()
	lay, err := packing.Build(r.LayoutRequest(nil))
	if err != nil {
		return fmt.Errorf("fastvideo: packing: %w", err)
	}
	geo, cfg := r.Denoise, g.spec.DiT
	c, t, hl, wl := cfg.InChannels, geo.LatentFrames, geo.LatentHeight, geo.LatentWidth
	ca, n := cfg.AudioInChannels, geo.AudioLatents

	// Initial noise: injected, or drawn from the seed in the same layouts.
	vn := p.req.VideoNoise
	if vn == nil {
		vn = GaussianNoise(r.Seed, VideoNoise, c*t*hl*wl)
	}
	an := p.req.AudioNoise
	if an == nil {
		an = GaussianNoise(r.Seed, AudioNoise, packing.AudioChannels*ca*n)
	}
	xv, err := packing.PatchifyVideo(vn, c, t, hl, wl, geo.PatchSize)
	if err != nil {
		return err
	}
	xa, err := packing.PackAudio(an, ca, n)
	if err != nil {
		return err
	}

	tags := make([]int32, lay.SequenceLength)
	for i, v := range lay.TokenTags {
		tags[i] = int32(v)
	}
	pos := make([]float64, 0, 3*lay.SequenceLength)
	for _, q := range lay.PositionIDs {
		pos = append(pos, q[0], q[1], q[2])
	}
	idx := make([]int32, lay.SequenceLength)
	steps := p.sched.Steps()
	err = p.denoiseLoop(t0, steps, func(k int) error {
		tv, ta := p.sched.Video.Timesteps[k], p.sched.Audio.Timesteps[k]
		// T2VA has no condition rows: text and video rows take the video time, audio rows the audio time.
		uniq, rowIdx := packing.RowTimesteps(lay, tv, ta, tv, ta)
		for i, v := range rowIdx {
			idx[i] = int32(v)
		}
		out, err := dit.Forward(h3.ForwardInputs{
			VideoRows: xv, AudioRows: xa, TextState: text, AdaLN: adaln,
			Timesteps: uniq, TimestepIndices: idx, TokenTags: tags, PositionIDs: pos,
			VideoIndices: lay.VideoIndices, AudioIndices: lay.AudioIndices, TextIndices: lay.TextIndices,
		})
		if err != nil {
			return fmt.Errorf("fastvideo: denoising step %d of %d: %w", k+1, steps, err)
		}
		if err := p.sched.Video.Step(k, out.Video, xv, xv); err != nil {
			return err
		}
		return p.sched.Audio.Step(k, out.Audio, xa, xa)
	})
	if err != nil {
		return err
	}
	p.dit, p.text, p.adaln = nil, nil, nil
	if err := p.releaseAll(); err != nil { // the DiT goes before the VAEs come
		return err
	}

	if p.videoLatents, err = packing.UnpatchifyVideo(xv, c, t, hl, wl, geo.PatchSize); err != nil {
		return err
	}
	p.videoShape = []int{1, c, t, hl, wl}
	p.audioRows, p.audioLatents = xa, n
	if p.req.ReturnLatents {
		al, err := packing.UnpackAudio(xa, ca, n)
		if err != nil {
			return err
		}
		p.res.Latents = &Latents{Video: p.videoLatents, VideoShape: []int{c, t, hl, wl},
			Audio: al, AudioShape: []int{packing.AudioChannels, ca, n}}
	}
	return p.checkCtx()
}

// decodeAudio runs the audio VAE when the file or the caller needs the waveform.
func (p *pipelineRun) decodeAudio() error {
	if p.req.SkipSave && !p.req.ReturnAudio {
		return nil
	}
	g := p.g
	defer p.begin(PhaseAudioDecode, &p.res.Timings.AudioDecode)()
	dec, err := acquire(p, &g.audio, "audio_vae", func() (*h3audio.Decoder, error) { return g.comp.loadAudioVAE(g.backend) })
	if err != nil {
		return err
	}
	wave, err := dec.DecodeRows(p.ctx, p.audioRows, p.audioLatents)
	if err != nil {
		return fmt.Errorf("fastvideo: audio decode: %w", err)
	}
	p.audio = wave
	if p.req.ReturnAudio {
		p.res.Audio = wave
	}
	return p.endPhase()
}

// decodeVideo runs the video VAE clip by clip, piping each clip's frames into the H.264 encoder.
func (p *pipelineRun) decodeVideo() error {
	g := p.g
	var dec *h3video.Decoder
	load := func() (err error) {
		dec, err = acquire(p, &g.video, "video_vae", func() (*h3video.Decoder, error) { return g.comp.loadVideoVAE(g.backend, g.dtype) })
		return err
	}
	return p.decodeVideoPhase(g.spec.AudioVAE.SamplingRate, packing.AudioChannels, load, func(sink frameSink) error {
		defer func() { p.videoLatents = nil }()
		return dec.Decode(p.ctx, p.videoLatents, p.videoShape, func(f h3video.Frames) error {
			return sink(f.RGB24, f.Count, f.Height, f.Width)
		})
	})
}

// openWriter starts the H.264 encoder on a staging file in the output folder (unless the request
// skips saving); audioRate 0 writes a video-only file.
func (p *pipelineRun) openWriter(audioRate, audioChannels int) error {
	if p.req.SkipSave {
		return nil
	}
	r := p.r
	var err error
	if p.staging, err = stagingPath(p.target); err != nil {
		return err
	}
	p.writer, err = p.g.media.NewMP4Writer(p.ctx, media.MP4Options{
		Path: p.staging, Width: r.Width, Height: r.Height, FPS: float64(r.FPS),
		AudioSampleRate: audioRate, AudioChannels: audioChannels,
	})
	return err
}

// sinkFrames is the frameSink of a run: each frame goes to the encoder as soon as it exists and, when the request asks, to Result.Frames.
func (p *pipelineRun) sinkFrames(rgb24 func([]byte) []byte, count, height, width int) error {
	r := p.r
	if height != r.Height || width != r.Width {
		return fmt.Errorf("fastvideo: the video VAE decoded %dx%d frames, the request is %dx%d", width, height, r.Width, r.Height)
	}
	frameBytes := r.Width * r.Height * 3
	rgb := rgb24(nil)
	for i := 0; i < count; i++ {
		frame := rgb[i*frameBytes : (i+1)*frameBytes : (i+1)*frameBytes]
		if p.writer != nil {
			if err := p.writer.WriteFrame(frame); err != nil {
				return err
			}
		}
		if p.req.ReturnFrames {
			p.res.Frames = append(p.res.Frames, frame)
		}
	}
	p.decoded += count
	p.emit(Event{Kind: DecodeProgress, Phase: PhaseVideoDecode, Done: p.decoded, Total: r.NumFrames})
	return nil
}

// endVideoDecode turns the decoder's error into the run's (cancellation first) and checks that the
// plan's frame count came out.
func (p *pipelineRun) endVideoDecode(err error) error {
	if err != nil {
		if cerr := p.checkCtx(); cerr != nil {
			return cerr
		}
		return fmt.Errorf("fastvideo: video decode: %w", err)
	}
	if p.decoded != p.r.NumFrames {
		return fmt.Errorf("fastvideo: the video VAE decoded %d frames, the plan has %d", p.decoded, p.r.NumFrames)
	}
	return nil
}

// mux finishes the MP4 (H.264 flush; MiniMax H3: the AAC track) and gives it its final name, never
// replacing an existing file.
func (p *pipelineRun) mux() error {
	if p.req.SkipSave {
		return nil
	}
	defer p.begin(PhaseMux, &p.res.Timings.Mux)()
	if err := p.writer.Close(p.audio); err != nil {
		if cerr := p.checkCtx(); cerr != nil {
			return cerr
		}
		return err
	}
	if err := p.checkCtx(); err != nil {
		return err
	}
	final, err := placeFile(p.staging, p.target)
	if err != nil {
		return err
	}
	p.staging = ""
	p.res.OutputPath = final
	return nil
}
