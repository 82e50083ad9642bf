package wan

import (
	"fmt"
	"math"
	"strings"

	"github.com/gomlx/compute"

	"fastvideo/internal/gx"
	"fastvideo/internal/weights"
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
		return nil, fmt.Errorf("wan: %w", err)
	}
	return d, nil
}

func (d *Decoder) fillRandom(seed int64) error {
	return gx.FillRandom(d.backend, d.set, d.opts.DType, seed, func(p *weights.Param) (float32, float32) {
		return randomScale(p.Name, p.Shape)
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
		return float32(1 / math.Sqrt(float64(gx.FanIn(shape)))), 0
	}
}
