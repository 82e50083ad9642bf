package h3

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/attention"
	h3dit "fastvideo/dit/h3"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/internal/testutil"
	"fastvideo/quant"
)

// resolve resolves req against a built-in model or, for a path, the folder's model; needPrompt is
// Validate's rule (the prompt is required), false Plan's.
func resolve(t *testing.T, model string, req api.Request, needPrompt bool) (family.Resolution, error) {
	t.Helper()
	m, err := lookup(t, model)
	if err != nil {
		t.Fatalf("model %s: %v", model, err)
	}
	return m.Resolve(req, needPrompt)
}

// lookup is a built-in model or, for a path, the folder's model.
func lookup(t *testing.T, model string) (family.Model, error) {
	t.Helper()
	if m, ok := (Family{}).Lookup(model); ok {
		return m, nil
	}
	return Family{}.ReadFolder(model)
}

// plan is the package-level Plan of fastvideo for an H3 model: the request resolved without a
// prompt and planned at dtype.
func plan(t *testing.T, model string, req api.Request, dtype api.DType) (*api.Plan, *PlanDetails, error) {
	t.Helper()
	m, err := lookup(t, model)
	if err != nil {
		return nil, nil, err
	}
	return family.PlanModel[*PlanDetails](m, req, dtype)
}

// mustPlan is plan for a request that must be valid.
func mustPlan(t *testing.T, model string, req api.Request) (*api.Plan, *PlanDetails) {
	t.Helper()
	p, d, err := plan(t, model, req, api.DTypeAuto)
	if err != nil {
		t.Fatal(err)
	}
	return p, d
}

// TestPlanWorkedExample is the worked example of FastVideo's MiniMax-H3 packing (480x832, 124
// frames, a 93-token prompt: 14,937 rows) with FastH3's 4-step ladders.
func TestPlanWorkedExample(t *testing.T) {
	p, d := mustPlan(t, "fasth3", api.Request{Height: 480, Width: 832, NumFrames: 124, FPS: 24, NumInferenceSteps: 4, PromptTokens: 93})
	if p.CanvasHeight != 480 || p.CanvasWidth != 832 || p.NumFrames != 124 || p.VideoLatentFrames != 37 ||
		d.AudioLatentFrames != 207 || p.LatentHeight != 30 || p.LatentWidth != 52 || p.LatentChannels != 24 {
		t.Fatalf("geometry %+v %+v", p, d)
	}
	want := RowCounts{Text: 93, ConditionVideo: 0, Audio: 414, Video: 14430, Total: 14937}
	if d.Rows != want {
		t.Fatalf("rows %+v, want %+v", d.Rows, want)
	}
	if d.Rows.Total-d.Rows.Text != 14844 {
		t.Errorf("non-text rows %d, want 14844", d.Rows.Total-d.Rows.Text)
	}
	if d.AudioSamples != 165600 || p.DurationSeconds != 124.0/24 {
		t.Errorf("audio samples %d, duration %v", d.AudioSamples, p.DurationSeconds)
	}
	eq := func(label string, got []float32, want ...float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s = %v, want %v", label, got, want)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s = %v, want %v", label, got, want)
			}
		}
	}
	eq("video sigmas", p.VideoSigmas, 1, 0.9729729890823364, 0.9230769276618958, 0.800000011920929, 0)
	eq("audio sigmas", d.AudioSigmas, 1, 0.8999999761581421, 0.75, 0.5, 0)
	eq("adaln timesteps", d.AdaLNTimesteps, 0, 0.027027010917663574, 0.07692307233810425, 0.10000002384185791,
		0.19999998807907104, 0.25, 0.5)
	if p.Preset != "fasth3_t2va" || p.Steps != 4 || p.Seed != 0 {
		t.Errorf("preset %q steps %d seed %d", p.Preset, p.Steps, p.Seed)
	}
}

// TestDiTComputeFloor: upstream quotes a compute floor of 1.13 s at 790 TFLOP/s for 14,937 rows.
func TestDiTComputeFloor(t *testing.T) {
	p, d := mustPlan(t, "h3", api.Request{Height: 480, Width: 832, NumFrames: 124, PromptTokens: 93})
	if d.Rows.Total != 14937 || p.Steps != 49 {
		t.Fatalf("rows %d steps %d", d.Rows.Total, p.Steps)
	}
	sec := p.DiTTFLOPsPerStep / 790
	t.Logf("h3 forward at L=14937: %.1f TFLOP, %.4f s at 790 TFLOP/s", p.DiTTFLOPsPerStep, sec)
	if math.Abs(sec-1.13) > 0.005 {
		t.Errorf("compute floor %.4f s, want 1.13 s", sec)
	}
	// Step 0 has one distinct timestep (both ladders start at t=0), later
	// steps two: the total is slightly below steps x the per-step maximum.
	if p.DiTTFLOPsTotal > 49*p.DiTTFLOPsPerStep || p.DiTTFLOPsTotal < 48.9*p.DiTTFLOPsPerStep {
		t.Errorf("total %.1f vs per step %.1f", p.DiTTFLOPsTotal, p.DiTTFLOPsPerStep)
	}
	// FastH3's VSA gate adds one 5376x7168 GEMM per block: 2*L*H*I*50.
	f, _ := mustPlan(t, "fasth3", api.Request{Height: 480, Width: 832, NumFrames: 124, PromptTokens: 93})
	gate := 2 * 14937.0 * 5376 * 7168 * 50 / 1e12
	if math.Abs(f.DiTTFLOPsPerStep-p.DiTTFLOPsPerStep-gate) > 1e-6 {
		t.Errorf("fasth3 %.3f - h3 %.3f != gate %.3f TFLOP", f.DiTTFLOPsPerStep, p.DiTTFLOPsPerStep, gate)
	}
}

// TestDiTParamsAndBytes checks the released DiT's parameter count (MiniMaxAI/MiniMax-H3's
// transformer: 33,122,992,896 parameters, 17,222,144 of them in the FP32 boundary modules).
func TestDiTParamsAndBytes(t *testing.T) {
	rel := h3dit.ReleaseConfig()
	if n := ditParams(rel, false); n != 33122992896 {
		t.Errorf("H3 params %d, want 33,122,992,896", n)
	}
	if n := ditParams(rel, true) - ditParams(rel, false); n != 1926758400 {
		t.Errorf("VSA gates %d, want 1,926,758,400", n)
	}
	fp32, half := ditParamGroups(rel, false)
	b, err := familykit.WeightBytes(fp32, half, api.BF16)
	if err != nil {
		t.Fatal(err)
	}
	// 17,222,144 FP32 boundary params; the rest BF16: 61.73 GiB (the ~62 GiB release).
	if b != 2*33122992896+2*17222144 {
		t.Errorf("bf16 bytes %d", b)
	}
	if f32, _ := familykit.WeightBytes(fp32, half, api.F32); f32 != 4*33122992896 {
		t.Errorf("f32 bytes %d", f32)
	}
	if _, err := familykit.WeightBytes(fp32, half, "int3"); err == nil {
		t.Error("an unknown dtype must be rejected")
	}
	r16 := rel
	r16.AdaLNRank = 16
	if n := float64(ditParams(r16, false)) / 1e9; math.Abs(n-20.17) > 0.01 {
		t.Errorf("rank-16 params %.3fB, want ~20.17B", n)
	}
	p, _, err := plan(t, "h3", api.Request{}, api.F32)
	if err != nil || p.WeightsDType != "f32" || p.WeightsBytes != 4*33122992896 || p.DiTParams != 33122992896 {
		t.Errorf("plan weights %s %d params %d (%v)", p.WeightsDType, p.WeightsBytes, p.DiTParams, err)
	}
}

// TestPlanFastModes checks the geometry of the MLX runtime's --fast and --fast-spatial modes.
func TestPlanFastModes(t *testing.T) {
	p, d := mustPlan(t, "fasth3", api.Request{Fast: true, PromptTokens: 93})
	if p.NumFrames != 124 || p.VideoLatentFrames != 22 || d.AudioLatentFrames != 207 || d.Rows.Video != 22*390 ||
		d.FastTemporal == nil || d.FastTemporal.SourceFrames != 73 || d.FastTemporal.VideoTemporalScale != 1.7391304347826073 {
		t.Fatalf("temporal fast plan %+v %+v", p, d.FastTemporal)
	}
	p, d = mustPlan(t, "fasth3", api.Request{FastSpatial: true, PromptTokens: 93})
	if p.CanvasHeight != 256 || p.CanvasWidth != 416 || p.Height != 480 || p.Width != 832 || d.Rows.Video != 3848 ||
		d.FastSpatial.Stage1Height != 240 || d.FastSpatial.Stage1Width != 416 {
		t.Fatalf("spatial fast plan %+v %+v", p, d.FastSpatial)
	}
	_, d = mustPlan(t, "fasth3", api.Request{Fast: true, FastSpatial: true, PromptTokens: 93})
	if d.Rows.Video != 22*104 || d.Rows.Total != 93+414+22*104 {
		t.Fatalf("combined fast plan rows %+v", d.Rows)
	}
}

// TestPlanFastSaving: a fast plan's full-cost figure is the DiT cost of the same request without
// its fast modes, and the spatial plan lists its frame filter with upstream's defaults.
func TestPlanFastSaving(t *testing.T) {
	full, fd := mustPlan(t, "fasth3", api.Request{PromptTokens: 93})
	if fd.FullDiTTFLOPsTotal != 0 || len(full.FrameFilters) != 0 {
		t.Fatalf("a plan without fast modes has a saving (%g) or filters %q", fd.FullDiTTFLOPsTotal, full.FrameFilters)
	}
	for _, req := range []api.Request{
		{FastSpatial: true, PromptTokens: 93},
		{Fast: true, PromptTokens: 93},
		{Fast: true, FastSpatial: true, FastSpatialScale: 3, PromptTokens: 93},
	} {
		p, d := mustPlan(t, "fasth3", req)
		if d.FullDiTTFLOPsTotal != full.DiTTFLOPsTotal || !(p.DiTTFLOPsTotal < full.DiTTFLOPsTotal) {
			t.Errorf("%+v: %.1f TFLOP, full %.1f; want full = %.1f (the plain plan's) and more", req,
				p.DiTTFLOPsTotal, d.FullDiTTFLOPsTotal, full.DiTTFLOPsTotal)
		}
	}
	p, _ := mustPlan(t, "fasth3", api.Request{FastSpatial: true, PromptTokens: 93})
	if want := "center-crop 240x416, lanczos to 480x832, sharpen 0.4"; len(p.FrameFilters) != 1 || p.FrameFilters[0] != want {
		t.Errorf("filters %q, want [%q]", p.FrameFilters, want)
	}
	p, _ = mustPlan(t, "fasth3", api.Request{FastSpatial: true, Upsample: "nearest", Sharpen: api.Ptr(0.0), PromptTokens: 93})
	if want := "center-crop 240x416, nearest to 480x832"; len(p.FrameFilters) != 1 || p.FrameFilters[0] != want {
		t.Errorf("filters %q, want [%q]", p.FrameFilters, want)
	}
}

func TestRequestValidation(t *testing.T) {
	cases := []struct {
		name   string
		model  string
		req    api.Request
		field  string
		inMsg  string
		planOK bool // Plan accepts it (prompt not required)
	}{
		{"unknown preset", "fasth3", api.Request{Prompt: "x", Preset: "hd"}, "preset", "fasth3_t2va", false},
		{"height not /32", "fasth3", api.Request{Prompt: "x", Height: 481, Width: 832}, "height", "multiple of 32", false},
		{"width not /32", "fasth3", api.Request{Prompt: "x", Height: 480, Width: 840}, "width", "832 or 864", false},
		{"negative height", "fasth3", api.Request{Prompt: "x", Height: -480, Width: 832}, "height", "positive", false},
		{"height alone", "fasth3", api.Request{Prompt: "x", Height: 480}, "width", "together", false},
		{"too short", "fasth3", api.Request{Prompt: "x", NumFrames: 100}, "num_frames", "108 to 345", false},
		{"too long (362 on CUDA)", "fasth3", api.Request{Prompt: "x", NumFrames: 360}, "num_frames", "124..345", false},
		{"negative frames", "fasth3", api.Request{Prompt: "x", NumFrames: -5}, "num_frames", "124..345", false},
		{"fps", "fasth3", api.Request{Prompt: "x", FPS: 30}, "fps", "24", false},
		{"negative steps", "fasth3", api.Request{Prompt: "x", NumInferenceSteps: -1}, "num_inference_steps", "1 to 1000", false},
		{"guidance", "h3", api.Request{Prompt: "x", GuidanceScale: 5}, "guidance_scale", "1.0", false},
		{"negative prompt", "h3", api.Request{Prompt: "x", NegativePrompt: "blurry"}, "negative_prompt", "empty", false},
		{"no prompt", "h3", api.Request{}, "prompt", "non-empty", true},
		{"fast factor 1", "fasth3", api.Request{Prompt: "x", Fast: true, FastFactor: 1}, "fast_factor", ">= 2", false},
		{"fast factor without fast", "fasth3", api.Request{Prompt: "x", FastFactor: 3}, "fast_factor", "temporal fast mode", false},
		{"spatial scale 1", "fasth3", api.Request{Prompt: "x", FastSpatial: true, FastSpatialScale: 1}, "fast_spatial_scale", ">= 2", false},
		{"spatial on 32x32", TinyName, api.Request{Prompt: "x", Height: 32, Width: 32, FastSpatial: true}, "fast_spatial_scale", "smaller than 32x32", false},
		{"prompt tokens", "h3", api.Request{Prompt: "x", PromptTokens: -3}, "prompt_tokens", "token count", false},
		{"refine", "fasth3", api.Request{Prompt: "x", Refine: true}, "refine", "no MiniMax H3 variant", false},
		{"refine knob", TinyName, api.Request{Prompt: "x", RefineUpsample: "nearest"}, "refine_upsample", "FastWan2.1-T2V-1.3B", false},
		{"side above the toy's", TinyName, api.Request{Prompt: "x", Height: 4096, Width: 96}, "height", "up to 256", false},
		{"side above the release's", "h3", api.Request{Prompt: "x", Height: 320000, Width: 832}, "height", "up to 2048", false},
		{"frames beyond int32", "h3", api.Request{Prompt: "x", NumFrames: math.MaxInt}, "num_frames", "124..345", false},
		{"audio noise NaN", TinyName, api.Request{Prompt: "x", Options: &Options{AudioNoise: nanAt(2*32*37, 5)}}, "audio_noise", "finite", false},
		{"audio noise length", TinyName, api.Request{Prompt: "x", Options: &Options{AudioNoise: make([]float32, 4)}}, "audio_noise", "[2][32][37]", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := resolve(t, c.model, c.req, true)
			var re *api.RequestError
			if !errors.As(err, &re) {
				t.Fatalf("Validate: %v, want a *RequestError", err)
			}
			if re.Field != c.field || !strings.Contains(err.Error(), c.inMsg) {
				t.Fatalf("error %q (field %q), want field %q mentioning %q", err, re.Field, c.field, c.inMsg)
			}
			if !strings.Contains(err.Error(), fmt.Sprint(re.Value)) || re.Allowed == "" {
				t.Fatalf("error %q does not show the value and what is allowed", err)
			}
			_, _, perr := plan(t, c.model, c.req, api.DTypeAuto)
			if c.planOK != (perr == nil) {
				t.Fatalf("Plan error %v, want ok=%v", perr, c.planOK)
			}
		})
	}
	// The value is part of the message.
	_, err := resolve(t, "fasth3", api.Request{Prompt: "x", Height: 481, Width: 832}, true)
	if err == nil || !strings.Contains(err.Error(), "481") {
		t.Errorf("%v does not name the value", err)
	}
	// Valid requests, including the aligned-up 121 frames and the short toy model.
	for _, c := range []struct {
		model string
		req   api.Request
	}{
		{"fasth3", api.Request{Prompt: "x"}},
		{"fasth3", api.Request{Prompt: "x", Height: 768, Width: 1344, NumFrames: 121, Seed: api.Ptr[int64](7)}},
		{"h3", api.Request{Prompt: "x", NumFrames: 345, NumInferenceSteps: 4}},
		{TinyName, api.Request{Prompt: "x"}},
		{TinyName, api.Request{Prompt: "x", Options: &Options{AudioNoise: make([]float32, 2*32*37)}}},
	} {
		if _, err := resolve(t, c.model, c.req, true); err != nil {
			t.Errorf("%s %+v: %v", c.model, c.req, err)
		}
	}
}

// nanAt is n zeros with a NaN at index i.
func nanAt(n, i int) []float32 {
	v := make([]float32, n)
	v[i] = float32(math.NaN())
	return v
}

// TestPlanJSONNames: the H3 details join the common plan fields in one flat JSON object.
func TestPlanJSONNames(t *testing.T) {
	p, d := mustPlan(t, "fasth3", api.Request{Prompt: "A cat plays the piano."})
	m := testutil.JSONObject(t, p)
	for _, k := range []string{"canvas_height", "canvas_width", "num_frames", "video_latent_frames", "audio_latent_frames",
		"latent_height", "latent_width", "rows", "video_sigmas", "audio_sigmas", "dit_tflops_per_step", "weights_bytes",
		"family", "latent_shape", "forwards_per_step", "adaln_timesteps"} {
		if _, ok := m[k]; !ok {
			t.Errorf("plan JSON lacks %q", k)
		}
	}
	for _, k := range []string{"sampler", "token_grid", "tokens", "text_tokens"} {
		if _, ok := m[k]; ok {
			t.Errorf("H3 plan JSON has the Wan field %q", k)
		}
	}
	rows := m["rows"].(map[string]any)
	for _, k := range []string{"text", "condition_video", "audio", "video", "total"} {
		if _, ok := rows[k]; !ok {
			t.Errorf("rows lack %q", k)
		}
	}
	if !d.Rows.TextEstimated || d.Rows.Text != 6 {
		t.Errorf("estimated text rows %d (%v), want 6 estimated", d.Rows.Text, d.Rows.TextEstimated)
	}
	var sb strings.Builder
	if err := p.WriteTable(&sb); err != nil || !strings.Contains(sb.String(), "14850 total") {
		t.Errorf("table:\n%s", sb.String())
	}
	// The shared fields every family fills.
	if p.Family != FamilyName || fmt.Sprint(p.LatentShape) != "[24 37 30 52]" || p.ForwardsPerStep != 1 || p.CFG {
		t.Errorf("H3 plan shared fields: %+v", p)
	}
}

func TestReadFolder(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, _ := json.Marshal(tinyDiT())
	write("transformer/config.json", string(cfg))
	vae, _ := json.Marshal(tinyVideoVAE())
	write("vae/config.json", string(vae))
	write("audio_vae/config.json", `{"latent_channels": 32, "sampling_rate": 32000}`)
	write("scheduler/scheduler_config.json", `{"_class_name": "MiniMaxH3Scheduler", "shift": 12.0}`)

	if ok, err := (Family{}).Detect(dir); !ok || err != nil {
		t.Fatalf("Detect: %v, %v", ok, err)
	}
	read := func() *Spec {
		t.Helper()
		m, err := Family{}.ReadFolder(dir)
		if err != nil {
			t.Fatal(err)
		}
		return m.(*Spec)
	}
	m := read()
	if m.Variant != "h3" || m.DiT.HiddenSize != 128 || m.VideoShift != 12 || m.AudioShift != 3 || len(m.Notes) != 1 {
		t.Fatalf("spec %+v", m)
	}
	if p, _, err := plan(t, dir, api.Request{}, api.DTypeAuto); err != nil || p.Steps != 49 || p.DiTParams != ditParams(tinyDiT(), false) {
		t.Fatalf("plan %+v, %v", p, err)
	}

	// FastH3: gate weights in the index and a shift-declaring 8-step contract.
	write("audio_scheduler/scheduler_config.json", `{"shift": 3.0}`)
	write("transformer/diffusion_pytorch_model.safetensors.index.json",
		`{"weight_map": {"transformer_blocks.0.attn.to_gate_compress.weight": "a.safetensors"}}`)
	write("fastvideo_inference.json", `{"schema_version": "fasth3-inference-contract-v1", "video_scheduler_shift": 12.0,
		"audio_scheduler_shift": 3.0, "dmd_denoising_steps": [1000, 937, 875, 750, 625, 500, 375, 250],
		"transformer_forwards": 8, "num_inference_steps": 9}`)
	m = read()
	if m.Variant != "fasth3" || !m.VSAGates || len(m.DMDRungs) != 8 || m.presets[m.DefaultPreset].Steps != 8 {
		t.Fatalf("fasth3 spec %+v", m)
	}
	p, _, err := plan(t, dir, api.Request{}, api.DTypeAuto)
	if err != nil || p.Steps != 8 || len(p.VideoSigmas) != 9 {
		t.Fatalf("contract plan %+v, %v", p, err)
	}
	// A contract of 100k rungs is refused with a short message (it used to echo every rung).
	rungs := strings.TrimSuffix(strings.Repeat("999, ", 100000), ", ")
	contract := `{"schema_version": "fasth3-inference-contract-v1", "video_scheduler_shift": 12.0,
		"audio_scheduler_shift": 3.0, "dmd_denoising_steps": [` + rungs + `], "transformer_forwards": 100000, "num_inference_steps": 100001}`
	write("fastvideo_inference.json", contract)
	if _, err := (Family{}).ReadFolder(dir); err == nil || len(err.Error()) > 1000 || !strings.Contains(err.Error(), "100000 DMD rungs") {
		t.Fatalf("100k-rung contract: %.300v", err)
	}
	write("fastvideo_inference.json", `{"schema_version": "fasth3-inference-contract-v1", "video_scheduler_shift": 12.0,
		"audio_scheduler_shift": 3.0, "dmd_denoising_steps": [1000, 937, 875, 750, 625, 500, 375, 250],
		"transformer_forwards": 8, "num_inference_steps": 9}`)
	// A converted (quantized) transformer/ keeps its config in the quantization manifest, not in
	// config.json; the folder reader takes it from there like h3.Load does.
	if err := os.Remove(filepath.Join(dir, "transformer", "config.json")); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(tinyDiT())
	write("transformer/"+h3dit.ManifestFile, fmt.Sprintf(`{"format_version": %d, "config": %s}`, quant.FormatVersion, raw))
	if m := read(); !reflect.DeepEqual(m.DiT, tinyDiT()) {
		t.Fatalf("converted transformer/: %+v", m.DiT)
	}
	var re *api.RequestError
	if _, err := resolve(t, dir, api.Request{Prompt: "x", NumInferenceSteps: 4}, true); !errors.As(err, &re) || re.Field != "num_inference_steps" {
		t.Errorf("a 4-step request on an 8-rung contract: %v", err)
	}

	// A missing config is invalid input naming the file.
	if err := os.Remove(filepath.Join(dir, "vae", "config.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := (Family{}).ReadFolder(dir); !errors.As(err, &re) || re.Field != "model" ||
		!strings.Contains(err.Error(), filepath.Join("vae", "config.json")) {
		t.Errorf("missing vae config: %v", err)
	}
	wanLike := tinyVideoVAE()
	wanLike.LatentChannels, wanLike.SpatialDownsampleFactors = 16, []int{2, 2, 2, 1}
	wanLike.LatentsMean, wanLike.LatentsStd = make([]float64, 16), make([]float64, 16)
	vae, _ = json.Marshal(wanLike)
	write("vae/config.json", string(vae))
	if _, err := (Family{}).ReadFolder(dir); err == nil || !strings.Contains(err.Error(), "H3 geometry") {
		t.Errorf("a Wan-like VAE must be rejected: %v", err)
	}
}

// The FastH3 plan reports its VSA tiling: 832×480×124 with a 93-token prompt is 9 prefix + 280 video
// tiles at E=64 (28 kept at 0.9) and 3 + 80 at E=256 (on gathered tiles: the kernel takes 64); the
// base model runs dense. Without a request for VSA, FastH3 runs dense attention and says why where this
// build has no block-sparse kernel, and VSA through the kernel where it has one.
func TestPlanVSATiles(t *testing.T) {
	req := api.Request{Height: 480, Width: 832, NumFrames: 124, PromptTokens: 93}
	if _, d := mustPlan(t, "fasth3", req); attention.BlockSparseKernel() {
		if d.VSA == nil || d.VSA.FineStage != "triton" {
			t.Errorf("fasth3 by default in a build with the kernel: VSA %+v, want it through the kernel", d.VSA)
		}
	} else if d.VSA != nil || d.Attention != familykit.DenseByDefault {
		t.Errorf("fasth3 by default: VSA %+v, attention %q; want dense, because %q", d.VSA, d.Attention, familykit.DenseByDefault)
	}
	req.Options = &Options{VSA: &VSA{}}
	_, d := mustPlan(t, "fasth3", req)
	if v := d.VSA; v == nil || v.PrefixTiles != 9 || v.VideoTiles != 280 || v.TopK != 28 || v.AttentionTFLOPsSaved <= 0 {
		t.Errorf("fasth3 VSA plan %+v, want 9 + 280 tiles, k 28, work saved", v)
	}
	req.Options = &Options{VSA: &VSA{TileSize: 256}}
	if _, d = mustPlan(t, "fasth3", req); d.VSA == nil || d.VSA.PrefixTiles != 3 || d.VSA.VideoTiles != 80 || d.VSA.FineStage != "gather" {
		t.Errorf("fasth3 E=256 VSA plan %+v, want 3 + 80 tiles", d.VSA)
	}
	req.Options = nil
	if _, d = mustPlan(t, "h3", req); d.VSA != nil {
		t.Errorf("base H3 plans VSA %+v; it has no gates", d.VSA)
	}
	req.Options = &Options{VSA: &VSA{Mode: "sideways"}}
	if _, _, err := plan(t, "fasth3", req, api.DTypeAuto); err == nil {
		t.Error("an unknown VSA mode must be rejected")
	}
}

// TestPlanFP8WeightBytes: with DType FP8 the plan sizes the DiT as dit/h3 holds it with Options.FP8
// (the joint blocks' core linears in one-byte codes with float32 scales, the rest in bf16), checked
// against the bytes of a bound tiny model (drawn with its VSA gates) in both precisions; the release
// model's FP8 weights are 43.80 GiB (61.73 in bf16), FastH3's 47.38 GiB, what the H200 bench measured
// resident (BENCHMARKS.md).
func TestPlanFP8WeightBytes(t *testing.T) {
	cfg := tinyDiT()
	for _, dt := range []api.DType{api.BF16, api.FP8} {
		m, err := h3dit.NewRandom(testutil.Backend(t), cfg, h3dit.Options{DType: dtypes.BFloat16, FP8: dt == api.FP8}, 1)
		if err != nil {
			t.Fatal(err)
		}
		got := m.WeightMemory().Total
		m.Close()
		if want, err := ditWeightBytes(cfg, true, dt); err != nil || want != got {
			t.Errorf("%s: plan sizes tiny-h3's DiT at %d bytes (%v), the bound model holds %d", dt, want, err, got)
		}
	}
	for model, want := range map[string]int64{"h3": 47025031680, "fasth3": 50878548480} {
		p, _, err := plan(t, model, api.Request{}, api.FP8)
		if err != nil || p.WeightsDType != api.FP8 || p.WeightsBytes != want {
			t.Errorf("%s plan in fp8: %s, %d bytes (%.2f GiB), want %d (%v)", model, p.WeightsDType, p.WeightsBytes, float64(p.WeightsBytes)/(1<<30), want, err)
		}
	}
}
