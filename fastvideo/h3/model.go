// Package h3 is the MiniMax H3 model family of the SDK (MiniMax H3 and its 4-step FastH3 students:
// text in, video with synchronized stereo audio out), behind the fastvideo/family contract: the
// built-in models and presets, reading snapshot folders, resolving and planning requests, and the
// condition, denoise and decode stages.
//
// A run: condition (Qwen3 tokenizer, the Qwen3-VL text stack streamed layer by layer, optional
// prompt cache), denoise (the joint audio-video DiT, the video ladder at shift 12 and the audio
// ladder at shift 3, AdaLN tables computed once for the visited timesteps), decode (the audio VAE
// on the stereo rows, then the video VAE clip by clip into the encoder). Upstream:
// fastvideo/pipelines/basic/minimax_h3/ and fastvideo/models/dits/minimax_h3.py in FastVideo.
package h3

import (
	"fmt"
	"sort"

	h3dit "fastvideo/dit/h3"
	"fastvideo/dit/h3/packing"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/internal/textenc/qwen3vl"
	"fastvideo/internal/weights"
	"fastvideo/schedule"
	"fastvideo/vae/h3audio"
	"fastvideo/vae/h3video"
)

// Spec describes a MiniMax H3 model for planning, validation and loading: the architecture
// configs, scheduler shifts and presets, from the built-in registry or a snapshot folder's
// configs (read once, then passed down).
type Spec struct {
	family.ModelInfo

	// DiT, VAE and AudioVAE are the model packages' own configs (transformer/, vae/ and
	// audio_vae/config.json), so that planning and loading share one definition.
	DiT      h3dit.Config
	VAE      h3video.Config
	AudioVAE h3audio.Config

	VideoShift, AudioShift float64
	// DMDRungs is set when the checkpoint's fastvideo_inference.json declares scheduler shifts: the
	// ladder is then these trained rungs.
	DMDRungs []int
	// VSAGates is set for FastH3 students, whose transformer carries the trained
	// attn.to_gate_compress matrices (an extra GEMM per block).
	VSAGates bool
	// VSA is the VSA default of a FastH3 checkpoint: as trained (trainedVSA), or with its
	// fastvideo_inference.json's vsa_sparsity / vsa_tile_size.
	VSA familykit.VSA
	// AdaLN is the converted checkpoint's fixed AdaLN cache manifest (nil: computed per run).
	AdaLN *h3dit.AdaLNManifest
	// DiTStoredBytes are the tensor bytes of a converted (quantized) transformer checkpoint, which loads
	// as stored (packed codes, scales and biases); 0 for a released one, sized from its config.
	DiTStoredBytes int64
	// WeightsDType is the DiT checkpoint precision: BF16 (the release: BF16 with the five boundary
	// modules in FP32) or F32.
	WeightsDType api.DType

	// MinAlignedFrames/MaxAlignedFrames bound the aligned clip length: the released models
	// generate 5-15 s (124..345 frames at 24 fps).
	MinAlignedFrames, MaxAlignedFrames int
	// MaxSide bounds each output side in pixels (upstream's canvases reach 512x2016; beyond MaxSide a
	// clip outgrows any single device).
	MaxSide int

	presets map[string]family.Preset

	// Vision and Processor are the Qwen3-VL vision tower (text_encoder/config.json) and image
	// processor (processor/preprocessor_config.json) that FL2VA keyframes go through; nil when
	// the model takes no keyframes (a snapshot without processor/).
	Vision    *qwen3vl.VisionConfig
	Processor *qwen3vl.ProcessorConfig
	// KeyframeCanvas sizes a keyframe request without a size from the first keyframe's aspect
	// (packing.ResolveCanvasSize, upstream's rule); tiny-h3 keeps its preset's canvas instead.
	KeyframeCanvas bool

	// rife is the tiny model's random RIFE (nil for released models: WithRIFE gives theirs).
	rife weights.Source
}

// InterpolatorWeights are the tiny model's RIFE weights (framefilter.BuiltinInterpolator), nil for others.
func (s *Spec) InterpolatorWeights() weights.Source { return s.rife }

// Info describes the model.
func (s *Spec) Info() family.ModelInfo { return s.ModelInfo }

// Released limits.
const (
	releasedMinFrames = 124
	releasedMaxFrames = 345
	releasedMaxSide   = 2048 // upstream's 4:1 canvas is 512x2016
	// MaxPromptTokens is the text length the released configs carry (text_len 1024); the inference
	// path does not truncate, so longer prompts are refused rather than run at unbounded cost.
	MaxPromptTokens = 1024
	tinyMaxSide     = 256
)

// Presets. Upstream's minimax_h3_t2va preset is 768x1344x124 with 50 sigma grid points (49
// forwards); the FastH3 examples run 4 forwards, at 480x832 (MLX mlx_fasth3.py) or 768x1344 (CUDA
// basic_fasth3.py).
var (
	baseH3Presets = []family.Preset{
		{Name: "minimax_h3_t2va", Description: "MiniMax H3 text-to-video with stereo audio at 768p",
			Height: 768, Width: 1344, NumFrames: 124, FPS: 24, Steps: schedule.H3BaseSteps, GuidanceScale: 1},
	}
	fastH3Presets = []family.Preset{
		{Name: "fasth3_t2va", Description: "FastH3 4-step text-to-video with stereo audio at 480x832 (MLX example defaults)",
			Height: 480, Width: 832, NumFrames: 124, FPS: 24, Steps: schedule.FastH3Steps, GuidanceScale: 1},
		{Name: "fasth3_t2va_768p", Description: "FastH3 4-step text-to-video with stereo audio at 768x1344 (CUDA example defaults)",
			Height: 768, Width: 1344, NumFrames: 124, FPS: 24, Steps: schedule.FastH3Steps, GuidanceScale: 1},
	}
	tinyH3Presets = []family.Preset{
		{Name: "tiny_t2va", Description: "64x96, 22 frames, 4 steps",
			Height: 64, Width: 96, NumFrames: 22, FPS: 24, Steps: schedule.FastH3Steps, GuidanceScale: 1},
	}
)

// setPresets installs the presets (copies, so a folder's step override never leaks into another
// spec).
func (s *Spec) setPresets(defaultName string, presets []family.Preset) {
	s.DefaultPreset = defaultName
	s.Presets = append([]family.Preset(nil), presets...)
	s.presets = map[string]family.Preset{}
	for _, p := range s.Presets {
		s.presets[p.Name] = p
	}
}

// setKeyframes enables FL2VA with the vision tower and image processor given (nil: none).
func (s *Spec) setKeyframes(vc *qwen3vl.VisionConfig, pc *qwen3vl.ProcessorConfig) {
	s.Vision, s.Processor = vc, pc
	s.FirstImage, s.LastImage = vc != nil && pc != nil, vc != nil && pc != nil
}

// released is a released model's spec before its name, presets and variant are set.
func released() *Spec {
	s := &Spec{
		ModelInfo: family.ModelInfo{Family: FamilyName, AudioSampleRate: h3audio.DefaultConfig().SamplingRate,
			AudioChannels: packing.AudioChannels},
		DiT: h3dit.ReleaseConfig(), VAE: h3video.DefaultConfig(), AudioVAE: h3audio.DefaultConfig(),
		VideoShift: schedule.H3VideoShift, AudioShift: schedule.H3AudioShift, WeightsDType: api.BF16,
		MinAlignedFrames: releasedMinFrames, MaxAlignedFrames: releasedMaxFrames, MaxSide: releasedMaxSide,
		KeyframeCanvas: true,
	}
	vc, pc := qwen3vl.Q32BVision(), qwen3vl.Q32BProcessor()
	s.setKeyframes(&vc, &pc)
	return s
}

// builtins are the family's built-in models, each made fresh on lookup.
var builtins = map[string]func() *Spec{
	"fasth3": func() *Spec {
		s := released()
		s.Name, s.Variant, s.VSAGates = "fasth3", "fasth3", true
		s.VSA = trainedVSA
		s.Description = "FastH3 (FastVideo/FastVideo-Minimax-FastH3-Preview): 4-step DMD student of MiniMax H3 with VSA gates"
		s.setPresets("fasth3_t2va", fastH3Presets)
		return s
	},
	"h3": func() *Spec {
		s := released()
		s.Name, s.Variant = "h3", "h3"
		s.Description = "MiniMax H3 (MiniMaxAI/MiniMax-H3): 33.1B joint audio-video DiT, 49-step base sampler"
		s.setPresets("minimax_h3_t2va", baseH3Presets)
		return s
	},
	TinyName: tinySpec,
}

// Family is MiniMax H3 behind the family contract.
type Family struct{}

// Name is the family's identifier.
func (Family) Name() string { return FamilyName }

// Builtins lists the built-in model names.
func (Family) Builtins() []string {
	var out []string
	for k := range builtins {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Lookup returns a built-in model.
func (Family) Lookup(name string) (family.Model, bool) {
	if f, ok := builtins[name]; ok {
		return f(), true
	}
	return nil, false
}

// FolderLayout names the files of an H3 snapshot.
func (Family) FolderLayout() string {
	return fmt.Sprintf("a MiniMax H3 snapshot holds %s/config.json, %s/config.json, %s/config.json, %s/, %s/ and scheduler/scheduler_config.json",
		familykit.DirTransformer, familykit.DirVAE, dirAudioVAE, familykit.DirTextEncoder, familykit.DirTokenizer)
}
