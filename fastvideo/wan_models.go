package fastvideo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	wandit "fastvideo/dit/wan"
	"fastvideo/dit/wan/geometry"
	"fastvideo/internal/textenc/umt5"
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

// WanSpec is what a Wan model is made of: the configs of its transformer, VAE and UMT5 text
// encoder, and the pipeline constants FastVideo ties to the model rather than to a request.
type WanSpec struct {
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
	// WarpDenoisingSteps is the model's default for Request.WarpDenoisingSteps (false for every
	// FastWan checkpoint: FastVideo's torch pipeline does not warp).
	WarpDenoisingSteps bool
	// WeightsDType is the precision Plan sizes the DiT's weights in by default: bf16, the precision
	// FastVideo runs Wan DiTs in (f32 for tiny-wan).
	WeightsDType DType
}

// Negative prompts of the Wan presets (api.md §4.3): Wan2.1 presets use the English one, Wan2.2
// presets the Chinese one.
const (
	WanNegativePromptEN = "Bright tones, overexposed, static, blurred details, subtitles, style, works, paintings, images, " +
		"static, overall gray, worst quality, low quality, JPEG compression residue, ugly, incomplete, extra " +
		"fingers, poorly drawn hands, poorly drawn faces, deformed, disfigured, misshapen limbs, fused fingers, " +
		"still picture, messy background, three legs, many people in the background, walking backwards"
	WanNegativePromptCN = "色调艳丽，过曝，静态，细节模糊不清，字幕，风格，作品，画作，画面，静止，整体发灰，最差质量，低质量，JPEG压缩残留，丑陋的，残缺的，多余的手指，画得不好的手部，画得不好的脸部，畸形的，毁容的，形态畸形的肢体，手指融合，静止不动的画面，杂乱的背景，三条腿，背景人很多，倒着走"
)

// wanDefaultSeed is SamplingParam's class default, which no Wan preset overrides.
const wanDefaultSeed = 1024

// wanPresets are FastVideo's Wan presets (fastvideo/pipelines/basic/wan/presets.py, family wan,
// version 1; api.md §4.2) for the text-to-video models this SDK runs. FastWan2.2's preset says 50
// steps and guidance 5.0 upstream, which its DMD loop ignores; they are kept verbatim.
func wanPresets() map[string]Preset {
	return map[string]Preset{
		"wan_t2v_1_3b": {Name: "wan_t2v_1_3b", Description: "Wan2.1 T2V 1.3B at 480x832, 81 frames, 50 UniPC steps with CFG 3.0",
			Height: 480, Width: 832, NumFrames: 81, FPS: 16, Steps: 50, GuidanceScale: 3.0, Seed: wanDefaultSeed,
			Sampler: SamplerUniPC, NegativePrompt: WanNegativePromptEN, ModelIDs: []string{"Wan-AI/Wan2.1-T2V-1.3B-Diffusers"}},
		"wan_t2v_14b": {Name: "wan_t2v_14b", Description: "Wan2.1 T2V 14B at 720x1280, 81 frames, 50 UniPC steps with CFG 5.0",
			Height: 720, Width: 1280, NumFrames: 81, FPS: 16, Steps: 50, GuidanceScale: 5.0, Seed: wanDefaultSeed,
			Sampler: SamplerUniPC, NegativePrompt: WanNegativePromptEN,
			ModelIDs: []string{"Wan-AI/Wan2.1-T2V-14B-Diffusers", "FastVideo/Wan2.1-VSA-T2V-14B-720P-Diffusers"}},
		"wan_2_2_ti2v_5b": {Name: "wan_2_2_ti2v_5b", Description: "Wan2.2 TI2V 5B text-to-video at 704x1280, 121 frames at 24 fps, 50 UniPC steps with CFG 5.0",
			Height: 704, Width: 1280, NumFrames: 121, FPS: 24, Steps: 50, GuidanceScale: 5.0, Seed: wanDefaultSeed,
			Sampler: SamplerUniPC, NegativePrompt: WanNegativePromptCN, ModelIDs: []string{"Wan-AI/Wan2.2-TI2V-5B-Diffusers"}},
		"fast_wan_t2v_480p": {Name: "fast_wan_t2v_480p", Description: "FastWan2.1 at 448x832, 61 frames, 3 DMD steps without guidance",
			Height: 448, Width: 832, NumFrames: 61, FPS: 16, Steps: 3, GuidanceScale: 3.0, Seed: wanDefaultSeed,
			Sampler: SamplerDMD, DMDSteps: schedule.FastWanDMDSteps, NegativePrompt: WanNegativePromptEN,
			ModelIDs: []string{"FastVideo/FastWan2.1-T2V-1.3B-Diffusers", "FastVideo/FastWan2.1-T2V-14B-480P-Diffusers"}},
		"fast_wan_2_2_ti2v_5b": {Name: "fast_wan_2_2_ti2v_5b", Description: "FastWan2.2 TI2V 5B at 704x1280, 121 frames at 24 fps, 3 DMD steps without guidance (the preset's 50 steps and CFG 5.0 are unused)",
			Height: 704, Width: 1280, NumFrames: 121, FPS: 24, Steps: 50, GuidanceScale: 5.0, Seed: wanDefaultSeed,
			Sampler: SamplerDMD, DMDSteps: schedule.FastWanDMDSteps, NegativePrompt: WanNegativePromptCN,
			ModelIDs: []string{"FastVideo/FastWan2.2-TI2V-5B-FullAttn-Diffusers", "FastVideo/FastWan2.2-TI2V-5B-Diffusers"}},
	}
}

// umt5XXL is the UMT5-XXL encoder of every Wan model (wan.md §3.1; google/umt5-xxl).
func umt5XXL() umt5.Config {
	return umt5.Config{
		ModelType: "umt5", VocabSize: 256384, DModel: 4096, DKV: 64, DFF: 10240, NumLayers: 24, NumHeads: 64,
		NumBuckets: 32, MaxDistance: 128, FeedForwardProj: "gated-gelu", LayerNormEps: 1e-6,
		PadTokenID: 0, EOSTokenID: 1, Act: "gelu_new", Gated: true,
	}
}

// wanVariant describes one released Wan text-to-video model.
type wanVariant struct {
	name, description string
	dit               func() wandit.Config
	vae               func() wanvae.Config
	shift             float64
	preset            string
}

var wanVariants = []wanVariant{
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

func (v wanVariant) spec() *ModelSpec {
	p := wanPresets()[v.preset]
	return &ModelSpec{
		Name: v.name, Family: FamilyWan, Variant: v.name, Description: v.description,
		Wan: &WanSpec{DiT: v.dit(), VAE: v.vae(), TextEncoder: umt5XXL(), TextLen: umt5.DefaultTextLen,
			FlowShift: v.shift, WeightsDType: BF16},
		DefaultPreset: p.Name, Presets: map[string]Preset{p.Name: p},
	}
}

func init() {
	for _, v := range wanVariants {
		registry[v.name] = v.spec
	}
	registry[tinyWanName] = tinyWanSpec
}

// wanModelAliases maps lower-cased Hugging Face ids to the registry's Wan names, so that Plan and
// Validate accept the ids FastVideo users know.
func wanModelAliases() map[string]string {
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

// Component folders of a diffusers-style Wan snapshot (wan.md §10).
const (
	wanModelIndex    = "model_index.json"
	dirTransformer2  = "transformer_2"
	wanTransformerCl = "WanTransformer3DModel"
)

// classNameOf reads the "_class_name" of a JSON config; "" when the file does not exist.
func classNameOf(path string) (string, error) {
	var c struct {
		ClassName string `json:"_class_name"`
	}
	if err := readJSON(path, &c, false); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", nil
		}
		return "", err
	}
	return c.ClassName, nil
}

// isWanFolder tells a Wan snapshot from a MiniMax H3 one by model_index.json's pipeline class
// (WanPipeline, WanDMDPipeline, ...) or, without it, the transformer's class. It returns the
// pipeline class ("" without model_index.json) for readWanFolder, which needs it too.
func isWanFolder(dir string) (isWan bool, pipeline string, err error) {
	if pipeline, err = classNameOf(filepath.Join(dir, wanModelIndex)); err != nil {
		return false, "", err
	}
	if pipeline != "" {
		return strings.HasPrefix(pipeline, "Wan"), pipeline, nil
	}
	cls, err := classNameOf(filepath.Join(dir, dirTransformer, "config.json"))
	if err != nil {
		return false, "", err
	}
	return cls == wanTransformerCl, "", nil
}

// readWanFolder reads a Wan snapshot's configs only (transformer/, vae/, text_encoder/ config.json
// and model_index.json) and checks that they agree: VAE latent channels = the DiT's in_channels,
// UMT5 width = the DiT's text_dim. The variant, and with it the presets and the flow shift, follows
// from the configs: a DMD pipeline class (WanDMDPipeline) or a path naming FastWan selects the
// FastWan presets; 48 input channels the Wan2.2 TI2V-5B ones; a 5120-wide DiT the 14B ones; any
// other 16-channel DiT the 1.3B ones. cls is model_index.json's pipeline class, as isWanFolder
// read it.
func readWanFolder(dir, cls string) (*ModelSpec, error) {
	if _, err := os.Stat(filepath.Join(dir, dirTransformer2)); err == nil {
		return nil, fmt.Errorf("fastvideo: %s has %s/: Wan2.2 A14B (two mixture-of-experts transformers) is not supported; "+
			"use a Wan2.1 T2V, Wan2.2 TI2V-5B or FastWan snapshot", dir, dirTransformer2)
	}
	if strings.Contains(strings.ToLower(cls), "imagetovideo") || strings.Contains(strings.ToLower(cls), "i2v") {
		return nil, fmt.Errorf("fastvideo: %s: pipeline %q is image-to-video, which is not supported; use a text-to-video snapshot", dir, cls)
	}
	dit, err := wandit.ReadConfig(filepath.Join(dir, dirTransformer))
	if err != nil {
		return nil, fmt.Errorf("fastvideo: %w", err)
	}
	vae, err := wanvae.LoadConfig(filepath.Join(dir, dirVAE))
	if err != nil {
		return nil, fmt.Errorf("fastvideo: %w", err)
	}
	if vae.ZDim != dit.InChannels || dit.OutChannels != dit.InChannels {
		return nil, fmt.Errorf("fastvideo: %s: the VAE's z_dim %d must equal the transformer's in_channels %d and out_channels %d "+
			"(text-to-video; 36- or 96-channel transformers take image or video conditions, which are not supported)",
			filepath.Join(dir, dirVAE, "config.json"), vae.ZDim, dit.InChannels, dit.OutChannels)
	}
	te, err := umt5.LoadConfig(filepath.Join(dir, dirTextEncoder))
	if err != nil {
		return nil, fmt.Errorf("fastvideo: %w (a Wan snapshot's text_encoder/ holds the UMT5 config.json and weights)", err)
	}
	if te.DModel != dit.TextDim {
		return nil, fmt.Errorf("fastvideo: the text encoder's d_model %d (%s) differs from the transformer's text_dim %d",
			te.DModel, filepath.Join(dir, dirTextEncoder, "config.json"), dit.TextDim)
	}

	// The whole path, not the base name: a Hugging Face cache keeps the repository name above the
	// snapshot hash (models--FastVideo--FastWan2.1-T2V-1.3B-Diffusers/snapshots/<hash>).
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	dmd := strings.Contains(strings.ToLower(cls), "dmd") || strings.Contains(strings.ToLower(abs), "fastwan")
	name := "wan2.1-t2v-1.3b"
	switch {
	case dit.InChannels == 48 && dmd:
		name = "fastwan2.2-ti2v-5b"
	case dit.InChannels == 48:
		name = "wan2.2-ti2v-5b"
	case dit.HiddenSize() == 5120 && dmd:
		name = "fastwan2.1-t2v-14b-480p"
	case dit.HiddenSize() == 5120:
		name = "wan2.1-t2v-14b"
	case dmd:
		name = "fastwan2.1-t2v-1.3b"
	}
	var v wanVariant
	for _, c := range wanVariants {
		if c.name == name {
			v = c
		}
	}
	m := v.spec()
	m.Name, m.Dir = dir, dir
	m.Description = fmt.Sprintf("%s read from %s", strings.SplitN(v.description, " (", 2)[0], dir)
	m.Wan.DiT, m.Wan.VAE, m.Wan.TextEncoder = dit, vae, te
	switch {
	case cls == "":
		m.Notes = append(m.Notes, fmt.Sprintf("%s missing: pipeline class taken as %s", filepath.Join(dir, wanModelIndex),
			map[bool]string{true: "WanDMDPipeline (the path names FastWan)", false: "WanPipeline"}[dmd]))
	case dmd && !strings.Contains(strings.ToLower(cls), "dmd"):
		m.Notes = append(m.Notes, fmt.Sprintf("pipeline class %s, but the path names FastWan: the DMD sampler and the %s preset apply", cls, v.preset))
	}
	if d := dit.HiddenSize(); dit.InChannels == 16 && d != 1536 && d != 5120 {
		m.Notes = append(m.Notes, fmt.Sprintf("transformer width %d is neither 1.3B (1536) nor 14B (5120): the %s presets apply", d, v.preset))
	}
	return m, nil
}

// wanGeometryVAE is the geometry package's view of a Wan VAE config.
func wanGeometryVAE(c wanvae.Config) geometry.VAE {
	name := "Wan2.1"
	if c.IsResidual || c.PatchSize > 1 {
		name = "Wan2.2"
	}
	return geometry.VAE{Name: name, TemporalRatio: c.TemporalRatio(), SpatialRatio: c.SpatialRatio(), LatentChannels: c.ZDim}
}
