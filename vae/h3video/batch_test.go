package h3video

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"fastvideo/internal/testutil"
)

func TestBatchTiles(t *testing.T) {
	tiles := make([]tilePlan, 12)
	for i := range tiles {
		tiles[i] = tilePlan{lh: 16, lw: 16}
	}
	tiles[11].lw = 8 // a narrower last tile forms its own group
	sizes := func(bs [][]int) []int {
		var s []int
		for _, b := range bs {
			s = append(s, len(b))
		}
		return s
	}
	for _, tc := range []struct {
		limit int
		want  []int
	}{{1, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}}, {4, []int{4, 4, 3, 1}}, {5, []int{4, 4, 3, 1}}, {6, []int{6, 5, 1}}, {20, []int{11, 1}}} {
		got := batchTiles(tiles, func(tilePlan) int { return tc.limit })
		if !reflect.DeepEqual(sizes(got), tc.want) {
			t.Errorf("limit %d: batch sizes %v, want %v", tc.limit, sizes(got), tc.want)
		}
		next := 0
		for _, b := range got {
			for _, i := range b {
				if i == 11 {
					continue
				}
				if i != next {
					t.Fatalf("limit %d: batches %v are not in raster order", tc.limit, got)
				}
				next++
			}
		}
	}
}

// TestTileBatch decodes several clips of a tiled canvas with the tiles batched in device calls of
// several sizes. Batching only changes how the backend's matmuls associate their sums, so every
// batch size must agree with tile-by-tile decoding to parity tolerance, and the pipelined decode
// must equal the clip-by-clip reference port bit for bit at the same batch size.
func TestTileBatch(t *testing.T) {
	testutil.ForEachFixture(t, "h3_video_vae", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		_, shape := fx.F32(t, "in.latents_normalized")
		r := cfg.SpatialRatio()
		tile := 3 * r
		s := []int{1, shape[1], 12, shape[3], shape[4]} // 12 latent frames: several clips and a padded tail
		rng := rand.New(rand.NewPCG(7, 11))
		z := make([]float32, s[1]*s[2]*s[3]*s[4])
		for i := range z {
			z[i] = float32(rng.NormFloat64())
		}
		ref := openDecoder(t, fx, Options{TileSize: tile, TileOverlap: r, TileBatch: 1})
		want, outShape := collect(t, ref, z, s)
		lat := latentView{data: z, c: s[1], t: s[2], h: s[3], w: s[4]}
		for _, batch := range []int{2, 4, 6} {
			d := openDecoder(t, fx, Options{TileSize: tile, TileOverlap: r, TileBatch: batch})
			cp, err := d.planClip(lat)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := collect(t, d, z, s)
			diff := testutil.Compare(got, want)
			t.Logf("TileBatch %d (%d tiles in %d calls): max abs %.3g vs tile by tile", batch, len(cp.tiles), len(cp.batches), diff.MaxAbs)
			testutil.AssertClose(t, "batched decode", got, want, outShape, testutil.ParityTol(want))
			if legacy := legacyDecode(t, d, z, s); !reflect.DeepEqual(got, legacy) {
				d := testutil.Compare(got, legacy)
				t.Errorf("TileBatch %d: pipelined decode differs from the clip-by-clip port by %g", batch, d.MaxAbs)
			}
		}
	})
}

// TestDecodeStopsEarly cancels the context from emit while the device goroutines are ahead, with one
// lane and with three (clip-parallel, all on device 0), then fails an emit: the decode must return
// the cause, stop every lane, release everything it holds and stay usable.
func TestDecodeStopsEarly(t *testing.T) {
	testutil.ForEachFixture(t, "h3_video_vae", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		r := cfg.SpatialRatio()
		z, s := laneLatents(t, fx)
		for _, lanes := range []int{1, 3} {
			d := openDecoder(t, fx, Options{TileSize: 3 * r, TileOverlap: r, TileBatch: 2})
			addLanes(t, d, lanes-1)
			ctx, cancel := context.WithCancel(context.Background())
			runs := 0
			err := d.DecodeDenormalized(ctx, z, s, func(Frames) error {
				runs++
				cancel()
				return nil
			})
			if !errors.Is(err, context.Canceled) || runs != 1 {
				t.Errorf("%d lanes: decode cancelled in its first emit returned %v after %d runs", lanes, err, runs)
			}
			boom := errors.New("sink full")
			if err := d.DecodeDenormalized(context.Background(), z, s, func(Frames) error { return boom }); !errors.Is(err, boom) {
				t.Errorf("%d lanes: a failing emit returned %v, want %v", lanes, err, boom)
			}
			if _, _, err := d.DecodeToPixels(context.Background(), z, s); err != nil {
				t.Fatal(err)
			}
		}
	})
}
