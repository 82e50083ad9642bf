package wan

import (
	"strings"

	"github.com/gomlx/compute"

	"fastvideo/internal/modelkit"
	"fastvideo/internal/randweights"
	"fastvideo/internal/weights"
)

// NewRandom builds a decoder for cfg whose weights are drawn on the backend, without a checkpoint,
// so release-size benchmarks need neither the download nor a host copy of the weights. The scales
// are the golden-fixture generator's, which keep activations in a realistic range: convolution
// weights randn/√fan_in, biases 0.05·randn, norm gains 1+0.1·randn.
func NewRandom(backend compute.Backend, cfg Config, opts Options, seed int64) (*Decoder, error) {
	return modelkit.Populate(func() (*Decoder, error) { return newDecoder(backend, cfg, opts) }, func(d *Decoder) error {
		return modelkit.DrawRandom("wan", d.set, d.opts.DType, d.backend, seed, randomDraw, nil)
	})
}

// randomDraw is the fixture generator's draw: the norm gains (".gamma", stored [C, 1, 1(, 1)] and so
// not vectors by shape) are 1+0.1·randn; the rest follows randweights.FixtureDraw.
func randomDraw(p *weights.Param) (scale, offset float32) {
	if strings.HasSuffix(p.Name, ".gamma") {
		return 0.1, 1
	}
	return randweights.FixtureDraw(p)
}
