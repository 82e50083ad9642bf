package wan_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gomlx/compute/dtypes"

	wandit "fastvideo/dit/wan"
	"fastvideo/fastvideo"
	"fastvideo/fastvideo/fvtest"
	"fastvideo/fastvideo/wan"
	"fastvideo/internal/testutil"
	"fastvideo/internal/textenc/umt5"
	"fastvideo/internal/tokenizer/unigram"
	"fastvideo/schedule"
)

// tiny-wan's default canvas (48x64, 9 frames) in latent space: [C, T, H, W].
const latentC, latentT, latentH, latentW = 16, 3, 6, 8

// reference recomputes tiny-wan generations from its components with the samplers written out by
// hand, for comparison with the pipeline: the prompt (and negative prompt) through the toy
// tokenizer and UMT5, zero-padded to 512 rows, the DiT's text embedder, then UniPC with CFG or the
// DMD ladder.
type reference struct {
	t    *testing.T
	spec *wan.Spec
	tok  *unigram.Tokenizer
	enc  *umt5.Encoder
	dit  *wandit.Model
}

// newReference loads tiny-wan's tokenizer, text encoder and DiT in f32 on the test backend; they
// are closed at the test's end.
func newReference(t *testing.T) *reference {
	t.Helper()
	spec := wan.TinySpec()
	tw, err := wan.NewTinyWeights(spec)
	if err != nil {
		t.Fatal(err)
	}
	r := &reference{t: t, spec: spec}
	if r.tok, err = unigram.FromTokenizerJSON(tw.TokenizerJSON, unigram.Options{}); err != nil {
		t.Fatal(err)
	}
	b := testutil.Backend(t)
	r.enc = testutil.Open(t, func() (*umt5.Encoder, error) {
		return umt5.FromSource(b, spec.TextEncoder, tw.TextEncoder, umt5.Options{})
	})
	r.dit = testutil.Open(t, func() (*wandit.Model, error) {
		return wandit.FromSource(b, spec.DiT, tw.DiT, wandit.Options{DType: dtypes.Float32})
	})
	return r
}

// embed is text through the tokenizer (</s> appended), UMT5 over its own tokens, zero-padding to
// TextLen rows and the DiT's text embedder.
func (r *reference) embed(text string) *wandit.TextState {
	t := r.t
	t.Helper()
	textLen := r.spec.TextLen
	ids, err := r.tok.EncodeWithSpecial(text, textLen)
	if err != nil {
		t.Fatal(err)
	}
	h, shape, err := r.enc.Encode(context.Background(), ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	padded, _, err := umt5.ZeroPadded(h, shape, nil, textLen)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := r.dit.PrepareText(padded)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ts.Close)
	return ts
}

// forward is the DiT's velocity for latent x at timestep ts.
func (r *reference) forward(x []float32, ts float32, text *wandit.TextState) []float32 {
	r.t.Helper()
	v, err := r.dit.Forward(wandit.ForwardInputs{Latent: x, Frames: latentT, Height: latentH, Width: latentW,
		Timesteps: []float32{ts}, TextState: text})
	if err != nil {
		r.t.Fatal(err)
	}
	return v
}

// unipc is UniPC at the model's flow shift from the seed's noise, with classifier-free guidance
// v = v_u + g·(v_c − v_u) over the negative prompt.
func (r *reference) unipc(prompt, negative string, guidance float32, steps int, seed int64) []float32 {
	t := r.t
	t.Helper()
	cond, uncond := r.embed(prompt), r.embed(negative)
	u, err := schedule.NewUniPC(r.spec.FlowShift, steps)
	if err != nil {
		t.Fatal(err)
	}
	x := fastvideo.GaussianNoise(seed, fastvideo.VideoNoise, latentC*latentT*latentH*latentW)
	for k := range steps {
		ts := float32(u.Timesteps[k])
		vc, vu := r.forward(x, ts, cond), r.forward(x, ts, uncond)
		for i := range vc {
			vc[i] = vu[i] + guidance*(vc[i]-vu[i])
		}
		if x, err = u.Step(vc, x); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

// dmd is the FastWan ladder (1000, 757, 522), raw or warped onto the model's flow-shift grid, one
// forward per rung predicting x0, re-noised between rungs with renoise (nil: the continuation of
// the seed's noise stream after the initial noise).
func (r *reference) dmd(prompt string, warped bool, seed int64, renoise []float32) []float32 {
	t := r.t
	t.Helper()
	cond := r.embed(prompt)
	rungs := schedule.FastWanDMDSteps
	d, err := schedule.NewDMDLadder(rungs)
	timesteps := make([]float32, len(rungs))
	for k, ts := range rungs {
		timesteps[k] = float32(ts)
	}
	if warped {
		d, err = schedule.NewWarpedDMDLadder(rungs, r.spec.FlowShift)
		if err == nil {
			timesteps = d.WarpedTimesteps
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	n := latentC * latentT * latentH * latentW
	noise := fastvideo.GaussianNoise(seed, fastvideo.VideoNoise, len(rungs)*n) // initial, then re-noise draws
	x := append([]float32(nil), noise[:n]...)
	if renoise == nil {
		renoise = noise[n:]
	}
	for k, ts := range timesteps {
		if err := d.PredictX0(k, r.forward(x, ts, cond), x, x); err != nil {
			t.Fatal(err)
		}
		if k+1 < len(rungs) {
			if err := d.Renoise(k, x, renoise[k*n:(k+1)*n], x); err != nil {
				t.Fatal(err)
			}
		}
	}
	return x
}

// TestWanUniPCWithCFG: the base-style preset runs 4 UniPC steps with classifier-free guidance (the
// preset's English negative prompt in the unconditional forward), bit for bit as written out by
// hand; the negative prompt and the guidance scale both matter.
func TestWanUniPCWithCFG(t *testing.T) {
	g, ref := fvtest.Open(t, wan.TinyName), newReference(t)
	req := fastvideo.Request{Prompt: "a red fox", Preset: "tiny_wan_t2v"}
	res := fvtest.LatentsOnly(t, g, req)
	p, d := res.Plan, res.Plan.Details.(*wan.PlanDetails)
	if d.Sampler != wan.SamplerUniPC || !p.CFG || p.ForwardsPerStep != 2 || p.GuidanceScale != 5 || p.Steps != 4 ||
		d.NegativePrompt != wan.NegativePromptEN || len(p.VideoSigmas) != 5 || p.VideoSigmas[4] != 0 || res.Seed != 1024 {
		t.Fatalf("plan %+v %+v", p, d)
	}
	want := ref.unipc("a red fox", wan.NegativePromptEN, 5, 4, 1024)
	if !testutil.SameBits(res.Latents.Video, want) {
		t.Fatal("UniPC+CFG latents differ from the hand-written loop")
	}
	blurry := req
	blurry.NegativePrompt = "blurry"
	other := fvtest.LatentsOnly(t, g, blurry).Latents.Video
	if testutil.SameBits(other, want) {
		t.Error("the negative prompt does not change the result")
	}
	if !testutil.SameBits(other, ref.unipc("a red fox", "blurry", 5, 4, 1024)) {
		t.Error("a request's negative prompt is not the one the unconditional forward sees")
	}
	noGuidance := req
	noGuidance.GuidanceScale = 1
	noCFG := fvtest.LatentsOnly(t, g, noGuidance)
	if noCFG.Plan.CFG || noCFG.Plan.ForwardsPerStep != 1 || noCFG.Plan.Details.(*wan.PlanDetails).NegativePrompt != "" ||
		testutil.SameBits(noCFG.Latents.Video, want) {
		t.Errorf("guidance 1: plan %+v", noCFG.Plan)
	}
}

// TestWanDMD: the default preset runs the FastWan ladder (1000, 757, 522 on the shift-8 grid), one
// forward per rung, re-noising with the continuation of the seed's noise stream or the request's
// RenoiseNoise; the warped ladder feeds the shift-3 grid's timesteps and gives another result. Each
// is bit for bit the hand-written ladder.
func TestWanDMD(t *testing.T) {
	g, ref := fvtest.Open(t, wan.TinyName), newReference(t)
	res := fvtest.LatentsOnly(t, g, fastvideo.Request{Prompt: "a red fox"})
	p, d := res.Plan, res.Plan.Details.(*wan.PlanDetails)
	n := latentC * latentT * latentH * latentW
	eq := func(label string, got []float32, want ...float32) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s = %v, want %v", label, got, want)
		}
	}
	eq("timesteps", p.VideoTimesteps, 1000, 757, 522)
	eq("sigmas", p.VideoSigmas, 1, 0.75675672, 0.52173913)
	if d.Sampler != wan.SamplerDMD || d.WarpDenoisingSteps || d.RenoiseNoiseLen() != 2*n || p.VideoNoiseLen() != n || res.Seed != 1024 {
		t.Fatalf("plan %+v %+v", p, d)
	}
	raw := ref.dmd("a red fox", false, 1024, nil)
	if !testutil.SameBits(res.Latents.Video, raw) {
		t.Fatal("DMD latents differ from the hand-written ladder")
	}

	renoise := fastvideo.GaussianNoise(5, fastvideo.VideoNoise, 2*n)
	injected := fvtest.LatentsOnly(t, g, fastvideo.Request{Prompt: "a red fox", Options: &wan.Options{RenoiseNoise: renoise}})
	if want := ref.dmd("a red fox", false, 1024, renoise); !testutil.SameBits(injected.Latents.Video, want) || testutil.SameBits(want, raw) {
		t.Error("DMD latents with the request's re-noise differ from the hand-written ladder's, or equal the seed's")
	}

	warped := fvtest.LatentsOnly(t, g, fastvideo.Request{Prompt: "a red fox", Options: &wan.Options{WarpDenoisingSteps: fastvideo.Ptr(true)}})
	ladder, err := schedule.NewWarpedDMDLadder(schedule.FastWanDMDSteps, schedule.Wan21T2V480PShift)
	if err != nil {
		t.Fatal(err)
	}
	eq("warped timesteps", warped.Plan.VideoTimesteps, ladder.WarpedTimesteps...)
	if !warped.Plan.Details.(*wan.PlanDetails).WarpDenoisingSteps || testutil.SameBits(warped.Latents.Video, raw) {
		t.Errorf("warped plan %+v", warped.Plan)
	}
	if !testutil.SameBits(warped.Latents.Video, ref.dmd("a red fox", true, 1024, nil)) {
		t.Error("warped DMD latents differ from the hand-written warped ladder")
	}
}
