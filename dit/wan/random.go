package wan

import (
	"fmt"
	"math"
	"strings"

	"github.com/gomlx/compute"

	"fastvideo/internal/gx"
	"fastvideo/internal/weights"
)

// NewRandom builds a model of the given configuration whose weights are drawn on the backend by GoMLX's
// RNG, without a checkpoint: release-size benchmarks then need neither the download nor a host copy of
// the parameters. The scales keep activations in a realistic range: matrices randn/√fan_in (the patch
// embedding's fan-in is Cin·pt·ph·pw), biases 0.05·randn, scale_shift_tables randn/√D (their upstream
// initialization), norm weights 1+0.1·randn.
func NewRandom(backend compute.Backend, cfg Config, opts Options, seed int64) (m *Model, err error) {
	defer gx.Recover(&err, "wan: random weights")
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
	err := gx.FillRandom(m.backend, m.p.set, m.dtype, seed, func(p *weights.Param) (float32, float32) {
		return randomScale(p.Name, p.Shape)
	})
	if err != nil {
		return fmt.Errorf("wan: %w", err)
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
		return float32(1 / math.Sqrt(float64(gx.FanIn(shape)))), 0
	default:
		return 0.1, 1
	}
}
