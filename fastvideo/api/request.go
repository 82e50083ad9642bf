package api

import (
	"fmt"
	"image"
	"unicode/utf8"

	"fastvideo/internal/imageops"
)

// Request is one generation, mirroring FastVideo's GenerationRequest / SamplingParam fields that
// every family shares; family-specific knobs go in Options (e.g. *h3.Options, *wan.Options).
//
// Unset means "the preset's value": numeric fields use 0 for unset (0 is never a valid size,
// frame count, fps, step count or guidance scale), Seed uses nil because 0 is a valid seed. This is
// FastVideo's behaviour for requests parsed from a mapping ("only explicit fields override the
// preset"), applied uniformly.
type Request struct {
	// Prompt is tokenized verbatim after trimming surrounding white space (no chat template);
	// H3 speech markup such as "(S1) A presenter says <d>[English] Hello.</d>" is plain text.
	Prompt string `json:"prompt"`
	// EnhancePrompt expands the prompt into cinematic shot language before anything else sees it
	// (FastVideo's --enhance-prompt with its template backend: camera, light and motion clauses for
	// the cue categories the prompt lacks, then a quality clause); Result.Prompt is what ran and
	// Result.PromptEnhancement the original. Off by default.
	EnhancePrompt bool `json:"enhance_prompt,omitempty"`
	// NegativePrompt is the text of the unconditional forward of classifier-free guidance; empty
	// means the preset's. Families whose models run without guidance reject a non-empty one.
	NegativePrompt string `json:"negative_prompt,omitempty"`

	// Height, Width are the output size in pixels; both or neither. The family says which
	// multiples and bounds apply.
	Height int `json:"height,omitempty"`
	Width  int `json:"width,omitempty"`
	// NumFrames is the requested frame count (H3 aligns it up to 17n+5; Wan needs 4n+1).
	NumFrames int `json:"num_frames,omitempty"`
	// FPS is the output rate (H3 generates 24 only; for Wan it labels the container).
	FPS int `json:"fps,omitempty"`
	// NumInferenceSteps counts DiT forwards (the MLX example's --steps); FastVideo's CUDA
	// num_inference_steps for H3 counts sigma-grid points, i.e. this value plus one.
	NumInferenceSteps int `json:"num_inference_steps,omitempty"`
	// GuidanceScale above 1 turns classifier-free guidance on where the model allows it.
	GuidanceScale float64 `json:"guidance_scale,omitempty"`
	Seed          *int64  `json:"seed,omitempty"` // nil: the preset's seed
	// OutputPath is the .mp4 file to write, or a folder (an existing one, or a path ending in a
	// separator or without an extension) in which the file is named after the prompt. Empty means
	// DefaultOutputPath. An existing file is never replaced: the name gets _1, _2, ... instead.
	OutputPath string `json:"output_path,omitempty"`
	Preset     string `json:"preset,omitempty"` // "" selects the model's default preset

	// PromptTokens is the prompt's length in tokens when already known (from the tokenizer or a
	// prompt cache); with 0 a generator's Plan counts it with the model's tokenizer and the
	// package-level Plan, which opens nothing, estimates it from the text.
	PromptTokens int `json:"prompt_tokens,omitempty"`

	// Fast enables the temporal fast mode: denoise and decode fewer frames on the full timeline,
	// then interpolate to the requested count with RIFE 4.25 (MLX --fast; released models need its
	// weights, fastvideo.WithRIFE).
	Fast       bool `json:"fast,omitempty"`
	FastFactor int  `json:"fast_factor,omitempty"` // 0: 2
	// FastSpatial enables the spatial fast mode: denoise and decode on a canvas FastSpatialScale
	// times smaller, then center-crop, resize and sharpen the decoded frames in pixel space (MLX
	// --fast-spatial, fastvideo/mlx_runtime/fast_spatial.py).
	FastSpatial      bool `json:"fast_spatial,omitempty"`
	FastSpatialScale int  `json:"fast_spatial_scale,omitempty"` // 0: 2
	// Upsample is the spatial mode's resize kernel: "lanczos" (empty: the default), "cubic",
	// "bilinear" or "nearest", with OpenCV's INTER_* semantics.
	Upsample string `json:"upsample,omitempty"`
	// Sharpen is the strength of the fast modes' unsharp pass; nil takes upstream's rule (0.4 after
	// the spatial mode, 0.6 after the temporal one, the larger when both run), 0 turns it off.
	Sharpen *float64 `json:"sharpen,omitempty"`

	// Refine is the two-stage refine of the DMD students (MLX --refine,
	// fastvideo/mlx_runtime/refine.py): the DMD ladder at the size divided by RefineScale, the
	// clean latents upsampled over H and W and re-noised to the stage-2 sigma, then the stage-2
	// ladder at the requested size; decoded once. It wins over FastSpatial (a warning says so);
	// with Fast both stages run on the shortened clip.
	Refine      bool `json:"refine,omitempty"`
	RefineScale int  `json:"refine_scale,omitempty"` // 0: 2
	// RefineSteps are the stage-2 DMD timesteps; nil drops the leading entries of the model's
	// ladder whose sigma is 1 (1000, 757, 522 -> 757, 522).
	RefineSteps []int `json:"refine_steps,omitempty"`
	// RefineSigma replaces the hand-off sigma (nil: the sigma of RefineSteps[0]); a value that
	// differs from it is run with a warning (the DiT is told a timestep that no longer matches).
	RefineSigma *float64 `json:"refine_sigma,omitempty"`
	// RefineAddNoise re-noises the upsampled latents to the hand-off sigma (nil: on); off hands
	// the clean upsample on.
	RefineAddNoise *bool `json:"refine_add_noise,omitempty"`
	// RefineUpsample is the latent upsampling: "bilinear" (empty: the default; torch's
	// align_corners=False in float32) or "nearest".
	RefineUpsample string `json:"refine_upsample,omitempty"`

	// SkipSave generates without writing a file (FastVideo's save_video=false); set at least one
	// of the Return fields then. A decoder whose output nothing uses is not run.
	SkipSave bool `json:"skip_save,omitempty"`
	// ReturnFrames puts the decoded frames in Result.Frames (RGB24), ReturnAudio the decoded
	// waveform in Result.Audio (families with audio only), ReturnLatents the final denoised latents
	// in Result.Latents.
	ReturnFrames  bool `json:"return_frames,omitempty"`
	ReturnAudio   bool `json:"return_audio,omitempty"`
	ReturnLatents bool `json:"return_latents,omitempty"`

	// Image is the first-frame keyframe of image-to-video, given as a decoded image; ImagePath
	// names a PNG or JPEG file instead (one of the two). LastImage / LastImagePath are the
	// last-frame keyframe. The image is read as FastVideo reads it (EXIF orientation applied,
	// converted to 8-bit RGB, alpha dropped), then resized and cropped by the model's own rule;
	// models without image conditioning reject them.
	Image         image.Image `json:"-"`
	ImagePath     string      `json:"image_path,omitempty"`
	LastImage     image.Image `json:"-"`
	LastImagePath string      `json:"last_image_path,omitempty"`

	// VideoNoise replaces the initial video noise drawn from Seed: C·T·Hl·Wl float32 values in the
	// latent layout [C][T][Hl][Wl] (batch 1, the layout of PyTorch's randn(1, C, T, Hl, Wl));
	// Plan.VideoNoiseLen gives the length. Inject the reference's noise to reproduce a PyTorch
	// run: GaussianNoise cannot reproduce torch.randn.
	VideoNoise []float32 `json:"-"`

	// Decoder picks the video decoder: "full" (empty: the default) runs the model's own VAE, "tiny"
	// the TAEHV tiny decoder (taew2_1 for Wan2.1/2.2-A14B, taew2_2 for Wan2.2-TI2V-5B, taeh3 for
	// MiniMax H3): a fraction of the time and memory at a visibly softer picture, same frame count.
	// Released models need its weights (<model>/taehv/<variant>.safetensors or
	// fastvideo.WithTinyDecoder); the tiny models carry their own. H3's audio still decodes with its
	// audio VAE.
	Decoder string `json:"decoder,omitempty"`
	// Preview makes each DenoiseStep event carry Event.Preview: the step's x0 estimate decoded by the
	// tiny decoder (first, middle and last frame side by side, as a small JPEG). Off by default; it
	// needs the tiny decoder's weights as Decoder "tiny" does.
	Preview bool `json:"preview,omitempty"`

	// Options holds the model family's own knobs (*h3.Options, *wan.Options); nil takes the
	// family's defaults. Options of another family are invalid input.
	Options Options `json:"-"`

	// Progress, when set, receives stage, step and decode events on the generating goroutine,
	// while the generator is held: it must return quickly and must not call the generator.
	Progress ProgressFunc `json:"-"`
}

// Video decoders (Request.Decoder).
const (
	DecoderFull = "full"
	DecoderTiny = "tiny"
)

// Options are a family's own request knobs.
type Options interface {
	// FamilyName is the family the options belong to ("minimax_h3", "wan").
	FamilyName() string
}

// Ptr returns a pointer to v, for optional fields such as Request.Seed.
func Ptr[T any](v T) *T { return &v }

// RequestError reports invalid input: which field, the value given and what is allowed. Callers
// tell bad input from runtime failures with errors.As.
type RequestError struct {
	Field   string // snake_case name as in FastVideo requests, e.g. "num_frames"
	Value   any    // the offending value
	Allowed string // what would be accepted
}

// maxShownValue bounds how much of a value an error message repeats (a prompt may be megabytes).
const maxShownValue = 200

func (e *RequestError) Error() string {
	v := fmt.Sprint(e.Value)
	if s, ok := e.Value.(string); ok {
		v = fmt.Sprintf("%q", truncate(s, maxShownValue))
	}
	return fmt.Sprintf("invalid %s %s: allowed %s", e.Field, truncate(v, maxShownValue+2), e.Allowed)
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Keyframe is a request's condition image, read and converted to 8-bit RGB (EXIF orientation
// applied, alpha dropped) as FastVideo's load_image does (fastvideo/models/vision_utils.py); the
// family resizes and crops it by its model's rule.
type Keyframe struct {
	// Field is the request field it came from ("image", "image_path", "last_image",
	// "last_image_path"), for messages.
	Field string
	// Source is the file, or "" for an image.Image passed in the request.
	Source string
	Pixels imageops.Image
}
