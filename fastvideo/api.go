package fastvideo

import (
	"errors"

	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
)

// The data a caller exchanges with the SDK lives in fastvideo/api (requests, results, plans, events),
// shared by this package and the model families; these are its public names here.
type (
	// Request is one generation (see api.Request).
	Request = api.Request
	// RequestError reports invalid input: the field, the value and what is allowed.
	RequestError = api.RequestError
	// Result is one finished generation.
	Result = api.Result
	// Latents are the final denoised latents of a generation.
	Latents = api.Latents
	// Timings are a generation's wall times by stage.
	Timings = api.Timings
	// GenerationPlan is what a request will run (Plan's result).
	GenerationPlan = api.Plan
	// Event is one progress report; ProgressFunc receives them.
	Event        = api.Event
	EventKind    = api.EventKind
	ProgressFunc = api.ProgressFunc
	// Preview is a denoising step's x0 estimate as a small picture (Request.Preview).
	Preview = api.Preview
	// Stage names a step of the generation pipeline.
	Stage = api.Stage
	// ModelInfo describes a model; Preset is one of its request presets.
	ModelInfo = family.ModelInfo
	Preset    = family.Preset
	// DType is a compute precision; MemoryPolicy decides which components stay resident.
	DType        = api.DType
	MemoryPolicy = family.MemoryPolicy
	// FrameFilter transforms decoded frames between decode and mux; Frames is a run of them.
	FrameFilter = family.FrameFilter
	Frames      = family.Frames
	// LoRA is an adapter merged into the DiT at load (WithLoRA); PlanLoRA what it changes
	// (GenerationPlan.LoRA).
	LoRA     = api.LoRA
	PlanLoRA = api.PlanLoRA
	// NoiseStream names an independent Gaussian stream of a seed.
	NoiseStream = familykit.NoiseStream
)

// Stages, event kinds, precisions, memory policies and noise streams.
const (
	StageValidate  = api.StageValidate
	StageCondition = api.StageCondition
	StageDenoise   = api.StageDenoise
	StageDecode    = api.StageDecode
	StageFilter    = api.StageFilter
	StageMux       = api.StageMux

	StageStart     = api.StageStart
	StageEnd       = api.StageEnd
	DenoiseStep    = api.DenoiseStep
	DecodeProgress = api.DecodeProgress
	Warning        = api.Warning

	DTypeAuto = api.DTypeAuto
	F32       = api.F32
	BF16      = api.BF16
	FP8       = api.FP8

	AutoMemory  = family.AutoMemory
	OneResident = family.OneResident
	AllResident = family.AllResident

	DecoderFull = api.DecoderFull
	DecoderTiny = api.DecoderTiny

	VideoNoise = familykit.VideoNoise
	AudioNoise = familykit.AudioNoise
	// RefineNoise is Wan refine's hand-off (seed+1) and stage-2 re-noise (seed+2) stream.
	RefineNoise = familykit.RefineNoise
)

// Ptr returns a pointer to v, for optional fields such as Request.Seed.
func Ptr[T any](v T) *T { return &v }

// GaussianNoise fills n standard-normal float32 values for (seed, stream): the SDK's documented
// initial noise (familykit.GaussianNoise says how it is drawn; it cannot reproduce torch.randn).
func GaussianNoise(seed int64, stream NoiseStream, n int) []float32 {
	return familykit.GaussianNoise(seed, stream, n)
}

// ErrDoesNotFit is wrapped by New's error when the memory policy "auto" finds a component that cannot
// run on the device even with nothing else kept beside it (the message names it, the memory and the
// fixes): the model would load and then fail in its first step.
var ErrDoesNotFit = errors.New("the model does not fit this device's memory")
