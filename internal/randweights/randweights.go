// Package randweights draws a model's weights on the device with GoMLX's RNG, so benchmarks and
// release-size tests need neither a checkpoint nor a host copy of the weights.
package randweights

import (
	"fmt"
	"math"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/internal/graphexec"
	"fastvideo/internal/weights"
)

// Draw gives the normal distribution of one parameter's random values: scale·N(0, 1) + offset.
type Draw func(p *weights.Param) (scale, offset float32)

// FillRandom binds every parameter of set to values drawn on the backend by GoMLX's RNG, so a
// release-size model needs neither a checkpoint nor a host copy of its weights. One RNG state seeded
// by seed is threaded through the parameters in declaration order, so a given set, dtype and seed
// always produce the same weights. Float parameters are draw(p)'s normal values, drawn in float32 and
// stored in the parameter's dtype (dt for compute-dtype parameters); uint32 parameters (packed
// quantized words) get uniformly random bits, so every code is equally likely. On failure the
// parameters already drawn stay bound: release the set.
func FillRandom(backend compute.Backend, set *weights.Set, dt dtypes.DType, seed int64, draw Draw) (err error) {
	defer graphexec.Recover(&err, "drawing random weights")
	state, err := RNGStateFromSeed(seed)
	if err != nil {
		return err
	}
	defer func() { _ = state.FinalizeAll() }()
	// One executable per (dtype, shape): a model repeats a few shapes many times.
	execs := map[string]*Exec{}
	defer func() {
		for _, e := range execs {
			e.Finalize()
		}
	}()
	for _, p := range set.Params() {
		pdt := p.Storage
		if pdt == dtypes.InvalidDType {
			pdt = dt
		}
		key := fmt.Sprint(pdt, p.Shape)
		e := execs[key]
		if e == nil {
			if pdt == dtypes.Uint32 {
				shape := shapes.Make(dtypes.Uint32, p.Shape...)
				e, err = NewExec(backend, func(st, _, _ *Node) (*Node, *Node) {
					return RandomIntN(st, uint64(1)<<32, shape)
				})
			} else {
				shape := shapes.Make(dtypes.Float32, p.Shape...)
				e, err = NewExec(backend, func(st, scale, offset *Node) (*Node, *Node) {
					next, v := RandomNormal(st, shape)
					return next, ConvertDType(Add(Mul(v, scale), offset), pdt)
				})
			}
			if err != nil {
				return err
			}
			execs[key] = e
		}
		scale, offset := draw(p)
		out, err := e.Call(state, scale, offset)
		if err != nil {
			return fmt.Errorf("drawing %s: %w", p.Name, err)
		}
		_ = state.FinalizeAll()
		state, p.T = out[0], out[1]
	}
	return nil
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
