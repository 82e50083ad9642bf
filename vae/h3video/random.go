package h3video

import (
	"fmt"
	"math"
	"strings"

	"github.com/gomlx/compute"

	"fastvideo/internal/gx"
	"fastvideo/internal/weights"
)

// NewRandom builds a decoder of the given geometry whose weights are drawn on the backend, without a
// checkpoint: release-size benchmarks then need neither the 10 GB download nor a host copy of the
// weights. The scales are those of the golden-fixture generator, so activations stay in a realistic
// range: matrices randn/√fan_in, biases 0.05·randn, norm weights and other vectors 1+0.1·randn.
func NewRandom(backend compute.Backend, cfg Config, opts Options, seed int64) (*Decoder, error) {
	d, err := newDecoder(backend, cfg, opts)
	if err != nil {
		return nil, err
	}
	draw := func(p *weights.Param) (float32, float32) { return randomScale(p.Name, p.Shape) }
	if err := gx.FillRandom(d.backend, d.set, d.opts.DType, seed, draw); err != nil {
		d.set.Release()
		return nil, fmt.Errorf("h3video: random weights: %w", err)
	}
	if err := d.build(); err != nil {
		d.set.Release()
		return nil, err
	}
	return d, nil
}

// randomScale returns (scale, offset) of the normal draw for a parameter.
func randomScale(name string, shape []int) (float32, float32) {
	switch {
	case strings.HasSuffix(name, ".bias"):
		return 0.05, 0
	case len(shape) >= 2:
		return float32(1 / math.Sqrt(float64(gx.FanIn(shape)))), 0
	default:
		return 0.1, 1
	}
}
