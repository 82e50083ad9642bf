package family

import "fmt"

// Residency is where a heavyweight component's weights are between the calls of a generator.
type Residency string

const (
	// Kept: loaded by the first call that needs it and kept on the device until Close.
	Kept Residency = "resident"
	// PerCall: loaded by the stage that needs it and released at that stage's end.
	PerCall Residency = "per_call"
	// Streamed: read layer by layer while it runs (the text encoders), never whole on the device.
	Streamed Residency = "streamed"
)

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
func ForDecoder(rs []ComponentResidency, decoder string, preview bool) []ComponentResidency {
	var out []ComponentResidency
	for _, r := range rs {
		switch {
		case r.Name == CompTinyDecoder && decoder != DecoderTiny && !preview:
		case r.Name == CompVideoVAE && decoder == DecoderTiny:
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

// ComponentSize is what the memory policy knows of one heavyweight component.
type ComponentSize struct {
	Name string `json:"name"`
	// Bytes are its weights on the device at the run's dtype.
	Bytes int64 `json:"bytes"`
	// StreamBytes, when positive, is what it holds on the device at once when it streams its
	// layers instead of loading them all: it then never needs Bytes.
	StreamBytes int64 `json:"stream_bytes,omitempty"`
}

// ComponentResidency is the memory policy's decision for one component.
type ComponentResidency struct {
	ComponentSize
	Residency Residency `json:"residency"`
	// Fits is false when even this component alone, beside the resident ones and the activation
	// headroom, exceeds what the device can give: the run is expected to fail for memory there.
	Fits bool `json:"fits"`
}

// PromptCounter is implemented by Components that can count a prompt's tokens exactly (their
// tokenizer), so that a generator's Plan checks a prompt's length as Generate will, not from an
// estimate (which undercounts scripts without spaces between words, CJK for one).
type PromptCounter interface {
	PromptTokens(prompt string) (int, error)
}

// ComponentSizer is implemented by Components that size their heavyweight components, the one
// that costs most to bring back (load and compile) first: the memory policy keeps them in that order.
type ComponentSizer interface {
	ComponentSizes() []ComponentSize
}

// need is what a component holds on the device while it runs when it is not kept.
func (c ComponentSize) need() int64 {
	if c.StreamBytes > 0 {
		return c.StreamBytes
	}
	return c.Bytes
}

// ChooseResidency decides, for each component in order (most costly to bring back first), whether it
// stays on the device: it is kept when, with it kept, every component that is not kept still runs
// (the kept bytes, its own need and headroom within free). A component that cannot run even alone
// constrains nothing (it is reported as not fitting). The others stream when they can, else load per
// call. A negative free (unknown) keeps nothing.
func ChooseResidency(free, headroom int64, sizes []ComponentSize) []ComponentResidency {
	kept := make([]bool, len(sizes))
	var keptBytes int64
	runs := func(resident int64) bool {
		for i, c := range sizes {
			if !kept[i] && c.need()+headroom <= free && resident+c.need()+headroom > free {
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
	out := make([]ComponentResidency, len(sizes))
	for i, c := range sizes {
		r := ComponentResidency{ComponentSize: c, Residency: Kept, Fits: keptBytes+headroom <= free}
		if !kept[i] {
			r.Residency = PerCall
			if c.StreamBytes > 0 {
				r.Residency = Streamed
			}
			r.Fits = keptBytes+c.need()+headroom <= free
		}
		out[i] = r
	}
	return out
}

// UniformResidency is the decision of an explicit policy: every component kept (AllResident) or
// none (OneResident; those that stream, stream).
func UniformResidency(policy MemoryPolicy, sizes []ComponentSize) []ComponentResidency {
	out := make([]ComponentResidency, len(sizes))
	for i, c := range sizes {
		r := ComponentResidency{ComponentSize: c, Residency: PerCall, Fits: true}
		switch {
		case policy == AllResident:
			r.Residency = Kept
		case c.StreamBytes > 0:
			r.Residency = Streamed
		}
		out[i] = r
	}
	return out
}

// Undecided lists sizes with no decision yet: a plan made for no particular device.
func Undecided(sizes []ComponentSize) []ComponentResidency {
	out := make([]ComponentResidency, len(sizes))
	for i, c := range sizes {
		out[i] = ComponentResidency{ComponentSize: c, Fits: true}
	}
	return out
}

// Sizes are the sizes behind decisions (to decide them again for a device).
func Sizes(rs []ComponentResidency) []ComponentSize {
	out := make([]ComponentSize, len(rs))
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
				return r.Residency != PerCall
			}
			return r.Residency == Kept
		}
	}
	return false
}

// DecoderRow writes the plan-table row of the video decoder.
func DecoderRow(row func(key, format string, a ...any), p *Plan) {
	d := p.Decoder
	if p.Decoder == DecoderTiny {
		d += " (TAEHV " + p.TinyDecoder + ")"
	}
	if p.Preview {
		d += fmt.Sprintf("; previews each step by TAEHV %s", p.TinyDecoder)
	}
	row("decoder", "%s", d)
}

// MemoryRows writes one plan-table row per component: its bytes and, when decided, where it lives.
func MemoryRows(row func(key, format string, a ...any), rs []ComponentResidency) {
	for _, r := range rs {
		where := string(r.Residency)
		switch {
		case where == "":
			where = "residency decided by the device"
		case r.Residency == Streamed:
			where = fmt.Sprintf("streamed (%.2f GiB at a time)", float64(r.StreamBytes)/(1<<30))
		}
		if !r.Fits {
			where += "; does not fit this device"
		}
		row("memory "+r.Name, "%.2f GiB, %s", float64(r.Bytes)/(1<<30), where)
	}
}
