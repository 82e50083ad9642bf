package rife

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/testutil"
)

// BenchmarkInterpolateTiny is the tiny models' RIFE on the CPU at tiny-h3's frame size (96x64,
// padded to 128x128), one pair a call: the cost the temporal fast mode adds to a CPU test.
func BenchmarkInterpolateTiny(b *testing.B) {
	m := testutil.Open(b, func() (*Model, error) { return Random(testutil.Backend(b), Tiny(), dtypes.Float32, 3) })
	rng := rand.New(rand.NewPCG(1, 2))
	const n, h, w = 1, 64, 64
	x, y := randomFrames(rng, n*h*w*3), randomFrames(rng, n*h*w*3)
	if _, err := m.Interpolate(x, y, n, h, w, []float64{0.5}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := m.Interpolate(x, y, n, h, w, []float64{0.5}); err != nil {
			b.Fatal(err)
		}
	}
}
