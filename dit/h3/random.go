package h3

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
// RNG, without a checkpoint: release-size benchmarks then need neither the 62 GiB download nor a host
// copy of 33B parameters. The scales are those of the golden-fixture generator, so activations stay in a
// realistic range: matrices randn/√fan_in, biases 0.05·randn, norm weights and other vectors 1+0.1·randn.
// opts.AdaLNManifest must be nil (a random model has its projections).
func NewRandom(backend compute.Backend, cfg Config, opts Options, seed int64) (m *Model, err error) {
	defer catch(&err, "random weights")
	if opts.AdaLNManifest != nil {
		return nil, fmt.Errorf("h3: NewRandom draws the AdaLN projections; Options.AdaLNManifest must be nil")
	}
	m, err = newModel(backend, cfg, opts)
	if err != nil {
		return nil, err
	}
	if err := m.fillRandom(seed); err != nil {
		m.p.set.Release()
		return nil, err
	}
	if err := m.finish(); err != nil {
		m.p.set.Release()
		return nil, err
	}
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
			return fmt.Errorf("h3: drawing %s: %w", p.Name, err)
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
	case len(shape) >= 2:
		return float32(1 / math.Sqrt(float64(shape[1]))), 0
	default:
		return 0.1, 1
	}
}
