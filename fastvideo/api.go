package fastvideo

import (
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
)

// The types every model family shares live in fastvideo/family, the contract between this package
// and the families; they are the SDK's public types under these names.
type (
	// Request is one generation (see family.Request).
	Request = family.Request
	// RequestError reports invalid input: the field, the value and what is allowed.
	RequestError = family.RequestError
	// Result is one finished generation.
	Result = family.Result
	// Latents are the final denoised latents of a generation.
	Latents = family.Latents
	// Timings are a generation's wall times by stage.
	Timings = family.Timings
	// GenerationPlan is what a request will run (Plan's result).
	GenerationPlan = family.Plan
	// Event is one progress report; ProgressFunc receives them.
	Event        = family.Event
	EventKind    = family.EventKind
	ProgressFunc = family.ProgressFunc
	// Preview is a denoising step's x0 estimate as a small picture (Request.Preview).
	Preview = family.Preview
	// Stage names a step of the generation pipeline.
	Stage = family.Stage
	// ModelInfo describes a model; Preset is one of its request presets.
	ModelInfo = family.ModelInfo
	Preset    = family.Preset
	// DType is a compute precision; MemoryPolicy decides which components stay resident.
	DType        = family.DType
	MemoryPolicy = family.MemoryPolicy
	// FrameFilter transforms decoded frames between decode and mux; Frames is a run of them.
	FrameFilter = family.FrameFilter
	Frames      = family.Frames
	// NoiseStream names an independent Gaussian stream of a seed.
	NoiseStream = familykit.NoiseStream
)

// Stages, event kinds, precisions, memory policies and noise streams.
const (
	StageValidate  = family.StageValidate
	StageCondition = family.StageCondition
	StageDenoise   = family.StageDenoise
	StageDecode    = family.StageDecode
	StageFilter    = family.StageFilter
	StageMux       = family.StageMux

	StageStart     = family.StageStart
	StageEnd       = family.StageEnd
	DenoiseStep    = family.DenoiseStep
	DecodeProgress = family.DecodeProgress
	Warning        = family.Warning

	DTypeAuto = family.DTypeAuto
	F32       = family.F32
	BF16      = family.BF16
	FP8       = family.FP8

	AutoMemory  = family.AutoMemory
	OneResident = family.OneResident
	AllResident = family.AllResident

	DecoderFull = family.DecoderFull
	DecoderTiny = family.DecoderTiny

	VideoNoise = familykit.VideoNoise
	AudioNoise = familykit.AudioNoise
)

// Ptr returns a pointer to v, for optional fields such as Request.Seed.
func Ptr[T any](v T) *T { return &v }

// GaussianNoise fills n standard-normal float32 values for (seed, stream): the SDK's documented
// initial noise (familykit.GaussianNoise says how it is drawn; it cannot reproduce torch.randn).
func GaussianNoise(seed int64, stream NoiseStream, n int) []float32 {
	return familykit.GaussianNoise(seed, stream, n)
}
