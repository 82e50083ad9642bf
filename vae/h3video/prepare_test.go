package h3video

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/testutil"
)

// TestPrepare checks that after Prepare(shape) a decode of that shape compiles no program and gives
// the same samples, bit for bit, as a decoder that compiles as it decodes; over the whole canvas and
// tiled (tiles of two sizes and two batch shapes).
func TestPrepare(t *testing.T) {
	testutil.ForEachFixture(t, "h3_video_vae", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		zn, shape := fx.F32(t, "in.latents_normalized")
		z, err := cfg.DenormalizeLatents(zn, shape)
		if err != nil {
			t.Fatal(err)
		}
		r := cfg.SpatialRatio()
		variants := []Options{{}}
		if tile := 3 * r; tile < shape[3]*r && tile < shape[4]*r {
			variants = append(variants, Options{TileSize: tile, TileOverlap: r}, Options{TileSize: tile, TileOverlap: r, TileBatch: 2})
		}
		for _, opts := range variants {
			t.Run(fmt.Sprintf("tile%d_batch%d", opts.TileSize, opts.TileBatch), func(t *testing.T) {
				want, _ := collect(t, openDecoder(t, fx, opts), z, shape)
				d := openDecoder(t, fx, opts)
				p0, _ := graphexec.Compiles()
				if err := d.Prepare(context.Background(), shape); err != nil {
					t.Fatal(err)
				}
				p1, _ := graphexec.Compiles()
				if p1 == p0 {
					t.Fatal("Prepare compiled no program")
				}
				got, _ := collect(t, d, z, shape)
				if p2, _ := graphexec.Compiles(); p2 != p1 {
					t.Errorf("the decode after Prepare compiled %d program(s)", p2-p1)
				}
				if diff := testutil.Compare(got, want); diff.MaxAbs != 0 || len(got) != len(want) {
					t.Errorf("decode after Prepare differs by %g (%d values, want %d)", diff.MaxAbs, len(got), len(want))
				}
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
		if err := d.Prepare(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "channels") {
			t.Errorf("Prepare(%v) = %v, want an error naming the channels", bad, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := d.Prepare(ctx, shape); err != context.Canceled {
			t.Errorf("Prepare with a cancelled context = %v, want context.Canceled", err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if err := d.Prepare(context.Background(), shape); err == nil {
			t.Error("Prepare after Close succeeded")
		}
	})
}
