package wan_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	wandit "fastvideo/dit/wan"
	"fastvideo/fastvideo"
	"fastvideo/fastvideo/fvtest"
	"fastvideo/fastvideo/wan"
	"fastvideo/internal/testutil"
	"fastvideo/schedule"
)

// forwardAt is the DiT's velocity for latent x [16][t][h][w] at timestep ts.
func (r *reference) forwardAt(x []float32, t, h, w int, ts float32, text *wandit.TextState) []float32 {
	r.t.Helper()
	v, err := r.dit.Forward(wandit.ForwardInputs{Latent: x, Frames: t, Height: h, Width: w, Timesteps: []float32{ts}, TextState: text})
	if err != nil {
		r.t.Fatal(err)
	}
	return v
}

// ladder runs the raw DMD rungs on x at the grid [16][t][h][w], re-noising from renoise.
func (r *reference) ladder(x []float32, rungs []int, t, h, w int, text *wandit.TextState, renoise []float32) {
	r.t.Helper()
	d, err := schedule.NewDMDLadder(rungs)
	if err != nil {
		r.t.Fatal(err)
	}
	n := len(x)
	for k, ts := range rungs {
		if err := d.PredictX0(k, r.forwardAt(x, t, h, w, float32(ts), text), x, x); err != nil {
			r.t.Fatal(err)
		}
		if k+1 < len(rungs) {
			if err := d.Renoise(k, x, renoise[k*n:(k+1)*n], x); err != nil {
				r.t.Fatal(err)
			}
		}
	}
}

// TestWanRefine: two-stage refine on tiny-wan's DMD preset at 64x64 is, bit for bit, the
// hand-written recipe: the 3 rungs at 32x32 from the seed's video stream, the bilinear upsample of
// the clean latents, the re-noise to σ(757) from the seed+1 refine stream, the rungs 757, 522 at
// 64x64 re-noised from the seed+2 stream. Step events number the 5 forwards and name the stages,
// the timings carry the phases, the decoded video is 64x64; after plain runs at 32x32 and 64x64 refine
// compiles nothing (each stage's shape compiles once, as a plain run of its size), warm or not.
func TestWanRefine(t *testing.T) {
	g, ref := fvtest.Open(t, wan.TinyName), newReference(t)
	// The plain runs at the two stages' sizes compile every program refine needs: its stage 1 is a
	// 32x32 forward, its stage 2 a 64x64 one, and the hand-off runs on the host.
	fvtest.LatentsOnly(t, g, fastvideo.Request{Prompt: "a red fox", Height: 32, Width: 32})
	plain, err := g.Generate(context.Background(), fastvideo.Request{Prompt: "a red fox", Height: 64, Width: 64, SkipSave: true, ReturnFrames: true})
	if err != nil {
		t.Fatal(err)
	}
	if plain.CompiledPrograms == 0 {
		t.Fatal("the plain 64x64 run compiled nothing: the counter does not count")
	}
	var steps []string
	req := fastvideo.Request{Prompt: "a red fox", Height: 64, Width: 64, Refine: true, Progress: func(e fastvideo.Event) {
		if e.Kind == fastvideo.DenoiseStep {
			steps = append(steps, fmt.Sprintf("%d/%d %s", e.Step, e.Steps, e.Message))
		}
	}}
	res := fvtest.LatentsOnly(t, g, req)
	if res.CompiledPrograms != 0 {
		t.Errorf("refine compiled %d programs beyond the plain runs at its stage sizes", res.CompiledPrograms)
	}
	if want := "[1/5 refine stage 1 (32x32) 2/5 refine stage 1 (32x32) 3/5 refine stage 1 (32x32) 4/5 refine stage 2 (64x64) 5/5 refine stage 2 (64x64)]"; fmt.Sprint(steps) != want {
		t.Errorf("step events %v, want %s", steps, want)
	}
	for _, ph := range []string{"refine_stage1", "refine_handoff", "refine_stage2"} {
		found := false
		for _, st := range res.Timings.Phases {
			found = found || string(st.Stage) == ph
		}
		if !found {
			t.Errorf("no %s phase in %+v", ph, res.Timings.Phases)
		}
	}
	d := res.Plan.Details.(*wan.PlanDetails)
	if d.Refine == nil || fmt.Sprint(res.Latents.VideoShape) != "[16 3 8 8]" || res.Plan.Steps != 5 {
		t.Fatalf("plan %+v, latents %v", d.Refine, res.Latents.VideoShape)
	}

	cond := ref.embed("a red fox")
	n1, n2 := 16*3*4*4, 16*3*8*8
	stream := fastvideo.GaussianNoise(1024, fastvideo.VideoNoise, 3*n1)
	x := append([]float32(nil), stream[:n1]...)
	ref.ladder(x, schedule.FastWanDMDSteps, 3, 4, 4, cond, stream[n1:])
	up, err := wan.UpsampleLatents(x, 16, 3, 4, 4, 2, wan.RefineBilinear)
	if err != nil {
		t.Fatal(err)
	}
	sigma := float64(float32(0.75675672))
	if err := wan.RefineHandoff(up, fastvideo.GaussianNoise(1025, fastvideo.RefineNoise, n2), sigma); err != nil {
		t.Fatal(err)
	}
	ref.ladder(up, []int{757, 522}, 3, 8, 8, cond, fastvideo.GaussianNoise(1026, fastvideo.RefineNoise, n2))
	if !testutil.SameBits(res.Latents.Video, up) {
		t.Fatal("refine latents differ from the hand-written two-stage recipe")
	}

	// Refine wins over the spatial fast mode: the same latents, and the note in Result.Warnings.
	both := req
	both.Progress, both.FastSpatial = nil, true
	won := fvtest.LatentsOnly(t, g, both)
	if !testutil.SameBits(won.Latents.Video, up) || len(won.Warnings) != 1 || !strings.Contains(won.Warnings[0], "refine wins") {
		t.Errorf("refine + fast spatial: same latents %v, warnings %q", testutil.SameBits(won.Latents.Video, up), won.Warnings)
	}

	req.Progress, req.SkipSave, req.ReturnFrames = nil, true, true
	for _, call := range []string{"decoded", "warm"} {
		out, err := g.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if out.Width != 64 || out.Height != 64 || len(out.Frames) != 9 || len(out.Frames[0]) != 64*64*3 || out.CompiledPrograms != 0 {
			t.Fatalf("%s refine call: %dx%d, %d frames, %d programs compiled", call, out.Width, out.Height, len(out.Frames), out.CompiledPrograms)
		}
	}
	// With the temporal fast mode both stages run on the shortened clip (17 frames from 9), then RIFE.
	fast := req
	fast.Fast, fast.NumFrames = true, 17
	out, err := g.Generate(context.Background(), fast)
	if err != nil {
		t.Fatal(err)
	}
	rf := out.Plan.Details.(*wan.PlanDetails).Refine
	if len(out.Frames) != 17 || out.Width != 64 || rf == nil || rf.Stage1Latent[1] != 3 || rf.Stage2Latent[1] != 3 {
		t.Errorf("refine + fast: %d frames at %dx%d, refine %+v", len(out.Frames), out.Width, out.Height, rf)
	}
}
