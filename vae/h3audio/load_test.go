package h3audio

import (
	"context"
	"slices"
	"strings"
	"testing"

	"fastvideo/internal/testutil"
)

func TestLoadReleaseFolder(t *testing.T) {
	testutil.ForEachFixture(t, kind, func(t *testing.T, fx *testutil.Fixture) {
		// The release's audio_vae/ folder; diffusers' _class_name must be ignored.
		dir := testutil.WriteReleaseFolder(t, fx, testutil.ReleaseFolder{ConfigPath: []string{"arch_config"},
			Extra: map[string]any{"_class_name": "AutoencoderKLMiniMaxH3Audio"}})
		d, err := Load(testutil.Backend(t), dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		var derived struct {
			HopLength int `json:"hop_length"`
		}
		if fx.DecodeConfig(&derived, "derived") == nil && derived.HopLength != 0 && d.Config().HopLength() != derived.HopLength {
			t.Errorf("hop length %d, want %d", d.Config().HopLength(), derived.HopLength)
		}
		z, zShape := fx.F32(t, "in.latents_normalized")
		want, wantShape := fx.F32(t, "out.decode_sample")
		got, err := d.Decode(context.Background(), z, zShape)
		if err != nil {
			t.Fatal(err)
		}
		var flat []float32
		for _, item := range got {
			flat = append(flat, item...)
		}
		testutil.AssertClose(t, "out.decode_sample", flat, want, wantShape, testutil.ParityTol(want))

		// The DiT hands audio over as packed rows [2·N, C] (channel 0's N rows, then channel 1's).
		if zShape[0] == 2 {
			c, n := zShape[1], zShape[2]
			rows := make([]float32, len(z))
			for ch := range 2 {
				for tt := range n {
					for k := range c {
						rows[(ch*n+tt)*c+k] = z[(ch*c+k)*n+tt]
					}
				}
			}
			stereo, err := d.DecodeRows(context.Background(), rows, n)
			if err != nil {
				t.Fatal(err)
			}
			flat = flat[:0]
			for _, item := range stereo {
				flat = append(flat, item...)
			}
			testutil.AssertClose(t, "DecodeRows", flat, want, wantShape, testutil.ParityTol(want))
		}
	})
}

func TestErrors(t *testing.T) {
	testutil.ForEachFixture(t, kind, func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		be := testutil.Backend(t)

		// A checkpoint of another width reports every mismatched name at once.
		wrong := cfg
		wrong.DecoderDim *= 2
		if _, err := FromSource(be, wrong, fx.Weights(), Options{}); err == nil ||
			!strings.Contains(err.Error(), "mismatched: decoder.conv_pre.weight_v") ||
			!strings.Contains(err.Error(), "mismatched: decoder.ups.0.0.bias") {
			t.Errorf("wrong decoder_dim: got %v", err)
		}

		bad := cfg
		bad.DecoderKernelSizes = bad.DecoderKernelSizes[:1]
		if _, err := FromSource(be, bad, fx.Weights(), Options{}); err == nil || !strings.Contains(err.Error(), "decoder_kernel_sizes") {
			t.Errorf("bad config: got %v", err)
		}

		d := openFixtureDecoder(t, fx, fx.Weights(), Options{})
		ctx := context.Background()
		if _, err := d.Decode(ctx, make([]float32, 6), []int{1, cfg.LatentChannels + 1, 2}); err == nil ||
			!strings.Contains(err.Error(), "latent_channels") {
			t.Errorf("wrong channels: got %v", err)
		}
		if _, err := d.Decode(ctx, make([]float32, 5), []int{1, cfg.LatentChannels, 2}); err == nil {
			t.Error("short latents: no error")
		}
		if _, err := d.Encode(ctx, [][]float32{{0, 1}}); err == nil || !strings.Contains(err.Error(), "Encoder: true") {
			t.Errorf("Encode without encoder: got %v", err)
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := d.Decode(cancelled, make([]float32, cfg.LatentChannels), []int{cfg.LatentChannels, 1}); err == nil {
			t.Error("cancelled context: no error")
		}
		d.Close()
		if _, err := d.Decode(ctx, make([]float32, cfg.LatentChannels), []int{cfg.LatentChannels, 1}); err == nil ||
			!strings.Contains(err.Error(), "closed") {
			t.Errorf("after Close: got %v", err)
		}
		if _, err := Load(be, t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("empty folder: got %v", err)
		}
	})
}

func TestDefaultConfigIsRelease(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.HopLength() != 800 {
		t.Errorf("hop %d, want 800 (40 latents/s at 32 kHz)", cfg.HopLength())
	}
	// BigVGAN: channels 1024 -> 8 over the 7 upsamplers.
	if cfg.DecoderDim>>len(cfg.DecoderRates) != 8 {
		t.Errorf("last decoder width %d, want 8", cfg.DecoderDim>>len(cfg.DecoderRates))
	}
}

func TestParamsMatchFixture(t *testing.T) {
	testutil.ForEachFixture(t, kind, func(t *testing.T, fx *testutil.Fixture) {
		dec, err := Params(fixtureConfig(t, fx))
		if err != nil {
			t.Fatal(err)
		}
		enc, err := EncoderParams(fixtureConfig(t, fx))
		if err != nil {
			t.Fatal(err)
		}
		declared := append(dec, enc...).Map()
		src := fx.Weights()
		for _, name := range src.Names() {
			info, _ := src.Tensor(name)
			shape, ok := declared[name]
			switch {
			case !ok && name != "pre_block.attn.zero_k_bias":
				t.Errorf("fixture tensor %s is not declared", name)
			case ok && !slices.Equal(shape, info.Shape):
				t.Errorf("%s: declared %v, fixture %v", name, shape, info.Shape)
			}
			delete(declared, name)
		}
		for name := range declared {
			t.Errorf("declared %s is not in the fixture", name)
		}
	})
}

func TestKaiserSincFilterMatchesBuffers(t *testing.T) {
	testutil.ForEachFixture(t, kind, func(t *testing.T, fx *testutil.Fixture) {
		one := KaiserSincFilter(0.25, 0.3, filterTaps)
		var got, want []float32
		n := 0
		for _, name := range fx.Names("w.") {
			if strings.HasSuffix(name, ".filter") {
				v, _ := fx.F32(t, name)
				got = append(got, v...)
				want = append(want, one...)
				n++
			}
		}
		testutil.AssertClose(t, "filter buffers", want, got, []int{n, filterTaps}, 1e-6)
		if n == 0 {
			t.Fatal("fixture has no filter buffers")
		}
	})
}
