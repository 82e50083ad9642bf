package api

import "time"

// Stage names one step of the generation pipeline, in the order they run. Progress events,
// timings and the memory policy (a component loaded for a stage is released at its end unless
// the generator keeps components resident) use these names.
type Stage string

const (
	// StageValidate checks the request, the output path, ffmpeg and the model files: nothing is
	// loaded yet.
	StageValidate Stage = "validate"
	// StageCondition turns the prompt into the DiT's text condition (tokenizer, text encoder,
	// prompt cache).
	StageCondition Stage = "condition"
	// StageDenoise loads the DiT and runs the sampling loop.
	StageDenoise Stage = "denoise"
	// StageDecode runs the VAEs: audio, then video clip by clip, each clip streamed through the
	// frame filters into the encoder as soon as it exists.
	StageDecode Stage = "decode"
	// StageFilter is the frame filters' share of the decode stream (time spent inside filters).
	StageFilter Stage = "filter"
	// StageMux finishes the H.264 stream, adds the audio track and gives the file its final name.
	StageMux Stage = "mux"
)

// EventKind tells which fields of an Event are meaningful.
type EventKind int

const (
	// StageStart: Stage is about to run.
	StageStart EventKind = iota
	// StageEnd: Stage ended after Elapsed (also when it failed; Generate's error says why).
	StageEnd
	// DenoiseStep: step Step of Steps (1-based) finished, Elapsed since the denoise stage began;
	// Message names the phase of a denoise that runs several ladders (Wan refine: "refine stage 1
	// (HxW)", "refine stage 2 (HxW)"), else it is empty.
	// Preview is set when the request asked for previews.
	DenoiseStep
	// DecodeProgress: Done of Total output frames written.
	DecodeProgress
	// Warning: Message describes something that did not stop the run (e.g. an unusable prompt
	// cache folder). Each warning is reported once per generator.
	Warning
)

// Event is one progress report. Callbacks run on the generating goroutine: keep them short, they
// delay the work.
type Event struct {
	Kind    EventKind
	Stage   Stage
	Step    int
	Steps   int
	Done    int
	Total   int
	Elapsed time.Duration
	Message string
	// Preview is the step's x0 estimate as a picture (DenoiseStep events of a Request.Preview run;
	// nil otherwise, at most one per step).
	Preview *Preview
}

// Preview is a small picture of what a denoising step would give if it were the last: the x0
// estimate decoded by the tiny decoder, the first, middle and last frame side by side.
type Preview struct {
	Step          int    // the denoising step (1-based), as Event.Step
	MIME          string // "image/jpeg"
	Data          []byte // the encoded image
	Width, Height int    // its size in pixels
	Frames        []int  // the output frames shown, left to right
}

// ProgressFunc receives events in order.
type ProgressFunc func(Event)
