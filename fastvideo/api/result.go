package api

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// Result is one finished generation. Large fields (Frames, Audio, Latents) are filled only when the
// request asked for them.
type Result struct {
	// OutputPath is the MP4 written (absolute), "" when the request set SkipSave.
	OutputPath string `json:"output_path,omitempty"`
	Prompt     string `json:"prompt"`
	// Seed is the seed the initial noise was drawn from (the request's, else the preset's), also
	// reported when Request.VideoNoise/AudioNoise replaced the draw.
	Seed int64 `json:"seed"`
	// PromptTokens is the prompt's exact token count (Wan: with the </s> the encoder sees; the DiT
	// attends to it zero-padded to 512 rows); PromptCached reports a prompt-cache hit (no tokenizer
	// or text encoder ran; Wan with guidance: for the negative prompt too).
	PromptTokens int  `json:"prompt_tokens"`
	PromptCached bool `json:"prompt_cached"`
	// PromptEnhancement is set when Request.EnhancePrompt rewrote the prompt: Prompt is then the
	// enhanced text the model ran on.
	PromptEnhancement *PromptEnhancement `json:"prompt_enhancement,omitempty"`

	Width     int `json:"width"`
	Height    int `json:"height"`
	NumFrames int `json:"num_frames"`
	FPS       int `json:"fps"`
	// Frames holds NumFrames frames of Width·Height·3 bytes of packed RGB (rgb24, row-major, top row
	// first) when Request.ReturnFrames was set.
	Frames [][]byte `json:"-"`
	// Audio is the stereo waveform the audio VAE decoded (planar: Audio[0] left, Audio[1] right,
	// 800 samples per audio latent, in [-1, 1]) when Request.ReturnAudio was set. The MP4 carries it
	// cut to the video's duration, ceil(NumFrames/FPS·SampleRate) samples.
	Audio [][]float32 `json:"-"`
	// SampleRate is the audio track's rate (32000 for MiniMax H3); 0 for Wan, which generates video
	// only.
	SampleRate int `json:"sample_rate"`
	// Latents are the final denoised latents when Request.ReturnLatents was set.
	Latents *Latents `json:"-"`

	Timings Timings `json:"timings"`
	// CompiledPrograms counts the XLA programs (or pure-Go backend graphs) this call compiled, which
	// took Timings.Compile: a warm call on a device with room compiles none (programs are compiled at
	// their first use with each input geometry and kept with their component). The count is
	// process-wide: another generator compiling at the same time counts here too.
	CompiledPrograms int64 `json:"compiled_programs"`
	// CompileCache counts what the persistent compile cache did during this call (nil when none is
	// installed: off, the pure-Go backend, or a build without it): of CompiledPrograms, Loaded came
	// from the cache and Compiled were compiled (and Stored written for later runs); Rejected entries
	// were damaged, foreign or did not load (each also a warning). Process-wide like CompiledPrograms.
	CompileCache *CompileCacheStats `json:"compile_cache,omitempty"`
	// PeakHostBytes is the largest memory the Go runtime held during the generation
	// (runtime/metrics /memory/classes/total:bytes, process-wide, sampled every 10 ms and at every
	// event). On the pure-Go backend weights and activations live there too; memory allocated outside
	// the Go runtime (XLA's and ffmpeg's) is not included.
	PeakHostBytes uint64 `json:"peak_host_bytes"`
	// PeakDeviceBytes is the accelerator's peak memory when the backend reports it, else -1;
	// DeviceMemory says which.
	PeakDeviceBytes int64  `json:"peak_device_bytes"`
	DeviceMemory    string `json:"device_memory"`
	Backend         string `json:"backend"`
	DType           DType  `json:"dtype"`

	// Warnings are what did not stop the run but may surprise (also sent as Warning events).
	Warnings []string `json:"warnings,omitempty"`

	// Plan is what ran (exact text rows).
	Plan *Plan `json:"plan"`
}

// PromptEnhancement is where an enhanced prompt came from.
type PromptEnhancement struct {
	// Original is the request's prompt, white space collapsed.
	Original string `json:"original"`
	// Backend is "template", or "cache" when the prompt cache folder had it.
	Backend string `json:"backend"`
}

// Latents are the denoised latents of a generation in DiT space (before the VAEs' de-normalization).
type Latents struct {
	Video      []float32 `json:"-"` // [C][T][Hl][Wl]
	VideoShape []int     `json:"video_shape"`
	Audio      []float32 `json:"-"` // [2][C][N], stereo (MiniMax H3)
	AudioShape []int     `json:"audio_shape,omitempty"`
	// Condition are MiniMax H3 FL2VA's keyframe condition latents as sampling left them,
	// [C][K][Hl][Wl] with one frame per keyframe (first, then last): the denoiser never steps
	// them, so they are the encoded keyframes mixed with their noise at 0.999, bit for bit.
	Condition      []float32 `json:"-"`
	ConditionShape []int     `json:"condition_shape,omitempty"`
}

// Timings are the wall times of a generation, stage by stage in the order the stages ran
// (validate, condition, denoise, decode, filter, mux; a stage that did not run is absent), the
// component loads inside them, and the total. Decode includes the frame filters, whose own share is
// the filter stage, and queueing the frames for the encoder (ffmpeg runs concurrently, fed from the
// queue as clips are decoded); Mux is waiting for the encoder to take what is still queued, finishing
// the H.264 stream and muxing the audio. In JSON the values are seconds.
type Timings struct {
	Stages []StageTime
	// Loads are the component loads (text_encoder, dit, video_vae, audio_vae, ...), each part of
	// the stage that needed it; a load preloaded beside an earlier stage (a kept component's, on a
	// first call) counts its whole time, though only what the stage waited for is in the stage's.
	Loads []StageTime
	// Phases are named parts of a stage, also counted in it: "preview" (Request.Preview's decodes,
	// inside denoise), and Wan's two-stage refine (refine_stage1, refine_handoff and refine_stage2
	// inside denoise).
	Phases []StageTime
	Total  time.Duration
	// Compile is the time spent compiling programs, inside the stages (and loads) that needed them,
	// summed over programs: compiles that run at once (two decoders) add up.
	Compile time.Duration
}

// StageTime is the wall time of one stage (or, in Timings.Loads, of one component load: Stage is
// then the component's name).
type StageTime struct {
	Stage   Stage
	Elapsed time.Duration
}

// Of is the time spent in stage s (0 if it did not run).
func (t Timings) Of(s Stage) time.Duration {
	var d time.Duration
	for _, st := range t.Stages {
		if st.Stage == s {
			d += st.Elapsed
		}
	}
	return d
}

// Add records d for stage s, after the stages recorded so far (repeated stages add up).
func (t *Timings) Add(s Stage, d time.Duration) { t.Stages = addTime(t.Stages, s, d) }

// AddPhase records d for a named part of a stage (repeated phases add up).
func (t *Timings) AddPhase(phase string, d time.Duration) {
	t.Phases = addTime(t.Phases, Stage(phase), d)
}

// AddLoad records a component load of d.
func (t *Timings) AddLoad(component string, d time.Duration) {
	t.Loads = addTime(t.Loads, Stage(component), d)
}

func addTime(list []StageTime, s Stage, d time.Duration) []StageTime {
	for i := range list {
		if list[i].Stage == s {
			list[i].Elapsed += d
			return list
		}
	}
	return append(list, StageTime{s, d})
}

// MarshalJSON writes the timings in seconds under the stage names, the loads under "loads".
func (t Timings) MarshalJSON() ([]byte, error) {
	seconds := func(list []StageTime) map[string]float64 {
		m := map[string]float64{}
		for _, st := range list {
			m[string(st.Stage)] = st.Elapsed.Seconds()
		}
		return m
	}
	m := map[string]any{"total": t.Total.Seconds(), "compile": t.Compile.Seconds()}
	for k, v := range seconds(t.Stages) {
		m[k] = v
	}
	if len(t.Loads) > 0 {
		m["loads"] = seconds(t.Loads)
	}
	if len(t.Phases) > 0 {
		m["phases"] = seconds(t.Phases)
	}
	return json.Marshal(m)
}

// WriteSummary prints a short human-readable report of the result.
func (r *Result) WriteSummary(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	if r.OutputPath != "" {
		row("output", "%s", printable(r.OutputPath))
	}
	if r.SampleRate > 0 {
		row("video", "%dx%d (WxH), %d frames at %d fps, audio %d Hz stereo", r.Width, r.Height, r.NumFrames, r.FPS, r.SampleRate)
	} else {
		row("video", "%dx%d (WxH), %d frames at %d fps, no audio", r.Width, r.Height, r.NumFrames, r.FPS)
	}
	cached := ""
	if r.PromptCached {
		cached = " (prompt cache hit)"
	}
	row("prompt", "%d tokens%s, seed %d", r.PromptTokens, cached, r.Seed)
	if e := r.PromptEnhancement; e != nil {
		row("enhanced", "%q (%s, from %q)", r.Prompt, e.Backend, e.Original)
	}
	var stages []string
	for _, st := range r.Timings.Stages {
		stages = append(stages, fmt.Sprintf("%s %s", st.Stage, secs(st.Elapsed)))
	}
	row("timings", "%s; total %s", strings.Join(stages, ", "), secs(r.Timings.Total))
	if len(r.Timings.Loads) > 0 {
		var loads []string
		for _, st := range r.Timings.Loads {
			loads = append(loads, fmt.Sprintf("%s %s", st.Stage, secs(st.Elapsed)))
		}
		row("loads", "%s", strings.Join(loads, ", "))
	}
	if len(r.Timings.Phases) > 0 {
		var phases []string
		for _, st := range r.Timings.Phases {
			phases = append(phases, fmt.Sprintf("%s %s", st.Stage, secs(st.Elapsed)))
		}
		row("phases", "%s", strings.Join(phases, ", "))
	}
	row("compiled", "%d programs in %s", r.CompiledPrograms, secs(r.Timings.Compile))
	if c := r.CompileCache; c != nil {
		row("compile cache", "%d loaded, %d compiled, %d stored, %d rejected", c.Loaded, c.Compiled, c.Stored, c.Rejected)
	}
	for _, w := range r.Warnings {
		row("warning", "%s", w)
	}
	dev := r.DeviceMemory
	if r.PeakDeviceBytes >= 0 {
		dev = fmt.Sprintf("%.2f GiB", float64(r.PeakDeviceBytes)/(1<<30))
	}
	row("memory", "peak host %.2f GiB; device: %s", float64(r.PeakHostBytes)/(1<<30), dev)
	row("backend", "%s, %s", r.Backend, r.DType)
	return tw.Flush()
}

// printable returns s, or s quoted when it holds characters a terminal would act on (control
// and escape sequences, bidirectional overrides), so a file name never rewrites the screen.
func printable(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.Is(unicode.Bidi_Control, r) {
			return strconv.QuoteToASCII(s)
		}
	}
	return s
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// CompileCacheStats are the persistent compile cache's counts over one call (Result.CompileCache).
type CompileCacheStats struct {
	Loaded   int64 `json:"loaded"`
	Compiled int64 `json:"compiled"`
	Stored   int64 `json:"stored"`
	Rejected int64 `json:"rejected"`
}
