package fastvideo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/h3"
	"fastvideo/fastvideo/wan"
	"fastvideo/internal/media"
	"fastvideo/internal/promptenhance"
	"fastvideo/internal/testutil"
)

// One generator of each toy model serves most tests (its synthetic weights are made once);
// TestMain closes them. They load per call (OneResident), so that each test sees its own loads and
// timings whatever ran before it; TestWarmCallCompilesNothing covers the default policy.
var (
	shared = sharedGenerator{open: func(o ...Option) (*VideoGenerator, error) {
		return newTiny(append(o, WithMemoryPolicy(OneResident))...)
	}}
	wanShared = sharedGenerator{open: func(o ...Option) (*VideoGenerator, error) {
		return newTinyWan(append(o, WithMemoryPolicy(OneResident))...)
	}}

	newTiny    = opener("tiny-h3")
	newTinyWan = opener("tiny-wan")
)

// opener opens a built-in model on the test backend with extra options.
func opener(model string) func(...Option) (*VideoGenerator, error) {
	return func(opts ...Option) (*VideoGenerator, error) {
		return New(context.Background(), model, append([]Option{WithBackend(testutil.BackendSpec())}, opts...)...)
	}
}

// openGenerator opens a generator with open (newTiny, newTinyWan) and opts, closed when the test ends.
func openGenerator(t *testing.T, open func(...Option) (*VideoGenerator, error), opts ...Option) *VideoGenerator {
	t.Helper()
	return testutil.Open(t, func() (*VideoGenerator, error) { return open(opts...) })
}

// sharedGenerator is a generator opened once for many tests of one family.
type sharedGenerator struct {
	open func(...Option) (*VideoGenerator, error)
	once sync.Once
	g    *VideoGenerator
	err  error
}

func (s *sharedGenerator) get(t *testing.T) *VideoGenerator {
	t.Helper()
	s.once.Do(func() { s.g, s.err = s.open() })
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.g
}

func tinyGenerator(t *testing.T) *VideoGenerator    { t.Helper(); return shared.get(t) }
func tinyWanGenerator(t *testing.T) *VideoGenerator { t.Helper(); return wanShared.get(t) }

func TestMain(m *testing.M) {
	code := m.Run()
	for _, g := range []*VideoGenerator{shared.g, wanShared.g} {
		if g != nil {
			if err := g.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "closing a shared generator:", err)
				code = 1
			}
		}
	}
	os.Exit(code)
}

// TestGenerateMP4 runs the whole tiny-h3 pipeline to a file and checks the container with ffprobe:
// H.264 at the requested size, frame count and rate, stereo 32 kHz AAC of the video's duration.
func TestGenerateMP4(t *testing.T) {
	res, events, dir := generateToFolder(t, tinyGenerator(t), Request{ReturnFrames: true, ReturnAudio: true, ReturnLatents: true})
	info, err := probe(res.OutputPath)
	if err != nil {
		t.Fatal(err)
	}
	v, a := info.Video, info.Audio
	if v == nil || v.Codec != "h264" || v.Width != 96 || v.Height != 64 || v.Frames != 22 || v.FPS != 24 {
		t.Fatalf("video stream %+v, want h264 96x64, 22 frames at 24 fps", v)
	}
	dur := 22.0 / 24
	if a == nil || a.Codec != "aac" || a.Channels != 2 || a.SampleRate != 32000 || math.Abs(a.Duration-dur) > 1024.0/32000 {
		t.Fatalf("audio stream %+v, want aac stereo 32 kHz lasting %.4f s (within one AAC frame)", a, dur)
	}
	t.Logf("video %+v", *v)
	t.Logf("audio %+v", *a)

	if len(res.Frames) != 22 || len(res.Frames[0]) != 96*64*3 || res.Width != 96 || res.Height != 64 || res.FPS != 24 {
		t.Errorf("frames %d of %d bytes, %dx%d at %d fps", len(res.Frames), len(res.Frames[0]), res.Width, res.Height, res.FPS)
	}
	if len(res.Audio) != 2 || len(res.Audio[0]) != 37*800 || len(res.Audio[1]) != 37*800 || res.SampleRate != 32000 {
		t.Errorf("audio %d channels of %d samples at %d Hz, want 2 x %d at 32000", len(res.Audio), len(res.Audio[0]), res.SampleRate, 37*800)
	}
	if l := res.Latents; l == nil || fmt.Sprint(l.VideoShape) != "[24 7 4 6]" || fmt.Sprint(l.AudioShape) != "[2 32 37]" ||
		len(l.Video) != 24*7*4*6 || len(l.Audio) != 2*32*37 {
		t.Errorf("latents %+v", res.Latents)
	}
	rows := res.Plan.Details.(*h3.PlanDetails).Rows
	if res.PromptTokens != 3 || res.PromptCached || rows.Text != 3 || rows.TextEstimated ||
		rows.Total != 3+74+42 || res.Seed != 0 || res.Prompt != "a red fox" {
		t.Errorf("prompt %d tokens (cached %v), plan rows %+v, seed %d, prompt %q", res.PromptTokens, res.PromptCached,
			rows, res.Seed, res.Prompt)
	}
	checkTimings(t, res.Timings, true)
	if res.PeakHostBytes == 0 || res.PeakDeviceBytes != -1 || res.DeviceMemory == "" || res.Backend != testutil.BackendSpec() {
		t.Errorf("memory %d / %d (%s), backend %s %s", res.PeakHostBytes, res.PeakDeviceBytes, res.DeviceMemory, res.Backend, res.DType)
	}
	checkSummary(t, res, "a_red_fox.mp4")
	checkRunEvents(t, events, "validate condition denoise decode mux", 4, 22,
		func(prev, done int) bool { return done > prev })
	// Nothing else is left in the folder.
	if names := testutil.DirNames(t, dir); len(names) != 1 {
		t.Errorf("output folder holds %v", names)
	}
}

// generateToFolder runs req with the prompt "  a red fox  " into a fresh folder, recording its
// events, and checks that the output is named after the trimmed prompt.
func generateToFolder(t *testing.T, g *VideoGenerator, req Request) (res *Result, events []Event, dir string) {
	t.Helper()
	dir = t.TempDir()
	req.Prompt, req.OutputPath = "  a red fox  ", dir
	req.Progress = func(e Event) { events = append(events, e) }
	res, err := g.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "a_red_fox.mp4"); res.OutputPath != want {
		t.Fatalf("output %q, want %q", res.OutputPath, want)
	}
	return res, events, dir
}

// checkTimings checks that every stage of a run took time, that the DiT and the video VAE were
// loaded (each inside its stage), and the audio VAE only with audio.
func checkTimings(t *testing.T, tm Timings, audio bool) {
	t.Helper()
	for _, st := range []Stage{StageValidate, StageCondition, StageDenoise, StageDecode, StageMux} {
		if !(tm.Of(st) > 0) {
			t.Errorf("timing %s = %v", st, tm.Of(st))
		}
	}
	if !(tm.Total > 0) {
		t.Errorf("total %v", tm.Total)
	}
	for _, c := range []string{"dit", "video_vae"} {
		if !(loadTime(tm, c) > 0) {
			t.Errorf("load %s = %v", c, loadTime(tm, c))
		}
	}
	if (loadTime(tm, "audio_vae") > 0) != audio {
		t.Errorf("audio VAE loaded for %v (audio %v)", loadTime(tm, "audio_vae"), audio)
	}
	if tm.Of(StageFilter) != 0 {
		t.Errorf("filter time %v without filters", tm.Of(StageFilter))
	}
}

// loadTime is the time spent loading component c.
func loadTime(tm Timings, c string) time.Duration {
	for _, l := range tm.Loads {
		if string(l.Stage) == c {
			return l.Elapsed
		}
	}
	return 0
}

// checkSummary checks that the result's summary writes and holds want, and logs it.
func checkSummary(t *testing.T, res *Result, want string) {
	t.Helper()
	var sb strings.Builder
	if err := res.WriteSummary(&sb); err != nil || !strings.Contains(sb.String(), want) {
		t.Errorf("summary: %v\n%s", err, sb.String())
	}
	t.Logf("timings %+v, peak host %.0f MiB\n%s", res.Timings, float64(res.PeakHostBytes)/(1<<20), sb.String())
}

// checkRunEvents checks a run's events: the stages in order, each of the steps denoising steps once
// and in order, and decode progress up to frames, each report accepted by nextDecode.
func checkRunEvents(t *testing.T, events []Event, stages string, steps, frames int, nextDecode func(prev, done int) bool) {
	t.Helper()
	var got []string
	step, decoded := 0, 0
	for _, e := range events {
		switch e.Kind {
		case StageStart:
			got = append(got, string(e.Stage))
		case DenoiseStep:
			if e.Step != step+1 || e.Steps != steps || e.Elapsed <= 0 {
				t.Errorf("denoise event %+v after step %d", e, step)
			}
			step = e.Step
		case DecodeProgress:
			if !nextDecode(decoded, e.Done) || e.Total != frames {
				t.Errorf("decode event %+v after %d frames", e, decoded)
			}
			decoded = e.Done
		}
	}
	if g := strings.Join(got, " "); g != stages || step != steps || decoded != frames {
		t.Errorf("stages %q, %d steps, %d frames decoded", g, step, decoded)
	}
}

// TestBadRequestsLoadNothing: every invalid request fails with a *RequestError naming the field,
// before any component (tokenizer included) is loaded.
func TestBadRequestsLoadNothing(t *testing.T) {
	b := newBadRequests(t, newTiny)
	notVideo, with := b.notVideo, b.with
	b.check([]badRequest{
		{"empty prompt", with(func(r *Request) { r.Prompt = "  " }), "prompt"},
		{"negative prompt", with(func(r *Request) { r.NegativePrompt = "blurry" }), "negative_prompt"},
		{"height not /32", with(func(r *Request) { r.Height, r.Width = 65, 96 }), "height"},
		{"width alone", with(func(r *Request) { r.Width = 96 }), "height"},
		{"too many frames", with(func(r *Request) { r.NumFrames = 400 }), "num_frames"},
		{"fps", with(func(r *Request) { r.FPS = 30 }), "fps"},
		{"steps", with(func(r *Request) { r.NumInferenceSteps = -1 }), "num_inference_steps"},
		{"guidance", with(func(r *Request) { r.GuidanceScale = 3 }), "guidance_scale"},
		{"preset", with(func(r *Request) { r.Preset = "hd" }), "preset"},
		{"prompt tokens", with(func(r *Request) { r.PromptTokens = -1 }), "prompt_tokens"},
		{"video noise length", with(func(r *Request) { r.VideoNoise = make([]float32, 10) }), "video_noise"},
		{"audio noise NaN", with(func(r *Request) {
			noise := make([]float32, 2*32*37)
			noise[5] = float32(math.NaN())
			r.Options = &h3.Options{AudioNoise: noise}
		}), "audio_noise"},
		{"another family's options", with(func(r *Request) { r.Options = &wan.Options{WarpDenoisingSteps: Ptr(false)} }), "options"},
		{"height above the toy's", with(func(r *Request) { r.Height, r.Width = 4096, 96 }), "height"},
		{"frames beyond any bound", with(func(r *Request) { r.NumFrames = math.MaxInt }), "num_frames"},
		{"fast factor without the temporal mode", with(func(r *Request) { r.FastFactor = 3 }), "fast_factor"},
		{"spatial scale that reduces nothing", with(func(r *Request) { r.FastSpatial, r.FastSpatialScale = true, 1 }), "fast_spatial_scale"},
		{"unknown upsample kernel", with(func(r *Request) { r.FastSpatial, r.Upsample = true, "area" }), "upsample"},
		{"upsample without the spatial mode", with(func(r *Request) { r.Upsample = "cubic" }), "upsample"},
		{"negative sharpen", with(func(r *Request) { r.FastSpatial, r.Sharpen = true, Ptr(-0.1) }), "sharpen"},
		{"NaN sharpen", with(func(r *Request) { r.FastSpatial, r.Sharpen = true, Ptr(math.NaN()) }), "sharpen"},
		{"infinite sharpen", with(func(r *Request) { r.FastSpatial, r.Sharpen = true, Ptr(math.Inf(1)) }), "sharpen"},
		{"sharpen without a fast mode", with(func(r *Request) { r.Sharpen = Ptr(0.5) }), "sharpen"},
		{"fast factor alone", with(func(r *Request) { r.FastFactor = 3 }), "fast_factor"},
		{"nothing to produce", with(func(r *Request) { r.SkipSave = true }), "skip_save"},
		{"output is another file", with(func(r *Request) { r.OutputPath = notVideo }), "output_path"},
		{"output with another extension", with(func(r *Request) { r.OutputPath = filepath.Join(b.dir, "clip.txt") }), "output_path"},
		{"output in /proc", with(func(r *Request) { r.OutputPath = "/proc/clip.mp4" }), "output_path"},
	})
}

// badRequests runs requests that must fail validation on a fresh generator whose load hook fails
// the test: each must be a *RequestError naming its field, and nothing may load or be written.
type badRequests struct {
	t        *testing.T
	g        *VideoGenerator
	dir      string
	notVideo string  // a file in dir that is not a video
	ok       Request // a valid request writing into dir
}

// badRequest is one request and the field its error must name.
type badRequest struct {
	name  string
	req   Request
	field string
}

func newBadRequests(t *testing.T, open func(...Option) (*VideoGenerator, error)) *badRequests {
	g, err := open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	g.loadHook = func(c string) { t.Errorf("%s loaded during a bad request", c) }
	dir := t.TempDir()
	notVideo := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notVideo, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &badRequests{t: t, g: g, dir: dir, notVideo: notVideo,
		ok: Request{Prompt: "a red fox", OutputPath: filepath.Join(dir, "out.mp4")}}
}

// with is the valid request edited by edit.
func (b *badRequests) with(edit func(*Request)) Request { r := b.ok; edit(&r); return r }

func (b *badRequests) check(cases []badRequest) {
	t := b.t
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := b.g.Generate(context.Background(), c.req)
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("error %v, want a *RequestError", err)
			}
			if re.Field != c.field || re.Allowed == "" {
				t.Fatalf("error %q names field %q, want %q", err, re.Field, c.field)
			}
		})
	}
	if n := b.g.loads.Load(); n != 0 {
		t.Errorf("%d component loads during bad requests", n)
	}
	if names := testutil.DirNames(t, b.dir); len(names) != 1 {
		t.Errorf("the output folder holds %v after bad requests", names)
	}
}

// TestNewErrors: what New rejects before loading anything.
func TestNewErrors(t *testing.T) {
	ctx := context.Background()
	var re *RequestError
	if _, err := New(ctx, "fasth3"); !errors.As(err, &re) || re.Field != "model" || !strings.Contains(err.Error(), "folder") {
		t.Errorf("New(fasth3): %v, want a model RequestError asking for the folder", err)
	}
	if _, err := New(ctx, "wan-9000"); !errors.As(err, &re) || re.Field != "model" {
		t.Errorf("New(wan-9000): %v", err)
	}
	if _, err := New(ctx, "tiny-h3", WithBackend("tpu")); !errors.As(err, &re) || re.Field != "backend" {
		t.Errorf("New with backend tpu: %v", err)
	}
	if _, err := New(ctx, "tiny-h3", WithDType("f8")); !errors.As(err, &re) || re.Field != "dtype" {
		t.Errorf("New with dtype f8: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := New(cancelled, "tiny-h3"); !errors.Is(err, context.Canceled) {
		t.Errorf("New with a cancelled context: %v", err)
	}
	g, err := newTiny()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := g.Generate(ctx, Request{Prompt: "x"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Generate after Close: %v", err)
	}
}

// TestCancelMidDenoise cancels from the progress callback after step 2: Generate returns ctx's
// error, later steps never run and neither the output nor a temporary file exists.
func TestCancelMidDenoise(t *testing.T) {
	g := tinyGenerator(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "cancelled.mp4")
	last := 0
	err := generateCancelled(g, out, func(e Event) bool {
		if e.Kind == DenoiseStep {
			last = e.Step
		}
		return e.Kind == DenoiseStep && e.Step == 2
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if last != 2 {
		t.Errorf("the last step reported is %d, want 2", last)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("output %s exists after cancellation (%v)", out, err)
	}
	if names := testutil.DirNames(t, dir); len(names) != 0 {
		t.Errorf("files left after cancellation: %v", names)
	}
}

// TestCancelDuringVideoDecode cancels once ffmpeg holds temporary files: they are removed too.
func TestCancelDuringVideoDecode(t *testing.T) {
	g := tinyGenerator(t)
	dir := t.TempDir()
	var sawTemps []string
	err := generateCancelled(g, filepath.Join(dir, "x.mp4"), func(e Event) bool {
		if e.Kind == DecodeProgress {
			sawTemps = encoderTemps(t, dir)
		}
		return e.Kind == DecodeProgress
	})
	checkCancelledDecode(t, err, dir, sawTemps)
}

// generateCancelled runs "a red fox" into out and cancels the run at the first event for which
// cancelAt is true; it returns Generate's error.
func generateCancelled(g *VideoGenerator, out string, cancelAt func(Event) bool) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := g.Generate(ctx, Request{Prompt: "a red fox", OutputPath: out, Progress: func(e Event) {
		if cancelAt(e) {
			cancel()
		}
	}})
	return err
}

// checkCancelledDecode checks a run cancelled while encoding: it failed with ctx's error, and the
// temporary files seen while encoding (sawTemps) are gone from dir.
// encoderTemps lists dir once ffmpeg has created its temporary output there: frames reach the
// encoder through a queue (framePump), so the first decoded frames can be reported before ffmpeg,
// fed from another goroutine, has opened its file. It gives up after 10 s (then the test fails).
func encoderTemps(t *testing.T, dir string) []string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if names := testutil.DirNames(t, dir); len(names) > 0 {
			return names
		}
	}
	return nil
}

func checkCancelledDecode(t *testing.T, err error, dir string, sawTemps []string) {
	t.Helper()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if len(sawTemps) == 0 {
		t.Error("no temporary file existed while encoding (the test would prove nothing)")
	}
	if names := testutil.DirNames(t, dir); len(names) != 0 {
		t.Errorf("files left after cancellation: %v (while encoding: %v)", names, sawTemps)
	}
}

// latentsOnly generates without decoding and returns the final latents.
func latentsOnly(t *testing.T, g *VideoGenerator, req Request) *Result {
	t.Helper()
	req.SkipSave, req.ReturnLatents = true, true
	res, err := g.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.OutputPath != "" || res.Frames != nil || res.Audio != nil || res.Latents == nil {
		t.Fatalf("a latents-only run returned output %q, %d frames, %d audio channels", res.OutputPath, len(res.Frames), len(res.Audio))
	}
	if loadTime(res.Timings, "video_vae") != 0 || loadTime(res.Timings, "audio_vae") != 0 {
		t.Errorf("a latents-only run decoded: %+v", res.Timings)
	}
	return res
}

// sharedResult is a reference run made once for several tests.
type sharedResult struct {
	once sync.Once
	res  *Result
}

func (s *sharedResult) get(t *testing.T, label string, run func() *Result) *Result {
	t.Helper()
	s.once.Do(func() { s.res = run() })
	if s.res == nil {
		t.Fatalf("the %s reference run failed", label)
	}
	return s.res
}

// reference latents of seed 7, shared by the determinism and folder tests.
var seed7 sharedResult

func seed7Latents(t *testing.T) *Latents {
	t.Helper()
	return seed7.get(t, "seed-7", func() *Result {
		return latentsOnly(t, tinyGenerator(t), Request{Prompt: "a red fox", Seed: Ptr[int64](7)})
	}).Latents
}

// concurrentRuns runs req latents-only twice at once on g; a failed run is nil.
func concurrentRuns(t *testing.T, g *VideoGenerator, req Request) [2]*Result {
	var wg sync.WaitGroup
	var again [2]*Result
	for i := range again {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := req
			r.SkipSave, r.ReturnLatents = true, true
			res, err := g.Generate(context.Background(), r)
			if err != nil {
				t.Error(err)
				return
			}
			again[i] = res
		}()
	}
	wg.Wait()
	return again
}

// TestDeterminism: the same seed gives the same latents bit for bit (also from two concurrent
// calls), injected noise is honoured, and injecting the seed's own noise changes nothing.
func TestDeterminism(t *testing.T) {
	g := tinyGenerator(t)
	ref := seed7Latents(t)
	req := Request{Prompt: "a red fox", Seed: Ptr[int64](7)}
	for i, r := range concurrentRuns(t, g, req) {
		if r == nil || !testutil.SameBits(r.Latents.Video, ref.Video) || !testutil.SameBits(r.Latents.Audio, ref.Audio) {
			t.Fatalf("concurrent run %d: latents differ from the first run with the same seed", i)
		}
	}

	plan, err := g.Plan(req)
	if err != nil {
		t.Fatal(err)
	}
	audioLen := plan.Details.(*h3.PlanDetails).AudioNoiseLen()
	if plan.VideoNoiseLen() != len(ref.Video) || audioLen != len(ref.Audio) {
		t.Fatalf("noise lengths %d, %d; latents %d, %d", plan.VideoNoiseLen(), audioLen, len(ref.Video), len(ref.Audio))
	}
	inj := req
	inj.VideoNoise = GaussianNoise(7, VideoNoise, plan.VideoNoiseLen())
	inj.Options = &h3.Options{AudioNoise: GaussianNoise(7, AudioNoise, audioLen)}
	same := latentsOnly(t, g, inj).Latents
	if !testutil.SameBits(same.Video, ref.Video) || !testutil.SameBits(same.Audio, ref.Audio) {
		t.Fatal("injecting the seed's own noise changed the latents")
	}

	inj.VideoNoise = GaussianNoise(8, VideoNoise, plan.VideoNoiseLen())
	other := latentsOnly(t, g, inj).Latents
	if testutil.SameBits(other.Video, ref.Video) {
		t.Fatal("different injected video noise gave the same video latents")
	}
	if testutil.SameBits(other.Audio, ref.Audio) {
		t.Fatal("different injected video noise left the audio latents bit-identical (the modalities attend to each other)")
	}
}

// TestAllResidentAndPromptCache: AllResident loads each component once across generations and
// matches the default policy bit for bit; the prompt cache skips the text encoder on a repeat.
func TestAllResidentAndPromptCache(t *testing.T) {
	ref := seed7Latents(t)
	g := openGenerator(t, newTiny, WithMemoryPolicy(AllResident), WithPromptCache(t.TempDir()))
	var loaded []string
	g.loadHook = func(c string) { loaded = append(loaded, c) }
	req := Request{Prompt: "a red fox", Seed: Ptr[int64](7)}
	first := latentsOnly(t, g, req)
	second := latentsOnly(t, g, req)
	if got := strings.Join(loaded, " "); got != "tokenizer dit text_encoder" { // the DiT preloads beside the prompt's encoding
		t.Errorf("loads over two generations: %q", got)
	}
	if first.PromptCached || !second.PromptCached {
		t.Errorf("prompt cache hits: first %v, second %v", first.PromptCached, second.PromptCached)
	}
	for i, r := range []*Result{first, second} {
		if !testutil.SameBits(r.Latents.Video, ref.Video) || !testutil.SameBits(r.Latents.Audio, ref.Audio) {
			t.Errorf("run %d: AllResident latents differ from the OneResident ones", i)
		}
	}
}

// probe inspects an MP4 with the ffprobe the environment names, else the one on PATH.
func probe(path string) (*media.ProbeInfo, error) {
	tools, err := media.FindTools(os.Getenv(media.EnvFFmpeg), os.Getenv(media.EnvFFprobe))
	if err != nil {
		return nil, err
	}
	return tools.Probe(path)
}

// sizedComponents are Components of known component sizes (family.ComponentSizer).
type sizedComponents struct {
	family.Components
	sizes []api.ComponentSize
}

func (s sizedComponents) ComponentSizes() []api.ComponentSize { return s.sizes }

// residencySizes are a FastH3-like model's components for the memory policy's tests: a DiT, a video
// VAE and a text encoder that streams a layer at a time.
const residencyGiB = int64(1) << 30

var residencySizes = []api.ComponentSize{{Name: "dit", Bytes: 60 * residencyGiB}, {Name: "video_vae", Bytes: 4 * residencyGiB},
	{Name: "text_encoder", Bytes: 44 * residencyGiB, StreamBytes: residencyGiB}}

// device is a DeviceMemory reader with fixed readings.
func device(used, limit int64) func() (uint64, uint64, error) {
	return func() (uint64, uint64, error) { return uint64(used), uint64(limit), nil }
}

// TestChooseResidency: auto keeps, most costly first, what leaves every other component room to run
// beside it with the activation headroom, in what the allocator can still give; explicit policies
// keep all or none; no statistics keep nothing (the text encoder streams).
func TestChooseResidency(t *testing.T) {
	const gib = residencyGiB
	sizes := residencySizes
	for _, c := range []struct {
		name   string
		policy MemoryPolicy
		device func() (uint64, uint64, error)
		want   string
	}{
		{"everything fits", AutoMemory, device(gib, 134*gib), "resident resident resident"},
		{"the text encoder streams", AutoMemory, device(gib, 125*gib), "resident resident streamed"},
		{"the DiT crowds out the decoder", AutoMemory, device(gib, 89*gib), "resident per_call streamed"},
		{"other processes hold memory", AutoMemory, device(60*gib, 130*gib), "per_call resident streamed"},
		{"no device statistics", AutoMemory, nil, "per_call per_call streamed"},
		{"explicit all", AllResident, nil, "resident resident resident"},
		{"explicit one", OneResident, device(0, 128*gib), "per_call per_call streamed"},
	} {
		e := &family.Engine{Memory: c.policy, DeviceMemory: c.device, Accelerated: true}
		var got []string
		var err error
		if e.Residency, _, err = chooseResidency(e, sizedComponents{sizes: sizes}, nil); err != nil {
			t.Fatal(err)
		}
		for _, r := range e.Residency {
			got = append(got, string(r.Residency))
			if want := r.Residency == api.Kept; e.Keeps(r.Name) != want {
				t.Errorf("%s: Keeps(%s) = %v, want %v", c.name, r.Name, !want, want)
			}
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%s: %s, want %s", c.name, strings.Join(got, " "), c.want)
		}
	}
}

// TestCheckFits: "auto" refuses before anything loads a component that cannot run on the device even
// alone beside the activation headroom (the device's or, on the go backend, the host's), naming it, the
// memory and the fixes; explicit policies and unread memory refuse nothing.
func TestCheckFits(t *testing.T) {
	const gib = residencyGiB
	for _, c := range []struct {
		name  string
		e     family.Engine
		sizes []api.ComponentSize // nil: residencySizes
		want  []string            // the error's parts ("!part": a part it must not have); none: no error
	}{
		{"an 80 GB card", family.Engine{Memory: AutoMemory, DeviceMemory: device(gib/2, 73*gib), Accelerated: true}, nil,
			[]string{"the dit needs 60.00 GiB at f32 and about 24.00 GiB of activations beside it (84.00 GiB)",
				"72.50 GiB is free to this process on this device", "at least 84.00 GiB", "-dtype fp8", "-memory one_resident"}},
		{"an FP8 run offers no smaller dtype", family.Engine{Memory: AutoMemory, DeviceMemory: device(gib/2, 73*gib), Accelerated: true, FP8: true}, nil,
			[]string{"the dit needs 60.00 GiB at fp8", "at least 84.00 GiB", "-memory one_resident", "!-dtype fp8"}},
		{"a 96 GB card", family.Engine{Memory: AutoMemory, DeviceMemory: device(gib/2, 88*gib), Accelerated: true}, nil, nil},
		{"explicit one", family.Engine{Memory: OneResident, DeviceMemory: device(gib/2, 73*gib), Accelerated: true}, nil, nil},
		{"no device statistics", family.Engine{Memory: AutoMemory, Accelerated: true}, nil, nil},
		{"a small host", family.Engine{Memory: AutoMemory, HostMemory: func() (uint64, error) { return uint64(40 * gib), nil }}, nil,
			[]string{"the dit needs 60.00 GiB at f32 and about 2.00 GiB of activations beside it (62.00 GiB)",
				"40.00 GiB is available on this host", "at least 62.00 GiB"}},
		{"a component that does not fit even streamed", family.Engine{Memory: AutoMemory,
			HostMemory: func() (uint64, error) { return uint64(4 * gib), nil }},
			[]api.ComponentSize{{Name: "text_encoder", Bytes: 44 * gib, StreamBytes: 3 * gib}},
			[]string{"the text_encoder holds 3.00 GiB at f32 at a time, streamed (44.00 GiB in all) and about 2.00 GiB " +
				"of activations beside it (5.00 GiB), and 4.00 GiB is available on this host"}},
	} {
		e, sizes := c.e, c.sizes
		if sizes == nil {
			sizes = residencySizes
		}
		rs, budget, err := chooseResidency(&e, sizedComponents{sizes: sizes}, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = checkFits(&e, rs, budget)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v, want no error", c.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrDoesNotFit) {
			t.Errorf("%s: %v, want ErrDoesNotFit", c.name, err)
			continue
		}
		for _, part := range c.want {
			if absent, ok := strings.CutPrefix(part, "!"); ok {
				if strings.Contains(err.Error(), absent) {
					t.Errorf("%s: %q offers %q", c.name, err, absent)
				}
			} else if !strings.Contains(err.Error(), part) {
				t.Errorf("%s: %q lacks %q", c.name, err, part)
			}
		}
	}
}

// TestRandomWeightsBringRIFE: a released model with random weights gets a random RIFE of the
// released size, so the temporal fast mode runs without WithRIFE; without random weights it has none.
func TestRandomWeightsBringRIFE(t *testing.T) {
	m, err := lookup("fasth3", families)
	if err != nil {
		t.Fatal(err)
	}
	if open, err := rifeWeights(Options{}, m); err != nil || open != nil {
		t.Fatalf("fasth3 without random weights has RIFE weights (%v)", err)
	}
	seed := int64(3)
	open, err := rifeWeights(Options{RandomWeights: &seed}, m)
	if err != nil || open == nil {
		t.Fatalf("no RIFE weights with random weights: %v", err)
	}
	src, closeSrc, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer closeSrc()
	if info, ok := src.Tensor("block0.conv0.0.0.weight"); !ok || len(info.Shape) == 0 || info.Shape[0] != 96 {
		t.Fatalf("the random RIFE is not the released size: %v %v", info.Shape, ok)
	}
}

// TestWarmCallCompilesNothing: with the default memory policy on the pure-Go backend (the host has
// room for the tiny models) the second identical Generate loads nothing and compiles no program, and
// one with another frame count compiles only the programs whose input geometry changed (the text
// encoder's, for one, stays): fewer than the first call. A warm call of the temporal fast mode keeps
// its interpolator (RIFE) too.
func TestWarmCallCompilesNothing(t *testing.T) {
	for _, model := range []struct {
		name string
		open func(...Option) (*VideoGenerator, error)
		// more frames than the preset's that the model takes
		moreFrames func(frames int) int
		fastFrames int // a clip the temporal fast mode shortens
	}{{"tiny-h3", newTiny, func(n int) int { return n + 2*(n/4+1) }, 56}, {"tiny-wan", newTinyWan, func(n int) int { return n + 4 }, 33}} {
		g, err := model.open()
		if err != nil {
			t.Fatal(err)
		}
		req := Request{Prompt: "a red fox", SkipSave: true, ReturnFrames: true}
		first, err := g.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var loads []string
		g.loadHook = func(c string) { loads = append(loads, c) }
		second, err := g.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if first.CompiledPrograms == 0 || first.Timings.Compile <= 0 {
			t.Errorf("%s: the first call reports %d compiled programs in %v", model.name, first.CompiledPrograms, first.Timings.Compile)
		}
		if second.CompiledPrograms != 0 || len(loads) != 0 {
			t.Errorf("%s: the warm call compiled %d programs and loaded %v", model.name, second.CompiledPrograms, loads)
		}
		req.NumFrames = model.moreFrames(first.NumFrames)
		other, err := g.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if other.NumFrames == first.NumFrames || other.CompiledPrograms == 0 || other.CompiledPrograms >= first.CompiledPrograms {
			t.Errorf("%s: %d frames after %d compiled %d programs (the first call %d): want some, fewer than the first",
				model.name, other.NumFrames, first.NumFrames, other.CompiledPrograms, first.CompiledPrograms)
		}
		// The temporal fast mode's interpolator stays too: its programs compile for every batch size.
		fast := Request{Prompt: "a red fox", SkipSave: true, ReturnFrames: true, Fast: true, NumFrames: model.fastFrames}
		if _, err := g.Generate(context.Background(), fast); err != nil {
			t.Fatal(err)
		}
		loads = nil
		warm, err := g.Generate(context.Background(), fast)
		if err != nil {
			t.Fatal(err)
		}
		if warm.CompiledPrograms != 0 || len(loads) != 0 {
			t.Errorf("%s: the warm fast call compiled %d programs and loaded %v", model.name, warm.CompiledPrograms, loads)
		}
		g.Close()
	}
}

// TestEnhancePrompt: with EnhancePrompt the model runs on the template's text (Result.Prompt, more
// tokens), the original is reported and names the file, the second call finds the enhancement in the
// prompt cache folder, and the plan sizes the enhanced prompt.
func TestEnhancePrompt(t *testing.T) {
	cache := t.TempDir()
	g := openGenerator(t, newTiny, WithPromptCache(cache))
	dir := t.TempDir()
	req := Request{Prompt: "a red  fox", EnhancePrompt: true, OutputPath: dir + string(filepath.Separator)}
	want, err := promptenhance.Template(req.Prompt)
	if err != nil {
		t.Fatal(err)
	}
	for i, backend := range []string{"template", "cache"} {
		res, err := g.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		e := res.PromptEnhancement
		if res.Prompt != want || e == nil || e.Original != "a red fox" || e.Backend != backend || res.PromptTokens <= 3 {
			t.Errorf("call %d: prompt %q (%d tokens), enhancement %+v; want %q from the %s", i+1, res.Prompt, res.PromptTokens, e, want, backend)
		}
		if base := filepath.Base(res.OutputPath); !strings.HasPrefix(base, "a_red_fox") {
			t.Errorf("call %d: the file is named %s, want it after the user's prompt", i+1, base)
		}
	}
	plain, err := g.Plan(Request{Prompt: "a red fox"})
	if err != nil {
		t.Fatal(err)
	}
	enhanced, err := g.Plan(req)
	if err != nil {
		t.Fatal(err)
	}
	pt := func(p *GenerationPlan) int { return p.Details.(*h3.PlanDetails).Rows.Text }
	if pt(enhanced) <= pt(plain) {
		t.Errorf("the plan sizes %d text rows enhanced, %d plain", pt(enhanced), pt(plain))
	}
}

// TestPlanCountsPromptTokens: a generator plans with the tokenizer's exact count, so a prompt the
// estimate undercounts (1,365 CJK characters: one "word" to the estimate, over 1,024 tokens to Qwen3)
// is refused by Plan, as Generate would refuse it, while a model name alone can only estimate.
func TestPlanCountsPromptTokens(t *testing.T) {
	g := tinyGenerator(t)
	var b strings.Builder
	for i := range 1365 {
		b.WriteRune(rune(0x4e00 + 37*i%20000)) // CJK ideographs that rarely merge into one token
	}
	prompt := b.String()
	if _, err := Plan("tiny-h3", Request{Prompt: prompt}); err != nil {
		t.Fatalf("the estimate already refuses it, the test proves nothing: %v", err)
	}
	_, err := g.Plan(Request{Prompt: prompt})
	var re *RequestError
	if !errors.As(err, &re) || re.Field != "prompt" {
		t.Errorf("Plan of %d CJK characters: %v, want the prompt refused", len([]rune(prompt)), err)
	}
	p, err := g.Plan(Request{Prompt: "a red fox"})
	if err != nil || p.Details.(*h3.PlanDetails).Rows.TextEstimated || p.Details.(*h3.PlanDetails).Rows.Text != 3 {
		t.Errorf("a short prompt: %+v, %v; want its exact 3 tokens", p, err)
	}
}
