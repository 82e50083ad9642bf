package family

import (
	"context"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"fastvideo/attention"
	"fastvideo/fastvideo/api"
	"fastvideo/internal/media"
	"fastvideo/quant"
)

// Family is one model family (MiniMax H3, Wan, ...): its built-in models and how to recognize and
// read its snapshot folders.
type Family interface {
	// Name is the family's identifier ("minimax_h3", "wan"), as in ModelInfo.Family and Plan.Family.
	Name() string
	// Builtins lists the family's built-in model names.
	Builtins() []string
	// Lookup returns a built-in model by name or alias; ok is false when the name is not the
	// family's.
	Lookup(name string) (m Model, ok bool)
	// Detect reports whether dir looks like one of the family's snapshot folders, reading only
	// small files.
	Detect(dir string) (bool, error)
	// ReadFolder reads a snapshot folder's configs (nothing heavy). A missing required file is a
	// *RequestError for the model field.
	ReadFolder(dir string) (Model, error)
	// FolderLayout names the files that make a folder one of the family's snapshots, for the
	// message that a folder is no model at all.
	FolderLayout() string
}

// Model is one model of a family, built in or read from a folder: it resolves and plans requests
// and opens its components.
type Model interface {
	Info() ModelInfo
	// Resolve applies the preset and validates req; with needPrompt false the prompt may be empty
	// (planning). Invalid input is a *RequestError.
	Resolve(req api.Request, needPrompt bool) (Resolution, error)
	// Open prepares generation on engine e: it checks everything a run needs that can fail before
	// weights are read, and loads nothing heavy.
	Open(e *Engine) (Components, error)
}

// Resolution is a validated request with the preset applied and its geometry derived.
type Resolution interface {
	Common() *Resolved
	// Plan computes what the request will run; dtype DTypeAuto sizes the weights at the
	// checkpoint's precision.
	Plan(dtype api.DType) (*api.Plan, error)
}

// Components are an opened model's heavyweight parts, loaded on demand by a run's stages.
type Components interface {
	// Describe names the model's source for messages ("tiny-h3 (random weights, in memory)", a folder).
	Describe() string
	// Check re-validates, cheaply, that the files a run needs are still there.
	Check() error
	// Start checks the run-level parts of r that need the components (nothing is loaded) and
	// returns the run's stages.
	Start(r Resolution, s *Session) (Stages, error)
	// Close releases the resident components.
	Close() error
}

// Stages are one run's family-specific stages, called in order by the pipeline, each after the
// previous one succeeded. Each stage checks ctx between its steps (denoising steps, clips).
type Stages interface {
	Condition(ctx context.Context) error
	Denoise(ctx context.Context) error
	// DecodeAudio returns the waveform (planar: one slice per channel) when the run needs it, for
	// the file's audio track or Result.Audio; nil for video-only models and for runs that need no
	// audio. It runs before Decode, in the same decode stage, so that the encoder is started with
	// the whole audio track and muxes it in the same ffmpeg pass as the frames; an audio decoder
	// is small next to the video's, so decoding it first delays the first frame little.
	DecodeAudio(ctx context.Context) ([][]float32, error)
	// Decode decodes the video latents into sink, frames as soon as they exist, so that a long clip
	// is never held whole (sink is nil when nothing needs frames).
	Decode(ctx context.Context, sink FrameSink) error
}

// ModelInfo describes a model for users and messages.
type ModelInfo struct {
	Name        string `json:"name"`   // registry name, or the folder path
	Family      string `json:"family"` // the Family's Name
	Variant     string `json:"variant"`
	Description string `json:"description"`
	Dir         string `json:"dir,omitempty"` // model folder, when read from disk

	DefaultPreset string   `json:"default_preset"`
	Presets       []Preset `json:"presets"`
	// AudioSampleRate and AudioChannels describe the generated audio (0 for video-only models).
	AudioSampleRate int `json:"audio_sample_rate,omitempty"`
	AudioChannels   int `json:"audio_channels,omitempty"`
	// FirstImage and LastImage say which keyframes the model conditions on (Request.Image and
	// Request.LastImage); a request with another is invalid.
	FirstImage bool     `json:"first_image,omitempty"`
	LastImage  bool     `json:"last_image,omitempty"`
	Notes      []string `json:"notes,omitempty"` // defaults taken when a folder omits a file
}

// Preset holds a model's request defaults (FastVideo's presets), the part every family shares.
type Preset struct {
	Name          string  `json:"name"`
	Description   string  `json:"description"`
	Height        int     `json:"height"`
	Width         int     `json:"width"`
	NumFrames     int     `json:"num_frames"`
	FPS           int     `json:"fps"`
	Steps         int     `json:"num_inference_steps"` // DiT forwards
	GuidanceScale float64 `json:"guidance_scale"`
	Seed          int64   `json:"seed"`
}

// RunDType is the dtype an engine's runs report and size their weights in: FP8 when it runs the FP8
// path, else its compute dtype.
func (e *Engine) RunDType() api.DType {
	if e.FP8 {
		return api.FP8
	}
	return api.DTypeOf(e.DType)
}

// MemoryPolicy decides how many heavyweight components stay resident.
type MemoryPolicy string

const (
	// AutoMemory (the default) decides for each component (ChooseResidency): those that cost most
	// to bring back stay resident while every other one still runs beside them with room for a
	// generation's activations, in what the accelerator (or, on the pure-Go backend, the host) can
	// give; the rest stream or load per call. New decides once.
	AutoMemory MemoryPolicy = "auto"
	// OneResident loads the text encoder, the DiT and the VAEs one at a time and
	// releases each at the end of the stage that loaded it: peak memory is the largest component,
	// not their sum.
	OneResident MemoryPolicy = "one_resident"
	// AllResident keeps every component loaded between Generate calls, trading memory for the
	// load time of the next request.
	AllResident MemoryPolicy = "all_resident"
)

// Engine is what a generator runs on, fixed at New: the compute backend and dtype, the memory
// policy and the prompt cache.
type Engine struct {
	Backend compute.Backend
	// BackendSpec is the resolved backend, e.g. "go:ops_sequential".
	BackendSpec string
	// Accelerated is set on accelerator backends (XLA), where bf16 and fused attention apply.
	Accelerated bool
	DType       dtypes.DType
	Memory      MemoryPolicy
	// Residency is AutoMemory's decision per component (New fills it; see Keeps).
	Residency      []api.ComponentResidency
	PromptCacheDir string // "" disables the prompt cache
	// Media are the ffmpeg and ffprobe executables; X264Preset the encoder's speed preset ("":
	// media.DefaultPreset).
	Media      media.Tools
	X264Preset string
	// Attention and QuantDispatch are the kernel choices every model is built with.
	Attention     attention.Options
	QuantDispatch quant.Dispatch
	// FP8 runs the DiT's core linears in float8 (DType FP8); families that have no FP8 path refuse it.
	FP8 bool
	// RandomWeights, when set, replaces every checkpoint by weights drawn from this seed (on the
	// device where the model is large): a built-in model runs at release size without its
	// download, a folder at the geometry of its configs without its weight files. The output is
	// noise; the work and its timings are real.
	RandomWeights *int64
	// DeviceMemory reads the accelerator's memory in bytes: in use (every process's, the XLA pool
	// included) and the most this process may use (the device's, capped by the allocator's
	// memory fraction); nil where the backend has no such statistics.
	DeviceMemory func() (used, limit uint64, err error)
	// AllocatorMemory reads the bytes the XLA allocator holds for live buffers on device 0 (nil where
	// the binary's go-xla has no statistics: the GPU build, bench/build_gpu.sh, adds them). Results
	// report its peak; the memory policy keeps reading DeviceMemory, which counts other processes too.
	AllocatorMemory func() (inUse uint64, err error)
	// HostMemory reads the host memory still available, in bytes: the pure-Go backend's device
	// (nil where unknown).
	HostMemory func() (available uint64, err error)
	// Devices is how many accelerators of the host the run spreads over (0 or 1: one).
	Devices int
	// LoRA are the adapters merged into the DiT at load, in order (the family's Open validates them).
	LoRA []api.LoRA
	// TinyDecoderPath is the TAEHV checkpoint of Request.Decoder "tiny" and of previews ("": the
	// model's own, <model dir>/taehv/<variant>.safetensors, or the tiny models' built-in weights).
	TinyDecoderPath string
}

// SpecSplitter is implemented by Models whose layout over devices follows from their specification
// alone, so that a plan (nothing opened, no backend) shows it as a generator would run it.
type SpecSplitter interface {
	PlanDevices(devices int, dt dtypes.DType) (*api.DevicePlan, error)
}

// DecoderChecker is implemented by Components that check, loading nothing, that a resolution's
// decoder choices (Request.Decoder "tiny", Request.Preview) have their weights, so that a plan
// refuses what a run would.
type DecoderChecker interface {
	CheckDecoder(r Resolution) error
}

// DeviceSplitter is implemented by Components that can spread their model over several devices:
// DevicePlan says what each of devices devices holds, or why the model does not split that way.
type DeviceSplitter interface {
	DevicePlan(devices int) (*api.DevicePlan, error)
}
