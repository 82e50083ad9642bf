package fastvideo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestWanPlans checks the released specifications against wan.md: latent and token geometry (§2),
// the UniPC and DMD ladders (§6.2, §6.4), parameter counts (§9.1) and forward FLOPs (§9.2).
func TestWanPlans(t *testing.T) {
	cases := []struct {
		model          string
		req            Request
		latent, grid   string
		tokens         int
		tflopsPerFwd   float64 // wan.md §9.2, one decimal
		forwards       int
		params         int64
		sampler        Sampler
		timesteps      string // the first and last few fed timesteps
		steps, fps     int
		negativePrefix string
	}{
		{"wan2.1-t2v-1.3b", Request{}, "[16 21 60 104]", "[21 30 52]", 32760, 283.0, 2, 1418996800, SamplerUniPC,
			"[999 993 986 979 971 964 956 948 940 931] [160 111 57]", 50, 16, "Bright tones"},
		{"fastwan2.1-t2v-1.3b", Request{}, "[16 16 56 104]", "[16 28 52]", 23296, 160.7, 1, 1418996800, SamplerDMD,
			"[1000 757 522] [1000 757 522]", 3, 16, ""},
		{"wan2.1-t2v-14b", Request{}, "[16 21 90 160]", "[21 45 80]", 75600, 6523.4, 2, 14288491584, SamplerUniPC,
			"[999 995 991 987 982 978 973 968 963 957] [241 172 92]", 50, 16, "Bright tones"},
		{"wan2.1-t2v-14b", Request{Height: 480, Width: 832}, "[16 21 60 104]", "[21 30 52]", 32760, 1678.4, 2, 14288491584, SamplerUniPC,
			"[999 995 991 987 982 978 973 968 963 957] [241 172 92]", 50, 16, "Bright tones"},
		{"wan2.2-ti2v-5b", Request{}, "[48 31 44 80]", "[31 22 40]", 27280, 517.0, 2, 4999787712, SamplerUniPC,
			"[999 995 991 987 982 978 973 968 963 957] [241 172 92]", 50, 24, "色调艳丽"},
		{"Wan-AI/Wan2.2-TI2V-5B-Diffusers", Request{Height: 480, Width: 832, NumFrames: 81}, "[48 21 30 52]", "[21 15 26]", 8190, 98.0, 2,
			4999787712, SamplerUniPC, "[999 995 991 987 982 978 973 968 963 957] [241 172 92]", 50, 24, "色调艳丽"},
		{"fastwan2.2-ti2v-5b", Request{}, "[48 31 44 80]", "[31 22 40]", 27280, 517.0, 1, 4999787712, SamplerDMD,
			"[1000 757 522] [1000 757 522]", 3, 24, ""},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s_%dx%d", c.model, c.req.Height, c.req.Width), func(t *testing.T) {
			p, err := Plan(c.model, c.req)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(p.LatentShape) != c.latent || fmt.Sprint(p.TokenGrid) != c.grid || p.Tokens != c.tokens || p.TextTokens != 512 {
				t.Errorf("latent %v, grid %v, %d tokens, %d text rows", p.LatentShape, p.TokenGrid, p.Tokens, p.TextTokens)
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
			if got := fmt.Sprint(ts[:min(10, len(ts))], ts[len(ts)-3:]); got != c.timesteps || p.Sampler != c.sampler ||
				p.Steps != c.steps || p.FPS != c.fps || p.Seed != 1024 {
				t.Errorf("timesteps %s, sampler %s, %d steps at %d fps, seed %d", got, p.Sampler, p.Steps, p.FPS, p.Seed)
			}
			if !strings.HasPrefix(p.NegativePrompt, c.negativePrefix) || (c.negativePrefix == "") != (p.NegativePrompt == "") {
				t.Errorf("negative prompt %q", p.NegativePrompt)
			}
			if p.Sampler == SamplerUniPC && (len(p.VideoSigmas) != p.Steps+1 || p.VideoSigmas[p.Steps] != 0) {
				t.Errorf("UniPC sigmas %v", p.VideoSigmas)
			}
		})
	}

	// wan.md §6.2: the 1.3B ladder's first sigma; §6.4: DMD sigmas on the shift-8 grid and the
	// warped shift-5 ladder of the MLX Wan2.2-5B recipe.
	p, _ := Plan("wan2.1-t2v-1.3b", Request{})
	if math.Abs(float64(p.VideoSigmas[0])-0.99989) > 5e-6 || math.Abs(float64(p.VideoSigmas[49])-0.05767) > 5e-6 {
		t.Errorf("1.3B sigmas %v ... %v", p.VideoSigmas[0], p.VideoSigmas[49])
	}
	p, _ = Plan("fastwan2.2-ti2v-5b", Request{})
	if fmt.Sprint(p.VideoSigmas) != fmt.Sprint([]float32{1, 0.75675672, 0.52173913}) || p.WarpDenoisingSteps || p.RenoiseNoiseLen() != 2*p.VideoNoiseLen() {
		t.Errorf("DMD sigmas %v, warp %v", p.VideoSigmas, p.WarpDenoisingSteps)
	}
	p, _ = Plan("fastwan2.2-ti2v-5b", Request{WarpDenoisingSteps: Ptr(true)})
	// wan.md quotes these rounded (939.6724, 0.939672, ...): compare at its precision.
	for i, want := range [][2]float64{{1000, 1}, {939.6724, 0.939672}, {845.2073, 0.845207}} {
		if math.Abs(float64(p.VideoTimesteps[i])-want[0]) > 1e-4 || math.Abs(float64(p.VideoSigmas[i])-want[1]) > 1e-6 {
			t.Errorf("warped timesteps %v, sigmas %v", p.VideoTimesteps, p.VideoSigmas)
		}
	}
	if p, _ := Plan("wan2.1-t2v-1.3b", Request{}, WithDType(F32)); p.WeightsBytes != 4*1418996800 {
		t.Errorf("f32 bytes %d", p.WeightsBytes)
	}
}

func TestWanRequestValidation(t *testing.T) {
	cases := []struct {
		name, model string
		req         Request
		field, msg  string
	}{
		{"height /16", "wan2.1-t2v-1.3b", Request{Height: 470, Width: 832}, "height", "multiple of 16 (the Wan2.1 VAE's 8x compression times the DiT's patch) (e.g. 464 or 480)"},
		{"width /32 on Wan2.2", "wan2.2-ti2v-5b", Request{Height: 480, Width: 840}, "width", "multiple of 32 (the Wan2.2 VAE's 16x compression times the DiT's patch) (e.g. 832 or 864)"},
		{"frames 4n+1", "wan2.1-t2v-1.3b", Request{NumFrames: 80}, "num_frames", "4n+1 frames (e.g. 77 or 81)"},
		{"rope range", "wan2.1-t2v-1.3b", Request{NumFrames: 4101}, "num_frames", "rope_max_seq_len"},
		{"fps", "wan2.1-t2v-1.3b", Request{FPS: -1}, "fps", "1 to 120"},
		{"dmd steps", "fastwan2.2-ti2v-5b", Request{NumInferenceSteps: 50}, "num_inference_steps", "3 or unset"},
		{"dmd guidance", "fastwan2.1-t2v-1.3b", Request{GuidanceScale: 3}, "guidance_scale", "without classifier-free guidance"},
		{"unipc steps", "wan2.1-t2v-1.3b", Request{NumInferenceSteps: 5000}, "num_inference_steps", "1 to 1000"},
		{"repeated timestep", "wan2.1-t2v-1.3b", Request{NumInferenceSteps: 900}, "num_inference_steps", "repeats timestep"},
		{"H3 option on Wan", "wan2.1-t2v-1.3b", Request{FastSpatial: true}, "fast_spatial", "not available for Wan"},
		{"Wan option on H3", "fasth3", Request{WarpDenoisingSteps: Ptr(false)}, "warp_denoising_steps", "Wan DMD option"},
		{"renoise on H3", "h3", Request{RenoiseNoise: []float32{}}, "renoise_noise", "nil"},
		{"prompt tokens", "wan2.1-t2v-1.3b", Request{PromptTokens: -1}, "prompt_tokens", "token count"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Plan(c.model, c.req)
			var re *RequestError
			if !errors.As(err, &re) || re.Field != c.field || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %v, want a RequestError on %s mentioning %q", err, c.field, c.msg)
			}
		})
	}
	// Valid: the presets themselves, an explicit guidance of 1 on a DMD model, any positive guidance.
	for _, c := range []struct {
		model string
		req   Request
	}{
		{"wan2.1-t2v-1.3b", Request{Prompt: "x"}},
		{"fastwan2.1-t2v-1.3b", Request{Prompt: "x", GuidanceScale: 1, NumInferenceSteps: 3}},
		{"wan2.2-ti2v-5b", Request{Prompt: "x", GuidanceScale: 0.5, Height: 704, Width: 1280, NumFrames: 5}},
		{"tiny-wan", Request{Prompt: "x", Preset: "tiny_wan_t2v", NegativePrompt: "blurry"}},
	} {
		if err := Validate(c.model, c.req); err != nil {
			t.Errorf("%s %+v: %v", c.model, c.req, err)
		}
	}
	// Released Wan specs plan but do not generate: New asks for the snapshot folder.
	var re *RequestError
	if _, err := New(context.Background(), "fastwan2.1-t2v-1.3b"); !errors.As(err, &re) || re.Field != "model" ||
		!strings.Contains(err.Error(), "FastVideo/FastWan2.1-T2V-1.3B-Diffusers") {
		t.Errorf("New(fastwan2.1-t2v-1.3b): %v", err)
	}
	if _, err := LookupModel("wan-9000"); err == nil || !strings.Contains(err.Error(), "fasth3, h3, tiny-h3 (MiniMax H3)") ||
		!strings.Contains(err.Error(), "tiny-wan") {
		t.Errorf("unknown model: %v", err)
	}
}

func TestWanPlanJSONAndTable(t *testing.T) {
	p, err := Plan(tinyWanName, Request{Preset: "tiny_wan_t2v"})
	if err != nil {
		t.Fatal(err)
	}
	m := planJSON(t, p)
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
	if p.WeightsDType != "f32" || p.LatentChannels != 16 || p.Tokens != 36 {
		t.Errorf("tiny plan %+v", p)
	}
	var sb strings.Builder
	if err := p.WriteTable(&sb); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"tiny-wan (preset tiny_wan_t2v)", "48x64 (HxW), 9 frames at 16 fps", "36 = 3 x 3 x 4",
		"UniPC, 4 steps at shift 3, CFG 5 (2 forwards per step)", "video only"} {
		if !strings.Contains(sb.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, sb.String())
		}
	}
	// The H3 plan keeps its fields and gains the shared ones.
	h, _ := Plan("fasth3", Request{})
	if h.Family != FamilyH3 || fmt.Sprint(h.LatentShape) != "[24 37 30 52]" || h.ForwardsPerStep != 1 || h.CFG || h.Sampler != "" {
		t.Errorf("H3 plan shared fields: %+v", h)
	}
}
