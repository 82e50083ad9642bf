package wan

import (
	"context"
	"fmt"
	"testing"

	"fastvideo/internal/graphexec/graphexectest"
	"fastvideo/internal/testutil"
)

// TestPrepare checks that after Prepare(shape) a decode of that shape compiles no program and gives
// the same samples, bit for bit, as a decoder that compiles as it decodes: the fixture's latents
// over the whole canvas, and three latent frames (the caches of a later chunk) in 2×2 tiles of
// three sizes.
func TestPrepare(t *testing.T) {
	testutil.ForEachFixture(t, kind, func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		r := cfg.SpatialRatio()
		z, zShape := fx.F32(t, "in.latents")
		zr, rShape := randomLatents(cfg, 3, 5, 5, 3)
		for _, c := range []struct {
			opts  Options
			z     []float32
			shape []int
		}{
			{Options{}, z, zShape},
			{Options{Tiling: true, TileSize: 4 * r, TileStride: 3 * r}, zr, rShape},
		} {
			t.Run(fmt.Sprintf("tiling=%v/%v", c.opts.Tiling, c.shape), func(t *testing.T) {
				graphexectest.PreparedSame(t, 0, func() *Decoder { return openDecoder(t, fx, c.opts) },
					func(d *Decoder) error { return d.Prepare(context.Background(), c.shape) },
					func(d *Decoder) []float32 { got, _ := collect(t, d, c.z, c.shape, nil); return got })
			})
		}
		t.Run("errors", func(t *testing.T) {
			d := openDecoder(t, fx, Options{})
			bad := append([]int(nil), zShape...)
			bad[1]++
			graphexectest.PrepareErrors(t, d.Prepare, d.Close, zShape, bad, "channels")
		})
	})
}
