package h3

import (
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/weights"
)

// SyntheticSource is a source of deterministic random weights for every parameter of a dense model of
// cfg, under the released names (for conversion tests on configs no fixture has).
func SyntheticSource(t *testing.T, cfg Config, seed int64) weights.Source {
	t.Helper()
	p, err := declareParams(cfg, dtypes.Float32, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	shapes := map[string][]int{}
	for _, prm := range p.set.Params() {
		shapes[prm.Name] = prm.Shape
	}
	return weights.NewSynthetic(seed, shapes, nil)
}
