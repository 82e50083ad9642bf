package family

import (
	"fmt"
	"sort"
	"strings"

	"fastvideo/fastvideo/api"
)

// Resolved is the part of a resolved request every family shares: the preset applied, the output
// geometry and the sampling knobs.
type Resolved struct {
	Model  ModelInfo
	Preset string

	Prompt         string // trimmed
	NegativePrompt string // the unconditional text when classifier-free guidance is on, else ""
	OutputPath     string
	Seed           int64
	FPS            int
	Steps          int // sampling steps
	Guidance       float64

	Height, Width   int // output size
	RequestedFrames int
	NumFrames       int // output frames, after the family's alignment

	PromptTokens          int
	PromptTokensEstimated bool

	// FirstImage and LastImage are the request's keyframes, read and converted to RGB (nil when
	// absent); only models whose ModelInfo takes them get them.
	FirstImage, LastImage *api.Keyframe

	// Filters are the frame filters the resolution needs (the fast modes' resize and sharpen),
	// run on the decoded frames before the caller's own (fastvideo.WithFrameFilter). The family
	// makes fresh ones for every resolution: a filter may hold state for one run.
	Filters []FrameFilter

	// Decoder is the video decoder that runs ("full" or "tiny"); Preview whether the denoising steps
	// carry previews.
	Decoder string
	Preview bool
}

// MaxPromptBytes bounds a prompt (and a negative prompt) before any tokenizer sees it: far above
// every model's token limit (H3 1,024 tokens, Wan 512), small enough that a hostile request costs
// nothing.
const MaxPromptBytes = 64 << 10

// MaxSteps bounds NumInferenceSteps (upstream has no bound; beyond this the ladders only repeat
// float32 values).
const MaxSteps = 1000

// ResolveCommon starts a resolution for any family: the preset, the prompt requirement, the seed,
// the run-level flags against the model's capabilities and the options' family. It returns the
// preset (the family's own preset type stays with the family) and the common fields.
func ResolveCommon(info ModelInfo, req api.Request, needPrompt bool) (Preset, *Resolved, error) {
	preset, err := FindPreset(info, req.Preset)
	if err != nil {
		return Preset{}, nil, err
	}
	for _, p := range []struct{ field, text string }{{"prompt", req.Prompt}, {"negative_prompt", req.NegativePrompt}} {
		if len(p.text) > MaxPromptBytes {
			return Preset{}, nil, &api.RequestError{Field: p.field, Value: fmt.Sprintf("%d bytes", len(p.text)),
				Allowed: fmt.Sprintf("at most %d bytes (the models read at most a thousand tokens)", MaxPromptBytes)}
		}
	}
	if needPrompt && strings.TrimSpace(req.Prompt) == "" {
		return Preset{}, nil, &api.RequestError{Field: "prompt", Value: req.Prompt, Allowed: "a non-empty text prompt"}
	}
	if req.Options != nil && req.Options.FamilyName() != info.Family {
		return Preset{}, nil, &api.RequestError{Field: "options", Value: fmt.Sprintf("%T", req.Options),
			Allowed: fmt.Sprintf("nil or the %s family's options (model %s)", info.Family, info.Name)}
	}
	if req.ReturnAudio && info.AudioChannels == 0 {
		return Preset{}, nil, &api.RequestError{Field: "return_audio", Value: true,
			Allowed: fmt.Sprintf("false (%s generates video only)", info.Name)}
	}
	if req.SkipSave && !req.ReturnFrames && !req.ReturnAudio && !req.ReturnLatents {
		return Preset{}, nil, &api.RequestError{Field: "skip_save", Value: true,
			Allowed: "false, or true together with return_frames, return_audio or return_latents (else nothing is produced)"}
	}
	if req.PromptTokens < 0 {
		return Preset{}, nil, &api.RequestError{Field: "prompt_tokens", Value: req.PromptTokens, Allowed: "0 (unknown) or the prompt's token count"}
	}
	decoder := strings.ToLower(req.Decoder)
	switch decoder {
	case "":
		decoder = api.DecoderFull
	case api.DecoderFull, api.DecoderTiny:
	default:
		return Preset{}, nil, &api.RequestError{Field: "decoder", Value: req.Decoder,
			Allowed: `"full" (the model's VAE; empty: the default) or "tiny" (the TAEHV tiny decoder)`}
	}
	r := &Resolved{Model: info, Preset: preset.Name, Prompt: strings.TrimSpace(req.Prompt), OutputPath: req.OutputPath,
		Seed: preset.Seed, PromptTokens: req.PromptTokens, Decoder: decoder, Preview: req.Preview}
	if req.Seed != nil {
		r.Seed = *req.Seed // a pointer: 0 is a seed, not "unset"
	}
	if err := resolveKeyframes(info, req, r); err != nil {
		return Preset{}, nil, err
	}
	return preset, r, nil
}

// FindPreset returns the named preset of a model ("" is its default).
func FindPreset(info ModelInfo, name string) (Preset, error) {
	if name == "" {
		name = info.DefaultPreset
	}
	var names []string
	for _, p := range info.Presets {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return Preset{}, &api.RequestError{Field: "preset", Value: name,
		Allowed: fmt.Sprintf("one of %s for model %s (empty: %s)", strings.Join(names, ", "), info.Name, info.DefaultPreset)}
}
