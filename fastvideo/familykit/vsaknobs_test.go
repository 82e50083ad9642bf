package familykit

import (
	"math"
	"testing"
)

// NaN compares false both ways, so a range check written as two rejections let it through.
func TestCheckVSAKnobsRejectsNonFinite(t *testing.T) {
	for _, s := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -0.1, 1} {
		if err := checkVSAKnobs(s, 0, nil, 4); err == nil {
			t.Errorf("checkVSAKnobs(sparsity %g) accepted it", s)
		}
	}
	if err := checkVSAKnobs(0.8, 0, nil, 4); err != nil {
		t.Errorf("checkVSAKnobs(0.8): %v", err)
	}
}
