// Package graphexec is how model packages run GoMLX graphs, one way for all: turning GoMLX panics into
// errors at a public boundary, building named executables and calling them, moving tensors to and from
// the device, freeing them, and the tests' trace hook.
//
// GoMLX reports graph-building and execution failures by panicking. Model code builds graphs freely
// and recovers once, where a public method returns: `defer graphexec.Recover(&err, "h3: forward")`.
package graphexec

import (
	"fmt"
	"runtime/debug"
	"time"
	"unsafe"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/dtypes/float16"
	"github.com/gomlx/compute/dtypes/gotype"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/parallel"
	"fastvideo/internal/weights"
)

// Recover turns a panic into an error stored in *err, prefixed with context (e.g. "h3: forward").
// It must be deferred directly: `defer graphexec.Recover(&err, "wan: forward")`. A panic with a non-error
// value (a programming error, not a GoMLX report) keeps its stack in the message.
func Recover(err *error, context string) {
	r := recover()
	if r == nil {
		return
	}
	*err = recovered(r, context)
}

// Catch runs fn and returns its error, or the panic it raised as an error prefixed with context
// (no prefix when context is empty).
func Catch(context string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = recovered(r, context)
		}
	}()
	return fn()
}

func recovered(r any, context string) error {
	e, ok := r.(error)
	switch {
	case ok && context == "":
		return e
	case ok:
		return fmt.Errorf("%s: %w", context, e)
	case context == "":
		return fmt.Errorf("%v\n%s", r, debug.Stack())
	}
	return fmt.Errorf("%s: %v\n%s", context, r, debug.Stack())
}

// MustExec creates the executable of fn named name (the name errors and profiles show) and panics
// when GoMLX refuses it; call it under Recover. The graph is built and compiled at the first call
// with each set of input shapes.
func MustExec[F ExecGraphFn](backend compute.Backend, name string, fn F) *Exec {
	e, err := NewExec(backend, fn)
	if err != nil {
		panic(err)
	}
	return e.WithName(name)
}

// Call runs e on device 0 and returns its outputs; a failure, panic included, is an error that names e.
func Call(e *Exec, args ...any) (out []*tensors.Tensor, err error) {
	return CallOn(e, 0, args...)
}

// Call1 is Call for an executable of one output.
func Call1(e *Exec, args ...any) (*tensors.Tensor, error) {
	out, err := Call(e, args...)
	if err != nil {
		return nil, err
	}
	if len(out) != 1 {
		Finalize(out...)
		return nil, fmt.Errorf("%s: %d outputs, want 1", e.Name(), len(out))
	}
	return out[0], nil
}

// CallOn runs the single-device executable e on device dev: host arguments are uploaded there, and
// device arguments must already live there (GoMLX refuses a tensor on another device rather than
// moving it). GoMLX's Exec.CallOnDevice ignores its device in v0.28.2, so this goes through
// CallWithGraphOnDevice. A call that compiles a program counts it (Compiles).
func CallOn(e *Exec, dev compute.DeviceNum, args ...any) (out []*tensors.Tensor, err error) {
	defer Recover(&err, e.Name())
	var pre *Graph
	if e.NumDevices() <= 1 {
		pre = precompile(e, args)
	}
	t0 := time.Now()
	var g *Graph
	out, g, err = e.CallWithGraphOnDevice(dev, args...)
	if pre == nil {
		noteGraph(g, time.Since(t0), true)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.Name(), err)
	}
	return out, nil
}

// CopyToDevice returns a copy of t on device dev (device to device where t is on a device); t is
// left as it is.
func CopyToDevice(backend compute.Backend, t *tensors.Tensor, dev compute.DeviceNum) (*tensors.Tensor, error) {
	if !t.IsOnAnyDevice() {
		return t.OnDeviceClone(backend, dev)
	}
	from, err := t.Device()
	if err != nil {
		return nil, err
	}
	buf, err := t.Buffer(backend, from)
	if err != nil {
		return nil, err
	}
	c, err := buf.CopyToDevice(dev)
	if err != nil {
		return nil, fmt.Errorf("copying a %s tensor from device %d to device %d: %w", t.Shape(), from, dev, err)
	}
	return tensors.FromBuffer(c)
}

// CopyAllToDevice copies every tensor of ts to device dev (nil entries stay nil): a device replica of
// a model's weights. On failure the copies already made are freed.
func CopyAllToDevice(backend compute.Backend, ts []*tensors.Tensor, dev compute.DeviceNum) ([]*tensors.Tensor, error) {
	out := make([]*tensors.Tensor, len(ts))
	for i, t := range ts {
		if t == nil {
			continue
		}
		c, err := CopyToDevice(backend, t, dev)
		if err != nil {
			Finalize(out...)
			return nil, fmt.Errorf("tensor %d of %d: %w", i+1, len(ts), err)
		}
		out[i] = c
	}
	return out, nil
}

// Finalize frees tensors (on the device and on the host); nil entries are skipped.
func Finalize(ts ...*tensors.Tensor) {
	for _, t := range ts {
		if t != nil {
			t.FinalizeAll()
		}
	}
}

// FinalizeExecs frees executables; nil entries are skipped.
func FinalizeExecs(es ...*Exec) {
	for _, e := range es {
		if e != nil {
			e.Finalize()
		}
	}
}

// Args appends tensors to args as Exec.Call arguments.
func Args(args []any, ts ...*tensors.Tensor) []any {
	for _, t := range ts {
		args = append(args, t)
	}
	return args
}

// Upload moves host tensors to the backend's device 0 once, so the executables that take them reuse
// one device copy. On failure the tensors already moved, and the rest, are freed.
func Upload(backend compute.Backend, ts ...*tensors.Tensor) error {
	return UploadTo(backend, 0, ts...)
}

// UploadTo is Upload to device dev.
func UploadTo(backend compute.Backend, dev compute.DeviceNum, ts ...*tensors.Tensor) error {
	for i, t := range ts {
		if err := t.ToDevice(backend, dev); err != nil {
			Finalize(ts...)
			return fmt.Errorf("uploading tensor %d of %d (%s): %w", i+1, len(ts), t.Shape(), err)
		}
	}
	return nil
}

// HostF32 copies a float tensor to the host as float32 (exact for Float32, BFloat16 and Float16);
// t stays usable.
func HostF32(t *tensors.Tensor) ([]float32, error) {
	switch t.DType() {
	case dtypes.Float32:
		return tensors.CopyFlatData[float32](t)
	case dtypes.BFloat16, dtypes.Float16:
		var out []float32
		err := t.ConstFlatData(func(flat any) { out = widen(flat) })
		return out, err
	}
	return nil, notFloat(t)
}

// TakeF32 is HostF32 for an output nobody reads again: it moves t to the host and frees it, and a
// Float32 tensor's values come back without a second copy (tensors.CopyFlatData copies the host
// buffer once more: 0.4 GB for a decoded 81-frame 480p video).
func TakeF32(t *tensors.Tensor) ([]float32, error) {
	switch t.DType() {
	case dtypes.Float32:
		return Take[float32](t)
	case dtypes.BFloat16:
		return takeWidened[bfloat16.BFloat16](t)
	case dtypes.Float16:
		return takeWidened[float16.Float16](t)
	}
	t.FinalizeAll()
	return nil, notFloat(t)
}

// takeWidened is TakeF32 of a half-precision tensor: widened straight out of the staging region
// where there is one, else out of Take's slice.
func takeWidened[T interface {
	gotype.Supported
	Float32() float32
}](t *tensors.Tensor) ([]float32, error) {
	if b, buf, ok := deviceBuffer(t); ok {
		defer t.FinalizeAll()
		var out []float32
		if staged, err := takeStaged(b, buf, t.Size(), func(v []T) { out = widenEach(v) }); staged {
			return out, err
		}
	}
	v, err := Take[T](t)
	return widenEach(v), err
}

// Place is the backend and device t lives on (an error for a tensor only on the host).
func Place(t *tensors.Tensor) (compute.Backend, compute.DeviceNum, error) {
	b, err := t.Backend()
	if err != nil {
		return nil, 0, err
	}
	dev, err := t.Device()
	if err != nil {
		return nil, 0, err
	}
	return b, dev, nil
}

// deviceBuffer is t's buffer on its device, if it has one.
func deviceBuffer(t *tensors.Tensor) (compute.Backend, compute.Buffer, bool) {
	b, dev, err := Place(t)
	if err != nil {
		return nil, nil, false
	}
	buf, err := t.Buffer(b, dev)
	if err != nil {
		return nil, nil, false
	}
	return b, buf, true
}

// Take moves t, of Go type T, to the host and frees it, returning its values without the second copy
// tensors.CopyFlatData makes. A device tensor is copied straight into a fresh slice whose pages are
// first touched by all the CPUs at once: the transfer into untouched memory otherwise takes each
// page fault in turn (0.10 s instead of 0.05 s for 388 MiB on an H200 host, bench -what d2h). In the
// GPU build a large output crosses through page-locked memory instead (takeStaged).
func Take[T gotype.Supported](t *tensors.Tensor) ([]T, error) {
	defer t.FinalizeAll()
	if b, buf, ok := deviceBuffer(t); ok {
		out := make([]T, t.Size())
		copyOut := func(staged []T) {
			parallel.Ranges(len(out), max(1, (1<<20)/int(unsafe.Sizeof(out[0]))), func(lo, hi int) { copy(out[lo:hi], staged[lo:hi]) })
		}
		if staged, err := takeStaged(b, buf, len(out), copyOut); staged {
			return out, err
		}
		touchPages(out)
		return out, buf.ToFlatData(out)
	}
	// A host tensor: after ToLocal its buffer is a Go slice of the tensor's own, so it outlives
	// FinalizeAll, which only drops the reference.
	if err := t.ToLocal(); err != nil {
		return nil, err
	}
	var out []T
	err := t.ConstFlatData(func(flat any) {
		if v, ok := flat.([]T); ok {
			out = v
		}
	})
	if err == nil && out == nil {
		err = fmt.Errorf("a %s tensor %s is not a %T", t.DType(), t.Shape(), out)
	}
	return out, err
}

// touchPages writes the zero value once per 4 KiB page of v, spread over the CPUs.
func touchPages[T any](v []T) {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if size == 0 || len(v)*size < 1<<20 {
		return
	}
	stride := max(1, 4096/size)
	pages := (len(v) + stride - 1) / stride
	parallel.Ranges(pages, 1024, func(lo, hi int) {
		for p := lo; p < hi; p++ {
			v[p*stride] = zero
		}
	})
}

func notFloat(t *tensors.Tensor) error {
	return fmt.Errorf("a %s tensor %s cannot be read as float32; convert it to a float dtype first", t.DType(), t.Shape())
}

// widen converts a []bfloat16.BFloat16 or []float16.Float16 to float32, split over the CPUs for
// large tensors (a decoded video is 10^8 values).
func widen(flat any) []float32 {
	switch v := flat.(type) {
	case []bfloat16.BFloat16:
		return widenEach(v)
	case []float16.Float16:
		return widenEach(v)
	}
	panic(fmt.Sprintf("graphexec: widen of %T", flat))
}

func widenEach[T interface{ Float32() float32 }](v []T) []float32 {
	out := make([]float32, len(v))
	parallel.Ranges(len(v), 1<<20, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = v[i].Float32()
		}
	})
	return out
}

// ParamArgs appends the bound tensors of ps to args as Exec.Call arguments.
func ParamArgs(args []any, ps ...*weights.Param) []any {
	for _, p := range ps {
		args = append(args, p.T)
	}
	return args
}

// Bound maps weight names to their graph inputs inside one graph build.
type Bound map[string]*Node

// Bind maps each of ps to its graph input, in[i] for ps[i].
func Bind(ps []*weights.Param, in []*Node) Bound {
	b := make(Bound, len(ps))
	for i, p := range ps {
		b[p.Name] = in[i]
	}
	return b
}

// Get is the graph input of the weight name. The graph and the binding read the same list of names,
// so a missing name is a programming error; the panic is recovered at the API boundary.
func (b Bound) Get(name string) *Node {
	n, ok := b[name]
	if !ok {
		panic(fmt.Errorf("graph needs %q, which was not bound", name))
	}
	return n
}

// Trace is a model's test hook: it receives named float32 copies of intermediates (the names of the
// fixtures' act.* tensors). A nil Trace traces nothing, so models call Emit unconditionally.
type Trace func(name string, shape []int, values []float32)

// Emit hands t to the hook as float32 under name; without a hook it does nothing (and reads nothing
// back). A failure is reported as "<context>: trace <name>: <error>".
func (tr Trace) Emit(context, name string, t *tensors.Tensor) error {
	if tr == nil {
		return nil
	}
	v, err := HostF32(t)
	if err != nil {
		return fmt.Errorf("%s: trace %s: %w", context, name, err)
	}
	tr(name, t.Shape().Dimensions, v)
	return nil
}

// Inputs is an executable's inputs as a struct of named fields (graph nodes when building it, tensors
// when calling it): Fields lists pointers to them in call order, the one place that order is written.
type Inputs[T any] interface{ Fields() []*T }

// Unpack fills a's fields from the graph inputs in order and returns the inputs after them (weights
// passed as a list).
func Unpack[T any](in []T, a Inputs[T]) []T {
	fs := a.Fields()
	for i, f := range fs {
		*f = in[i]
	}
	return in[len(fs):]
}

// Values lists a's fields in order (to pass several Inputs in one call: Pack(first, Values(second)...)).
func Values[T any](a Inputs[T]) []T {
	fs := a.Fields()
	out := make([]T, len(fs))
	for i, f := range fs {
		out[i] = *f
	}
	return out
}

// Pack lists a's fields in order as Exec.Call arguments, followed by rest.
func Pack[T any](a Inputs[T], rest ...T) []any {
	fs := a.Fields()
	args := make([]any, 0, len(fs)+len(rest))
	for _, f := range fs {
		args = append(args, *f)
	}
	for _, r := range rest {
		args = append(args, r)
	}
	return args
}
