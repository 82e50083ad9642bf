package fastvideo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"

	wandit "fastvideo/dit/wan"
	"fastvideo/internal/textenc/umt5"
	"fastvideo/schedule"
)

// One tiny-wan generator serves most Wan tests (its synthetic weights are made once); TestMain
// closes it.
var wanShared sharedGenerator

func newTinyWan(opts ...Option) (*VideoGenerator, error) {
	return New(context.Background(), tinyWanName, append([]Option{WithBackend(testBackend())}, opts...)...)
}

func tinyWanGenerator(t *testing.T) *VideoGenerator {
	t.Helper()
	return wanShared.get(t, newTinyWan)
}

// TestWanGenerateMP4 runs tiny-wan's default (DMD) preset to a file and checks the container with
// ffprobe: H.264 at the planned size, frame count and rate, and no audio stream.
func TestWanGenerateMP4(t *testing.T) {
	res, events, dir := generateToFolder(t, tinyWanGenerator(t), Request{ReturnFrames: true, ReturnLatents: true})
	plan := res.Plan
	if plan.Height != 48 || plan.Width != 64 || plan.NumFrames != 9 || plan.FPS != 16 || plan.Sampler != SamplerDMD ||
		plan.Tokens != 36 || plan.TextTokens != 512 || plan.CFG || plan.ForwardsPerStep != 1 || plan.Steps != 3 {
		t.Fatalf("plan %+v", plan)
	}
	tools, err := findMediaTools()
	if err != nil {
		t.Fatal(err)
	}
	info, err := tools.Probe(res.OutputPath)
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
	checkRunEvents(t, events, "validate condition load_dit denoise video_decode mux", 3, 9,
		func(prev, done int) bool { return done == prev+map[bool]int{true: 1, false: 4}[prev == 0] })
	if names := dirNames(t, dir); len(names) != 1 {
		t.Errorf("output folder holds %v", names)
	}
}

// wanReference recomputes a tiny-wan generation from the components with the samplers written out
// by hand, for comparison with the pipeline: the prompt (and negative prompt) through the toy
// tokenizer and UMT5, zero-padded to 512 rows; the seed's noise; then UniPC with CFG or the DMD
// ladder whose re-noise continues the seed's stream.
func wanReference(t *testing.T, g *VideoGenerator, sampler Sampler, prompt, negative string, guidance float64, steps int, seed int64) []float32 {
	t.Helper()
	c := newTinyWanComponents(tinyWanSpec())
	ws := c.spec.Wan
	tok, err := c.loadTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	open, _, err := c.textEncoder()
	if err != nil {
		t.Fatal(err)
	}
	src, _, _ := open()
	enc, err := umt5.FromSource(g.backend, ws.TextEncoder, src, umt5.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	dit, err := c.loadDiT(g.backend, dtypes.Float32)
	if err != nil {
		t.Fatal(err)
	}
	defer dit.Close()
	embed := func(text string) *wandit.TextState {
		ids, err := tok.EncodeWithSpecial(text, 512)
		if err != nil {
			t.Fatal(err)
		}
		h, shape, err := enc.Encode(context.Background(), ids, nil)
		if err != nil {
			t.Fatal(err)
		}
		padded, _, err := umt5.ZeroPadded(h, shape, nil, 512)
		if err != nil {
			t.Fatal(err)
		}
		ts, err := dit.PrepareText(padded)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	cond := embed(prompt)
	defer cond.Close()
	const cT, cC, cH, cW = 3, 16, 6, 8
	n := cC * cT * cH * cW
	forward := func(x []float32, ts float32, text *wandit.TextState) []float32 {
		v, err := dit.Forward(wandit.ForwardInputs{Latent: x, Frames: cT, Height: cH, Width: cW, Timesteps: []float32{ts}, TextState: text})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	switch sampler {
	case SamplerUniPC:
		uncond := embed(negative)
		defer uncond.Close()
		u, err := schedule.NewUniPC(ws.FlowShift, steps)
		if err != nil {
			t.Fatal(err)
		}
		x := GaussianNoise(seed, VideoNoise, n)
		for k := 0; k < steps; k++ {
			ts := float32(u.Timesteps[k])
			vc, vu := forward(x, ts, cond), forward(x, ts, uncond)
			for i := range vc {
				vc[i] = vu[i] + float32(guidance)*(vc[i]-vu[i])
			}
			if x, err = u.Step(vc, x); err != nil {
				t.Fatal(err)
			}
		}
		return x
	default:
		d, err := schedule.NewDMDLadder([]int{1000, 757, 522})
		if err != nil {
			t.Fatal(err)
		}
		noise := GaussianNoise(seed, VideoNoise, 3*n) // initial noise, then the two re-noise draws
		x := append([]float32(nil), noise[:n]...)
		for k := 0; k < 3; k++ {
			v := forward(x, float32(d.Timesteps[k]), cond)
			if err := d.PredictX0(k, v, x, x); err != nil {
				t.Fatal(err)
			}
			if k < 2 {
				if err := d.Renoise(k, x, noise[(k+1)*n:(k+2)*n], x); err != nil {
					t.Fatal(err)
				}
			}
		}
		return x
	}
}

// TestWanUniPCWithCFG: the base-style preset runs 4 UniPC steps with classifier-free guidance (the
// preset's English negative prompt in the unconditional forward), bit for bit as written out by hand;
// the negative prompt and the guidance scale both matter.
func TestWanUniPCWithCFG(t *testing.T) {
	g := tinyWanGenerator(t)
	req := Request{Prompt: "a red fox", Preset: "tiny_wan_t2v"}
	res := latentsOnly(t, g, req)
	if p := res.Plan; p.Sampler != SamplerUniPC || !p.CFG || p.ForwardsPerStep != 2 || p.GuidanceScale != 5 || p.Steps != 4 ||
		p.NegativePrompt != WanNegativePromptEN || len(p.VideoSigmas) != 5 || p.VideoSigmas[4] != 0 {
		t.Fatalf("plan %+v", p)
	}
	want := wanReference(t, g, SamplerUniPC, "a red fox", WanNegativePromptEN, 5, 4, 1024)
	if !sameBits(res.Latents.Video, want) {
		t.Fatal("UniPC+CFG latents differ from the hand-written loop")
	}
	other := latentsOnly(t, g, Request{Prompt: "a red fox", Preset: "tiny_wan_t2v", NegativePrompt: "blurry"}).Latents.Video
	if sameBits(other, want) {
		t.Error("the negative prompt does not change the result")
	}
	if !sameBits(other, wanReference(t, g, SamplerUniPC, "a red fox", "blurry", 5, 4, 1024)) {
		t.Error("a request's negative prompt is not the one the unconditional forward sees")
	}
	noCFG := latentsOnly(t, g, Request{Prompt: "a red fox", Preset: "tiny_wan_t2v", GuidanceScale: 1})
	if noCFG.Plan.CFG || noCFG.Plan.ForwardsPerStep != 1 || noCFG.Plan.NegativePrompt != "" || sameBits(noCFG.Latents.Video, want) {
		t.Errorf("guidance 1: plan %+v", noCFG.Plan)
	}
}

// TestWanDMD: the default preset runs the FastWan ladder (1000, 757, 522 on the shift-8 grid), one
// forward per rung, re-noising with the continuation of the seed's noise stream; the warped ladder
// feeds the shift-3 grid's timesteps and gives another result.
func TestWanDMD(t *testing.T) {
	g := tinyWanGenerator(t)
	res := seed1024WanLatents(t)
	p := res.Plan
	eq := func(label string, got []float32, want ...float32) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s = %v, want %v", label, got, want)
		}
	}
	eq("timesteps", p.VideoTimesteps, 1000, 757, 522)
	eq("sigmas", p.VideoSigmas, 1, 0.75675672, 0.52173913)
	if p.Sampler != SamplerDMD || p.WarpDenoisingSteps || p.RenoiseNoiseLen() != 2*16*3*6*8 || p.VideoNoiseLen() != 16*3*6*8 {
		t.Fatalf("plan %+v", p)
	}
	want := wanReference(t, g, SamplerDMD, "a red fox", "", 1, 3, 1024)
	if !sameBits(res.Latents.Video, want) {
		t.Fatal("DMD latents differ from the hand-written ladder")
	}

	warped := latentsOnly(t, g, Request{Prompt: "a red fox", WarpDenoisingSteps: Ptr(true)})
	ladder, err := schedule.NewWarpedDMDLadder(schedule.FastWanDMDSteps, schedule.Wan21T2V480PShift)
	if err != nil {
		t.Fatal(err)
	}
	eq("warped timesteps", warped.Plan.VideoTimesteps, ladder.WarpedTimesteps...)
	if !warped.Plan.WarpDenoisingSteps || sameBits(warped.Latents.Video, want) {
		t.Errorf("warped plan %+v", warped.Plan)
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
		if r == nil || !sameBits(r.Latents.Video, ref.Latents.Video) {
			t.Fatalf("concurrent run %d differs from the first run with the same seed", i)
		}
	}
	plan := ref.Plan
	all := GaussianNoise(1024, VideoNoise, plan.VideoNoiseLen()+plan.RenoiseNoiseLen())
	inj := req
	inj.VideoNoise, inj.RenoiseNoise = all[:plan.VideoNoiseLen()], all[plan.VideoNoiseLen():]
	if !sameBits(latentsOnly(t, g, inj).Latents.Video, ref.Latents.Video) {
		t.Fatal("injecting the seed's own noise changed the latents")
	}
	inj.RenoiseNoise = GaussianNoise(5, VideoNoise, plan.RenoiseNoiseLen())
	if sameBits(latentsOnly(t, g, inj).Latents.Video, ref.Latents.Video) {
		t.Fatal("different re-noise gave the same latents")
	}
	if sameBits(latentsOnly(t, g, Request{Prompt: "a red fox", Seed: Ptr[int64](7)}).Latents.Video, ref.Latents.Video) {
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
			r.RenoiseNoise = make([]float32, 2*16*3*6*8)
			r.RenoiseNoise[7] = float32(math.NaN())
		}), "renoise_noise"},
		{"audio noise", with(func(r *Request) { r.AudioNoise = make([]float32, 4) }), "audio_noise"},
		{"fast mode", with(func(r *Request) { r.Fast = true }), "fast"},
		{"return audio", with(func(r *Request) { r.ReturnAudio = true }), "return_audio"},
		{"nothing to produce", with(func(r *Request) { r.SkipSave = true }), "skip_save"},
		{"output is another file", with(func(r *Request) { r.OutputPath = notVideo }), "output_path"},
		{"unipc steps", base(func(r *Request) { r.NumInferenceSteps = -1 }), "num_inference_steps"},
		{"unipc guidance", base(func(r *Request) { r.GuidanceScale = -2 }), "guidance_scale"},
		{"negative prompt without CFG", base(func(r *Request) { r.GuidanceScale, r.NegativePrompt = 1, "blurry" }), "negative_prompt"},
		{"warp on unipc", base(func(r *Request) { r.WarpDenoisingSteps = Ptr(true) }), "warp_denoising_steps"},
		{"renoise on unipc", base(func(r *Request) { r.RenoiseNoise = []float32{1} }), "renoise_noise"},
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
			sawTemps = dirNames(t, dir)
			return true
		}
		return false
	})
	checkCancelledDecode(t, err, dir, sawTemps)
}

// TestWanAllResidentAndPromptCache: AllResident loads each component once; the prompt cache serves
// both the prompt and the negative prompt on a repeat; the latents match the default policy's.
func TestWanAllResidentAndPromptCache(t *testing.T) {
	g, err := newTinyWan(WithMemoryPolicy(AllResident), WithPromptCache(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var loaded []string
	g.loadHook = func(c string) { loaded = append(loaded, c) }
	req := Request{Prompt: "a red fox", Preset: "tiny_wan_t2v", NumInferenceSteps: 2}
	ref := latentsOnly(t, tinyWanGenerator(t), req)
	first, second := latentsOnly(t, g, req), latentsOnly(t, g, req)
	if got := strings.Join(loaded, " "); got != "tokenizer text_encoder dit" {
		t.Errorf("loads over two generations: %q", got)
	}
	if first.PromptCached || !second.PromptCached {
		t.Errorf("prompt cache hits: first %v, second %v", first.PromptCached, second.PromptCached)
	}
	for i, r := range []*Result{first, second} {
		if !sameBits(r.Latents.Video, ref.Latents.Video) {
			t.Errorf("run %d: AllResident latents differ from the OneResident ones", i)
		}
	}
}

// TestWanToyTokenizer: the toy vocabulary tokenizes whole words, spells out unknown words, falls
// back to bytes outside its characters, and always ends with </s>.
func TestWanToyTokenizer(t *testing.T) {
	c := newTinyWanComponents(tinyWanSpec())
	tok, err := c.loadTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	vocab := tinyWanVocab()
	if tok.VocabSize() != len(vocab) || tok.EOSID() != 1 || tok.PadID() != 0 || tok.UnkID() != 2 || c.spec.Wan.TextEncoder.VocabSize != len(vocab) {
		t.Fatalf("vocab %d (%d), eos %d pad %d unk %d", tok.VocabSize(), len(vocab), tok.EOSID(), tok.PadID(), tok.UnkID())
	}
	for text, want := range map[string]string{
		"A red fox":    "▁A ▁red ▁fox",
		"foxes  ran!":  "▁fox es ▁r a n !",
		"a 狐":          "▁a ▁ <0xE7> <0x8B> <0x90>",
		"the Cat, run": "▁the ▁C a t , ▁r u n",
	} {
		pieces, err := tok.Tokens(text)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(pieces, " "); got != want {
			t.Errorf("%q -> %q, want %q", text, got, want)
		}
		ids, _ := tok.EncodeWithSpecial(text, 512)
		if ids[len(ids)-1] != 1 {
			t.Errorf("%q: ids %v do not end with </s>", text, ids)
		}
	}
	again, _ := newTinyWanComponents(tinyWanSpec()).loadTokenizer()
	if again.Fingerprint() != tok.Fingerprint() {
		t.Error("the toy tokenizer is not deterministic")
	}
	ids, _ := tok.EncodeWithSpecial(strings.Repeat("fox ", 600), 512)
	if len(ids) != 512 || ids[511] != 1 {
		t.Errorf("a long prompt gives %d ids", len(ids))
	}
}
