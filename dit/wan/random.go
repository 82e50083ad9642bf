package wan

import (
	"fmt"
	"math"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
)

// NewRandom builds a model of the given configuration whose weights are drawn on the backend by GoMLX's
// RNG, without a checkpoint: release-size benchmarks then need neither the download nor a host copy of
// the parameters. The scales keep activations in a realistic range: matrices randn/√fan_in (the patch
// embedding's fan-in is Cin·pt·ph·pw), biases 0.05·randn, scale_shift_tables randn/√D (their upstream
// initialization), norm weights 1+0.1·randn.
func NewRandom(backend compute.Backend, cfg Config, opts Options, seed int64) (m *Model, err error) {
	defer catch(&err, "random weights")
	m, err = newModel(backend, cfg, opts)
	if err != nil {
		return nil, err
	}
	if err := m.fillRandom(seed); err != nil {
		m.p.set.Release()
		return nil, err
	}
	m.finish()
	return m, nil
}

func (m *Model) fillRandom(seed int64) error {
	state, err := RNGStateFromSeed(seed)
	if err != nil {
		return err
	}
	defer func() { _ = state.FinalizeAll() }()
	execs := map[string]*Exec{}
	defer func() {
		for _, e := range execs {
			e.Finalize()
		}
	}()
	for _, p := range m.p.set.Params() {
		dt := p.Storage
		if dt == dtypes.InvalidDType {
			dt = m.dtype
		}
		shape := shapes.Make(dtypes.Float32, p.Shape...)
		key := fmt.Sprint(dt, p.Shape)
		e := execs[key]
		if e == nil {
			e, err = NewExec(m.backend, func(st, scale, offset *Node) (*Node, *Node) {
				next, v := RandomNormal(st, shape)
				return next, ConvertDType(Add(Mul(v, scale), offset), dt)
			})
			if err != nil {
				return err
			}
			execs[key] = e
		}
		scale, offset := randomScale(p.Name, p.Shape)
		out, err := e.Call(state, scale, offset)
		if err != nil {
			return fmt.Errorf("wan: drawing %s: %w", p.Name, err)
		}
		_ = state.FinalizeAll()
		state, p.T = out[0], out[1]
	}
	return nil
}

// randomScale returns (scale, offset) of the normal draw for a parameter.
func randomScale(name string, shape []int) (float32, float32) {
	switch {
	case strings.HasSuffix(name, ".bias"):
		return 0.05, 0
	case strings.HasSuffix(name, "scale_shift_table"):
		return float32(1 / math.Sqrt(float64(shape[len(shape)-1]))), 0
	case len(shape) >= 2:
		fanIn := 1
		for _, d := range shape[1:] {
			fanIn *= d
		}
		return float32(1 / math.Sqrt(float64(fanIn))), 0
	default:
		return 0.1, 1
	}
}
