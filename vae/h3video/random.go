package h3video

import (
	"github.com/gomlx/compute"

	"fastvideo/internal/modelkit"
	"fastvideo/internal/randweights"
)

// NewRandom builds a decoder of the given geometry whose weights are drawn on the backend, without a
// checkpoint: release-size benchmarks then need neither the 10 GB download nor a host copy of the
// weights. The scales are those of the golden-fixture generator, so activations stay in a realistic
// range: matrices randn/√fan_in, biases 0.05·randn, norm weights and other vectors 1+0.1·randn.
func NewRandom(backend compute.Backend, cfg Config, opts Options, seed int64) (*Decoder, error) {
	return modelkit.Populate(func() (*Decoder, error) { return newDecoder(backend, cfg, opts) }, func(d *Decoder) error {
		return modelkit.DrawRandom("h3video", d.set, d.opts.DType, d.backend, seed, randweights.FixtureDraw, d.build)
	})
}
