// Package wan is the Wan model family of the SDK (Wan2.1 T2V 1.3B/14B, Wan2.2 TI2V-5B and the
// 3-step FastWan DMD students: text in, video out), behind the fastvideo/family contract: the
// built-in models and presets, reading snapshot folders, resolving and planning requests, and the
// condition, denoise and decode stages.
//
// A run: condition (UMT5's Unigram tokenizer, </s> appended, the UMT5 encoder, its output
// zero-padded to 512 rows, for the prompt and, with classifier-free guidance, the negative prompt;
// optional prompt cache), denoise (UniPC at the model's flow shift with two forwards per step
// under guidance, or the FastWan DMD ladder 1000/757/522 with x0 prediction and re-noising,
// optionally warped), decode (the causal Wan VAE one latent frame at a time, streamed into the
// encoder). Upstream: fastvideo/pipelines/basic/wan/ in FastVideo.
package wan

import (
	"sort"
	"strings"

	wandit "fastvideo/dit/wan"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/internal/textenc/umt5"
	"fastvideo/internal/weights"
	"fastvideo/schedule"
	wanvae "fastvideo/vae/wan"
)

// Sampler names a Wan denoising loop.
type Sampler string

const (
	// SamplerUniPC is the base Wan pipelines' FlowUniPCMultistepScheduler (order 2, bh2) at the
	// model's flow shift, with classifier-free guidance (a second, negative-prompt forward per step)
	// when the guidance scale exceeds 1.
	SamplerUniPC Sampler = "unipc"
	// SamplerDMD is the FastWan students' DmdDenoisingStage: a few fixed rungs (1000, 757, 522), one
	// forward each predicting x0, re-noised with fresh noise between rungs; no guidance.
	SamplerDMD Sampler = "dmd"
)

// Preset is a Wan preset: the common defaults plus the sampler.
type Preset struct {
	family.Preset
	// Sampler is SamplerUniPC (the base pipelines: UniPC with classifier-free guidance when
	// GuidanceScale > 1) or SamplerDMD (the FastWan students: DMDSteps, one forward each, no
	// guidance; Steps and GuidanceScale are upstream's preset values, which the DMD loop ignores).
	Sampler        Sampler  `json:"sampler,omitempty"`
	DMDSteps       []int    `json:"dmd_denoising_steps,omitempty"`
	NegativePrompt string   `json:"negative_prompt,omitempty"`
	ModelIDs       []string `json:"model_ids,omitempty"` // Hugging Face ids upstream maps to the preset
}

// Spec is what a Wan model is made of: the configs of its transformer, VAE and UMT5 text encoder
// (read once, then passed down to planning and loading), and the pipeline constants FastVideo ties
// to the model rather than to a request.
type Spec struct {
	family.ModelInfo

	DiT         wandit.Config
	VAE         wanvae.Config
	TextEncoder umt5.Config
	// TextLen is the number of prompt rows the DiT's cross-attention sees: the UMT5 output of the
	// prompt's tokens (with </s>, truncated to TextLen), zero-padded to TextLen (512).
	TextLen int
	// FlowShift is FastVideo's flow_shift for the model (3 for Wan2.1-1.3B, 5 for 14B and Wan2.2-5B,
	// 8 for FastWan2.1): the UniPC ladder's shift and the grid of warped DMD rungs. The plain DMD loop
	// looks its sigmas up on a fixed shift-8 grid, as upstream does.
	FlowShift float64
	// WarpDenoisingSteps is the model's default for Options.WarpDenoisingSteps (false for every
	// FastWan checkpoint: FastVideo's torch pipeline does not warp).
	WarpDenoisingSteps bool
	// VSAGates is set for VSA-trained students (FastWan), whose transformer carries to_gate_compress:
	// they run with Video Sparse Attention at VSA unless Options.VSA says otherwise.
	VSAGates bool
	VSA      familykit.VSA
	// WeightsDType is the precision Plan sizes the DiT's weights in by default: bf16, the precision
	// FastVideo runs Wan DiTs in (f32 for tiny-wan).
	WeightsDType api.DType
	// MaxSide bounds each output side in pixels; MaxFrames the frame count.
	MaxSide, MaxFrames int
	// ImageMaxArea is the canvas area a first-frame image is fitted to (Wan2.2 TI2V: 480·832, as
	// fastvideo/pipelines/stages/input_validation.py); 0 for text-only models.
	ImageMaxArea int

	presets map[string]Preset

	// rife is the tiny model's random RIFE (nil for released models: WithRIFE gives theirs).
	rife weights.Source
}

// InterpolatorWeights are the tiny model's RIFE weights (framefilter.BuiltinInterpolator), nil for others.
func (s *Spec) InterpolatorWeights() weights.Source { return s.rife }

// Info describes the model.
func (s *Spec) Info() family.ModelInfo { return s.ModelInfo }

// Limits of the released models: Wan is trained up to 720x1280 and 81-121 frames; beyond these a
// clip outgrows any single device.
const (
	releasedMaxSide   = 1920
	releasedMaxFrames = 481
	tinyMaxSide       = 256
	tinyMaxFrames     = 65
)

// Negative prompts of the Wan presets (fastvideo/pipelines/basic/wan/presets.py): Wan2.1 presets use the English one, Wan2.2
// presets the Chinese one.
const (
	NegativePromptEN = "Bright tones, overexposed, static, blurred details, subtitles, style, works, paintings, images, " +
		"static, overall gray, worst quality, low quality, JPEG compression residue, ugly, incomplete, extra " +
		"fingers, poorly drawn hands, poorly drawn faces, deformed, disfigured, misshapen limbs, fused fingers, " +
		"still picture, messy background, three legs, many people in the background, walking backwards"
	NegativePromptCN = "色调艳丽，过曝，静态，细节模糊不清，字幕，风格，作品，画作，画面，静止，整体发灰，最差质量，低质量，JPEG压缩残留，丑陋的，残缺的，多余的手指，画得不好的手部，画得不好的脸部，畸形的，毁容的，形态畸形的肢体，手指融合，静止不动的画面，杂乱的背景，三条腿，背景人很多，倒着走"
)

// defaultSeed is SamplingParam's class default, which no Wan preset overrides.
const defaultSeed = 1024

// releasedPresets are FastVideo's Wan presets (fastvideo/pipelines/basic/wan/presets.py, family wan,
// version 1) for the text-to-video models this SDK runs. FastWan2.2's preset says 50
// steps and guidance 5.0 upstream, which its DMD loop ignores; they are kept verbatim.
func releasedPresets() map[string]Preset {
	return map[string]Preset{
		"wan_t2v_1_3b": {Preset: family.Preset{Name: "wan_t2v_1_3b", Description: "Wan2.1 T2V 1.3B at 480x832, 81 frames, 50 UniPC steps with CFG 3.0",
			Height: 480, Width: 832, NumFrames: 81, FPS: 16, Steps: 50, GuidanceScale: 3.0, Seed: defaultSeed},
			Sampler: SamplerUniPC, NegativePrompt: NegativePromptEN, ModelIDs: []string{"Wan-AI/Wan2.1-T2V-1.3B-Diffusers"}},
		"wan_t2v_14b": {Preset: family.Preset{Name: "wan_t2v_14b", Description: "Wan2.1 T2V 14B at 720x1280, 81 frames, 50 UniPC steps with CFG 5.0",
			Height: 720, Width: 1280, NumFrames: 81, FPS: 16, Steps: 50, GuidanceScale: 5.0, Seed: defaultSeed},
			Sampler: SamplerUniPC, NegativePrompt: NegativePromptEN,
			ModelIDs: []string{"Wan-AI/Wan2.1-T2V-14B-Diffusers", "FastVideo/Wan2.1-VSA-T2V-14B-720P-Diffusers"}},
		"wan_2_2_ti2v_5b": {Preset: family.Preset{Name: "wan_2_2_ti2v_5b", Description: "Wan2.2 TI2V 5B text-to-video at 704x1280, 121 frames at 24 fps, 50 UniPC steps with CFG 5.0",
			Height: 704, Width: 1280, NumFrames: 121, FPS: 24, Steps: 50, GuidanceScale: 5.0, Seed: defaultSeed},
			Sampler: SamplerUniPC, NegativePrompt: NegativePromptCN, ModelIDs: []string{"Wan-AI/Wan2.2-TI2V-5B-Diffusers"}},
		"fast_wan_t2v_480p": {Preset: family.Preset{Name: "fast_wan_t2v_480p", Description: "FastWan2.1 at 448x832, 61 frames, 3 DMD steps without guidance",
			Height: 448, Width: 832, NumFrames: 61, FPS: 16, Steps: 3, GuidanceScale: 3.0, Seed: defaultSeed},
			Sampler: SamplerDMD, DMDSteps: schedule.FastWanDMDSteps, NegativePrompt: NegativePromptEN,
			ModelIDs: []string{"FastVideo/FastWan2.1-T2V-1.3B-Diffusers", "FastVideo/FastWan2.1-T2V-14B-480P-Diffusers"}},
		"fast_wan_2_2_ti2v_5b": {Preset: family.Preset{Name: "fast_wan_2_2_ti2v_5b", Description: "FastWan2.2 TI2V 5B at 704x1280, 121 frames at 24 fps, 3 DMD steps without guidance (the preset's 50 steps and CFG 5.0 are unused)",
			Height: 704, Width: 1280, NumFrames: 121, FPS: 24, Steps: 50, GuidanceScale: 5.0, Seed: defaultSeed},
			Sampler: SamplerDMD, DMDSteps: schedule.FastWanDMDSteps, NegativePrompt: NegativePromptCN,
			ModelIDs: []string{"FastVideo/FastWan2.2-TI2V-5B-FullAttn-Diffusers", "FastVideo/FastWan2.2-TI2V-5B-Diffusers"}},
	}
}

// setPresets installs presets, the first being the default.
func (s *Spec) setPresets(presets ...Preset) {
	s.DefaultPreset = presets[0].Name
	s.Presets, s.presets = nil, map[string]Preset{}
	for _, p := range presets {
		s.Presets = append(s.Presets, p.Preset)
		s.presets[p.Name] = p
	}
}

// umt5XXL is the UMT5-XXL encoder of every Wan model (google/umt5-xxl).
func umt5XXL() umt5.Config {
	return umt5.Config{
		ModelType: "umt5", VocabSize: 256384, DModel: 4096, DKV: 64, DFF: 10240, NumLayers: 24, NumHeads: 64,
		NumBuckets: 32, MaxDistance: 128, FeedForwardProj: "gated-gelu", LayerNormEps: 1e-6,
		PadTokenID: 0, EOSTokenID: 1, Act: "gelu_new", Gated: true,
	}
}

// variant describes one released Wan text-to-video model.
type variant struct {
	name, description string
	dit               func() wandit.Config
	vae               func() wanvae.Config
	shift             float64
	preset            string
}

var variants = []variant{
	{"wan2.1-t2v-1.3b", "Wan2.1 T2V 1.3B (Wan-AI/Wan2.1-T2V-1.3B-Diffusers): 50-step UniPC with CFG",
		wandit.Wan21T2V1_3B, wanvae.DefaultConfig, schedule.Wan21T2V480PShift, "wan_t2v_1_3b"},
	{"wan2.1-t2v-14b", "Wan2.1 T2V 14B (Wan-AI/Wan2.1-T2V-14B-Diffusers): 50-step UniPC with CFG at 720p",
		wandit.Wan21T2V14B, wanvae.DefaultConfig, schedule.Wan21T2V720PShift, "wan_t2v_14b"},
	{"fastwan2.1-t2v-1.3b", "FastWan2.1 T2V 1.3B (FastVideo/FastWan2.1-T2V-1.3B-Diffusers): 3-step DMD student, no CFG",
		wandit.Wan21T2V1_3B, wanvae.DefaultConfig, schedule.FastWanShift, "fast_wan_t2v_480p"},
	{"fastwan2.1-t2v-14b-480p", "FastWan2.1 T2V 14B 480P (FastVideo/FastWan2.1-T2V-14B-480P-Diffusers): 3-step DMD student, no CFG",
		wandit.Wan21T2V14B, wanvae.DefaultConfig, schedule.FastWanShift, "fast_wan_t2v_480p"},
	{"wan2.2-ti2v-5b", "Wan2.2 TI2V 5B (Wan-AI/Wan2.2-TI2V-5B-Diffusers), text-to-video: 50-step UniPC with CFG, Wan2.2 VAE",
		wandit.Wan22TI2V5B, wanvae.Wan22Config, schedule.Wan22TI2V5BShift, "wan_2_2_ti2v_5b"},
	{"fastwan2.2-ti2v-5b", "FastWan2.2 TI2V 5B (FastVideo/FastWan2.2-TI2V-5B-Diffusers): 3-step DMD student, no CFG, Wan2.2 VAE",
		wandit.Wan22TI2V5B, wanvae.Wan22Config, schedule.Wan22TI2V5BShift, "fast_wan_2_2_ti2v_5b"},
}

func (v variant) spec() *Spec {
	s := &Spec{
		ModelInfo: family.ModelInfo{Name: v.name, Family: FamilyName, Variant: v.name, Description: v.description},
		DiT:       v.dit(), VAE: v.vae(), TextEncoder: umt5XXL(), TextLen: umt5.DefaultTextLen,
		FlowShift: v.shift, WeightsDType: api.BF16, MaxSide: releasedMaxSide, MaxFrames: releasedMaxFrames,
	}
	if v.vae().IsResidual { // the Wan2.2 VAE: the TI2V models
		s.ImageMaxArea, s.FirstImage = releasedImageArea, true
	}
	s.VSA.Sparsity, s.VSAGates = vsaSparsity[v.name]
	s.VSA.TileSize = wandit.VSATileSize
	s.setPresets(releasedPresets()[v.preset])
	return s
}

// modelAliases maps lower-cased Hugging Face ids to the registry's Wan names, so that Plan and
// Validate accept the ids FastVideo users know.
func modelAliases() map[string]string {
	return map[string]string{
		"wan-ai/wan2.1-t2v-1.3b-diffusers":                "wan2.1-t2v-1.3b",
		"wan-ai/wan2.1-t2v-14b-diffusers":                 "wan2.1-t2v-14b",
		"fastvideo/wan2.1-vsa-t2v-14b-720p-diffusers":     "wan2.1-t2v-14b",
		"fastvideo/fastwan2.1-t2v-1.3b-diffusers":         "fastwan2.1-t2v-1.3b",
		"fastvideo/fastwan2.1-t2v-14b-480p-diffusers":     "fastwan2.1-t2v-14b-480p",
		"wan-ai/wan2.2-ti2v-5b-diffusers":                 "wan2.2-ti2v-5b",
		"fastvideo/fastwan2.2-ti2v-5b-diffusers":          "fastwan2.2-ti2v-5b",
		"fastvideo/fastwan2.2-ti2v-5b-fullattn-diffusers": "fastwan2.2-ti2v-5b",
	}
}

// Family is Wan behind the family contract.
type Family struct{}

// Name is the family's identifier.
func (Family) Name() string { return FamilyName }

// Builtins lists the built-in model names.
func (Family) Builtins() []string {
	out := []string{TinyName, Tiny22Name}
	for _, v := range variants {
		out = append(out, v.name)
	}
	sort.Strings(out)
	return out
}

// Lookup returns a built-in model by name or Hugging Face id.
func (Family) Lookup(name string) (family.Model, bool) {
	switch name {
	case TinyName:
		return tinySpec(), true
	case Tiny22Name:
		return tiny22Spec(), true
	}
	if alias, ok := modelAliases()[strings.ToLower(name)]; ok {
		name = alias
	}
	for _, v := range variants {
		if v.name == name {
			return v.spec(), true
		}
	}
	return nil, false
}
