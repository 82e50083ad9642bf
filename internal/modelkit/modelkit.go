// Package modelkit is the lifecycle every model package (dit/h3, dit/wan, the VAEs, the text encoders)
// shares, written once: resolving Options.DType, checking the backend, opening a released folder
// (copying its weights, or keeping the checkpoint for the model's lifetime), the plain and traced
// executable sets, device tables cached by geometry, prepared text rows, and the checks on the host
// inputs every model makes the same way. Each model package keeps only what is that model.
package modelkit

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/randweights"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// Float dtypes the models accept in Options.DType: DiTs compute in Float32 or BFloat16; the VAEs and
// text encoders also take Float16.
var (
	DiTDTypes  = []dtypes.DType{dtypes.Float32, dtypes.BFloat16}
	HalfDTypes = []dtypes.DType{dtypes.Float32, dtypes.BFloat16, dtypes.Float16}
)

// DType resolves a model's Options.DType: the zero value means Float32 (exact, the CPU choice); any
// dtype outside allowed is refused, naming the field and the choices.
func DType(dt dtypes.DType, allowed []dtypes.DType) (dtypes.DType, error) {
	if dt == dtypes.InvalidDType {
		return dtypes.Float32, nil
	}
	for _, a := range allowed {
		if dt == a {
			return dt, nil
		}
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = a.String()
	}
	return dt, fmt.Errorf("Options.DType = %s is not supported; use %s", dt, strings.Join(names, ", "))
}

// CheckBackend refuses a nil backend with the fix.
func CheckBackend(backend compute.Backend) error {
	if backend == nil {
		return errors.New("backend is nil; create one with fastvideo/internal/backend")
	}
	return nil
}

// LoadFolder reads the config of a released component folder (vae/, audio_vae/, …) with readConfig,
// opens its checkpoint (one file, a folder of files or shards with their index) and hands both to
// build, which must copy what it keeps (weights.Bind does): the checkpoint closes when build returns.
// what prefixes an open failure ("wan", "h3audio", …), as build's own errors are prefixed.
func LoadFolder[C, T any](dir, what string, readConfig func(string) (C, error), build func(C, weights.Source) (T, error)) (T, error) {
	var zero T
	cfg, err := readConfig(dir)
	if err != nil {
		return zero, err
	}
	ckpt, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return zero, fmt.Errorf("%s: opening the weights: %w", what, err)
	}
	defer ckpt.Close()
	return build(cfg, ckpt)
}

// OpenFolder is LoadFolder for a model that keeps reading its checkpoint (a text encoder streaming
// its layers) or may alias it (same-dtype host tensors on the Go backend): on success the checkpoint
// stays open and its Close is returned for the model to call when it closes.
func OpenFolder[C, T any](dir, what string, readConfig func(string) (C, error), build func(C, weights.Source) (T, error)) (T, func() error, error) {
	var zero T
	cfg, err := readConfig(dir)
	if err != nil {
		return zero, nil, err
	}
	ckpt, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return zero, nil, fmt.Errorf("%s: opening the weights: %w", what, err)
	}
	m, err := build(cfg, ckpt)
	if err != nil {
		ckpt.Close()
		return zero, nil, err
	}
	return m, ckpt.Close, nil
}

// Finalizer is a set of executables that can be freed.
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

// RopeCache keeps the device RoPE tables of the last geometry: every step of a generation uses the
// same one, and comparing it is far cheaper than recomputing and uploading 2·L·width cos/sin values.
type RopeCache[K any] struct {
	equal    func(a, b K) bool
	key      K
	cos, sin *tensors.Tensor
}

// NewRopeCache makes an empty cache whose geometries compare with equal.
func NewRopeCache[K any](equal func(a, b K) bool) *RopeCache[K] { return &RopeCache[K]{equal: equal} }

// Tables returns the device tables [rows, width] for key, computing them with tables (host cos, sin)
// and uploading them when key differs from the cached geometry.
func (c *RopeCache[K]) Tables(backend compute.Backend, key K, rows, width int, tables func() (cos, sin []float32)) (cos, sin *tensors.Tensor, err error) {
	if c.cos != nil && c.equal(c.key, key) {
		return c.cos, c.sin, nil
	}
	c.Finalize()
	cosH, sinH := tables()
	cos, sin = tensors.FromFlatDataAndDimensions(cosH, rows, width), tensors.FromFlatDataAndDimensions(sinH, rows, width)
	if err := graphexec.Upload(backend, cos, sin); err != nil {
		return nil, nil, fmt.Errorf("RoPE tables: %w", err)
	}
	c.key, c.cos, c.sin = key, cos, sin
	return cos, sin, nil
}

// Finalize frees the cached tables.
func (c *RopeCache[K]) Finalize() {
	if c != nil && c.cos != nil {
		graphexec.Finalize(c.cos, c.sin)
		c.cos, c.sin = nil, nil
	}
}

// Release frees a model's parameters, then its executables and device caches, then closes the
// checkpoint it reads from (closeSrc; nil when it owns none).
func Release(set *weights.Set, closeSrc func() error, owned ...Finalizer) error {
	set.Release()
	for _, o := range owned {
		o.Finalize()
	}
	if closeSrc != nil {
		return closeSrc()
	}
	return nil
}

// TextRows is a prompt prepared once per generation on the device, [rows, width] in the compute
// dtype, reused by every step. The DiTs embed it in their own TextState types so that a prompt
// prepared by one model cannot be passed to another.
type TextRows struct {
	rows int
	x    *tensors.Tensor
}

// NewTextRows wraps a prepared [rows, width] tensor.
func NewTextRows(rows int, x *tensors.Tensor) TextRows { return TextRows{rows: rows, x: x} }

// Rows is the number of text tokens.
func (t *TextRows) Rows() int { return t.rows }

// Tensor is the device tensor, nil once closed.
func (t *TextRows) Tensor() *tensors.Tensor { return t.x }

// Close frees the device tensor.
func (t *TextRows) Close() {
	if t != nil && t.x != nil {
		t.x.FinalizeAll()
		t.x = nil
	}
}

// TextCount checks host text features [S, width] (row-major) and returns S.
func TextCount(text []float32, width int, what string) (int, error) {
	if len(text) == 0 || len(text)%width != 0 {
		return 0, fmt.Errorf("%s have %d values, want S × text_dim (%d) with S >= 1", what, len(text), width)
	}
	return len(text) / width, nil
}

// CheckFinite refuses a NaN or infinite value of the field named field.
func CheckFinite(field string, values []float32) error {
	for i, t := range values {
		if math.IsNaN(float64(t)) || math.IsInf(float64(t), 0) {
			return fmt.Errorf("%s[%d] = %v is not finite", field, i, t)
		}
	}
	return nil
}

// Validator is a model configuration.
type Validator interface{ Validate() error }

// Prepare makes the checks every model makes before declaring its parameters: the configuration, the
// backend, and Options.DType, which it resolves among allowed. Errors other than the config's own are
// prefixed with what ("h3", "wan", …).
func Prepare(what string, cfg Validator, backend compute.Backend, dt dtypes.DType, allowed []dtypes.DType) (dtypes.DType, error) {
	if err := cfg.Validate(); err != nil {
		return dt, err
	}
	if err := CheckBackend(backend); err != nil {
		return dt, fmt.Errorf("%s: %w", what, err)
	}
	dt, err := DType(dt, allowed)
	if err != nil {
		return dt, fmt.Errorf("%s: %w", what, err)
	}
	return dt, nil
}

// Guard serializes a model's calls with its Close: a call takes it (exclusively, or shared for calls
// that may run together) and fails once the model is closed; Close releases the model once.
type Guard struct {
	mu     sync.RWMutex
	closed bool
}

// Lock takes the guard for one exclusive call; once the model is closed it fails with closedErr,
// leaving the guard free.
func (g *Guard) Lock(closedErr string) (unlock func(), err error) {
	return g.take(g.mu.Lock, g.mu.Unlock, closedErr)
}

// RLock is Lock for a call that may run alongside other shared calls.
func (g *Guard) RLock(closedErr string) (unlock func(), err error) {
	return g.take(g.mu.RLock, g.mu.RUnlock, closedErr)
}

func (g *Guard) take(lock, unlock func(), closedErr string) (func(), error) {
	lock()
	if g.closed {
		unlock()
		return nil, errors.New(closedErr)
	}
	return unlock, nil
}

// Close runs release once, after the calls in flight; later calls to Close return nil.
func (g *Guard) Close(release func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	return release()
}

// BindSource binds a model's declared parameters from the checkpoint tensors of src (stored in dt, on
// backend) and then runs finish (executables, derived tensors; nil: nothing); when either fails the
// parameters are released. A bind failure is prefixed with what.
func BindSource(what string, src weights.Source, set *weights.Set, dt dtypes.DType, backend compute.Backend, finish func() error) error {
	return populate(set, func() error {
		if err := weights.Bind(src, set, weights.Options{DType: dt, Backend: backend}); err != nil {
			return fmt.Errorf("%s: binding the weights: %w", what, err)
		}
		return nil
	}, finish)
}

// DrawRandom is BindSource with values drawn on the device (randweights.FillRandom from seed, with
// draw) instead of a checkpoint's.
func DrawRandom(what string, set *weights.Set, dt dtypes.DType, backend compute.Backend, seed int64, draw randweights.Draw, finish func() error) error {
	return populate(set, func() error {
		if err := randweights.FillRandom(backend, set, dt, seed, draw); err != nil {
			return fmt.Errorf("%s: random weights: %w", what, err)
		}
		return nil
	}, finish)
}

func populate(set *weights.Set, fill, finish func() error) error {
	err := fill()
	if err == nil && finish != nil {
		err = finish()
	}
	if err != nil {
		set.Release()
	}
	return err
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
