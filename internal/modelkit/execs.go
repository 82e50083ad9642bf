package modelkit

import "github.com/gomlx/gomlx/core/graph"

// Finalizer is what a model frees when it closes: executables, device caches.
type Finalizer interface{ Finalize() }

// Stages are a model's executables: the plain set, built with the model, and the traced set (which
// also returns intermediates for the parity tests), built on first use.
type Stages[S Finalizer] struct {
	build         func(traced bool) S
	plain, traced S
	hasTraced     bool
}

// NewStages builds the plain set now and keeps build for the traced one.
func NewStages[S Finalizer](build func(traced bool) S) *Stages[S] {
	return &Stages[S]{build: build, plain: build(false)}
}

// Get returns the traced set when traced (building it once), else the plain one.
func (s *Stages[S]) Get(traced bool) S {
	if !traced {
		return s.plain
	}
	if !s.hasTraced {
		s.traced, s.hasTraced = s.build(true), true
	}
	return s.traced
}

// Finalize frees both sets.
func (s *Stages[S]) Finalize() {
	if s == nil {
		return
	}
	s.plain.Finalize()
	if s.hasTraced {
		s.traced.Finalize()
	}
}

// ExecCache keeps executables built once per key: a tile geometry, a token grid, a graph variant.
type ExecCache[K comparable] map[K]*graph.Exec

// Get returns the executable of key, building it with build the first time.
func (c ExecCache[K]) Get(key K, build func() (*graph.Exec, error)) (*graph.Exec, error) {
	if e := c[key]; e != nil {
		return e, nil
	}
	e, err := build()
	if err != nil {
		return nil, err
	}
	c[key] = e
	return e, nil
}

// Finalize frees every executable.
func (c ExecCache[K]) Finalize() {
	for k, e := range c {
		e.Finalize()
		delete(c, k)
	}
}
