package family

import (
	"context"
	"errors"
	"fmt"
	"time"

	"fastvideo/fastvideo/api"
)

// Session is one run's view of the pipeline: the engine, the request and result, progress
// reporting, and the memory policy that releases a stage's components at its end.
type Session struct {
	Engine  *Engine
	Request api.Request
	Result  *api.Result

	stage    api.Stage
	emit     func(api.Event)
	noteLoad func(component string)
	releases []func() error // non-resident components of the running stage, released last first

	prewarms []*prewarm          // decoder compiles started early (StartPrewarm), until awaited or the run ends
	preloads map[string]*preload // loads of kept components started early (Preload), until acquired

	denoiseStart time.Time    // the first denoise phase's start (step events' Elapsed)
	preview      *api.Preview // the running step's preview, until its event
}

// SetPreview attaches p to the running denoising step's event (DenoiseLoop); a later call in the same
// step replaces it, so a step carries at most one.
func (s *Session) SetPreview(p *api.Preview) { s.preview = p }

// NoteLoad reports that the run loads component now (a load the session's Acquire does not see, such
// as a text encoder opened on a prompt-cache miss).
func (s *Session) NoteLoad(component string) { s.noteLoad(component) }

// NewSession starts a run's session: emit receives every event, noteLoad every component load.
func NewSession(e *Engine, req api.Request, res *api.Result, emit func(api.Event), noteLoad func(string)) *Session {
	return &Session{Engine: e, Request: req, Result: res, emit: emit, noteLoad: noteLoad}
}

// Emit reports an event.
func (s *Session) Emit(e api.Event) { s.emit(e) }

// Stage is the running stage.
func (s *Session) Stage() api.Stage { return s.stage }

// SetStage records the running stage (the pipeline calls it).
func (s *Session) SetStage(st api.Stage) { s.stage = st }

// Canceled returns ctx's error wrapped with the running stage, or nil.
func (s *Session) Canceled(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fastvideo: generation cancelled during %s: %w", s.stage, err)
	}
	return nil
}

// OnRelease registers free to run when the running stage ends (or the run fails).
func (s *Session) OnRelease(free func() error) { s.releases = append(s.releases, free) }

// Release closes the non-resident components registered so far, last first.
func (s *Session) Release() error {
	var errs []error
	for i := len(s.releases) - 1; i >= 0; i-- {
		errs = append(errs, s.releases[i]())
	}
	s.releases = nil
	return errors.Join(errs...)
}

// Component is a loaded model part that a generator may keep resident.
type Component interface {
	comparable
	Close() error
}

// Acquire returns the resident component in *slot, or the one a Preload of name loaded (waiting
// for it), or loads one (reporting name as a load and timing it): kept in *slot when the engine
// keeps that component (Engine.Keeps), else released at the end of the running stage.
func Acquire[T Component](s *Session, slot *T, name string, load func() (T, error)) (T, error) {
	var zero T
	if *slot != zero {
		return *slot, nil
	}
	if c, found, err := takePreload[T](s, name); found {
		if err != nil {
			return zero, err
		}
		*slot = c // only kept components preload
		return c, nil
	}
	s.noteLoad(name)
	t0 := time.Now()
	c, err := load()
	if err != nil {
		return zero, err
	}
	s.Result.Timings.AddLoad(name, time.Since(t0))
	if s.Engine.Keeps(name) {
		*slot = c
	} else {
		s.OnRelease(c.Close)
	}
	return c, nil
}

// Release closes the component in *slot, if any, and empties the slot (for Components.Close).
func Release[T Component](slot *T) error {
	var zero T
	if *slot == zero {
		return nil
	}
	err := (*slot).Close()
	*slot = zero
	return err
}

// DenoiseLoop runs steps sampling steps, each after a cancellation check, and reports each
// finished one as a DenoiseStep event (with the preview the step set, if any).
func (s *Session) DenoiseLoop(ctx context.Context, steps int, step func(k int) error) error {
	return s.DenoisePhase(ctx, DenoisePhase{Steps: steps, Total: steps}, step)
}

// DenoisePhase is one part of a denoise that runs several ladders (Wan's two-stage refine): its
// steps are numbered after the Offset steps of the parts before it, out of Total, and its step
// events carry Name as their Message.
type DenoisePhase struct {
	Name                 string
	Offset, Steps, Total int
}

// DenoisePhase runs one phase's steps like DenoiseLoop; the events' Elapsed counts from the first
// phase's start.
func (s *Session) DenoisePhase(ctx context.Context, ph DenoisePhase, step func(k int) error) error {
	if ph.Offset == 0 || s.denoiseStart.IsZero() {
		s.denoiseStart = time.Now()
	}
	for k := 0; k < ph.Steps; k++ {
		if err := s.Canceled(ctx); err != nil {
			return err
		}
		if err := step(k); err != nil {
			return err
		}
		e := api.Event{Kind: api.DenoiseStep, Stage: api.StageDenoise, Step: ph.Offset + k + 1, Steps: ph.Total,
			Elapsed: time.Since(s.denoiseStart), Message: ph.Name, Preview: s.preview}
		s.preview = nil
		s.Emit(e)
	}
	return nil
}
