package family

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	"fastvideo/fastvideo/api"
)

// A run's first decode would otherwise compile its decoders' programs one after another after the
// denoise (most of a cold run's decode time); a family starts those compiles at the start of its
// Denoise stage instead, with the decoders' Prepare methods, so that they overlap the DiT's load,
// compiles and steps (docs/architecture.md, "Decoder prewarm").

// prewarm is one StartPrewarm's goroutines.
type prewarm struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

// StartPrewarm runs each of jobs on a goroutine of its own, with a context that ends with ctx or
// with the run (Finish). Jobs only compile: a failed one costs the decode the compiles it did not
// make, never the run (AwaitPrewarm reports it as a warning).
func (s *Session) StartPrewarm(ctx context.Context, jobs ...func(context.Context) error) {
	if len(jobs) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &prewarm{cancel: cancel}
	for _, job := range jobs {
		w.wg.Go(func() {
			if err := runJob(ctx, job); err != nil {
				w.mu.Lock()
				w.errs = append(w.errs, err)
				w.mu.Unlock()
			}
		})
	}
	s.prewarms = append(s.prewarms, w)
}

// runJob runs job, with a panic turned into an error: a goroutine's panic would end the process,
// where the pipeline recovers a stage's.
func runJob(ctx context.Context, job func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return job(ctx)
}

// AwaitPrewarm waits for the prewarm jobs started so far (a family's Decode calls it first, so that
// the decode finds the programs compiled rather than compiling them a second time beside the
// prewarm). A job that failed for another reason than the run's cancellation is reported as a
// warning; the decode compiles what it left out.
func (s *Session) AwaitPrewarm() {
	for _, w := range s.prewarms {
		w.wg.Wait()
		w.cancel()
		for _, err := range w.errs {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			msg := fmt.Sprintf("decoder prewarm failed (the decode compiles its programs itself): %v", err)
			s.Result.Warnings = append(s.Result.Warnings, msg)
			s.Emit(api.Event{Kind: api.Warning, Message: msg})
		}
	}
	s.prewarms = nil
}

// Finish ends the run's background work: prewarm jobs still running are cancelled and waited for,
// so that none outlives the run or a component it uses, and preloads no stage took are waited for
// and kept. The pipeline calls it when a run ends, successful or not, before it releases the run's
// components.
func (s *Session) Finish() {
	for _, w := range s.prewarms {
		w.cancel()
		w.wg.Wait()
	}
	s.prewarms = nil
	s.finishPreloads()
}
