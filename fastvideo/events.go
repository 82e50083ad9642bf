package fastvideo

import "time"

// Phase names one stage of a generation, in the order they run.
type Phase string

const (
	PhaseValidate    Phase = "validate"
	PhaseCondition   Phase = "condition"
	PhaseLoadDiT     Phase = "load_dit"
	PhaseDenoise     Phase = "denoise"
	PhaseVideoDecode Phase = "video_decode"
	PhaseAudioDecode Phase = "audio_decode"
	PhaseMux         Phase = "mux"
)

// EventKind tells which fields of an Event are meaningful.
type EventKind int

const (
	// PhaseStart: Phase is about to run.
	PhaseStart EventKind = iota
	// PhaseEnd: Phase ended after Elapsed (also when it failed; Generate's
	// error says why).
	PhaseEnd
	// DenoiseStep: step Step of Steps (1-based) finished, Elapsed since the
	// denoise phase began.
	DenoiseStep
	// DecodeProgress: Done of Total video frames decoded.
	DecodeProgress
)

// Event is one progress report. Callbacks run on the generating goroutine:
// keep them short, they delay the work.
type Event struct {
	Kind    EventKind
	Phase   Phase
	Step    int
	Steps   int
	Done    int
	Total   int
	Elapsed time.Duration
}

// ProgressFunc receives events in order.
type ProgressFunc func(Event)
