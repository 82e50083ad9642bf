package wan

import (
	"math"
	"testing"

	"fastvideo/internal/testutil"
)

// TestNewRandom draws a tiny model on the backend and runs a forward: every declared parameter gets a
// tensor of its declared shape, and the output is finite with a plausible magnitude.
func TestNewRandom(t *testing.T) {
	testutil.ForEachFixture(t, "wan_dit", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		m := testutil.Open(t, func() (*Model, error) { return NewRandom(testutil.Backend(t), cfg, Options{}, 7) })
		for _, p := range m.p.set.Params() {
			if !p.Bound() {
				t.Fatalf("%s not drawn", p.Name)
			}
			if got := p.T.Shape().Dimensions; len(got) != len(p.Shape) {
				t.Fatalf("%s drawn with shape %v, declared %v", p.Name, got, p.Shape)
			}
		}
		out := mustForward(t, m, fixtureInputs(t, fx))
		var ss float64
		for _, v := range out {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("non-finite output %v", v)
			}
			ss += float64(v) * float64(v)
		}
		if rms := math.Sqrt(ss / float64(len(out))); rms < 0.05 || rms > 20 {
			t.Errorf("output rms %.3g: random weights out of a realistic range", rms)
		}
	})
}
