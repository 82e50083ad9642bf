package h3audio

import (
	"context"
	"testing"

	"fastvideo/internal/graphexec/graphexectest"
	"fastvideo/internal/testutil"
)

// TestPrepare checks that after Prepare (PrepareRows) a Decode (DecodeRows) of that shape compiles
// no program and gives the waveform, bit for bit, of a decoder that compiles as it decodes.
func TestPrepare(t *testing.T) {
	testutil.ForEachFixture(t, kind, func(t *testing.T, fx *testutil.Fixture) {
		z, shape := fx.F32(t, "in.latents_normalized")
		ctx := context.Background()
		check := func(t *testing.T, prepare func(*Decoder) error, decode func(*Decoder) ([][]float32, error)) {
			graphexectest.PreparedSame(t, 1, func() *Decoder { return openFixtureDecoder(t, fx, fx.Weights(), Options{}) }, prepare,
				func(d *Decoder) [][]float32 {
					got, err := decode(d)
					if err != nil {
						t.Fatal(err)
					}
					return got
				})
		}
		t.Run("Decode", func(t *testing.T) {
			check(t, func(d *Decoder) error { return d.Prepare(ctx, shape) },
				func(d *Decoder) ([][]float32, error) { return d.Decode(ctx, z, shape) })
		})
		t.Run("DecodeRows", func(t *testing.T) {
			c := fixtureConfig(t, fx).LatentChannels
			n := shape[len(shape)-1]
			rows := make([]float32, 2*n*c)
			for i := range rows {
				rows[i] = z[i%len(z)]
			}
			check(t, func(d *Decoder) error { return d.PrepareRows(ctx, n) },
				func(d *Decoder) ([][]float32, error) { return d.DecodeRows(ctx, rows, n) })
		})
		t.Run("errors", func(t *testing.T) {
			d := openFixtureDecoder(t, fx, fx.Weights(), Options{})
			if err := d.PrepareRows(ctx, 0); err == nil {
				t.Error("PrepareRows(0) succeeded")
			}
			graphexectest.PrepareErrors(t, d.Prepare, d.Close, shape, []int{1, 2, 3, 4}, "must be [B, C, N] or [C, N]")
		})
	})
}
