package h3

import (
	"fmt"
	"math"
	"strings"

	"github.com/gomlx/compute"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/randweights"
	"fastvideo/internal/weights"
	"fastvideo/quant"
)

// NewRandom builds a model of the given configuration whose weights are drawn on the backend by GoMLX's
// RNG, without a checkpoint: release-size benchmarks then need neither the 62 GiB download nor a host
// copy of 33B parameters. The scales are those of the golden-fixture generator, so activations stay in a
// realistic range: matrices randn/√fan_in, biases 0.05·randn, norm weights and other vectors 1+0.1·randn.
// opts.AdaLNManifest must be nil (a random model has its projections).
func NewRandom(backend compute.Backend, cfg Config, opts Options, seed int64) (m *Model, err error) {
	return newRandom(backend, cfg, opts, nil, seed)
}

// NewRandomQuantized is NewRandom with the six core linears of every joint and refiner block
// affine-quantized with scheme, as a converted checkpoint stores them (packed uint32 words, scales and
// biases in the compute dtype), drawn on the device: uniformly random words (every code equally likely)
// and per-group scales and biases that make each dequantized matrix uniform with the standard deviation
// 1/√fan_in of NewRandom's matrices. Nothing is quantized on the host, so a release-size model is cheap.
func NewRandomQuantized(backend compute.Backend, cfg Config, opts Options, scheme quant.Scheme, seed int64) (*Model, error) {
	if err := scheme.Validate(); err != nil {
		return nil, fmt.Errorf("h3: NewRandomQuantized: %w", err)
	}
	return newRandom(backend, cfg, opts, func(name string) *quant.Scheme {
		for _, s := range coreLinearNames {
			if strings.HasSuffix(name, "."+s) {
				return &scheme
			}
		}
		return nil
	}, seed)
}

func newRandom(backend compute.Backend, cfg Config, opts Options, schemes schemeFunc, seed int64) (m *Model, err error) {
	defer graphexec.Recover(&err, "h3: random weights")
	if opts.AdaLNManifest != nil {
		return nil, fmt.Errorf("h3: NewRandom draws the AdaLN projections; Options.AdaLNManifest must be nil")
	}
	return modelkit.Populate(func() (*Model, error) { return newModel(backend, cfg, opts, schemes) }, func(m *Model) error {
		done, err := m.convertFP8OnBind()
		if err != nil {
			return err
		}
		defer done()
		return modelkit.DrawRandom("h3", m.p.set, m.dtype, m.backend, seed, m.randomDraw(), m.finish)
	})
}

// quantRole records, for the scales and biases of a quantized weight, the matrix they belong to.
type quantRole struct {
	w      *quant.Weight
	scales bool
}

// randomDraw draws the scales and biases of quantized matrices with randomAffine and the rest as the
// fixture generator does.
func (m *Model) randomDraw() randweights.Draw {
	roles := map[*weights.Param]quantRole{}
	for _, c := range m.p.cores() {
		for _, w := range c.linears() {
			if w.Quantized() {
				roles[w.Scales] = quantRole{w, true}
				roles[w.Biases] = quantRole{w, false}
			}
		}
	}
	return func(p *weights.Param) (float32, float32) {
		if r, ok := roles[p]; ok {
			return randomAffine(r)
		}
		return randweights.FixtureDraw(p)
	}
}

// randomAffine returns (scale, offset) of the normal draw of a quantized matrix's scales or biases. With
// codes uniform on [0, n], n = 2^bits − 1, a group's values s·q + b are uniform on [b, b + n·s]; s = 2√3σ/n
// and b = −√3σ make them uniform on [−√3σ, √3σ], of standard deviation σ = 1/√fan_in like NewRandom's
// matrices. Each group's s and b vary by 5 % around that.
func randomAffine(r quantRole) (float32, float32) {
	sigma := 1 / math.Sqrt(float64(r.w.In))
	half := math.Sqrt(3) * sigma
	if r.scales {
		s := 2 * half / float64(int(1)<<r.w.Scheme.Bits-1)
		return float32(0.05 * s), float32(s)
	}
	return float32(0.05 * half), float32(-half)
}
