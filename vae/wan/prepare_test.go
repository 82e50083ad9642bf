package wan

import (
	"context"
	"fmt"
	"testing"

	"fastvideo/internal/graphexec"
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
				want, _ := collect(t, openDecoder(t, fx, c.opts), c.z, c.shape, nil)
				d := openDecoder(t, fx, c.opts)
				p0, _ := graphexec.Compiles()
				if err := d.Prepare(context.Background(), c.shape); err != nil {
					t.Fatal(err)
				}
				p1, _ := graphexec.Compiles()
				if p1 == p0 {
					t.Fatal("Prepare compiled no program")
				}
				got, _ := collect(t, d, c.z, c.shape, nil)
				if p2, _ := graphexec.Compiles(); p2 != p1 {
					t.Errorf("the decode after Prepare compiled %d program(s)", p2-p1)
				}
				if diff := testutil.Compare(got, want); diff.MaxAbs != 0 || len(got) != len(want) {
					t.Errorf("decode after Prepare differs by %g (%d values, want %d)", diff.MaxAbs, len(got), len(want))
				}
			})
		}
		t.Run("errors", func(t *testing.T) {
			d := openDecoder(t, fx, Options{})
			bad := append([]int(nil), zShape...)
			bad[1]++
			if err := d.Prepare(context.Background(), bad); err == nil {
				t.Errorf("Prepare(%v) succeeded", bad)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := d.Prepare(ctx, zShape); err != context.Canceled {
				t.Errorf("Prepare with a cancelled context = %v, want context.Canceled", err)
			}
			d.Close()
			if err := d.Prepare(context.Background(), zShape); err == nil {
				t.Error("Prepare after Close succeeded")
			}
		})
	})
}
