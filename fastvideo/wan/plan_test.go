package wan

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/internal/testutil"
)

// plan is the package-level Plan of fastvideo for the Wan model s: req resolved without a prompt and planned at dtype.
func plan(t *testing.T, s *Spec, req api.Request, dtype api.DType) (*api.Plan, *PlanDetails, error) {
	t.Helper()
	return family.PlanModel[*PlanDetails](s, req, dtype)
}

// builtin is a built-in Wan model.
func builtin(t *testing.T, name string) *Spec {
	t.Helper()
	m, ok := Family{}.Lookup(name)
	if !ok {
		t.Fatalf("no built-in Wan model %q", name)
	}
	return m.(*Spec)
}

func mustPlan(t *testing.T, name string, req api.Request, dtype api.DType) (*api.Plan, *PlanDetails) {
	t.Helper()
	p, d, err := plan(t, builtin(t, name), req, dtype)
	if err != nil {
		t.Fatal(err)
	}
	return p, d
}

// checkTable fails the test unless p's table holds each of want.
func checkTable(t *testing.T, p *api.Plan, want ...string) {
	t.Helper()
	var sb strings.Builder
	if err := p.WriteTable(&sb); err != nil {
		t.Fatal(err)
	}
	for _, s := range want {
		if !strings.Contains(sb.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, sb.String())
		}
	}
}

// planErrorCase is a request that Plan refuses for the model: a RequestError on field whose message
// holds msg.
type planErrorCase struct {
	name, model string
	req         api.Request
	field, msg  string
}

// checkPlanErrors plans each case in its own subtest and checks the refusal.
func checkPlanErrors(t *testing.T, cases []planErrorCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := plan(t, builtin(t, c.model), c.req, api.DTypeAuto)
			var re *api.RequestError
			if !errors.As(err, &re) || re.Field != c.field || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %v, want a RequestError on %s mentioning %q", err, c.field, c.msg)
			}
		})
	}
}

// TestPlans checks the released specifications: latent and token geometry, the UniPC and DMD
// ladders (FastVideo's FlowUniPCMultistepScheduler and DmdDenoisingStage), parameter counts
// (dit/wan's table) and forward FLOPs.
func TestPlans(t *testing.T) {
	cases := []struct {
		model          string
		req            api.Request
		latent, grid   string
		tokens         int
		tflopsPerFwd   float64 // one decimal
		forwards       int
		params         int64
		sampler        Sampler
		timesteps      string // the first and last few fed timesteps
		steps, fps     int
		negativePrefix string
	}{
		{"wan2.1-t2v-1.3b", api.Request{}, "[16 21 60 104]", "[21 30 52]", 32760, 283.0, 2, 1418996800, SamplerUniPC,
			"[999 993 986 979 971 964 956 948 940 931] [160 111 57]", 50, 16, "Bright tones"},
		{"fastwan2.1-t2v-1.3b", api.Request{}, "[16 16 56 104]", "[16 28 52]", 23296, 160.7, 1, 1418996800, SamplerDMD,
			"[1000 757 522] [1000 757 522]", 3, 16, ""},
		{"wan2.1-t2v-14b", api.Request{}, "[16 21 90 160]", "[21 45 80]", 75600, 6523.4, 2, 14288491584, SamplerUniPC,
			"[999 995 991 987 982 978 973 968 963 957] [241 172 92]", 50, 16, "Bright tones"},
		{"wan2.1-t2v-14b", api.Request{Height: 480, Width: 832}, "[16 21 60 104]", "[21 30 52]", 32760, 1678.4, 2, 14288491584, SamplerUniPC,
			"[999 995 991 987 982 978 973 968 963 957] [241 172 92]", 50, 16, "Bright tones"},
		{"wan2.2-ti2v-5b", api.Request{}, "[48 31 44 80]", "[31 22 40]", 27280, 517.0, 2, 4999787712, SamplerUniPC,
			"[999 995 991 987 982 978 973 968 963 957] [241 172 92]", 50, 24, "色调艳丽"},
		{"Wan-AI/Wan2.2-TI2V-5B-Diffusers", api.Request{Height: 480, Width: 832, NumFrames: 81}, "[48 21 30 52]", "[21 15 26]", 8190, 98.0, 2,
			4999787712, SamplerUniPC, "[999 995 991 987 982 978 973 968 963 957] [241 172 92]", 50, 24, "色调艳丽"},
		{"fastwan2.2-ti2v-5b", api.Request{}, "[48 31 44 80]", "[31 22 40]", 27280, 517.0, 1, 4999787712, SamplerDMD,
			"[1000 757 522] [1000 757 522]", 3, 24, ""},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s_%dx%d", c.model, c.req.Height, c.req.Width), func(t *testing.T) {
			p, d := mustPlan(t, c.model, c.req, api.DTypeAuto)
			if fmt.Sprint(p.LatentShape) != c.latent || fmt.Sprint(d.TokenGrid) != c.grid || d.Tokens != c.tokens || d.TextTokens != 512 {
				t.Errorf("latent %v, grid %v, %d tokens, %d text rows", p.LatentShape, d.TokenGrid, d.Tokens, d.TextTokens)
			}
			if got := p.DiTTFLOPsPerStep / float64(c.forwards); math.Abs(got-c.tflopsPerFwd) > 0.05 || p.ForwardsPerStep != c.forwards {
				t.Errorf("%.2f TFLOP per forward x %d forwards, want %.1f x %d", got, p.ForwardsPerStep, c.tflopsPerFwd, c.forwards)
			}
			if math.Abs(p.DiTTFLOPsTotal-float64(p.Steps)*p.DiTTFLOPsPerStep) > 1e-6*p.DiTTFLOPsTotal {
				t.Errorf("total %.1f != %d steps x %.1f", p.DiTTFLOPsTotal, p.Steps, p.DiTTFLOPsPerStep)
			}
			if p.DiTParams != c.params || p.WeightsDType != "bf16" || p.WeightsBytes <= 2*c.params || p.WeightsBytes > 2*c.params+2*c.params/200 {
				t.Errorf("%d params, %d bytes in %s", p.DiTParams, p.WeightsBytes, p.WeightsDType)
			}
			ts := p.VideoTimesteps
			if got := fmt.Sprint(ts[:min(10, len(ts))], ts[len(ts)-3:]); got != c.timesteps || d.Sampler != c.sampler ||
				p.Steps != c.steps || p.FPS != c.fps || p.Seed != 1024 {
				t.Errorf("timesteps %s, sampler %s, %d steps at %d fps, seed %d", got, d.Sampler, p.Steps, p.FPS, p.Seed)
			}
			if !strings.HasPrefix(d.NegativePrompt, c.negativePrefix) || (c.negativePrefix == "") != (d.NegativePrompt == "") {
				t.Errorf("negative prompt %q", d.NegativePrompt)
			}
			if d.Sampler == SamplerUniPC && (len(p.VideoSigmas) != p.Steps+1 || p.VideoSigmas[p.Steps] != 0) {
				t.Errorf("UniPC sigmas %v", p.VideoSigmas)
			}
		})
	}

	// The 1.3B ladder's first and last sigmas; DMD sigmas on the shift-8 grid and the warped
	// shift-5 ladder of the MLX Wan2.2-5B recipe.
	p, _ := mustPlan(t, "wan2.1-t2v-1.3b", api.Request{}, api.DTypeAuto)
	if math.Abs(float64(p.VideoSigmas[0])-0.99989) > 5e-6 || math.Abs(float64(p.VideoSigmas[49])-0.05767) > 5e-6 {
		t.Errorf("1.3B sigmas %v ... %v", p.VideoSigmas[0], p.VideoSigmas[49])
	}
	p, d := mustPlan(t, "fastwan2.2-ti2v-5b", api.Request{}, api.DTypeAuto)
	if fmt.Sprint(p.VideoSigmas) != fmt.Sprint([]float32{1, 0.75675672, 0.52173913}) || d.WarpDenoisingSteps || d.RenoiseNoiseLen() != 2*p.VideoNoiseLen() {
		t.Errorf("DMD sigmas %v, warp %v", p.VideoSigmas, d.WarpDenoisingSteps)
	}
	p, _ = mustPlan(t, "fastwan2.2-ti2v-5b", api.Request{Options: &Options{WarpDenoisingSteps: api.Ptr(true)}}, api.DTypeAuto)
	// The MLX recipe quotes these rounded (939.6724, 0.939672, ...): compare at its precision.
	for i, want := range [][2]float64{{1000, 1}, {939.6724, 0.939672}, {845.2073, 0.845207}} {
		if math.Abs(float64(p.VideoTimesteps[i])-want[0]) > 1e-4 || math.Abs(float64(p.VideoSigmas[i])-want[1]) > 1e-6 {
			t.Errorf("warped timesteps %v, sigmas %v", p.VideoTimesteps, p.VideoSigmas)
		}
	}
	if p, _ := mustPlan(t, "wan2.1-t2v-1.3b", api.Request{}, api.F32); p.WeightsBytes != 4*1418996800 {
		t.Errorf("f32 bytes %d", p.WeightsBytes)
	}
}

func TestRequestValidation(t *testing.T) {
	checkPlanErrors(t, []planErrorCase{
		{"height /16", "wan2.1-t2v-1.3b", api.Request{Height: 470, Width: 832}, "height",
			"a positive multiple of 16 up to 1920 (the Wan2.1 VAE's 8x compression times the DiT's patch) (e.g. 464 or 480)"},
		{"width /32 on Wan2.2", "wan2.2-ti2v-5b", api.Request{Height: 480, Width: 840}, "width",
			"a positive multiple of 32 up to 1920 (the Wan2.2 VAE's 16x compression times the DiT's patch) (e.g. 832 or 864)"},
		{"side above the release's", "wan2.1-t2v-1.3b", api.Request{Height: 320000, Width: 832}, "height", "up to 1920"},
		{"frames 4n+1", "wan2.1-t2v-1.3b", api.Request{NumFrames: 80}, "num_frames", "4n+1 frames up to 481 (e.g. 77 or 81)"},
		{"frames above the release's", "wan2.1-t2v-1.3b", api.Request{NumFrames: 4101}, "num_frames", "4n+1 frames up to 481"},
		{"frames beyond int32", "wan2.1-t2v-1.3b", api.Request{NumFrames: math.MaxInt}, "num_frames", "4n+1 frames up to 481"},
		{"fps", "wan2.1-t2v-1.3b", api.Request{FPS: -1}, "fps", "1 to 120"},
		{"dmd steps", "fastwan2.2-ti2v-5b", api.Request{NumInferenceSteps: 50}, "num_inference_steps", "3 or unset"},
		{"dmd guidance", "fastwan2.1-t2v-1.3b", api.Request{GuidanceScale: 3}, "guidance_scale", "without classifier-free guidance"},
		{"unipc steps", "wan2.1-t2v-1.3b", api.Request{NumInferenceSteps: 5000}, "num_inference_steps", "1 to 1000"},
		{"repeated timestep", "wan2.1-t2v-1.3b", api.Request{NumInferenceSteps: 900}, "num_inference_steps", "repeats timestep"},
		{"fast factor alone", "wan2.1-t2v-1.3b", api.Request{FastFactor: 3}, "fast_factor", "unless the temporal fast mode is on"},
		{"spatial scale alone", "wan2.1-t2v-1.3b", api.Request{FastSpatialScale: 3}, "fast_spatial_scale", "unless the spatial fast mode is on"},
		{"spatial scale off the grid", "wan2.1-t2v-1.3b", api.Request{FastSpatial: true, FastSpatialScale: 3}, "fast_spatial_scale",
			"dividing 480x832 into a size that is a multiple of 16x16"},
		{"spatial stage 1 off the grid", "wan2.1-t2v-1.3b", api.Request{FastSpatial: true, Height: 464, Width: 832}, "fast_spatial_scale",
			"a multiple of 16x16"},
		{"fast that does not shorten", "wan2.1-t2v-1.3b", api.Request{Fast: true, NumFrames: 5}, "fast", "a 5-frame source clip"},
		{"fast factor that does not shorten", "wan2.1-t2v-1.3b", api.Request{Fast: true, FastFactor: 2, NumFrames: 4}, "fast_factor",
			"a 5-frame source clip"},
		{"fast frames bound", "wan2.1-t2v-1.3b", api.Request{Fast: true, NumFrames: 482}, "num_frames", "2 to 481 frames"},
		{"upsample without spatial", "wan2.1-t2v-1.3b", api.Request{Fast: true, Upsample: "cubic"}, "upsample", "spatial fast mode"},
		{"sharpen without a mode", "wan2.1-t2v-1.3b", api.Request{Sharpen: api.Ptr(0.5)}, "sharpen", "unless a fast mode is on"},
		{"prompt tokens", "wan2.1-t2v-1.3b", api.Request{PromptTokens: -1}, "prompt_tokens", "token count"},
		{"renoise on UniPC", TinyName, api.Request{Preset: "tiny_wan_t2v", Options: &Options{RenoiseNoise: []float32{1}}}, "renoise_noise", "nil"},
		{"renoise length", TinyName, api.Request{Options: &Options{RenoiseNoise: make([]float32, 3)}}, "renoise_noise", "2 blocks"},
	})
	// The token grid must fit the DiT's RoPE tables: a spec whose frame bound lets a clip
	// outgrow rope_max_seq_len is stopped there.
	long := builtin(t, "wan2.1-t2v-1.3b")
	long.MaxFrames = 5000
	var re *api.RequestError
	if _, _, err := plan(t, long, api.Request{NumFrames: 4101}, api.DTypeAuto); !errors.As(err, &re) ||
		re.Field != "num_frames" || !strings.Contains(err.Error(), "rope_max_seq_len") {
		t.Errorf("a clip beyond the RoPE tables: %v", err)
	}
	// Valid: the presets themselves, an explicit guidance of 1 on a DMD model, any positive guidance.
	for _, c := range []struct {
		model string
		req   api.Request
	}{
		{"wan2.1-t2v-1.3b", api.Request{Prompt: "x"}},
		{"fastwan2.1-t2v-1.3b", api.Request{Prompt: "x", GuidanceScale: 1, NumInferenceSteps: 3}},
		{"wan2.2-ti2v-5b", api.Request{Prompt: "x", GuidanceScale: 0.5, Height: 704, Width: 1280, NumFrames: 5}},
		{TinyName, api.Request{Prompt: "x", Preset: "tiny_wan_t2v", NegativePrompt: "blurry"}},
	} {
		if _, err := builtin(t, c.model).Resolve(c.req, true); err != nil {
			t.Errorf("%s %+v: %v", c.model, c.req, err)
		}
	}
	// Released Wan specs plan but do not generate: opening one asks for the snapshot folder.
	if _, err := builtin(t, "fastwan2.1-t2v-1.3b").Open(&family.Engine{}); !errors.As(err, &re) || re.Field != "model" ||
		!strings.Contains(err.Error(), "FastVideo/FastWan2.1-T2V-1.3B-Diffusers") {
		t.Errorf("opening fastwan2.1-t2v-1.3b: %v", err)
	}
}

func TestPlanJSONAndTable(t *testing.T) {
	p, _ := mustPlan(t, TinyName, api.Request{Preset: "tiny_wan_t2v"}, api.DTypeAuto)
	m := testutil.JSONObject(t, p)
	for _, k := range []string{"family", "latent_shape", "token_grid", "tokens", "text_tokens", "sampler", "cfg", "guidance_scale",
		"forwards_per_step", "video_sigmas", "video_timesteps", "dit_tflops_per_step", "weights_bytes", "negative_prompt"} {
		if _, ok := m[k]; !ok {
			t.Errorf("Wan plan JSON lacks %q", k)
		}
	}
	for _, k := range []string{"rows", "audio_sigmas", "audio_latent_frames", "adaln_timesteps"} {
		if _, ok := m[k]; ok {
			t.Errorf("Wan plan JSON has the MiniMax H3 field %q", k)
		}
	}
	if p.WeightsDType != "f32" || p.LatentChannels != 16 || m["tokens"] != 36.0 || p.Family != FamilyName {
		t.Errorf("tiny plan %+v", p)
	}
	checkTable(t, p, "tiny-wan (preset tiny_wan_t2v)", "48x64 (HxW), 9 frames at 16 fps", "36 = 3 x 3 x 4",
		"UniPC, 4 steps at shift 3, CFG 5 (2 forwards per step)", "video only")
}

// TestFastModes: the MLX runtime's Wan fast modes reduce the denoise geometry and add the frame
// filters in its order, and the plan shows the reduced geometry and the saving.
func TestFastModes(t *testing.T) {
	// 81 frames at factor 2: aligned_keyframe_count gives 41 source frames (11 latents); 448x832 at
	// scale 2 runs at 224x416.
	p, d := mustPlan(t, "fastwan2.1-t2v-1.3b", api.Request{Fast: true, FastSpatial: true, NumFrames: 81}, api.DTypeAuto)
	if ft, fs := d.FastTemporal, d.FastSpatial; ft == nil || fs == nil ||
		*ft != (FastTemporalPlan{TargetFrames: 81, SourceFrames: 41, Factor: 2, SourceLatentFrames: 11}) ||
		*fs != (FastSpatialPlan{TargetHeight: 448, TargetWidth: 832, Stage1Height: 224, Stage1Width: 416, Scale: 2}) {
		t.Fatalf("fast plans %+v %+v", d.FastTemporal, d.FastSpatial)
	}
	if p.NumFrames != 81 || p.Height != 448 || p.Width != 832 || p.CanvasHeight != 224 || p.CanvasWidth != 416 ||
		fmt.Sprint(p.LatentShape) != "[16 11 28 52]" || d.Tokens != 11*14*26 {
		t.Fatalf("plan %+v, tokens %d", p, d.Tokens)
	}
	if want := []string{"RIFE 4.25 41 -> 81 frames", "lanczos to 448x832, sharpen 0.6"}; fmt.Sprint(p.FrameFilters) != fmt.Sprint(want) {
		t.Errorf("filters %q, want %q", p.FrameFilters, want)
	}
	full, _ := mustPlan(t, "fastwan2.1-t2v-1.3b", api.Request{NumFrames: 81}, api.DTypeAuto)
	if math.Abs(d.FullDiTTFLOPsTotal-full.DiTTFLOPsTotal) > 1e-9 || d.FullDiTTFLOPsTotal < 6*p.DiTTFLOPsTotal {
		t.Errorf("saving: %.1f of %.1f TFLOP, the full plan %.1f", p.DiTTFLOPsTotal, d.FullDiTTFLOPsTotal, full.DiTTFLOPsTotal)
	}
	checkTable(t, p, "canvas", "224x416", "factor 2: 41 source frames (11 latents) interpolated to 81", "fast saving")
	// Any target count with the temporal mode (61 at factor 2: 33 made into 65, the first 61 kept);
	// the spatial mode alone sharpens at 0.4 with the chosen kernel, and the upstream defaults
	// apply per mode.
	for _, c := range []struct {
		req     api.Request
		frames  int
		filters string
	}{
		{api.Request{Fast: true, NumFrames: 62}, 33, "[RIFE 4.25 33 -> 62 frames sharpen 0.6]"},
		{api.Request{Fast: true, FastFactor: 4, NumFrames: 121, Sharpen: api.Ptr(0.0)}, 33, "[RIFE 4.25 33 -> 121 frames]"},
		{api.Request{FastSpatial: true, Upsample: "bilinear"}, 81, "[bilinear to 480x832, sharpen 0.4]"},
	} {
		p, _ := mustPlan(t, "wan2.1-t2v-1.3b", c.req, api.DTypeAuto)
		if p.VideoLatentFrames != (c.frames-1)/4+1 || fmt.Sprint(p.FrameFilters) != c.filters {
			t.Errorf("%+v: %d latent frames, filters %q; want %d source frames, %s", c.req, p.VideoLatentFrames, p.FrameFilters, c.frames, c.filters)
		}
	}
}

// TestToyTokenizer: the toy vocabulary tokenizes whole words, spells out unknown words, falls
// back to bytes outside its characters, and always ends with </s>.
func TestToyTokenizer(t *testing.T) {
	c := newTinySource(tinySpec())
	tok, err := c.loadTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	vocab := tinyWanVocab()
	if tok.VocabSize() != len(vocab) || tok.EOSID() != 1 || tok.PadID() != 0 || tok.UnkID() != 2 || c.spec.TextEncoder.VocabSize != len(vocab) {
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
	again, _ := newTinySource(tinySpec()).loadTokenizer()
	if again.Fingerprint() != tok.Fingerprint() {
		t.Error("the toy tokenizer is not deterministic")
	}
	ids, _ := tok.EncodeWithSpecial(strings.Repeat("fox ", 600), 512)
	if len(ids) != 512 || ids[511] != 1 {
		t.Errorf("a long prompt gives %d ids", len(ids))
	}
}
