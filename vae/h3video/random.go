package h3video

import (
	"fmt"

	"github.com/gomlx/compute"

	"fastvideo/internal/randweights"
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
	if err := randweights.FillRandom(d.backend, d.set, d.opts.DType, seed, randweights.FixtureDraw); err != nil {
		d.set.Release()
		return nil, fmt.Errorf("h3video: random weights: %w", err)
	}
	if err := d.build(); err != nil {
		d.set.Release()
		return nil, err
	}
	return d, nil
}
