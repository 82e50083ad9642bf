package h3audio

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

const kind = "h3_audio_vae"

var fixtureConfig = testutil.ConfigReader(ParseConfig, "arch_config")

func openFixtureDecoder(t *testing.T, fx *testutil.Fixture, src weights.Source, opts Options) *Decoder {
	t.Helper()
	d, err := FromSource(testutil.Backend(t), fixtureConfig(t, fx), src, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// checkDecode compares the decoder's output and every act.* intermediate the
// fixture holds against the reference.
func checkDecode(t *testing.T, fx *testutil.Fixture, d *Decoder) {
	t.Helper()
	z, zShape := fx.F32(t, "in.latents_normalized")
	want, wantShape := fx.F32(t, "out.decode_sample")

	got, err := d.Decode(context.Background(), z, zShape)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != wantShape[0] {
		t.Fatalf("Decode returned %d items, want %d", len(got), wantShape[0])
	}
	var flat []float32
	for _, item := range got {
		flat = append(flat, item...)
	}
	testutil.AssertClose(t, "out.decode_sample", flat, want, wantShape, testutil.ParityTol(want))

	// Intermediates: map the fixture's act names to decodeGraph's taps.
	tapOf := map[string]string{"out.latents_denormalized": "latents_denormalized"}
	for _, name := range fx.Names("act.") {
		tap := strings.TrimPrefix(name, "act.")
		if strings.HasPrefix(tap, "dec_") || strings.HasPrefix(tap, "decoder_") {
			tapOf[name] = tap
		}
	}
	var names, tapNames []string
	for name, tap := range tapOf {
		if fx.Has(name) {
			names = append(names, name)
			tapNames = append(tapNames, tap)
		}
	}
	outs, err := d.runDecode(tensors.FromFlatDataAndDimensions(z, zShape...), tapNames)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range names {
		w, shape := fx.F32(t, name)
		g := tensors.MustCopyFlatData[float32](outs[i])
		if !slices.Equal(outs[i].Shape().Dimensions, shape) {
			t.Errorf("%s: shape %v, want %v", name, outs[i].Shape().Dimensions, shape)
			continue
		}
		testutil.AssertClose(t, name, g, w, shape, testutil.ParityTol(w))
	}
}

func TestDecodeParity(t *testing.T) {
	testutil.ForEachFixture(t, kind, func(t *testing.T, fx *testutil.Fixture) {
		checkDecode(t, fx, openFixtureDecoder(t, fx, fx.Weights(), Options{}))
	})
}

// foldWeightNorm serves src with every weight_g/weight_v pair folded into a plain weight
// (g·v/‖v‖ in float64), as a checkpoint without weight norm has, and counts the folded pairs.
func foldWeightNorm(t *testing.T, src weights.Source) (weights.MapSource, int) {
	t.Helper()
	out := weights.MapSource{}
	folded := 0
	for _, name := range src.Names() {
		info, _ := src.Tensor(name)
		switch {
		case strings.HasSuffix(name, ".weight_g"):
			continue
		case strings.HasSuffix(name, ".weight_v"):
			prefix := strings.TrimSuffix(name, ".weight_v")
			gInfo, ok := src.Tensor(prefix + ".weight_g")
			if !ok {
				t.Fatalf("%s has no weight_g", prefix)
			}
			v, err := info.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			g, _ := gInfo.Float32s()
			rows := info.Shape[0]
			per := len(v) / rows
			w := make([]float32, len(v))
			for r := range rows {
				var ss float64
				for _, x := range v[r*per : (r+1)*per] {
					ss += float64(x) * float64(x)
				}
				scale := float64(g[r]) / math.Sqrt(ss)
				for k := r * per; k < (r+1)*per; k++ {
					w[k] = float32(float64(v[k]) * scale)
				}
			}
			name = prefix + ".weight"
			info = safetensors.Info{Name: name, DType: safetensors.F32, Shape: info.Shape, Data: safetensors.F32Bytes(w)}
			folded++
		}
		out[name] = info
	}
	return out, folded
}

func TestDecodeParityFoldedWeights(t *testing.T) {
	testutil.ForEachFixture(t, kind, func(t *testing.T, fx *testutil.Fixture) {
		src, n := foldWeightNorm(t, fx.Weights())
		if n == 0 {
			t.Fatal("fixture has no weight_g/weight_v pairs to fold")
		}
		d := openFixtureDecoder(t, fx, src, Options{})
		for _, p := range d.dec {
			if strings.HasSuffix(p.Name, ".weight_g") || strings.HasSuffix(p.Name, ".weight_v") {
				t.Fatalf("folded source still bound %s", p.Name)
			}
		}
		checkDecode(t, fx, d)
	})
}

func TestEncodeParity(t *testing.T) {
	testutil.ForEachFixture(t, kind, func(t *testing.T, fx *testutil.Fixture) {
		if !fx.Has("out.encode_mean") {
			t.Skip("fixture has no encoder outputs")
		}
		cfg := fixtureConfig(t, fx)
		d := openFixtureDecoder(t, fx, fx.Weights(), Options{Encoder: true})
		wave, wShape := fx.F32(t, "in.waveform")
		items := make([][]float32, wShape[0])
		for i := range items {
			items[i] = wave[i*wShape[2] : (i+1)*wShape[2]]
		}
		post, err := d.Encode(context.Background(), items)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			got  []float32
		}{
			{"out.encode_mean", post.Mean},
			{"out.encode_logs", post.Logs},
			{"out.encode_mode_normalized", post.Normalized(cfg)},
		} {
			w, shape := fx.F32(t, c.name)
			if !slices.Equal(post.Shape, shape) {
				t.Fatalf("%s: shape %v, want %v", c.name, post.Shape, shape)
			}
			testutil.AssertClose(t, c.name, c.got, w, shape, testutil.ParityTol(w))
		}
		// Encoder intermediates.
		hop := cfg.HopLength()
		padded := (wShape[2] + hop - 1) / hop * hop
		flat := make([]float32, wShape[0]*padded)
		for i := range items {
			copy(flat[i*padded:], items[i])
		}
		var names []string
		for _, n := range []string{"encoder_out", "pre_block_out"} {
			if fx.Has("act." + n) {
				names = append(names, n)
			}
		}
		outs, err := d.runEncode(tensors.FromFlatDataAndDimensions(flat, wShape[0], 1, padded), names)
		if err != nil {
			t.Fatal(err)
		}
		for i, n := range names {
			w, shape := fx.F32(t, "act."+n)
			if !slices.Equal(outs[i].Shape().Dimensions, shape) {
				t.Errorf("act.%s: shape %v, want %v", n, outs[i].Shape().Dimensions, shape)
				continue
			}
			testutil.AssertClose(t, "act."+n, tensors.MustCopyFlatData[float32](outs[i]), w, shape, testutil.ParityTol(w))
		}
	})
}
