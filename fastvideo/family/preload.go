package family

import (
	"context"
	"fmt"
	"time"
)

// A run's first call loads its components one after another as the stages reach them: the text
// encoder in Condition, then the DiT and the decoders in Denoise. A family starts the loads of the
// components the engine keeps in Condition instead (Preload), once the prompt has passed its cheap
// checks, so that they overlap the text encoder's load and the prompt's encoding; Acquire then waits
// for them (docs/architecture.md, "Preload"). Only kept components preload: the memory policy keeps one only where every component
// that is not kept still runs beside it, so a preload holds no more on the device than a second call
// does.

// preload is one Preload's load, running or done.
type preload struct {
	done chan struct{}
	comp any // the loaded component (a T), once done
	err  error
	took time.Duration
	// keep puts the loaded component in its slot (Finish, when no Acquire took it).
	keep func()
}

// Preload starts load on a goroutine of its own when the engine keeps name and *slot is empty (and
// no preload of name is running), and reports name as a load now. Acquire with the same name waits
// for it and takes its result. load must not touch the session: it runs beside the stage.
func Preload[T Component](s *Session, slot *T, name string, load func() (T, error)) {
	var zero T
	if *slot != zero || !s.Engine.Keeps(name) || s.preloads[name] != nil {
		return
	}
	s.noteLoad(name)
	p := &preload{done: make(chan struct{})}
	p.keep = func() {
		if c, ok := p.comp.(T); ok && p.err == nil {
			*slot = c
		}
	}
	if s.preloads == nil {
		s.preloads = map[string]*preload{}
	}
	s.preloads[name] = p
	go func() {
		defer close(p.done)
		t0 := time.Now()
		var c T
		p.err = runJob(context.Background(), func(context.Context) error {
			var err error
			c, err = load()
			return err
		})
		if p.err == nil {
			p.comp = c
		}
		p.took = time.Since(t0)
	}()
}

// PrewarmPreloaded starts job (a prewarm job: StartPrewarm) on what the running preload of name
// loads, as soon as it has loaded, so that a decoder's compiles overlap the stages before the one
// that acquires it. Without a preload of name nothing starts. A failed load is not the job's to
// report: the Acquire that takes the preload fails with it.
func PrewarmPreloaded[T Component](ctx context.Context, s *Session, name string, job func(context.Context, T) error) {
	p := s.preloads[name]
	if p == nil {
		return
	}
	s.StartPrewarm(ctx, func(ctx context.Context) error {
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		c, ok := p.comp.(T)
		if p.err != nil || !ok {
			return nil
		}
		return job(ctx, c)
	})
}

// takePreload waits for the preload of name, if any, and hands over its component.
func takePreload[T Component](s *Session, name string) (c T, found bool, err error) {
	p := s.preloads[name]
	if p == nil {
		return c, false, nil
	}
	<-p.done
	delete(s.preloads, name)
	if p.err != nil {
		return c, true, fmt.Errorf("loading %s: %w", name, p.err)
	}
	s.Result.Timings.AddLoad(name, p.took)
	c, _ = p.comp.(T)
	return c, true, nil
}

// finishPreloads waits for the preloads no Acquire took (a run that failed before the stage that
// needed them) and keeps what loaded: the engine keeps those components, so the next call finds
// them resident instead of loading them again. A load cannot be interrupted, so a run cancelled
// during Condition returns once its preloads end.
func (s *Session) finishPreloads() {
	for name, p := range s.preloads {
		<-p.done
		p.keep()
		delete(s.preloads, name)
	}
}
