package wan

import (
	"fmt"
	"math"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
)

// NewRandom builds a decoder for cfg whose weights are drawn on the backend, without a checkpoint,
// so release-size benchmarks need neither the download nor a host copy of the weights. The scales
// are the golden-fixture generator's, which keep activations in a realistic range: convolution
// weights randn/√fan_in, biases 0.05·randn, norm gains 1+0.1·randn.
func NewRandom(backend compute.Backend, cfg Config, opts Options, seed int64) (*Decoder, error) {
	d, err := newDecoder(backend, cfg, opts)
	if err != nil {
		return nil, err
	}
	if err := d.fillRandom(seed); err != nil {
		d.set.Release()
		return nil, fmt.Errorf("wan: random weights: %w", err)
	}
	return d, nil
}

func (d *Decoder) fillRandom(seed int64) error {
	state, err := RNGStateFromSeed(seed)
	if err != nil {
		return err
	}
	defer func() { state.FinalizeAll() }()
	execs := map[string]*Exec{}
	defer func() {
		for _, e := range execs {
			e.Finalize()
		}
	}()
	return catch(func() {
		for _, p := range d.set.Params() {
			dt := p.Storage
			if dt == dtypes.InvalidDType {
				dt = d.opts.DType
			}
			shape := shapes.Make(dtypes.Float32, p.Shape...)
			key := fmt.Sprint(dt, p.Shape)
			e := execs[key]
			if e == nil {
				e = MustNewExec(d.backend, func(st, scale, offset *Node) (*Node, *Node) {
					next, v := RandomNormal(st, shape)
					return next, ConvertDType(Add(Mul(v, scale), offset), dt)
				})
				execs[key] = e
			}
			scale, offset := randomScale(p.Name, p.Shape)
			out, err := e.Call(state, scale, offset)
			if err != nil {
				panic(err)
			}
			state.FinalizeAll()
			state, p.T = out[0], out[1]
		}
	})
}

// randomScale returns (scale, offset) of the normal draw for a parameter.
func randomScale(name string, shape []int) (float32, float32) {
	switch {
	case strings.HasSuffix(name, ".bias"):
		return 0.05, 0
	case strings.HasSuffix(name, ".gamma"):
		return 0.1, 1
	default:
		fanIn := 1
		for _, v := range shape[1:] {
			fanIn *= v
		}
		return float32(1 / math.Sqrt(float64(fanIn))), 0
	}
}
