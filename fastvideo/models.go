package fastvideo

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"fastvideo/dit/h3"
	"fastvideo/dit/h3/packing"
	"fastvideo/internal/safetensors"
	"fastvideo/schedule"
	"fastvideo/vae/h3audio"
	"fastvideo/vae/h3video"
)

// ModelSpec describes a model for planning and validation: the architecture
// configs, scheduler shifts and presets. It comes from the built-in registry
// (LookupModel) or from a model folder's configs (ReadModelFolder); nothing
// heavy is read.
type ModelSpec struct {
	Name        string // registry name, or the folder path
	Family      string // FamilyH3 or FamilyWan
	Variant     string // "fasth3", "h3", "tiny-h3", "wan2.1-t2v-1.3b", "tiny-wan", ...
	Description string
	Dir         string // model folder, when read from disk

	// Wan holds the Wan family's configs (nil for MiniMax H3, whose configs are the fields below).
	Wan *WanSpec

	// DiT is transformer/config.json in the DiT package's own type, whose decoder applies the release
	// defaults, so that planning and loading share one definition.
	DiT h3.Config
	// VAE and AudioVAE are vae/ and audio_vae/config.json as their packages define them; planning
	// reads only the geometry (latent channels, strides, sampling rate).
	VAE      h3video.Config
	AudioVAE h3audio.Config

	VideoShift, AudioShift float64
	// DMDRungs is set when the checkpoint's fastvideo_inference.json declares
	// scheduler shifts (h3.md §5.5): the ladder is then these trained rungs.
	DMDRungs []int
	// VSAGates is set for FastH3 students, whose transformer carries the 50
	// trained attn.to_gate_compress matrices (an extra GEMM per block).
	VSAGates bool
	// WeightsDType is the DiT checkpoint precision: BF16 (the release: BF16
	// with the five boundary modules in FP32) or F32.
	WeightsDType DType

	// MinAlignedFrames/MaxAlignedFrames bound the aligned clip length: the
	// released models generate 5-15 s (124..345 frames at 24 fps).
	MinAlignedFrames, MaxAlignedFrames int

	DefaultPreset string
	Presets       map[string]Preset
	Notes         []string // defaults taken when a folder omits a file
}

// Model families.
const (
	FamilyH3  = "minimax_h3" // MiniMax H3 and FastH3: joint audio-video DiT
	FamilyWan = "wan"        // Wan2.1 / Wan2.2 TI2V and the FastWan students: video only
)

// Preset holds a model's request defaults (FastVideo api presets).
type Preset struct {
	Name          string  `json:"name"`
	Description   string  `json:"description"`
	Height        int     `json:"height"`
	Width         int     `json:"width"`
	NumFrames     int     `json:"num_frames"`
	FPS           int     `json:"fps"`
	Steps         int     `json:"num_inference_steps"` // DiT forwards (Wan DMD presets: see Sampler)
	GuidanceScale float64 `json:"guidance_scale"`
	Seed          int64   `json:"seed"`

	// Wan presets only.
	//
	// Sampler is SamplerUniPC (the base pipelines: UniPC with classifier-free guidance when
	// GuidanceScale > 1) or SamplerDMD (the FastWan students: DMDSteps, one forward each, no
	// guidance; Steps and GuidanceScale are upstream's preset values, which the DMD loop ignores).
	Sampler        Sampler  `json:"sampler,omitempty"`
	DMDSteps       []int    `json:"dmd_denoising_steps,omitempty"`
	NegativePrompt string   `json:"negative_prompt,omitempty"`
	ModelIDs       []string `json:"model_ids,omitempty"` // Hugging Face ids upstream maps to the preset
}

// Presets. Upstream's minimax_h3_t2va preset is 768x1344x124 with 50 sigma
// grid points (49 forwards); the FastH3 examples run 4 forwards, at 480x832
// (MLX mlx_fasth3.py) or 768x1344 (CUDA basic_fasth3.py).
func h3Presets() map[string]Preset {
	return map[string]Preset{
		"minimax_h3_t2va": {Name: "minimax_h3_t2va", Description: "MiniMax H3 text-to-video with stereo audio at 768p",
			Height: 768, Width: 1344, NumFrames: 124, FPS: 24, Steps: schedule.H3BaseSteps, GuidanceScale: 1},
	}
}

func fastH3Presets() map[string]Preset {
	return map[string]Preset{
		"fasth3_t2va": {Name: "fasth3_t2va", Description: "FastH3 4-step text-to-video with stereo audio at 480x832 (MLX example defaults)",
			Height: 480, Width: 832, NumFrames: 124, FPS: 24, Steps: schedule.FastH3Steps, GuidanceScale: 1},
		"fasth3_t2va_768p": {Name: "fasth3_t2va_768p", Description: "FastH3 4-step text-to-video with stereo audio at 768x1344 (CUDA example defaults)",
			Height: 768, Width: 1344, NumFrames: 124, FPS: 24, Steps: schedule.FastH3Steps, GuidanceScale: 1},
	}
}

// Built-in models.
var registry = map[string]func() *ModelSpec{
	"fasth3": func() *ModelSpec {
		return &ModelSpec{
			Name: "fasth3", Family: FamilyH3, Variant: "fasth3",
			Description: "FastH3 (FastVideo/FastVideo-Minimax-FastH3-Preview): 4-step DMD student of MiniMax H3 with VSA gates",
			DiT:         h3.ReleaseConfig(), VAE: h3video.DefaultConfig(), AudioVAE: h3audio.DefaultConfig(),
			VideoShift: schedule.H3VideoShift, AudioShift: schedule.H3AudioShift, VSAGates: true, WeightsDType: BF16,
			MinAlignedFrames: 124, MaxAlignedFrames: 345,
			DefaultPreset: "fasth3_t2va", Presets: fastH3Presets(),
		}
	},
	"h3": func() *ModelSpec {
		return &ModelSpec{
			Name: "h3", Family: FamilyH3, Variant: "h3",
			Description: "MiniMax H3 (MiniMaxAI/MiniMax-H3): 33.1B joint audio-video DiT, 49-step base sampler",
			DiT:         h3.ReleaseConfig(), VAE: h3video.DefaultConfig(), AudioVAE: h3audio.DefaultConfig(),
			VideoShift: schedule.H3VideoShift, AudioShift: schedule.H3AudioShift, WeightsDType: BF16,
			MinAlignedFrames: 124, MaxAlignedFrames: 345,
			DefaultPreset: "minimax_h3_t2va", Presets: h3Presets(),
		}
	},
	"tiny-h3": func() *ModelSpec {
		return &ModelSpec{
			Name: "tiny-h3", Family: FamilyH3, Variant: "tiny-h3",
			Description: "The H3 architecture at toy width with seeded random weights made in memory (no files; its output is noise), for tests and smoke runs",
			DiT:         tinyDiT(), VAE: tinyVideoVAE(), AudioVAE: tinyAudioVAE(),
			VideoShift: schedule.H3VideoShift, AudioShift: schedule.H3AudioShift, WeightsDType: F32,
			// Short clips are the point of a toy model: any aligned length up
			// to the released maximum.
			MinAlignedFrames: 5, MaxAlignedFrames: 345,
			DefaultPreset: "tiny_t2va",
			Presets: map[string]Preset{"tiny_t2va": {Name: "tiny_t2va", Description: "64x96, 22 frames, 4 steps",
				Height: 64, Width: 96, NumFrames: 22, FPS: 24, Steps: schedule.FastH3Steps, GuidanceScale: 1}},
		}
	},
}

// Models lists the built-in model names.
func Models() []string {
	var out []string
	for k := range registry {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// modelsByFamily lists the built-in names family by family, for error messages.
func modelsByFamily() string {
	byFamily := map[string][]string{}
	for _, name := range Models() {
		f := registry[name]().Family
		byFamily[f] = append(byFamily[f], name)
	}
	return fmt.Sprintf("%s (MiniMax H3); %s (Wan)", strings.Join(byFamily[FamilyH3], ", "), strings.Join(byFamily[FamilyWan], ", "))
}

// LookupModel returns a built-in model ("fasth3", "h3", "tiny-h3", "tiny-wan", "wan2.1-t2v-1.3b",
// ...; Wan models also under their Hugging Face ids) or, for a directory, the spec read from its
// configs (a MiniMax H3 or a Wan snapshot).
func LookupModel(name string) (*ModelSpec, error) {
	if f, ok := registry[name]; ok {
		return f(), nil
	}
	if st, err := os.Stat(name); err == nil && st.IsDir() {
		return ReadModelFolder(name)
	}
	if f, ok := registry[wanModelAliases()[strings.ToLower(name)]]; ok {
		return f(), nil
	}
	return nil, &RequestError{Field: "model", Value: name,
		Allowed: modelsByFamily() + ", or a model folder: MiniMax H3 (transformer/, vae/, audio_vae/, scheduler/) " +
			"or Wan (model_index.json, transformer/, vae/, text_encoder/, tokenizer/)"}
}

func (m *ModelSpec) preset(name string) (Preset, error) {
	if name == "" {
		name = m.DefaultPreset
	}
	p, ok := m.Presets[name]
	if !ok {
		var names []string
		for k := range m.Presets {
			names = append(names, k)
		}
		sort.Strings(names)
		return Preset{}, &RequestError{Field: "preset", Value: name,
			Allowed: fmt.Sprintf("one of %s for model %s (empty: %s)", strings.Join(names, ", "), m.Name, m.DefaultPreset)}
	}
	return p, nil
}

// inferenceContract is fastvideo_inference.json (h3.md §5.5).
type inferenceContract struct {
	SchemaVersion       string   `json:"schema_version"`
	VideoShift          *float64 `json:"video_scheduler_shift"`
	AudioShift          *float64 `json:"audio_scheduler_shift"`
	DMDDenoisingSteps   []int    `json:"dmd_denoising_steps"`
	TransformerForwards int      `json:"transformer_forwards"`
	NumInferenceSteps   int      `json:"num_inference_steps"`
}

// ReadModelFolder reads a diffusers-style H3 snapshot's configs only:
// transformer/config.json, vae/config.json, audio_vae/config.json,
// scheduler/scheduler_config.json and audio_scheduler/scheduler_config.json,
// plus the transformer's weight index (to detect FastH3's VSA gates) and an
// optional fastvideo_inference.json. Fields a config omits keep the released
// values.
//
// A Wan snapshot (model_index.json naming a Wan pipeline, or a WanTransformer3DModel transformer) is
// read by readWanFolder instead.
func ReadModelFolder(dir string) (*ModelSpec, error) {
	if isWan, pipeline, err := isWanFolder(dir); err != nil {
		return nil, err
	} else if isWan {
		return readWanFolder(dir, pipeline)
	}
	m := &ModelSpec{
		Name: dir, Dir: dir, Family: FamilyH3, Variant: "h3",
		DiT: h3.ReleaseConfig(), VAE: h3video.DefaultConfig(), AudioVAE: h3audio.DefaultConfig(),
		VideoShift: schedule.H3VideoShift, AudioShift: schedule.H3AudioShift, WeightsDType: BF16,
		MinAlignedFrames: 124, MaxAlignedFrames: 345,
	}
	// The DiT's own reader, so that -plan and New see the config the loader will use, including a
	// converted transformer/ whose config lives in its quantization manifest. The video VAE is read
	// leniently here (planning needs only its geometry); New checks it strictly (openFolder).
	var err error
	if m.DiT, err = h3.ReadConfig(filepath.Join(dir, dirTransformer)); err != nil {
		return nil, fmt.Errorf("fastvideo: %w", err)
	}
	if err := readJSON(filepath.Join(dir, dirVAE, "config.json"), &m.VAE, true); err != nil {
		return nil, err
	}
	if m.VAE.SpatialRatio() != packing.VAESpatialRatio || m.VAE.LatentChannels != m.DiT.InChannels {
		return nil, fmt.Errorf("fastvideo: %s: spatial ratio %d and %d latent channels do not match the H3 geometry (ratio %d, %d DiT input channels)",
			filepath.Join(dir, "vae", "config.json"), m.VAE.SpatialRatio(), m.VAE.LatentChannels, packing.VAESpatialRatio, m.DiT.InChannels)
	}
	if m.AudioVAE, err = h3audio.ReadConfig(filepath.Join(dir, dirAudioVAE)); err != nil {
		return nil, fmt.Errorf("fastvideo: %w", err)
	}
	if m.AudioVAE.LatentChannels != m.DiT.AudioInChannels {
		return nil, fmt.Errorf("fastvideo: %s: %d latent channels, but the DiT takes %d audio channels",
			filepath.Join(dir, "audio_vae", "config.json"), m.AudioVAE.LatentChannels, m.DiT.AudioInChannels)
	}
	if m.VideoShift, err = readShift(filepath.Join(dir, "scheduler", "scheduler_config.json"), true); err != nil {
		return nil, err
	}
	audioPath := filepath.Join(dir, "audio_scheduler", "scheduler_config.json")
	if shift, err := readShift(audioPath, false); err != nil {
		return nil, err
	} else if shift > 0 {
		m.AudioShift = shift
	} else {
		m.Notes = append(m.Notes, fmt.Sprintf("%s missing: audio shift %g (released)", audioPath, m.AudioShift))
	}
	if m.VSAGates, err = hasGateWeights(filepath.Join(dir, "transformer")); err != nil {
		return nil, err
	}
	if err := m.readContract(dir); err != nil {
		return nil, err
	}
	if m.VSAGates || m.DMDRungs != nil {
		m.Variant, m.DefaultPreset, m.Presets = "fasth3", "fasth3_t2va", fastH3Presets()
		m.Description = "FastH3 student read from " + dir
	} else {
		m.DefaultPreset, m.Presets = "minimax_h3_t2va", h3Presets()
		m.Description = "MiniMax H3 read from " + dir
	}
	if n := len(m.DMDRungs); n > 0 {
		for name, p := range m.Presets {
			p.Steps = n
			m.Presets[name] = p
		}
	}
	return m, nil
}

func readJSON(path string, v any, required bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		if !required && errors.Is(err, os.ErrNotExist) {
			return err
		}
		return fmt.Errorf("fastvideo: reading %s: %w (a MiniMax H3 model folder holds transformer/, vae/, audio_vae/ and scheduler/ configs)", path, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("fastvideo: parsing %s: %w", path, err)
	}
	return nil
}

// readShift reads a MiniMaxH3Scheduler config; 0 when optional and absent.
func readShift(path string, required bool) (float64, error) {
	var c struct {
		ClassName string   `json:"_class_name"`
		Shift     *float64 `json:"shift"`
	}
	if err := readJSON(path, &c, required); err != nil {
		if !required && errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	if c.ClassName != "" && c.ClassName != "MiniMaxH3Scheduler" {
		return 0, fmt.Errorf("fastvideo: %s: scheduler %q, want MiniMaxH3Scheduler (is this a MiniMax H3 folder?)", path, c.ClassName)
	}
	if c.Shift == nil || !(*c.Shift > 0) {
		return 0, fmt.Errorf("fastvideo: %s: shift must be a positive number", path)
	}
	return *c.Shift, nil
}

// hasGateWeights looks for attn.to_gate_compress in the transformer's weight
// names (index JSON, or the header of a single safetensors file).
func hasGateWeights(dir string) (bool, error) {
	const gate = "to_gate_compress"
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	err := readJSON(filepath.Join(dir, "diffusion_pytorch_model.safetensors.index.json"), &index, false)
	switch {
	case err == nil:
		for k := range index.WeightMap {
			if strings.Contains(k, gate) {
				return true, nil
			}
		}
		return false, nil
	case !errors.Is(err, os.ErrNotExist):
		return false, err
	}
	single := filepath.Join(dir, "diffusion_pytorch_model.safetensors")
	if _, err := os.Stat(single); err != nil {
		return false, nil // configs only: nothing to inspect
	}
	f, err := safetensors.Open(single)
	if err != nil {
		return false, fmt.Errorf("fastvideo: reading the header of %s: %w", single, err)
	}
	defer f.Close()
	for _, k := range f.Names() {
		if strings.Contains(k, gate) {
			return true, nil
		}
	}
	return false, nil
}

// readContract applies a shift-declaring fastvideo_inference.json (at the
// folder root or in transformer/); four-step sidecars without shifts keep
// the uniform ladder.
func (m *ModelSpec) readContract(dir string) error {
	for _, p := range []string{filepath.Join(dir, "fastvideo_inference.json"), filepath.Join(dir, "transformer", "fastvideo_inference.json")} {
		var c inferenceContract
		if err := readJSON(p, &c, false); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return err
		}
		if c.VideoShift == nil && c.AudioShift == nil {
			return nil
		}
		switch {
		case c.SchemaVersion != "fasth3-inference-contract-v1":
			return fmt.Errorf("fastvideo: %s: unsupported schema_version %q (want fasth3-inference-contract-v1)", p, c.SchemaVersion)
		case c.VideoShift == nil || c.AudioShift == nil:
			return fmt.Errorf("fastvideo: %s must declare both video_scheduler_shift and audio_scheduler_shift", p)
		case c.TransformerForwards != len(c.DMDDenoisingSteps) || c.NumInferenceSteps != len(c.DMDDenoisingSteps)+1:
			return fmt.Errorf("fastvideo: %s: transformer_forwards must equal the %d DMD rungs and num_inference_steps the rungs plus one",
				p, len(c.DMDDenoisingSteps))
		}
		if _, err := schedule.NewH3LadderFromDMDSteps(*c.VideoShift, c.DMDDenoisingSteps); err != nil {
			return fmt.Errorf("fastvideo: %s: %w", p, err)
		}
		if _, err := schedule.NewH3LadderFromDMDSteps(*c.AudioShift, c.DMDDenoisingSteps); err != nil {
			return fmt.Errorf("fastvideo: %s: %w", p, err)
		}
		m.VideoShift, m.AudioShift, m.DMDRungs = *c.VideoShift, *c.AudioShift, c.DMDDenoisingSteps
		return nil
	}
	return nil
}
