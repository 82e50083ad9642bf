package fastvideo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/framefilter"
	"fastvideo/internal/graphexec"
	"fastvideo/internal/media"
	"fastvideo/internal/promptenhance"
)

// pipelineRun is one generation (g.mu held): the stages in order, each timed and reported, each
// releasing the components it loaded (unless resident) when it ends.
//
//	validate   request, output path, ffmpeg, model files: nothing loaded yet
//	condition  the family's text conditioning (tokenizer, text encoder, prompt cache)
//	denoise    the family's DiT and sampling loop
//	decode     the family's VAEs: the audio first, the encoder started with it, then the video frames
//	           streaming through the frame filters into the encoder
//	mux        flush the encoders (H.264 and, with audio, AAC), move the file to its final name
//
// staleStaging is the age after which a staging file in the output folder belongs to a run that
// was killed, not to one still running.
const staleStaging = time.Hour

type pipelineRun struct {
	g     *VideoGenerator
	req   Request
	res   *Result
	mem   *memSampler
	start time.Time
	sess  *family.Session

	r       family.Resolution
	stages  family.Stages
	filters []family.FrameFilter // the resolution's, then the generator's

	target  string // final output path
	staging string // the writer's finished file before placeFile
	writer  *media.MP4Writer
	pump    *framePump // feeds writer
	// madeDirs are the output folders this run created (removed again if it fails).
	madeDirs []string
	written  int // frames out of the filters so far
}

func (g *VideoGenerator) run(ctx context.Context, req Request) (res *Result, err error) {
	p := &pipelineRun{g: g, req: req, mem: newMemSampler(deviceReader(g.engine)), start: time.Now(), res: &Result{PeakDeviceBytes: -1}}
	programs0, compile0 := graphexec.Compiles()
	cache0 := g.compile.stats()
	p.sess = family.NewSession(g.engine, req, p.res, p.emit, g.noteLoad)
	defer func() {
		p.mem.finish()
		if rec := recover(); rec != nil {
			err = fmt.Errorf("fastvideo: internal error during %s: %v\n%s", p.sess.Stage(), rec, debug.Stack())
		}
		if cerr := p.cleanup(err != nil); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			res = nil
			if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
				// A component may report the cancellation in its own words; make it matchable.
				err = fmt.Errorf("fastvideo: generation cancelled during %s: %w (%v)", p.sess.Stage(), cerr, err)
			}
		}
	}()
	p.warn()
	for _, st := range []struct {
		stage api.Stage
		run   func(context.Context) error
	}{
		{api.StageValidate, p.validate},
		{api.StageCondition, func(ctx context.Context) error { return p.stages.Condition(ctx) }},
		{api.StageDenoise, func(ctx context.Context) error { return p.stages.Denoise(ctx) }},
		{api.StageDecode, p.decode},
		{api.StageMux, p.mux},
	} {
		if err := p.stage(ctx, st.stage, st.run); err != nil {
			return nil, err
		}
	}
	if p.res.Plan != nil {
		p.res.Plan.Devices = g.devices
		p.res.Plan.CompileCache = g.compile.note()
		if lr, ok := g.comps.(family.LoRAReporter); ok {
			p.res.Plan.LoRA = lr.LoRAPlan()
		}
	}
	p.res.Timings.Total = time.Since(p.start)
	programs, compile := graphexec.Compiles()
	p.res.CompiledPrograms, p.res.Timings.Compile = programs-programs0, compile-compile0
	p.res.CompileCache = statsSince(g.compile.stats(), cache0)
	p.res.PeakHostBytes = p.mem.finish()
	p.res.PeakDeviceBytes = p.mem.devicePeakBytes()
	p.warn()
	return p.res, nil
}

// warn reports the generator's pending warnings, once (the compile cache's too: run at the start
// and at the end of a generation, it reports those of the programs compiled in between).
func (p *pipelineRun) warn() {
	for _, w := range append(p.g.warnings, p.g.compile.takeWarnings()...) {
		p.res.Warnings = append(p.res.Warnings, w)
		p.emit(Event{Kind: api.Warning, Message: w})
	}
	p.g.warnings = nil
}

// stage runs one stage: start and end events, its time, the release of what it loaded (the model
// of a stage goes before the next stage's comes), and a cancellation check.
func (p *pipelineRun) stage(ctx context.Context, st api.Stage, run func(context.Context) error) error {
	p.sess.SetStage(st)
	t0 := time.Now()
	p.emit(Event{Kind: api.StageStart, Stage: st})
	err := run(ctx)
	d := time.Since(t0)
	p.res.Timings.Add(st, d)
	p.emit(Event{Kind: api.StageEnd, Stage: st, Elapsed: d})
	if err != nil {
		if cerr := p.sess.Canceled(ctx); cerr != nil && st != api.StageValidate {
			return cerr
		}
		return err
	}
	if err := p.sess.Release(); err != nil {
		return err
	}
	return p.sess.Canceled(ctx)
}

// emit samples memory and forwards an event to the request's callback.
func (p *pipelineRun) emit(e Event) {
	p.mem.take()
	if p.req.Progress != nil {
		p.req.Progress(e)
	}
}

// cleanup releases what this run loaded (unless resident) and, after a failure, every partial
// output. It returns the release errors.
func (p *pipelineRun) cleanup(failed bool) error {
	p.sess.Finish() // background compiles use the components Release closes
	err := p.sess.Release()
	if failed {
		if p.pump != nil {
			p.pump.abandon()
		}
		if p.writer != nil {
			p.writer.Abort() // synchronous: ffmpeg is gone and its temporaries removed on return
		}
		if p.staging != "" {
			os.Remove(p.staging)
		}
		removeDirs(p.madeDirs) // a failed run leaves no folder it made either
	}
	return err
}

// validate resolves the request and checks everything a run needs before anything is loaded.
func (p *pipelineRun) validate(context.Context) error {
	if err := p.enhancePrompt(); err != nil {
		return err
	}
	g, req := p.g, p.req
	r, err := g.model.Resolve(req, true)
	if err != nil {
		return err
	}
	c := r.Common()
	if err := p.bindInterpolator(c.Filters); err != nil {
		return err
	}
	if !req.SkipSave {
		named := c.Prompt
		if e := p.res.PromptEnhancement; e != nil {
			named = e.Original // the user's words name the file, not the clauses added to them
		}
		if p.target, err = outputTarget(req.OutputPath, named); err != nil {
			return err
		}
		// Staging files of runs that were killed (SIGKILL, a power cut) would stay hidden forever.
		if _, err := media.SweepStaging(filepath.Dir(p.target), staleStaging); err != nil {
			return fmt.Errorf("fastvideo: clearing stale temporary files: %w", err)
		}
		if err := g.engine.Media.Check(); err != nil {
			return fmt.Errorf("fastvideo: %w", err)
		}
	}
	if err := g.comps.Check(); err != nil {
		return err
	}
	if p.stages, err = g.comps.Start(r, p.sess); err != nil {
		return err
	}
	p.r = r
	p.filters = append(append([]family.FrameFilter(nil), c.Filters...), g.filters...)
	res := p.res
	res.Prompt, res.Seed, res.Width, res.Height, res.NumFrames, res.FPS = c.Prompt, c.Seed, c.Width, c.Height, c.NumFrames, c.FPS
	res.SampleRate = c.Model.AudioSampleRate
	res.Backend, res.DType = g.Backend()
	switch {
	case g.engine.AllocatorMemory != nil:
		res.DeviceMemory = "the XLA allocator's bytes in use on device 0, sampled every 10 ms (PJRT_Device_MemoryStats; the GPU build's)"
	case g.engine.DeviceMemory != nil:
		res.DeviceMemory = "the GPU's used memory, sampled every 10 ms (NVIDIA management library): XLA's pool high-water mark and the CUDA context, every process on the device"
	case g.engine.Accelerated:
		res.DeviceMemory = "not reported: no statistics for this accelerator (NVIDIA GPUs only, through the driver's management library)"
	default:
		res.DeviceMemory = "not reported: the go backend computes in host memory, counted in peak_host_bytes"
	}
	return nil
}

// enhancePrompt applies Request.EnhancePrompt: the request (and the session's copy) carry the
// enhanced prompt from here on, cached beside the prompt cache when there is one. An empty prompt is
// left to Resolve, which names the field.
func (p *pipelineRun) enhancePrompt() error {
	if !p.req.EnhancePrompt || strings.TrimSpace(p.req.Prompt) == "" {
		return nil
	}
	dir := ""
	if c := p.g.engine.PromptCacheDir; c != "" {
		dir = filepath.Join(c, "enhanced_prompts")
	}
	e, err := promptenhance.Enhance(p.req.Prompt, dir)
	if err != nil {
		return &RequestError{Field: "prompt", Value: p.req.Prompt, Allowed: err.Error()}
	}
	p.req.Prompt, p.sess.Request.Prompt = e.Enhanced, e.Enhanced
	p.res.PromptEnhancement = &api.PromptEnhancement{Original: e.Original, Backend: e.Backend}
	return nil
}

// interpolatorUser is a frame filter that needs the generator's interpolator (the temporal fast
// mode's framefilter.TemporalFilter).
type interpolatorUser interface {
	UseInterpolator(load func() (framefilter.Interpolator, error))
}

// bindInterpolator gives the filters that interpolate the generator's RIFE, loaded when the first
// frame needs it (timed as the "rife" load, released with the decode stage unless resident).
func (p *pipelineRun) bindInterpolator(filters []family.FrameFilter) error {
	g := p.g
	for _, f := range filters {
		u, ok := f.(interpolatorUser)
		if !ok {
			continue
		}
		if g.rife == nil {
			return &RequestError{Field: "fast", Value: true, Allowed: "false, or RIFE 4.25 weights given to New " +
				"(fastvideo.WithRIFE(dir), -rife DIR: mlx-community/RIFE-4.25 or Practical-RIFE's flownet as safetensors)"}
		}
		u.UseInterpolator(func() (framefilter.Interpolator, error) {
			return family.Acquire(p.sess, &g.interp, "rife", func() (framefilter.Interpolator, error) { return framefilter.LoadRIFE(g.engine, g.rife) })
		})
	}
	return nil
}

// decode runs the family's audio decoder, then opens the encoder with the whole audio track
// (unless nothing needs frames) and runs the video decoders, whose frames go through the filters to
// the encoder and Result.Frames as soon as they exist, so a long clip is never held whole. The audio
// comes first so that one ffmpeg run encodes both tracks (media.MP4Writer): muxing the audio after
// the last frame took a second pass over the finished video.
func (p *pipelineRun) decode(ctx context.Context) error {
	audio, err := p.stages.DecodeAudio(ctx)
	if err != nil {
		return p.decodeError(ctx, "audio decode", err)
	}
	if !family.WantsFrames(p.req) {
		return p.decodeError(ctx, "video decode", p.stages.Decode(ctx, nil))
	}
	if err := p.openWriter(ctx, audio); err != nil {
		return err
	}
	err = p.stages.Decode(ctx, func(f family.Frames) error {
		if err := p.sess.Canceled(ctx); err != nil {
			return err
		}
		return p.filter(ctx, 0, f)
	})
	if err == nil {
		err = p.flushFilters(ctx)
	}
	if err != nil {
		return p.decodeError(ctx, "video decode", err)
	}
	if n := p.r.Common().NumFrames; p.written != n {
		return fmt.Errorf("fastvideo: the decoders and filters gave %d frames, the plan has %d", p.written, n)
	}
	return nil
}

// decodeError names the decode that failed with err (nil for none), or reports the run's
// cancellation when that is the cause, in the words every stage uses.
func (p *pipelineRun) decodeError(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := p.sess.Canceled(ctx); cerr != nil {
		return cerr
	}
	return fmt.Errorf("fastvideo: %s: %w", what, err)
}

// filter passes frames through filters i.. and on to the output.
func (p *pipelineRun) filter(ctx context.Context, i int, f family.Frames) error {
	if i == len(p.filters) {
		return p.output(f)
	}
	t0 := time.Now()
	out, err := p.filters[i].Filter(ctx, f)
	p.res.Timings.Add(api.StageFilter, time.Since(t0))
	if err != nil {
		return fmt.Errorf("fastvideo: frame filter %s: %w", p.filters[i].Name(), err)
	}
	if out.Count == 0 {
		return nil
	}
	return p.filter(ctx, i+1, out)
}

// flushFilters drains the filters in order, each flush going through the filters after it.
func (p *pipelineRun) flushFilters(ctx context.Context) error {
	for i, f := range p.filters {
		t0 := time.Now()
		out, err := f.Flush(ctx)
		p.res.Timings.Add(api.StageFilter, time.Since(t0))
		if err != nil {
			return fmt.Errorf("fastvideo: frame filter %s: %w", f.Name(), err)
		}
		if out.Count > 0 {
			if err := p.filter(ctx, i+1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// output takes frames out of the filters: each goes to the encoder as soon as it exists and, when
// the request asks, to Result.Frames.
func (p *pipelineRun) output(f family.Frames) error {
	c := p.r.Common()
	if f.Height != c.Height || f.Width != c.Width {
		return fmt.Errorf("frames of %dx%d, the request is %dx%d", f.Width, f.Height, c.Width, c.Height)
	}
	if len(f.RGB) != f.Count*f.Width*f.Height*3 {
		return fmt.Errorf("%d bytes for %d frames of %dx%d RGB", len(f.RGB), f.Count, f.Width, f.Height)
	}
	for i := 0; i < f.Count; i++ {
		frame := f.Frame(i)
		if p.pump != nil {
			if err := p.pump.put(frame); err != nil {
				return err
			}
		}
		if p.req.ReturnFrames {
			p.res.Frames = append(p.res.Frames, frame)
		}
	}
	p.written += f.Count
	p.emit(Event{Kind: api.DecodeProgress, Stage: api.StageDecode, Done: p.written, Total: c.NumFrames})
	return nil
}

// openWriter starts the encoder on a staging file in the output folder (unless the request skips
// saving), with audio as the file's audio track; a model without audio writes a video-only file.
// The writer is told the plan's frame count, which fits the audio track to the video and makes a
// short or long stream of frames fail instead of muxing silently.
func (p *pipelineRun) openWriter(ctx context.Context, audio [][]float32) error {
	if p.req.SkipSave {
		return nil
	}
	c := p.r.Common()
	var err error
	if p.madeDirs, err = makeDirs(filepath.Dir(p.target)); err != nil {
		return fmt.Errorf("fastvideo: creating the output folder: %w", err)
	}
	if p.staging, err = stagingPath(p.target); err != nil {
		return err
	}
	p.writer, err = p.g.engine.Media.NewMP4Writer(ctx, media.MP4Options{
		Path: p.staging, Width: c.Width, Height: c.Height, FPS: float64(c.FPS), Frames: c.NumFrames,
		AudioSampleRate: c.Model.AudioSampleRate, AudioChannels: c.Model.AudioChannels, Audio: audio,
		Preset: p.g.engine.X264Preset,
	})
	if err == nil {
		p.pump = newFramePump(p.writer, c.Width*c.Height*3)
	}
	return err
}

// mux finishes the MP4 (the encoders' flush after the last frame) and gives it its final name,
// never replacing an existing file.
func (p *pipelineRun) mux(ctx context.Context) error {
	if p.req.SkipSave {
		return nil
	}
	pump := p.pump
	p.pump = nil
	if err := pump.finish(); err != nil {
		return err
	}
	if err := p.writer.Close(); err != nil {
		return err
	}
	if err := p.sess.Canceled(ctx); err != nil {
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
