package family

import "fastvideo/fastvideo/api"

// Component names, as loads, timings and the memory policy call them.
const (
	CompTextEncoder     = "text_encoder"
	CompDiT             = "dit"
	CompVideoVAE        = "video_vae"
	CompAudioVAE        = "audio_vae"
	CompVisionEncoder   = "vision_encoder"
	CompVideoVAEEncoder = "video_vae_encoder"
	CompRIFE            = "rife"
	// CompTinyDecoder is the TAEHV tiny video decoder (Request.Decoder "tiny", previews).
	CompTinyDecoder = "tiny_decoder"
)

// ForDecoder is the memory rows of a run with decoder ("full" or "tiny") and previews on or off:
// the tiny decoder's row only when a run uses it, the full video VAE's only when it decodes.
func ForDecoder(rs []api.ComponentResidency, decoder string, preview bool) []api.ComponentResidency {
	var out []api.ComponentResidency
	for _, r := range rs {
		switch {
		case r.Name == CompTinyDecoder && decoder != api.DecoderTiny && !preview:
		case r.Name == CompVideoVAE && decoder == api.DecoderTiny:
		default:
			out = append(out, r)
		}
	}
	return out
}

// companions are loads that live and go with another component: the conditioner (acquired as the
// tokenizer) owns the text encoder it opens, and a DiT replica is the DiT's copy on another device.
var companions = map[string]string{"tokenizer": CompTextEncoder, "dit_replica": CompDiT}

// conditioner is the load that holds the text encoder: kept unless the encoder loads per call, since a
// streaming encoder holds no weights on the device between calls, and keeping it keeps the
// tokenizer, the open checkpoint and its compiled layer program.
const conditioner = "tokenizer"

// PromptCounter is implemented by Components that can count a prompt's tokens exactly (their
// tokenizer), so that a generator's Plan checks a prompt's length as Generate will, not from an
// estimate (which undercounts scripts without spaces between words, CJK for one).
type PromptCounter interface {
	PromptTokens(prompt string) (int, error)
}

// ComponentSizer is implemented by Components that size their heavyweight components, the one
// that costs most to bring back (load and compile) first: the memory policy keeps them in that order.
type ComponentSizer interface {
	ComponentSizes() []api.ComponentSize
}

// ChooseResidency decides, for each component in order (most costly to bring back first), whether it
// stays on the device: it is kept when, with it kept, every component that is not kept still runs
// (the kept bytes, its own need and headroom within free). A component that cannot run even alone
// constrains nothing (it is reported as not fitting). The others stream when they can, else load per
// call. A negative free (unknown) keeps nothing.
func ChooseResidency(free, headroom int64, sizes []api.ComponentSize) []api.ComponentResidency {
	kept := make([]bool, len(sizes))
	var keptBytes int64
	runs := func(resident int64) bool {
		for i, c := range sizes {
			if !kept[i] && c.RunningBytes()+headroom <= free && resident+c.RunningBytes()+headroom > free {
				return false
			}
		}
		return resident+headroom <= free
	}
	for i, c := range sizes {
		kept[i] = true
		if free >= 0 && runs(keptBytes+c.Bytes) {
			keptBytes += c.Bytes
			continue
		}
		kept[i] = false
	}
	out := make([]api.ComponentResidency, len(sizes))
	for i, c := range sizes {
		r := api.ComponentResidency{ComponentSize: c, Residency: api.Kept, Fits: keptBytes+headroom <= free}
		if !kept[i] {
			r.Residency = api.PerCall
			if c.StreamBytes > 0 {
				r.Residency = api.Streamed
			}
			r.Fits = keptBytes+c.RunningBytes()+headroom <= free
		}
		out[i] = r
	}
	return out
}

// UniformResidency is the decision of an explicit policy: every component kept (AllResident) or
// none (OneResident; those that stream, stream).
func UniformResidency(policy MemoryPolicy, sizes []api.ComponentSize) []api.ComponentResidency {
	out := make([]api.ComponentResidency, len(sizes))
	for i, c := range sizes {
		r := api.ComponentResidency{ComponentSize: c, Residency: api.PerCall, Fits: true}
		switch {
		case policy == AllResident:
			r.Residency = api.Kept
		case c.StreamBytes > 0:
			r.Residency = api.Streamed
		}
		out[i] = r
	}
	return out
}

// Undecided lists sizes with no decision yet: a plan made for no particular device.
func Undecided(sizes []api.ComponentSize) []api.ComponentResidency {
	out := make([]api.ComponentResidency, len(sizes))
	for i, c := range sizes {
		out[i] = api.ComponentResidency{ComponentSize: c, Fits: true}
	}
	return out
}

// Sizes are the sizes behind decisions (to decide them again for a device).
func Sizes(rs []api.ComponentResidency) []api.ComponentSize {
	out := make([]api.ComponentSize, len(rs))
	for i, r := range rs {
		out[i] = r.ComponentSize
	}
	return out
}

// Keeps reports whether the component named name stays loaded between calls: always under
// AllResident, never under OneResident, and as the engine's Residency decided under AutoMemory (a
// component it does not list loads per call).
func (e *Engine) Keeps(name string) bool {
	switch e.Memory {
	case AllResident:
		return true
	case OneResident:
		return false
	}
	owner, companion := companions[name]
	if !companion {
		owner = name
	}
	for _, r := range e.Residency {
		if r.Name == owner {
			if name == conditioner {
				return r.Residency != api.PerCall
			}
			return r.Residency == api.Kept
		}
	}
	return false
}
