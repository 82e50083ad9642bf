package wan

import (
	"math"
	"strings"

	"github.com/gomlx/compute"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/randweights"
	"fastvideo/internal/weights"
)

// NewRandom builds a model of the given configuration whose weights are drawn on the backend by GoMLX's
// RNG, without a checkpoint: release-size benchmarks then need neither the download nor a host copy of
// the parameters. The scales keep activations in a realistic range: matrices randn/√fan_in (the patch
// embedding's fan-in is Cin·pt·ph·pw), biases 0.05·randn, scale_shift_tables randn/√D (their upstream
// initialization), norm weights 1+0.1·randn.
func NewRandom(backend compute.Backend, cfg Config, opts Options, seed int64) (m *Model, err error) {
	defer graphexec.Recover(&err, "wan: random weights")
	return modelkit.Populate(func() (*Model, error) { return newModel(backend, cfg, opts) }, func(m *Model) error {
		return modelkit.DrawRandom("wan", m.p.set, m.dtype, m.backend, seed, randomScale, m.finish)
	})
}

// randomScale is randweights.FixtureDraw but for the scale_shift_tables, drawn randn/√D as upstream initializes
// them.
func randomScale(p *weights.Param) (float32, float32) {
	if strings.HasSuffix(p.Name, "scale_shift_table") {
		return float32(1 / math.Sqrt(float64(p.Shape[len(p.Shape)-1]))), 0
	}
	return randweights.FixtureDraw(p)
}
