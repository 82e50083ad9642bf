// Package randweights draws a model's weights on the device with GoMLX's RNG, so benchmarks and
// release-size tests need neither a checkpoint nor a host copy of the weights.
package randweights

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/internal/graphexec"
	"fastvideo/internal/parallel"
	"fastvideo/internal/weights"
)

// Draw gives the normal distribution of one parameter's random values: scale·N(0, 1) + offset.
type Draw func(p *weights.Param) (scale, offset float32)

// FillRandom binds every parameter of set to values drawn on the backend by GoMLX's RNG, so a
// release-size model needs neither a checkpoint nor a host copy of its weights. One RNG state seeded
// by seed is threaded through the parameters in declaration order, so a given set, dtype and seed
// always produce the same weights. Float parameters are draw(p)'s normal values, drawn in float32 and
// stored in the parameter's dtype (dt for compute-dtype parameters); uint32 parameters (packed
// quantized words) get uniformly random bits, so every code is equally likely. A parameter's AfterBind
// runs as soon as it is drawn. On failure the
// parameters already drawn stay bound: release the set.
func FillRandom(backend compute.Backend, set *weights.Set, dt dtypes.DType, seed int64, draw Draw) error {
	d := NewDrawer(backend)
	defer d.Close()
	return d.Fill(set, dt, seed, draw)
}

// Drawer is FillRandom with its executables (one per dtype and shape) kept across calls: a model
// drawn set by set (a text stack layer by layer) repeats a few shapes many times, and compiling
// them again for every set costs far more than drawing. Safe for concurrent use.
type Drawer struct {
	backend compute.Backend
	mu      sync.Mutex
	execs   map[string]*Exec
}

// NewDrawer makes a drawer on backend; Close frees its executables.
func NewDrawer(backend compute.Backend) *Drawer {
	return &Drawer{backend: backend, execs: map[string]*Exec{}}
}

// Close frees the executables.
func (d *Drawer) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range d.execs {
		e.Finalize()
	}
	d.execs = map[string]*Exec{}
}

// Fill is FillRandom (see there) with the drawer's executables.
func (d *Drawer) Fill(set *weights.Set, dt dtypes.DType, seed int64, draw Draw) (err error) {
	defer graphexec.Recover(&err, "drawing random weights")
	d.mu.Lock()
	defer d.mu.Unlock()
	state, err := RNGStateFromSeed(seed)
	if err != nil {
		return err
	}
	defer func() { _ = state.FinalizeAll() }()
	if err := d.compileAll(set, dt, state.Shape()); err != nil {
		return err
	}
	for _, p := range set.Params() {
		e, err := d.exec(storage(p, dt), p.Shape)
		if err != nil {
			return err
		}
		scale, offset := draw(p)
		out, err := graphexec.Call(e, state, scale, offset)
		if err != nil {
			return fmt.Errorf("drawing %s: %w", p.Name, err)
		}
		_ = state.FinalizeAll()
		state, p.T = out[0], out[1]
		if p.AfterBind != nil {
			if err := p.AfterBind(p); err != nil {
				return fmt.Errorf("after drawing %s: %w", p.Name, err)
			}
		}
	}
	return nil
}

// storage is the dtype p is drawn in: its own storage, else the compute dtype dt.
func storage(p *weights.Param, dt dtypes.DType) dtypes.DType {
	if p.Storage == dtypes.InvalidDType {
		return dt
	}
	return p.Storage
}

// compileAll compiles the generator of every dtype and shape in set that the drawer lacks, several at
// once. A release-size model has tens of distinct shapes, and compiling them one at a time as the draw
// reached each made most of a first load (the FastH3 DiT: about 14 of 17 s on an H200 with an empty
// compile cache, BENCHMARKS.md); the draws themselves stay in declaration order, so the values do not
// change. state is the RNG state's shape.
func (d *Drawer) compileAll(set *weights.Set, dt dtypes.DType, state shapes.Shape) error {
	var todo []*Exec
	for _, p := range set.Params() {
		pdt := storage(p, dt)
		if d.execs[execKey(pdt, p.Shape)] != nil {
			continue
		}
		e, err := d.exec(pdt, p.Shape)
		if err != nil {
			return err
		}
		todo = append(todo, e)
	}
	scalar := shapes.Make(dtypes.Float32)
	errs := make([]error, len(todo))
	parallel.Ranges(len(todo), 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			_, errs[i] = graphexec.Compile(todo[i], state, scalar, scalar)
		}
	})
	return errors.Join(errs...)
}

func execKey(pdt dtypes.DType, dims []int) string { return fmt.Sprint(pdt, dims) }

// exec is the generator of one dtype and shape, compiled once.
func (d *Drawer) exec(pdt dtypes.DType, dims []int) (*Exec, error) {
	key := execKey(pdt, dims)
	if e := d.execs[key]; e != nil {
		return e, nil
	}
	var e *Exec
	var err error
	if pdt == dtypes.Uint32 {
		shape := shapes.Make(dtypes.Uint32, dims...)
		e, err = NewExec(d.backend, func(st, _, _ *Node) (*Node, *Node) {
			return RandomIntN(st, uint64(1)<<32, shape)
		})
	} else {
		shape := shapes.Make(dtypes.Float32, dims...)
		e, err = NewExec(d.backend, func(st, scale, offset *Node) (*Node, *Node) {
			next, v := RandomNormal(st, shape)
			return next, ConvertDType(Add(Mul(v, scale), offset), pdt)
		})
	}
	if err != nil {
		return nil, err
	}
	d.execs[key] = e
	return e, nil
}

// FanIn is the fan-in of a PyTorch weight [out, in, k...]: the product of every axis but the first.
func FanIn(shape []int) int {
	n := 1
	for _, d := range shape[1:] {
		n *= d
	}
	return n
}

// FixtureDraw is the Draw of the golden-fixture generators, which keeps a random model's activations in
// a realistic range: biases (".bias") 0.05·N(0, 1), matrices N(0, 1)/√fan_in, other vectors (norm
// weights) 1 + 0.1·N(0, 1). Models with other parameter kinds check those first and fall back to it.
func FixtureDraw(p *weights.Param) (scale, offset float32) {
	switch {
	case strings.HasSuffix(p.Name, ".bias"):
		return 0.05, 0
	case len(p.Shape) >= 2:
		return float32(1 / math.Sqrt(float64(FanIn(p.Shape)))), 0
	default:
		return 0.1, 1
	}
}
