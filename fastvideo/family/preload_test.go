package family

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
)

// fakeComp is a component a test loads; closed counts its Close calls.
type fakeComp struct{ closed *atomic.Int32 }

func (c *fakeComp) Close() error { c.closed.Add(1); return nil }

// preloadSession is a session whose engine keeps every component (kept) or none, counting the loads
// it is told of.
func preloadSession(kept bool) (*Session, *atomic.Int32) {
	policy := OneResident
	if kept {
		policy = AllResident
	}
	s, _ := newTestSession()
	s.Engine.Memory = policy
	var noted atomic.Int32
	s.noteLoad = func(string) { noted.Add(1) }
	return s, &noted
}

// TestPreloadThenAcquire: Acquire takes what Preload loaded (one load, reported once and timed),
// keeps it in its slot, and does not load again.
func TestPreloadThenAcquire(t *testing.T) {
	s, noted := preloadSession(true)
	var slot *fakeComp
	var loads, closed atomic.Int32
	release := make(chan struct{})
	load := func() (*fakeComp, error) { loads.Add(1); <-release; return &fakeComp{&closed}, nil }
	Preload(s, &slot, "dit", load)
	Preload(s, &slot, "dit", load) // already running: no second load
	close(release)
	c, err := Acquire(s, &slot, "dit", func() (*fakeComp, error) { t.Error("Acquire loaded beside the preload"); return nil, nil })
	if err != nil || c == nil || slot != c {
		t.Fatalf("Acquire after Preload: %v, %v (slot %v)", c, err, slot)
	}
	if loads.Load() != 1 || noted.Load() != 1 {
		t.Errorf("%d loads, %d reported; want 1 and 1", loads.Load(), noted.Load())
	}
	if l := s.Result.Timings.Loads; len(l) != 1 || l[0].Stage != "dit" {
		t.Errorf("load times %v, want dit's", l)
	}
	s.Finish()
	if closed.Load() != 0 || slot != c {
		t.Errorf("Finish closed or dropped the acquired component (closed %d)", closed.Load())
	}
}

// TestPreloadOnlyKept: a component the engine does not keep is not preloaded (it would hold the
// device beside the stage before its own); Acquire loads it as before.
func TestPreloadOnlyKept(t *testing.T) {
	s, noted := preloadSession(false)
	var slot *fakeComp
	var closed atomic.Int32
	Preload(s, &slot, "dit", func() (*fakeComp, error) { t.Error("preloaded a component the engine does not keep"); return nil, nil })
	c, err := Acquire(s, &slot, "dit", func() (*fakeComp, error) { return &fakeComp{&closed}, nil })
	if err != nil || c == nil || slot != nil {
		t.Fatalf("Acquire: %v, %v; slot %v (want empty: not kept)", c, err, slot)
	}
	if noted.Load() != 1 {
		t.Errorf("%d loads reported, want 1", noted.Load())
	}
	if err := s.Release(); err != nil || closed.Load() != 1 {
		t.Errorf("release of the per-call component: %v, closed %d", err, closed.Load())
	}
}

// TestPreloadFailure: a failed or panicking preload fails the Acquire that takes it, naming the
// component; a later Acquire loads again.
func TestPreloadFailure(t *testing.T) {
	for _, c := range []struct {
		name string
		load func() (*fakeComp, error)
		want string
	}{
		{"error", func() (*fakeComp, error) { return nil, errors.New("no room") }, "loading dit: no room"},
		{"panic", func() (*fakeComp, error) { panic("boom") }, "loading dit: panic: boom"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, _ := preloadSession(true)
			var slot *fakeComp
			Preload(s, &slot, "dit", c.load)
			_, err := Acquire(s, &slot, "dit", func() (*fakeComp, error) { t.Error("loaded beside the failed preload"); return nil, nil })
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Acquire after a failed preload: %v, want %q", err, c.want)
			}
			var closed atomic.Int32
			if got, err := Acquire(s, &slot, "dit", func() (*fakeComp, error) { return &fakeComp{&closed}, nil }); err != nil || got == nil {
				t.Errorf("a second Acquire: %v, %v", got, err)
			}
		})
	}
}

// TestFinishKeepsUntakenPreload: a run that ends before the stage that needed a preloaded component
// waits for the load and keeps the component (the engine keeps it), so the next call does not
// load it again.
func TestFinishKeepsUntakenPreload(t *testing.T) {
	s, _ := preloadSession(true)
	var slot *fakeComp
	var closed atomic.Int32
	started := make(chan struct{})
	Preload(s, &slot, "video_vae", func() (*fakeComp, error) { close(started); return &fakeComp{&closed}, nil })
	<-started
	s.Finish()
	if slot == nil || closed.Load() != 0 {
		t.Fatalf("after Finish: slot %v, closed %d; want the preloaded component kept", slot, closed.Load())
	}
	s.Finish() // nothing left to wait for
}

// TestPrewarmPreloaded: the job runs on what the preload loaded, once it has loaded, and AwaitPrewarm
// waits for it; without a preload nothing starts; a failed load is left to the Acquire that takes it
// (no warning); Finish cancels a job still waiting for its load.
func TestPrewarmPreloaded(t *testing.T) {
	s, _ := preloadSession(true)
	var slot *fakeComp
	var closed atomic.Int32
	release := make(chan struct{})
	Preload(s, &slot, "video_vae", func() (*fakeComp, error) { <-release; return &fakeComp{&closed}, nil })
	var got atomic.Pointer[fakeComp]
	PrewarmPreloaded(context.Background(), s, "video_vae", func(_ context.Context, c *fakeComp) error { got.Store(c); return nil })
	PrewarmPreloaded(context.Background(), s, "audio_vae", func(context.Context, *fakeComp) error {
		t.Error("a job ran without a preload")
		return nil
	})
	close(release)
	s.AwaitPrewarm()
	c, err := Acquire(s, &slot, "video_vae", func() (*fakeComp, error) { t.Error("loaded beside the preload"); return nil, nil })
	if err != nil || got.Load() == nil || got.Load() != c {
		t.Fatalf("the job saw %v, Acquire took %v (%v): want the same preloaded component", got.Load(), c, err)
	}

	s2, _ := preloadSession(true)
	var slot2 *fakeComp
	Preload(s2, &slot2, "video_vae", func() (*fakeComp, error) { return nil, errors.New("no room") })
	PrewarmPreloaded(context.Background(), s2, "video_vae", func(context.Context, *fakeComp) error {
		t.Error("a job ran on a failed load")
		return nil
	})
	s2.AwaitPrewarm()
	if len(s2.Result.Warnings) != 0 {
		t.Errorf("a failed preload warned through its prewarm job: %q", s2.Result.Warnings)
	}
	if _, err := Acquire(s2, &slot2, "video_vae", func() (*fakeComp, error) { return nil, nil }); err == nil {
		t.Error("Acquire took a failed preload without its error")
	}

	s3, _ := preloadSession(true)
	var slot3 *fakeComp
	hold := make(chan struct{})
	Preload(s3, &slot3, "video_vae", func() (*fakeComp, error) { <-hold; return &fakeComp{&closed}, nil })
	ran := make(chan struct{}, 1)
	PrewarmPreloaded(context.Background(), s3, "video_vae", func(context.Context, *fakeComp) error { ran <- struct{}{}; return nil })
	go func() { close(hold) }() // Finish cancels the waiting job, then waits for the load
	s3.Finish()
	if slot3 == nil {
		t.Error("Finish dropped the preload its cancelled prewarm job waited for")
	}
}
