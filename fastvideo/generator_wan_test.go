package fastvideo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/fastvideo/h3"
	"fastvideo/fastvideo/wan"
	"fastvideo/internal/testutil"
)

// TestWanGenerateMP4 runs tiny-wan's default (DMD) preset to a file and checks the container with
// ffprobe: H.264 at the planned size, frame count and rate, and no audio stream.
func TestWanGenerateMP4(t *testing.T) {
	res, events, dir := generateToFolder(t, tinyWanGenerator(t), Request{ReturnFrames: true, ReturnLatents: true})
	plan := res.Plan
	d := plan.Details.(*wan.PlanDetails)
	if plan.Height != 48 || plan.Width != 64 || plan.NumFrames != 9 || plan.FPS != 16 || d.Sampler != wan.SamplerDMD ||
		d.Tokens != 36 || d.TextTokens != 512 || plan.CFG || plan.ForwardsPerStep != 1 || plan.Steps != 3 {
		t.Fatalf("plan %+v %+v", plan, d)
	}
	info, err := probe(res.OutputPath)
	if err != nil {
		t.Fatal(err)
	}
	if v := info.Video; v == nil || v.Codec != "h264" || v.Width != plan.Width || v.Height != plan.Height ||
		v.Frames != plan.NumFrames || v.FPS != float64(plan.FPS) {
		t.Fatalf("video stream %+v, want h264 %dx%d, %d frames at %d fps", info.Video, plan.Width, plan.Height, plan.NumFrames, plan.FPS)
	}
	if info.Audio != nil {
		t.Fatalf("a Wan video has an audio stream: %+v", *info.Audio)
	}
	t.Logf("video %+v", *info.Video)

	if len(res.Frames) != 9 || len(res.Frames[0]) != 64*48*3 || res.SampleRate != 0 || res.Audio != nil {
		t.Errorf("frames %d of %d bytes, sample rate %d, audio %v", len(res.Frames), len(res.Frames[0]), res.SampleRate, res.Audio != nil)
	}
	// Random weights give noise, but not a constant picture.
	lo, hi := byte(255), byte(0)
	for _, b := range res.Frames[4] {
		lo, hi = min(lo, b), max(hi, b)
	}
	if hi-lo < 64 {
		t.Errorf("frame 4 spans only %d..%d", lo, hi)
	}
	if l := res.Latents; l == nil || fmt.Sprint(l.VideoShape) != "[16 3 6 8]" || len(l.Video) != 16*3*6*8 || l.Audio != nil {
		t.Errorf("latents %+v", res.Latents)
	}
	// "a red fox" is three whole words of the toy vocabulary, then </s>.
	if res.PromptTokens != 4 || res.PromptCached || res.Seed != 1024 || res.Prompt != "a red fox" {
		t.Errorf("prompt %d tokens (cached %v), seed %d, prompt %q", res.PromptTokens, res.PromptCached, res.Seed, res.Prompt)
	}
	checkTimings(t, res.Timings, false)
	checkSummary(t, res, "no audio")
	// The causal VAE emits 1 frame for the first latent frame, then 4 per latent frame.
	checkRunEvents(t, events, "validate condition denoise decode mux", 3, 9,
		func(prev, done int) bool { return done == prev+map[bool]int{true: 1, false: 4}[prev == 0] })
	if names := testutil.DirNames(t, dir); len(names) != 1 {
		t.Errorf("output folder holds %v", names)
	}
}

var wanSeed1024 sharedResult

// seed1024WanLatents is the default tiny-wan request's latents-only result, shared by tests.
func seed1024WanLatents(t *testing.T) *Result {
	t.Helper()
	return wanSeed1024.get(t, "seed-1024", func() *Result { return latentsOnly(t, tinyWanGenerator(t), Request{Prompt: "a red fox"}) })
}

// TestWanDeterminism: the same seed gives the same latents (also from concurrent calls), injected
// noise is honoured, and injecting the seed's own initial and re-noise draws changes nothing.
func TestWanDeterminism(t *testing.T) {
	g := tinyWanGenerator(t)
	ref := seed1024WanLatents(t)
	req := Request{Prompt: "a red fox"}
	for i, r := range concurrentRuns(t, g, req) {
		if r == nil || !testutil.SameBits(r.Latents.Video, ref.Latents.Video) {
			t.Fatalf("concurrent run %d differs from the first run with the same seed", i)
		}
	}
	plan := ref.Plan
	renoiseLen := plan.Details.(*wan.PlanDetails).RenoiseNoiseLen()
	all := GaussianNoise(1024, VideoNoise, plan.VideoNoiseLen()+renoiseLen)
	inj := req
	inj.VideoNoise = all[:plan.VideoNoiseLen()]
	inj.Options = &wan.Options{RenoiseNoise: all[plan.VideoNoiseLen():]}
	if !testutil.SameBits(latentsOnly(t, g, inj).Latents.Video, ref.Latents.Video) {
		t.Fatal("injecting the seed's own noise changed the latents")
	}
	inj.Options = &wan.Options{RenoiseNoise: GaussianNoise(5, VideoNoise, renoiseLen)}
	if testutil.SameBits(latentsOnly(t, g, inj).Latents.Video, ref.Latents.Video) {
		t.Fatal("different re-noise gave the same latents")
	}
	if testutil.SameBits(latentsOnly(t, g, Request{Prompt: "a red fox", Seed: Ptr[int64](7)}).Latents.Video, ref.Latents.Video) {
		t.Fatal("seed 7 gave the latents of seed 1024")
	}
}

// TestWanBadRequestsLoadNothing: every invalid Wan request fails with a *RequestError naming the
// field, before any component is loaded.
func TestWanBadRequestsLoadNothing(t *testing.T) {
	b := newBadRequests(t, newTinyWan)
	notVideo, with := b.notVideo, b.with
	base := func(edit func(*Request)) Request {
		return with(func(r *Request) { r.Preset = "tiny_wan_t2v"; edit(r) })
	}
	b.check([]badRequest{
		{"empty prompt", with(func(r *Request) { r.Prompt = " " }), "prompt"},
		{"height not /16", with(func(r *Request) { r.Height, r.Width = 40, 64 }), "height"},
		{"width not /16", with(func(r *Request) { r.Height, r.Width = 48, 72 }), "width"},
		{"width alone", with(func(r *Request) { r.Width = 64 }), "height"},
		{"frames not 4n+1", with(func(r *Request) { r.NumFrames = 12 }), "num_frames"},
		{"negative frames", with(func(r *Request) { r.NumFrames = -3 }), "num_frames"},
		{"fps", with(func(r *Request) { r.FPS = 500 }), "fps"},
		{"dmd steps", with(func(r *Request) { r.NumInferenceSteps = 4 }), "num_inference_steps"},
		{"dmd guidance", with(func(r *Request) { r.GuidanceScale = 3 }), "guidance_scale"},
		{"dmd negative prompt", with(func(r *Request) { r.NegativePrompt = "blurry" }), "negative_prompt"},
		{"preset", with(func(r *Request) { r.Preset = "hd" }), "preset"},
		{"video noise length", with(func(r *Request) { r.VideoNoise = make([]float32, 10) }), "video_noise"},
		{"renoise NaN", with(func(r *Request) {
			noise := make([]float32, 2*16*3*6*8)
			noise[7] = float32(math.NaN())
			r.Options = &wan.Options{RenoiseNoise: noise}
		}), "renoise_noise"},
		{"another family's options", with(func(r *Request) { r.Options = &h3.Options{AudioNoise: make([]float32, 4)} }), "options"},
		{"height above the toy's", with(func(r *Request) { r.Height, r.Width = 4096, 64 }), "height"},
		{"frames beyond any bound", with(func(r *Request) { r.NumFrames = math.MaxInt }), "num_frames"},
		{"fast mode that does not shorten", with(func(r *Request) { r.Fast, r.NumFrames = true, 5 }), "fast"},
		{"fast factor alone", with(func(r *Request) { r.FastFactor = 3 }), "fast_factor"},
		{"spatial fast mode off the grid", with(func(r *Request) { r.FastSpatial = true }), "fast_spatial_scale"},
		{"upsample", with(func(r *Request) { r.Upsample = "lanczos" }), "upsample"},
		{"sharpen", with(func(r *Request) { r.Sharpen = Ptr(0.4) }), "sharpen"},
		{"return audio", with(func(r *Request) { r.ReturnAudio = true }), "return_audio"},
		{"nothing to produce", with(func(r *Request) { r.SkipSave = true }), "skip_save"},
		{"output is another file", with(func(r *Request) { r.OutputPath = notVideo }), "output_path"},
		{"unipc steps", base(func(r *Request) { r.NumInferenceSteps = -1 }), "num_inference_steps"},
		{"unipc guidance", base(func(r *Request) { r.GuidanceScale = -2 }), "guidance_scale"},
		{"negative prompt without CFG", base(func(r *Request) { r.GuidanceScale, r.NegativePrompt = 1, "blurry" }), "negative_prompt"},
		{"warp on unipc", base(func(r *Request) { r.Options = &wan.Options{WarpDenoisingSteps: Ptr(true)} }), "warp_denoising_steps"},
		{"renoise on unipc", base(func(r *Request) { r.Options = &wan.Options{RenoiseNoise: []float32{1}} }), "renoise_noise"},
	})
}

// TestWanCancel cancels during the denoising loop (after step 2 of 3) and during the streamed decode
// (after 5 of 9 frames, while ffmpeg holds temporary files): Generate returns ctx's error and nothing
// is left behind.
func TestWanCancel(t *testing.T) {
	g := tinyWanGenerator(t)
	dir := t.TempDir()
	last := 0
	err := generateCancelled(g, filepath.Join(dir, "a.mp4"), func(e Event) bool {
		if e.Kind == DenoiseStep {
			last = e.Step
		}
		return e.Kind == DenoiseStep && e.Step == 2
	})
	if !errors.Is(err, context.Canceled) || last != 2 {
		t.Fatalf("error %v after step %d, want context.Canceled after step 2", err, last)
	}
	var sawTemps []string
	err = generateCancelled(g, filepath.Join(dir, "b.mp4"), func(e Event) bool {
		// After the second chunk (5 of 9 frames): ffmpeg has had the time of a chunk's decode to
		// create its output, which it does only once frames arrive.
		if e.Kind == DecodeProgress && e.Done == 5 {
			sawTemps = encoderTemps(t, dir)
			return true
		}
		return false
	})
	checkCancelledDecode(t, err, dir, sawTemps)
}

// TestWanAllResidentAndPromptCache: AllResident loads each component once; the prompt cache serves
// both the prompt and the negative prompt on a repeat; the latents match the default policy's.
func TestWanAllResidentAndPromptCache(t *testing.T) {
	g := openGenerator(t, newTinyWan, WithMemoryPolicy(AllResident), WithPromptCache(t.TempDir()))
	var loaded []string
	g.loadHook = func(c string) { loaded = append(loaded, c) }
	req := Request{Prompt: "a red fox", Preset: "tiny_wan_t2v", NumInferenceSteps: 2}
	ref := latentsOnly(t, tinyWanGenerator(t), req)
	first, second := latentsOnly(t, g, req), latentsOnly(t, g, req)
	if got := strings.Join(loaded, " "); got != "tokenizer dit text_encoder" { // the DiT preloads beside the prompt's encoding
		t.Errorf("loads over two generations: %q", got)
	}
	if first.PromptCached || !second.PromptCached {
		t.Errorf("prompt cache hits: first %v, second %v", first.PromptCached, second.PromptCached)
	}
	for i, r := range []*Result{first, second} {
		if !testutil.SameBits(r.Latents.Video, ref.Latents.Video) {
			t.Errorf("run %d: AllResident latents differ from the OneResident ones", i)
		}
	}
}
