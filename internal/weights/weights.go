// Package weights binds checkpoint tensors to a model's declared parameters.
//
// A model declares its parameters once, as a table of checkpoint names and
// shapes computed from its config (a Set); Bind then fills them from any Source
// (a safetensors checkpoint, a fixture, a quantized file). Binding is all or
// nothing and reports every problem at once: a checkpoint from the wrong model
// variant produces one error listing each missing, unexpected and mismatched
// name, instead of a fix-one-rerun loop.
package weights

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/x448/float16"

	"fastvideo/internal/safetensors"
)

// Source yields checkpoint tensors by name.
type Source interface {
	Names() []string
	Tensor(name string) (safetensors.Info, bool)
}

// HeaderSource is a Source whose tensors are computed on demand (a dequantizing wrapper): Header
// describes a tensor (name, dtype, shape; no Data) without computing it, so that checks over a whole
// checkpoint stay cheap and Tensor runs only for what is loaded.
type HeaderSource interface {
	Source
	Header(name string) (safetensors.Info, bool)
}

// HeaderOf describes the tensor called name, through Header where src computes its tensors.
func HeaderOf(src Source, name string) (safetensors.Info, bool) {
	if h, ok := src.(HeaderSource); ok {
		return h.Header(name)
	}
	return src.Tensor(name)
}

// Param is one declared parameter. After a successful Bind, T holds its value.
type Param struct {
	Name  string
	Shape []int
	// Storage is the dtype the parameter keeps. InvalidDType means "the compute
	// dtype of the Bind": float checkpoints are converted to it. FP32 boundary
	// modules declare Float32; quantized words declare their integer dtype, which
	// the checkpoint must match exactly.
	Storage  dtypes.DType
	Optional bool
	// Deferred parameters are checked by Bind like the others (present, shape, dtype) but not loaded:
	// the model loads them itself, e.g. cut into per-device slices (LoadTo, SliceInfo), so that the
	// whole tensor never lands on a device.
	Deferred bool
	// AfterBind, when set, runs as soon as T holds the value (loaded by Bind, or drawn by randweights)
	// and before the next parameter lands, so that a model can convert it on the device (FP8) without
	// the unconverted copies of all its weights being alive at once. It may replace T.
	AfterBind func(*Param) error
	T         *tensors.Tensor
}

// ThenAfterBind makes fn run after the parameter's AfterBind (if any) once it is bound.
func (p *Param) ThenAfterBind(fn func(*Param) error) {
	prev := p.AfterBind
	if prev == nil {
		p.AfterBind = fn
		return
	}
	p.AfterBind = func(q *Param) error {
		if err := prev(q); err != nil {
			return err
		}
		return fn(q)
	}
}

// AfterBindAll makes fn run on every parameter declared so far once it is bound, after the
// parameter's own AfterBind (nil fn: nothing).
func (s *Set) AfterBindAll(fn func(*Param) error) {
	if fn == nil {
		return
	}
	for _, p := range s.root.params {
		p.ThenAfterBind(fn)
	}
}

// Bound reports whether the parameter received a value (always true for
// non-optional parameters after a successful Bind).
func (p *Param) Bound() bool { return p != nil && p.T != nil }

// Set is an ordered table of declared parameters under a common name prefix.
type Set struct {
	prefix string
	root   *setRoot
}

type setRoot struct {
	prefix string
	params []*Param
	byName map[string]*Param
	ignore []string
}

// NewSet starts a table whose names all begin with prefix (may be empty). Bind
// treats source names under prefix that the table does not declare as unexpected.
func NewSet(prefix string) *Set {
	return &Set{prefix: prefix, root: &setRoot{prefix: prefix, byName: map[string]*Param{}}}
}

// Sub returns a view that prepends name+"." to every declaration, e.g.
// s.Sub("transformer_blocks.3").Add("attn.to_q.weight", d, d).
func (s *Set) Sub(name string) *Set {
	return &Set{prefix: s.prefix + name + ".", root: s.root}
}

// Add declares a parameter stored in the compute dtype.
func (s *Set) Add(name string, shape ...int) *Param {
	return s.declare(name, dtypes.InvalidDType, false, shape)
}

// AddF32 declares a parameter that stays float32 whatever the compute dtype.
func (s *Set) AddF32(name string, shape ...int) *Param {
	return s.declare(name, dtypes.Float32, false, shape)
}

// AddTyped declares a parameter with an exact storage dtype.
func (s *Set) AddTyped(name string, dt dtypes.DType, shape ...int) *Param {
	return s.declare(name, dt, false, shape)
}

// AddOptional declares a compute-dtype parameter that may be absent.
func (s *Set) AddOptional(name string, shape ...int) *Param {
	return s.declare(name, dtypes.InvalidDType, true, shape)
}

// Ignore marks source names (exact, or a prefix ending in ".") that Bind should
// neither load nor report as unexpected, e.g. buffers a model recomputes.
func (s *Set) Ignore(names ...string) {
	for _, n := range names {
		s.root.ignore = append(s.root.ignore, s.prefix+n)
	}
}

func (s *Set) declare(name string, dt dtypes.DType, optional bool, shape []int) *Param {
	full := s.prefix + name
	if _, dup := s.root.byName[full]; dup {
		panic(fmt.Sprintf("weights: parameter %q declared twice", full)) // a programming error in a model's table
	}
	p := &Param{Name: full, Shape: append([]int(nil), shape...), Storage: dt, Optional: optional}
	s.root.params = append(s.root.params, p)
	s.root.byName[full] = p
	return p
}

// Params lists the declared parameters in declaration order.
func (s *Set) Params() []*Param { return append([]*Param(nil), s.root.params...) }

// Options control Bind.
type Options struct {
	// DType is the compute dtype for parameters declared with Add (default Float32).
	DType dtypes.DType
	// Backend receives the tensors; nil keeps them as host tensors.
	Backend compute.Backend
	// AllowUnexpected accepts source names under the set's prefix that nothing declares.
	AllowUnexpected bool
}

// BindError lists every problem of one Bind.
type BindError struct {
	Missing    []string
	Unexpected []string
	Mismatched []string
}

func (e *BindError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "weights: checkpoint does not match the model (%d missing, %d unexpected, %d mismatched)",
		len(e.Missing), len(e.Unexpected), len(e.Mismatched))
	for _, group := range []struct {
		what  string
		names []string
	}{{"missing", e.Missing}, {"unexpected", e.Unexpected}, {"mismatched", e.Mismatched}} {
		for _, n := range group.names {
			fmt.Fprintf(&b, "\n  %s: %s", group.what, n)
		}
	}
	return b.String()
}

// Bind loads every declared parameter from src. Nothing is kept on failure.
func Bind(src Source, set *Set, opts Options) error {
	// Checked here, once, rather than in every model's FromSource: a nil interface would otherwise
	// panic on the first src.Tensor call.
	if src == nil {
		return errors.New("weights: Bind needs a weight source, got nil; pass an opened checkpoint (safetensors.OpenCheckpoint)")
	}
	if set == nil {
		return errors.New("weights: Bind needs a parameter set, got nil; declare one with weights.NewSet")
	}
	if opts.DType == dtypes.InvalidDType {
		opts.DType = dtypes.Float32
	}
	root := set.root
	var errs BindError
	var jobs []bindJob
	for _, p := range root.params {
		info, ok := HeaderOf(src, p.Name)
		if !ok {
			if !p.Optional {
				errs.Missing = append(errs.Missing, fmt.Sprintf("%s %v", p.Name, p.Shape))
			}
			continue
		}
		if !slices.Equal(info.Shape, p.Shape) {
			errs.Mismatched = append(errs.Mismatched, fmt.Sprintf("%s: checkpoint shape %v, model expects %v", p.Name, info.Shape, p.Shape))
			continue
		}
		dt := p.Storage
		if dt == dtypes.InvalidDType {
			dt = opts.DType
		}
		if !convertible(info.DType, dt) {
			errs.Mismatched = append(errs.Mismatched, fmt.Sprintf("%s: checkpoint dtype %s cannot be stored as %s", p.Name, info.DType, dt))
			continue
		}
		jobs = append(jobs, bindJob{p, info, dt})
	}
	if !opts.AllowUnexpected {
		for _, n := range src.Names() {
			if !strings.HasPrefix(n, root.prefix) || root.byName[n] != nil || ignored(root.ignore, n) {
				continue
			}
			errs.Unexpected = append(errs.Unexpected, n)
		}
	}
	if len(errs.Missing)+len(errs.Unexpected)+len(errs.Mismatched) > 0 {
		sort.Strings(errs.Missing)
		sort.Strings(errs.Unexpected)
		sort.Strings(errs.Mismatched)
		return &errs
	}
	return loadJobs(src, jobs, opts.Backend)
}

// bindJob is one checked parameter of a Bind: its checkpoint header and the dtype it is stored in.
type bindJob struct {
	p    *Param
	info safetensors.Info
	dt   dtypes.DType
}

// loadJobs loads the checked parameters in order, running each one's AfterBind before the next loads;
// on failure it frees what it loaded.
func loadJobs(src Source, jobs []bindJob, backend compute.Backend) error {
	var loaded []*Param
	fail := func(err error) error {
		for _, p := range loaded {
			p.T.FinalizeAll()
			p.T = nil
		}
		return err
	}
	_, lazy := src.(HeaderSource)
	for _, j := range jobs {
		if j.p.Deferred {
			continue
		}
		info := j.info
		if lazy {
			info, _ = src.Tensor(j.p.Name)
		}
		t, err := Load(info, j.dt, backend)
		if err != nil {
			return fail(fmt.Errorf("weights: loading %s: %w", j.p.Name, err))
		}
		j.p.T = t
		loaded = append(loaded, j.p)
		if j.p.AfterBind != nil {
			if err := j.p.AfterBind(j.p); err != nil {
				return fail(fmt.Errorf("weights: after loading %s: %w", j.p.Name, err))
			}
		}
	}
	return nil
}

// Release frees every bound tensor of the set (device memory included).
func (s *Set) Release() {
	for _, p := range s.root.params {
		if p.T != nil {
			p.T.FinalizeAll()
			p.T = nil
		}
	}
}

func ignored(prefixes []string, name string) bool {
	for _, p := range prefixes {
		if name == p || (strings.HasSuffix(p, ".") && strings.HasPrefix(name, p)) {
			return true
		}
	}
	return false
}

// STDType maps a safetensors dtype to the GoMLX dtype with the same bytes.
func STDType(d safetensors.DType) dtypes.DType {
	switch d {
	case safetensors.F64:
		return dtypes.Float64
	case safetensors.F32:
		return dtypes.Float32
	case safetensors.F16:
		return dtypes.Float16
	case safetensors.BF16:
		return dtypes.BFloat16
	case safetensors.I64:
		return dtypes.Int64
	case safetensors.I32:
		return dtypes.Int32
	case safetensors.I16:
		return dtypes.Int16
	case safetensors.I8:
		return dtypes.Int8
	case safetensors.U8:
		return dtypes.Uint8
	case safetensors.U16:
		return dtypes.Uint16
	case safetensors.U32:
		return dtypes.Uint32
	case safetensors.U64:
		return dtypes.Uint64
	case safetensors.Bool:
		return dtypes.Bool
	}
	return dtypes.InvalidDType
}

func convertible(from safetensors.DType, to dtypes.DType) bool {
	if from.IsFloat() {
		return to == dtypes.Float32 || to == dtypes.BFloat16 || to == dtypes.Float16 || to == dtypes.Float64
	}
	return STDType(from) == to
}

// Load converts one checkpoint tensor to dtype dt and places it on backend (nil:
// a host tensor). Same-dtype tensors are uploaded straight from the mapping.
func Load(info safetensors.Info, dt dtypes.DType, backend compute.Backend) (*tensors.Tensor, error) {
	return LoadTo(info, dt, backend, 0)
}

// LoadTo is Load onto the backend's device dev.
func LoadTo(info safetensors.Info, dt dtypes.DType, backend compute.Backend, dev compute.DeviceNum) (*tensors.Tensor, error) {
	shape := shapes.Make(dt, info.Shape...)
	if STDType(info.DType) == dt {
		return fromRaw(backend, dev, shape, info.Data)
	}
	if !info.DType.IsFloat() {
		return nil, fmt.Errorf("%s tensor cannot be converted to %s", info.DType, dt)
	}
	// Checked here so that EncodeFloats, which only knows the float dtypes, never sees another.
	if !convertible(info.DType, dt) {
		return nil, fmt.Errorf("%s tensor %q cannot be converted to %s; load it as Float32, BFloat16, Float16 or Float64", info.DType, info.Name, dt)
	}
	vals, err := info.Float64s()
	if err != nil {
		return nil, err
	}
	return fromRaw(backend, dev, shape, EncodeFloats(vals, dt))
}

func fromRaw(backend compute.Backend, dev compute.DeviceNum, shape shapes.Shape, data []byte) (t *tensors.Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("uploading %s: %v", shape, r)
		}
	}()
	return tensors.FromRaw(backend, dev, shape, data)
}

// EncodeFloats rounds values to dt (round to nearest even) as little-endian bytes.
func EncodeFloats(vals []float64, dt dtypes.DType) []byte {
	switch dt {
	case dtypes.Float32:
		out := make([]byte, 4*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(float32(v)))
		}
		return out
	case dtypes.Float64:
		out := make([]byte, 8*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint64(out[8*i:], math.Float64bits(v))
		}
		return out
	case dtypes.BFloat16:
		out := make([]byte, 2*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint16(out[2*i:], bfloat16.FromFloat32(float32(v)).Bits())
		}
		return out
	case dtypes.Float16:
		out := make([]byte, 2*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint16(out[2*i:], float16.Fromfloat32(float32(v)).Bits())
		}
		return out
	}
	panic(fmt.Sprintf("weights: EncodeFloats to %s", dt))
}

// TensorShape is one checkpoint tensor a model binds.
type TensorShape struct {
	Name  string
	Shape []int
}

// Shapes is a model's checkpoint parameter table: the released tensor names it binds with their
// shapes, in declaration order. Every model package offers its own as Params(cfg) (and, where it has
// an encoder part, EncoderParams(cfg)); benchmarks build random checkpoints from it, converters and
// tests check one against it.
type Shapes []TensorShape

// ShapesOf lists the declared shapes of ps, in order.
func ShapesOf(ps []*Param) Shapes {
	out := make(Shapes, len(ps))
	for i, p := range ps {
		out[i] = TensorShape{Name: p.Name, Shape: append([]int(nil), p.Shape...)}
	}
	return out
}

// Map is the table keyed by name (a Synthetic source's declaration).
func (s Shapes) Map() map[string][]int {
	out := make(map[string][]int, len(s))
	for _, t := range s {
		out[t.Name] = t.Shape
	}
	return out
}

// Count is the number of values of every tensor of the table.
func (s Shapes) Count() int64 {
	var n int64
	for _, t := range s {
		k := int64(1)
		for _, d := range t.Shape {
			k *= int64(d)
		}
		n += k
	}
	return n
}
