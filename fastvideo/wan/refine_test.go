package wan

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"fastvideo/fastvideo/api"
	"fastvideo/schedule"
)

// refineFixture is testdata/wan_refine.json, made by testdata/gen_refine.py from upstream's
// fastvideo/mlx_runtime/refine.py and sampling.py.
type refineFixture struct {
	Upsample []struct {
		Name string
		upsampleGeometry
		In, Out, Torch        []float32
		MaxAbsTorchVsUpstream float64 `json:"max_abs_torch_vs_upstream"`
	}
	SigmaFor map[string]float64 `json:"sigma_for"`
	Grids    []struct {
		Stage1, Stage2 []int
		Sigma          float64
	}
	NoRefineStepsError string `json:"no_refine_steps_error"`
	Handoff            []struct {
		Sigma    float64
		AddNoise bool `json:"add_noise"`
		upsampleGeometry
		Clean, Noise, Out []float32
	}
	Plans []struct {
		Args map[string]any
		Plan *struct {
			Stage1, Target, Stage1Latent, Stage2Latent []int
			Scale, LatentFrames                        int
		}
		Error string
	}
}

// upsampleGeometry is how a fixture case upsamples its latents: Shape [B, C, T, H, W], Scale, Mode.
type upsampleGeometry struct {
	Mode  string
	Scale int
	Shape []int
}

// upsample is UpsampleLatents of x with the case's geometry; an error fails the test.
func (g upsampleGeometry) upsample(t *testing.T, x []float32) []float32 {
	t.Helper()
	s := g.Shape
	out, err := UpsampleLatents(x, s[0]*s[1], s[2], s[3], s[4], g.Scale, g.Mode)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The JSON fields of the plan rows in snake case.
func (f *refineFixture) UnmarshalJSON(b []byte) error {
	type plain refineFixture
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	var raw struct {
		Plans []struct {
			Plan *struct {
				Stage1LatentSnake []int `json:"stage1_latent"`
				Stage2LatentSnake []int `json:"stage2_latent"`
				LatentFrames      int   `json:"latent_frames"`
			}
		}
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	for i, r := range raw.Plans {
		if r.Plan != nil && p.Plans[i].Plan != nil {
			p.Plans[i].Plan.Stage1Latent, p.Plans[i].Plan.Stage2Latent = r.Plan.Stage1LatentSnake, r.Plan.Stage2LatentSnake
			p.Plans[i].Plan.LatentFrames = r.Plan.LatentFrames
		}
	}
	*f = refineFixture(p)
	return nil
}

func loadRefineFixture(t *testing.T) *refineFixture {
	t.Helper()
	b, err := os.ReadFile("testdata/wan_refine.json")
	if err != nil {
		t.Fatal(err)
	}
	var f refineFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Upsample) == 0 || len(f.Handoff) == 0 || len(f.Plans) == 0 {
		t.Fatal("empty fixture")
	}
	return &f
}

// TestRefineUpsampleMatchesUpstream: UpsampleLatents equals upstream's upsample_latents_spatial
// (its NumPy float32 path) bit for bit, and torch's F.interpolate (bilinear align_corners=False,
// nearest) within float32 rounding, on odd sizes and scales 2 and 3; the fastmetal test vector.
func TestRefineUpsampleMatchesUpstream(t *testing.T) {
	f := loadRefineFixture(t)
	for _, c := range f.Upsample {
		got := c.upsample(t, c.In)
		if len(got) != len(c.Out) {
			t.Fatalf("%s %s: %d values, want %d", c.Name, c.Mode, len(got), len(c.Out))
		}
		worst := 0.0
		for i := range got {
			if got[i] != c.Out[i] {
				t.Fatalf("%s %s: value %d = %v, upstream %v", c.Name, c.Mode, i, got[i], c.Out[i])
			}
			worst = max(worst, math.Abs(float64(got[i]-c.Torch[i])))
		}
		if worst > 1e-6 {
			t.Errorf("%s %s: %g from torch's F.interpolate", c.Name, c.Mode, worst)
		}
	}
	vec, err := UpsampleLatents([]float32{0, 1, 2, 3}, 1, 1, 2, 2, 2, RefineBilinear)
	if err != nil {
		t.Fatal(err)
	}
	if want := "[0 0.25 0.75 1 0.5 0.75 1.25 1.5 1.5 1.75 2.25 2.5 2 2.25 2.75 3]"; fmt.Sprint(vec) != want {
		t.Errorf("test vector %v, want %s", vec, want)
	}
	if _, err := UpsampleLatents(vec, 1, 1, 4, 4, 2, "cubic"); err == nil || err.Error() != "Unsupported upsample mode: cubic" {
		t.Errorf("cubic: %v", err)
	}
}

// TestRefineHandoffMatchesUpstream: upsample then x = (1−σ)·up + σ·ε equals prepare_refine_latents
// with the same noise bit for bit; noise off or σ = 0 hands the clean upsample on.
func TestRefineHandoffMatchesUpstream(t *testing.T) {
	f := loadRefineFixture(t)
	for _, c := range f.Handoff {
		up := c.upsample(t, c.Clean)
		if c.AddNoise && c.Sigma > 0 {
			if err := RefineHandoff(up, c.Noise, c.Sigma); err != nil {
				t.Fatal(err)
			}
		}
		for i := range up {
			if up[i] != c.Out[i] {
				t.Fatalf("σ %g %s x%d noise %v: value %d = %v, upstream %v", c.Sigma, c.Mode, c.Scale, c.AddNoise, i, up[i], c.Out[i])
			}
		}
	}
}

// TestRefineSigmaGrid: the DMD ladder's sigma lookup (nearest timestep on the full shift-8
// FlowMatchEulerDiscrete table) is upstream's MLXDMDSchedule.sigma_for, the derived stage-2 grid is
// default_refine_timesteps (1000, 757, 522 -> 757, 522; σ_h 0.7568, printed by the MLX CLI), and a
// grid left empty is refused with upstream's message.
func TestRefineSigmaGrid(t *testing.T) {
	f := loadRefineFixture(t)
	for ts, want := range f.SigmaFor {
		var n int
		fmt.Sscan(ts, &n)
		l, err := schedule.NewDMDLadder([]int{n})
		if err != nil {
			t.Fatal(err)
		}
		if l.Sigmas[0] != float32(want) {
			t.Errorf("sigma(%d) = %v, upstream %v", n, l.Sigmas[0], want)
		}
	}
	for _, g := range f.Grids {
		l, err := schedule.NewDMDLadder(g.Stage1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := defaultRefineSteps(g.Stage1, l.Sigmas)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(g.Stage2) {
			t.Fatalf("%v -> %v (%v), upstream %v", g.Stage1, got, err, g.Stage2)
		}
		l2, _ := schedule.NewDMDLadder(got)
		if l2.Sigmas[0] != float32(g.Sigma) {
			t.Errorf("σ_h of %v = %v, upstream %v", got, l2.Sigmas[0], g.Sigma)
		}
	}
	if got := fmt.Sprintf("%.4f", f.Grids[0].Sigma); got != "0.7568" {
		t.Errorf("σ_h of 757, 522 prints %s", got)
	}
	_, err := defaultRefineSteps([]int{1000}, []float32{1})
	// Upstream prints its float grid ([1000.0]); ours is integers.
	if want := strings.Replace(f.NoRefineStepsError, "[1000.0]", "[1000]", 1); err == nil || err.Error() != want {
		t.Errorf("all at σ 1: %v, want %q", err, want)
	}
}

// TestPlanRefineResolutions: every row of upstream's plan_refine_resolutions table, geometry or
// message, in upstream's words.
func TestPlanRefineResolutions(t *testing.T) {
	f := loadRefineFixture(t)
	for _, row := range f.Plans {
		a := row.Args
		num := func(k string, def int) int {
			if v, ok := a[k]; ok {
				return int(v.(float64))
			}
			return def
		}
		patch := [3]int{1, 2, 2}
		if v, ok := a["patch_size"]; ok {
			for i, x := range v.([]any) {
				patch[i] = int(x.(float64))
			}
		}
		enabled, label := true, "Refine"
		if v, ok := a["enabled"]; ok {
			enabled = v.(bool)
		}
		if v, ok := a["mode_label"]; ok {
			label = v.(string)
		}
		p, err := planRefineResolutions(num("height", 0), num("width", 0), num("num_frames", 0), num("spatial_scale", 2),
			num("vae_spatial_compression", 8), num("vae_temporal_compression", 4), patch, enabled, label)
		switch {
		case row.Error != "":
			if err == nil || err.Error() != row.Error {
				t.Errorf("%v: %v, upstream %q", a, err, row.Error)
			}
		case err != nil:
			t.Errorf("%v: %v, upstream plans %+v", a, err, row.Plan)
		default:
			w := row.Plan
			got := fmt.Sprint([]int{p.Stage1Height, p.Stage1Width}, []int{p.TargetHeight, p.TargetWidth}, p.Scale, p.LatentFrames,
				p.Stage1Latent[:], p.Stage2Latent[:])
			if want := fmt.Sprint(w.Stage1, w.Target, w.Scale, w.LatentFrames, w.Stage1Latent, w.Stage2Latent); got != want {
				t.Errorf("%v: %s, upstream %s", a, got, want)
			}
		}
	}
}

// TestRefinePlan: refine on the DMD models plans both stages (sizes, latents, ladders, σ_h) and the
// requests upstream refuses are refused, each on its field with upstream's words.
func TestRefinePlan(t *testing.T) {
	p, d := mustPlan(t, "fastwan2.1-t2v-1.3b", api.Request{Refine: true, NumFrames: 81, Height: 480, Width: 832}, api.DTypeAuto)
	rf := d.Refine
	if rf == nil || rf.Scale != 2 || rf.Stage1Height != 240 || rf.Stage1Width != 416 || fmt.Sprint(rf.Stage1Latent) != "[16 21 30 52]" ||
		fmt.Sprint(rf.Stage2Latent) != "[16 21 60 104]" || fmt.Sprint(rf.Stage2Steps) != "[757 522]" || rf.Stage2StepsGiven ||
		fmt.Sprintf("%.4f", rf.Sigma) != "0.7568" || !rf.AddNoise || rf.Upsample != "bilinear" || rf.HandoffSeed != p.Seed+1 || rf.Stage2Seed != p.Seed+2 {
		t.Fatalf("refine plan %+v", rf)
	}
	if p.Steps != 5 || fmt.Sprint(p.VideoTimesteps) != "[1000 757 522 757 522]" || fmt.Sprint(p.LatentShape) != "[16 21 60 104]" ||
		p.CanvasHeight != 480 || d.RenoiseNoiseLen() != 0 || !(d.FullDiTTFLOPsTotal > p.DiTTFLOPsTotal) {
		t.Fatalf("plan %+v", p)
	}
	checkTable(t, p, "stage 1 at 240x416", "stage 2 rungs [757 522]", "hand-off sigma 0.7568", "stage-1 weight 0.2432")
	// Refine wins over the spatial fast mode, with a note; with the temporal mode both stages run on
	// the shortened clip; a given grid, sigma and mode are used.
	_, d = mustPlan(t, TinyName, api.Request{Refine: true, FastSpatial: true, Upsample: "cubic", Height: 64, Width: 64}, api.DTypeAuto)
	if d.FastSpatial != nil || d.Refine == nil || len(d.Refine.Warnings) != 1 || !strings.Contains(d.Refine.Warnings[0], "refine wins") {
		t.Errorf("refine + fast spatial: %+v %+v", d.FastSpatial, d.Refine)
	}
	p, d = mustPlan(t, "fastwan2.1-t2v-1.3b", api.Request{Refine: true, Fast: true, NumFrames: 81}, api.DTypeAuto)
	if d.FastTemporal == nil || d.Refine.Stage1Latent[1] != 11 || d.Refine.Stage2Latent[1] != 11 || p.NumFrames != 81 {
		t.Errorf("refine + fast: %+v %+v", d.FastTemporal, d.Refine)
	}
	_, d = mustPlan(t, TinyName, api.Request{Refine: true, Height: 96, Width: 96, RefineScale: 3, RefineSteps: []int{522},
		RefineSigma: api.Ptr(0.6), RefineUpsample: "nearest"}, api.DTypeAuto)
	if rf := d.Refine; rf.Stage1Height != 32 || fmt.Sprint(rf.Stage2Steps) != "[522]" || !rf.Stage2StepsGiven || rf.Sigma != 0.6 ||
		fmt.Sprintf("%.4f", rf.GridSigma) != "0.5217" || rf.Upsample != "nearest" || len(rf.Warnings) != 1 || !strings.Contains(rf.Warnings[0], "no longer matches") {
		t.Errorf("explicit knobs: %+v", rf)
	}
	_, d = mustPlan(t, TinyName, api.Request{Refine: true, Height: 64, Width: 64, RefineSteps: []int{1000, 522}, RefineAddNoise: api.Ptr(false)}, api.DTypeAuto)
	if rf := d.Refine; rf.Sigma != 1 || rf.AddNoise {
		t.Errorf("σ 1 without noise: %+v", rf)
	}
	_, d = mustPlan(t, "fastwan2.2-ti2v-5b", api.Request{Refine: true, NumFrames: 5, Options: &Options{WarpDenoisingSteps: api.Ptr(true)}}, api.DTypeAuto)
	if rf := d.Refine; fmt.Sprint(rf.Stage2Steps) != "[757 522]" || rf.Stage2Timesteps[0] == 757 || fmt.Sprint(rf.Stage1Latent[2:]) != "[22 40]" {
		t.Errorf("warped 5B: %+v", rf)
	}

	checkPlanErrors(t, []planErrorCase{
		{"UniPC", "wan2.1-t2v-1.3b", api.Request{Refine: true}, "refine", "refine currently requires a DMD model"},
		{"tiny UniPC", TinyName, api.Request{Refine: true, Preset: "tiny_wan_t2v", Height: 64, Width: 64}, "refine", "FastWan2.1-T2V-1.3B"},
		{"scale 1", TinyName, api.Request{Refine: true, RefineScale: 1, Height: 64, Width: 64}, "refine_scale", "Refine scale must be >= 2"},
		{"scale off the size", "fastwan2.1-t2v-1.3b", api.Request{Refine: true, RefineScale: 3}, "refine_scale",
			"Refine requires height/width divisible by spatial_scale=3 (got 448x832)."},
		{"stage 1 off the VAE", TinyName, api.Request{Refine: true, RefineScale: 4, Height: 48, Width: 64}, "refine_scale",
			"Refine requires height/width divisible by 32 (got 48x64, vae_spatial=8)."},
		{"stage 1 off the patch", TinyName, api.Request{Refine: true}, "refine_scale",
			"Refine stage1 latent grid 3x4 is not divisible by patch spatial size 2x2."},
		{"sigma range", TinyName, api.Request{Refine: true, Height: 64, Width: 64, RefineSigma: api.Ptr(1.5)}, "refine_sigma", "sigma must be in [0, 1], got 1.5"},
		{"sigma NaN", TinyName, api.Request{Refine: true, Height: 64, Width: 64, RefineSigma: api.Ptr(math.NaN())}, "refine_sigma", "[0, 1]"},
		{"sigma 1 with noise", TinyName, api.Request{Refine: true, Height: 64, Width: 64, RefineSigma: api.Ptr(1.0)}, "refine_sigma",
			"Refine hand-off sigma=1.0000 (from stage-2 timestep 757) discards the stage-1 result entirely"},
		{"grid at full noise", TinyName, api.Request{Refine: true, Height: 64, Width: 64, RefineSteps: []int{1000, 522}}, "refine_steps",
			"Refine hand-off sigma=1.0000 (from stage-2 timestep 1000)"},
		{"empty grid", TinyName, api.Request{Refine: true, Height: 64, Width: 64, RefineSteps: []int{}}, "refine_steps", "must be non-empty"},
		{"bad grid", TinyName, api.Request{Refine: true, Height: 64, Width: 64, RefineSteps: []int{522, 757}}, "refine_steps", "strictly decreasing"},
		{"mode", TinyName, api.Request{Refine: true, Height: 64, Width: 64, RefineUpsample: "cubic"}, "refine_upsample", "bilinear (the default) or nearest"},
		{"knob alone", TinyName, api.Request{RefineScale: 2}, "refine_scale", "unset unless refine is on"},
		{"noise knob alone", TinyName, api.Request{RefineAddNoise: api.Ptr(true)}, "refine_add_noise", "unset unless refine is on"},
		{"renoise", TinyName, api.Request{Refine: true, Height: 64, Width: 64, Options: &Options{RenoiseNoise: []float32{1}}}, "renoise_noise", "nil with refine"},
		{"video noise", TinyName, api.Request{Refine: true, Height: 64, Width: 64, VideoNoise: []float32{1}}, "video_noise", "nil with refine"},
		{"spatial scale", TinyName, api.Request{Refine: true, FastSpatial: true, FastSpatialScale: 1, Height: 64, Width: 64}, "fast_spatial_scale", ">= 2"},
	})
}

// FuzzRefinePlan: whatever the refine knobs and sizes, planning returns (no panic) and every
// rejection is a *RequestError.
func FuzzRefinePlan(f *testing.F) {
	f.Add(64, 64, 9, 2, 757, 522, 0.5, true, false, uint8(0))
	f.Add(48, 64, 9, 0, 0, 0, -1.0, false, true, uint8(1))
	f.Add(448, 832, 81, 1<<62, 1000, 1000, math.NaN(), true, true, uint8(2))
	f.Add(-16, 1<<40, -3, -2, -757, 1<<40, math.Inf(1), false, false, uint8(3))
	models := []string{TinyName, "fastwan2.1-t2v-1.3b", "fastwan2.2-ti2v-5b", "wan2.1-t2v-1.3b"}
	f.Fuzz(func(t *testing.T, h, w, frames, scale, s1, s2 int, sigma float64, noise, fast bool, model uint8) {
		req := api.Request{Refine: true, Height: h, Width: w, NumFrames: frames, RefineScale: scale, Fast: fast,
			RefineAddNoise: &noise, RefineUpsample: RefineNearest}
		if s1 != 0 {
			req.RefineSteps = []int{s1, s2}
		}
		if sigma >= 0 {
			req.RefineSigma = &sigma
		}
		s := builtin(t, models[int(model)%len(models)])
		_, _, err := plan(t, s, req, api.DTypeAuto)
		var re *api.RequestError
		if err != nil && !errors.As(err, &re) {
			t.Fatalf("%+v: %v is not a *family.RequestError", req, err)
		}
	})
}
