package h3video

import (
	"context"
	"fmt"
	"testing"

	"fastvideo/internal/graphexec/graphexectest"
	"fastvideo/internal/testutil"
)

// TestPrepare checks that after Prepare(shape) a decode of that shape compiles no program and gives
// the same samples, bit for bit, as a decoder that compiles as it decodes; over the whole canvas and
// tiled (tiles of two sizes and two batch shapes).
func TestPrepare(t *testing.T) {
	testutil.ForEachFixture(t, "h3_video_vae", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		_, z, shape := fixtureLatents(t, fx, cfg)
		r := cfg.SpatialRatio()
		variants := []Options{{}}
		if tile := 3 * r; tile < shape[3]*r && tile < shape[4]*r {
			variants = append(variants, Options{TileSize: tile, TileOverlap: r}, Options{TileSize: tile, TileOverlap: r, TileBatch: 2})
		}
		for _, opts := range variants {
			t.Run(fmt.Sprintf("tile%d_batch%d", opts.TileSize, opts.TileBatch), func(t *testing.T) {
				graphexectest.PreparedSame(t, 0, func() *Decoder { return openDecoder(t, fx, opts) },
					func(d *Decoder) error { return d.Prepare(context.Background(), shape) },
					func(d *Decoder) []float32 { got, _ := collect(t, d, z, shape); return got })
			})
		}
	})
}

func TestPrepareErrors(t *testing.T) {
	testutil.ForEachFixture(t, "h3_video_vae", func(t *testing.T, fx *testutil.Fixture) {
		_, shape := fx.F32(t, "in.latents_normalized")
		d := openDecoder(t, fx, Options{})
		bad := append([]int(nil), shape...)
		bad[1]++
		graphexectest.PrepareErrors(t, d.Prepare, d.Close, shape, bad, "channels")
	})
}
