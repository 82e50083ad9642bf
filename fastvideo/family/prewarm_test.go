package family

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"fastvideo/fastvideo/api"
)

func newTestSession() (*Session, *[]api.Event) {
	var events []api.Event
	s := NewSession(&Engine{}, api.Request{}, &api.Result{}, func(e api.Event) { events = append(events, e) }, func(string) {})
	return s, &events
}

// TestPrewarmAwait: AwaitPrewarm waits for every job; a failure (a panic included) becomes a
// warning, a cancellation does not.
func TestPrewarmAwait(t *testing.T) {
	s, events := newTestSession()
	var ran atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	s.StartPrewarm(context.Background(),
		func(context.Context) error { ran.Add(1); return nil },
		func(context.Context) error { ran.Add(1); return errors.New("h3video: no room") },
		func(context.Context) error { ran.Add(1); panic("boom") })
	s.StartPrewarm(ctx, func(ctx context.Context) error { ran.Add(1); cancel(); <-ctx.Done(); return ctx.Err() })
	s.StartPrewarm(ctx) // no jobs: nothing to wait for
	s.AwaitPrewarm()
	if ran.Load() != 4 {
		t.Errorf("%d jobs ran before AwaitPrewarm returned, want 4", ran.Load())
	}
	w := s.Result.Warnings
	if len(w) != 2 || len(*events) != 2 || !strings.Contains(strings.Join(w, "\n"), "no room") || !strings.Contains(strings.Join(w, "\n"), "boom") {
		t.Errorf("warnings %q (%d events), want the failure and the panic only", w, len(*events))
	}
	s.AwaitPrewarm() // awaited jobs are not reported twice
	if len(s.Result.Warnings) != 2 {
		t.Errorf("a second AwaitPrewarm added warnings: %q", s.Result.Warnings)
	}
}

// TestPrewarmFinish: Finish cancels the jobs still running and returns once they have ended,
// reporting nothing.
func TestPrewarmFinish(t *testing.T) {
	s, _ := newTestSession()
	var ended atomic.Bool
	started := make(chan struct{})
	s.StartPrewarm(context.Background(), func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		ended.Store(true)
		return ctx.Err()
	})
	<-started
	s.Finish()
	if !ended.Load() {
		t.Error("Finish returned before the job ended")
	}
	s.AwaitPrewarm()
	if len(s.Result.Warnings) != 0 {
		t.Errorf("warnings after Finish: %q", s.Result.Warnings)
	}
}
