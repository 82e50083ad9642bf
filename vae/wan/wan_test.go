package wan

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/testutil"
)

const kind = "wan_vae"

// fixtureConfig decodes the tiny config a fixture was generated with; openDecoder opens the decoder of
// a fixture on the test backend.
var fixtureConfig, openDecoder = testutil.FixtureReaders(ParseConfig, FromSource)

// collect runs a streamed decode of VAE-space latents (hook optional) and concatenates the
// emitted samples into [3, frames, H, W], checking that runs arrive in order, 1 frame first and
// TemporalRatio frames after.
func collect(t *testing.T, d *Decoder, z []float32, shape []int, hook tapHook) ([]float32, []int) {
	t.Helper()
	out, err := d.cfg.OutputShape(shape)
	if err != nil {
		t.Fatal(err)
	}
	frames := testutil.NewFrameCollector(out)
	err = d.decode(context.Background(), z, shape, func(f Frames) error {
		want := d.cfg.TemporalRatio()
		if f.Start == 0 {
			want = 1
		}
		if f.Count != want {
			t.Fatalf("run start %d count %d, want count %d", f.Start, f.Count, want)
		}
		frames.Add(t, f.Start, f.Count, f.Height, f.Width, f.Sample)
		return nil
	}, hook)
	if err != nil {
		t.Fatal(err)
	}
	return frames.Frames(t), out
}

// TestParity decodes the fixture's raw latents chunk by chunk and checks the clamped video, the
// decoder output of the first latent frame (before unpatchify) and post_quant_conv.
func TestParity(t *testing.T) {
	testutil.ForEachFixture(t, kind, func(t *testing.T, fx *testutil.Fixture) {
		d := openDecoder(t, fx, Options{})
		z, zShape := fx.F32(t, "in.latents")
		var chunk0 []float32
		var chunk0Shape []int
		var pq [][]float32
		got, _ := collect(t, d, z, zShape, func(k int, name string, data []float32, shape []int) {
			switch {
			case name == "decoder" && k == 0:
				chunk0, chunk0Shape = data, shape
			case name == "post_quant_conv":
				pq = append(pq, data)
			}
		})
		want, wantShape := fx.F32(t, "out.decode")
		testutil.AssertClose(t, "out.decode", got, want, wantShape, testutil.ParityTol(want))

		if fx.Has("act.decoder_chunk0") {
			want, wantShape := fx.F32(t, "act.decoder_chunk0")
			if len(chunk0Shape) != len(wantShape) {
				t.Fatalf("decoder chunk 0 has shape %v, the fixture %v", chunk0Shape, wantShape)
			}
			testutil.AssertClose(t, "act.decoder_chunk0", chunk0, want, wantShape, testutil.ParityTol(want))
		}
		if fx.Has("act.post_quant_conv") {
			// Per-chunk [1, z, 1, h, w] outputs, re-assembled along time.
			want, wantShape := fx.F32(t, "act.post_quant_conv")
			zc, nt, plane := wantShape[1], wantShape[2], wantShape[3]*wantShape[4]
			if len(pq) != nt {
				t.Fatalf("post_quant_conv tapped on %d chunks, want %d", len(pq), nt)
			}
			all := make([]float32, len(want))
			for k, frame := range pq {
				for c := 0; c < zc; c++ {
					copy(all[(c*nt+k)*plane:(c*nt+k+1)*plane], frame[c*plane:(c+1)*plane])
				}
			}
			testutil.AssertClose(t, "act.post_quant_conv", all, want, wantShape, testutil.ParityTol(want))
		}
	})
}

// TestEncoderParity encodes the fixture video (first frame, then 4-frame chunks) and checks the
// posterior mean and log-variance.
func TestEncoderParity(t *testing.T) {
	testutil.ForEachFixture(t, kind, func(t *testing.T, fx *testutil.Fixture) {
		if !fx.Has("out.encode_mean") {
			t.Skip("fixture has no encoder outputs")
		}
		d := openDecoder(t, fx, Options{Encoder: true})
		video, vShape := fx.F32(t, "in.video")
		mean, logvar, shape, err := d.Encode(context.Background(), video, vShape)
		if err != nil {
			t.Fatal(err)
		}
		wantMean, wantShape := fx.F32(t, "out.encode_mean")
		if len(shape) != len(wantShape) {
			t.Fatalf("latent shape %v, fixture %v", shape, wantShape)
		}
		for i := range shape {
			if shape[i] != wantShape[i] {
				t.Fatalf("latent shape %v, fixture %v", shape, wantShape)
			}
		}
		testutil.AssertClose(t, "out.encode_mean", mean, wantMean, wantShape, testutil.ParityTol(wantMean))
		wantLV, _ := fx.F32(t, "out.encode_logvar")
		testutil.AssertClose(t, "out.encode_logvar", logvar, wantLV, wantShape, testutil.ParityTol(wantLV))

		bad := append([]int(nil), vShape...)
		bad[2]--
		n := bad[1] * bad[2] * bad[3] * bad[4]
		if _, _, _, err := d.Encode(context.Background(), video[:n], bad); err == nil || !strings.Contains(err.Error(), "n+1") {
			t.Errorf("%d frames: %v", bad[2], err)
		}
	})
}

// TestPipelinePath goes through the public API from DiT-space latents: (z − mean)/std fed to
// Decode / DecodeToPixels must give the fixture's video, mapped to [0, 1] like the pipeline.
func TestPipelinePath(t *testing.T) {
	testutil.ForEachFixture(t, kind, func(t *testing.T, fx *testutil.Fixture) {
		d := openDecoder(t, fx, Options{})
		cfg := d.Config()
		z, zShape := fx.F32(t, "in.latents")
		plane := zShape[2] * zShape[3] * zShape[4]
		norm := make([]float32, len(z))
		for i, v := range z {
			c := i / plane
			norm[i] = float32((float64(v) - cfg.LatentsMean[c]) / cfg.LatentsStd[c])
		}
		pix, shape, err := d.DecodeToPixels(context.Background(), norm, zShape)
		if err != nil {
			t.Fatal(err)
		}
		want, wantShape := fx.F32(t, "out.decode")
		if len(shape) != len(wantShape) {
			t.Fatalf("DecodeToPixels shape %v, fixture %v", shape, wantShape)
		}
		for i, v := range shape {
			if v != wantShape[i] {
				t.Fatalf("DecodeToPixels shape %v, fixture %v", shape, wantShape)
			}
		}
		ref := make([]float32, len(want))
		for i, v := range want {
			ref[i] = min(max(v/2+0.5, 0), 1)
		}
		testutil.AssertClose(t, "DecodeToPixels", pix, ref, wantShape, testutil.ParityTol(ref))
	})
}

// TestCheckpointSizes checks the declared decoder (post_quant_conv included) against the
// parameter counts of the released VAEs.
func TestCheckpointSizes(t *testing.T) {
	testutil.AssertParamCounts(t, Params, []testutil.ParamCase[Config]{
		{Name: "wan21 decoder", Cfg: DefaultConfig(), Want: 73_295_603}, {Name: "wan22 decoder", Cfg: Wan22Config(), Want: 555_051_580}})
}

// TestDecodeGFLOP checks the FLOP walk against figures computed by hand from the released configs.
func TestDecodeGFLOP(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		t, h, w int
		want    float64 // TFLOP
	}{{"wan21 480x832x81", DefaultConfig(), 21, 60, 104, 275}, {"wan22 480x832x81", Wan22Config(), 21, 30, 52, 597},
		{"wan22 704x1280x121", Wan22Config(), 31, 44, 80, 2011}} {
		got := tc.cfg.DecodeGFLOP(tc.t, tc.h, tc.w) / 1e3
		t.Logf("%s: %.1f TFLOP (computed %.0f)", tc.name, got, tc.want)
		if math.Abs(got-tc.want) > 0.02*tc.want {
			t.Errorf("%s: %.1f TFLOP, want about %.0f", tc.name, got, tc.want)
		}
	}
}

// randomLatents draws DiT-space latents [1, z, t, h, w] (standard normal).
func randomLatents(cfg Config, t, h, w int, seed uint64) ([]float32, []int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	z := make([]float32, cfg.ZDim*t*h*w)
	for i := range z {
		z[i] = float32(rng.NormFloat64())
	}
	return z, []int{1, cfg.ZDim, t, h, w}
}

// refMerge is FastVideo's spatial_tiled_decode written tile-major on whole videos: every tile
// decoded on its own over all frames, then _merge_spatial_tiles with blend_v / blend_h in place.
// It is the independent oracle for the streamed, chunk-major tiled decode.
func refMerge(t *testing.T, whole *Decoder, z []float32, shape []int, tile, stride int) []float32 {
	t.Helper()
	cfg := whole.Config()
	r := cfg.SpatialRatio()
	zc, nt, h, w := shape[1], shape[2], shape[3], shape[4]
	type vid struct {
		data []float32 // [3][F][th][tw]
		h, w int
	}
	var rows [][]*vid
	for i := 0; i < h; i += stride {
		var row []*vid
		for j := 0; j < w; j += stride {
			th, tw := min(tile, h-i), min(tile, w-j)
			sub := make([]float32, zc*nt*th*tw)
			for c := 0; c < zc; c++ {
				for k := 0; k < nt; k++ {
					for y := 0; y < th; y++ {
						src := (((c*nt+k)*h)+i+y)*w + j
						dst := ((c*nt+k)*th + y) * tw
						copy(sub[dst:dst+tw], z[src:src+tw])
					}
				}
			}
			data, _ := collect(t, whole, sub, []int{1, zc, nt, th, tw}, nil)
			row = append(row, &vid{data, th * r, tw * r})
		}
		rows = append(rows, row)
	}
	nf, nc := cfg.NumFrames(nt), cfg.PixelChannels()
	planes := nc * nf
	blend := (tile - stride) * r
	at := func(v *vid, p, y, x int) *float32 { return &v.data[(p*v.h+y)*v.w+x] }
	hh, ww := h*r, w*r
	out := make([]float32, planes*hh*ww)
	for i, row := range rows {
		for j, b := range row {
			if i > 0 {
				a := rows[i-1][j]
				e := min(a.h, b.h, blend)
				for y := 0; y < e; y++ {
					wa, wb := float32(1-float64(y)/float64(e)), float32(float64(y)/float64(e))
					for p := 0; p < planes; p++ {
						for x := 0; x < b.w; x++ {
							*at(b, p, y, x) = float32(*at(a, p, a.h-e+y, x)*wa) + float32(*at(b, p, y, x)*wb)
						}
					}
				}
			}
			if j > 0 {
				a := row[j-1]
				e := min(a.w, b.w, blend)
				for x := 0; x < e; x++ {
					wa, wb := float32(1-float64(x)/float64(e)), float32(float64(x)/float64(e))
					for p := 0; p < planes; p++ {
						for y := 0; y < b.h; y++ {
							*at(b, p, y, x) = float32(*at(a, p, y, a.w-e+x)*wa) + float32(*at(b, p, y, x)*wb)
						}
					}
				}
			}
			kh, kw := min(stride*r, b.h), min(stride*r, b.w)
			for p := 0; p < planes; p++ {
				for y := 0; y < kh; y++ {
					for x := 0; x < kw; x++ {
						out[(p*hh+i*r*stride+y)*ww+j*r*stride+x] = *at(b, p, y, x)
					}
				}
			}
		}
	}
	return out
}

// TestTiling checks the streamed tiled decode against the tile-major oracle (exact up to float
// rounding), that a tile covering the canvas reproduces the whole decode, and measures how far the
// blended tiles are from the whole-canvas decode (a property of the reference's tiling, reported).
func TestTiling(t *testing.T) {
	testutil.ForEachFixture(t, kind, func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		r := cfg.SpatialRatio()
		// 5×5 latents in tiles of 4 every 3 (the release's 256/192 proportions): 2×2 tiles, the second
		// row and column cut short by the canvas edge.
		const lat, tile, stride = 5, 4, 3
		zn, shape := randomLatents(cfg, 2, lat, lat, 11)
		z, err := cfg.DenormalizeLatents(zn, shape)
		if err != nil {
			t.Fatal(err)
		}
		whole := openDecoder(t, fx, Options{})
		ref, _ := collect(t, whole, z, shape, nil)

		fits := openDecoder(t, fx, Options{Tiling: true, TileSize: lat * r, TileStride: lat * r})
		got, outShape := collect(t, fits, z, shape, nil)
		testutil.AssertClose(t, "one tile = whole", got, ref, outShape[1:], 0)

		tiled := openDecoder(t, fx, Options{Tiling: true, TileSize: tile * r, TileStride: stride * r})
		got, _ = collect(t, tiled, z, shape, nil)
		oracle := refMerge(t, whole, z, shape, tile, stride)
		testutil.AssertClose(t, "tiled vs tile-major oracle", got, oracle, outShape[1:], 1e-6)

		diff := testutil.Compare(got, ref)
		var sum float64
		for i := range got {
			sum += math.Abs(float64(got[i] - ref[i]))
		}
		t.Logf("tiled (%d px tiles every %d px on %d×%d px) vs whole decode: max abs %.4g, mean abs %.4g (outputs in [-1, 1])",
			tile*r, stride*r, lat*r, lat*r, diff.MaxAbs, sum/float64(len(got)))
		if diff.NaNFound || diff.MaxAbs > 2 {
			t.Errorf("tiled decode is not a valid video: max abs diff %g", diff.MaxAbs)
		}
	})
}

func TestLoadReleaseFolder(t *testing.T) {
	testutil.ForEachFixture(t, kind, func(t *testing.T, fx *testutil.Fixture) {
		// The released vae/ folder (diffusers' extra keys included), encoder weights too.
		dir := testutil.WriteReleaseFolder(t, fx, testutil.ReleaseFolder{ConfigPath: []string{"arch_config"},
			Extra: map[string]any{"_class_name": "AutoencoderKLWan", "_diffusers_version": "0.33.0"}})
		d, err := Load(testutil.Backend(t), dir, Options{Encoder: fx.Has("out.encode_mean")})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		z, zShape := fx.F32(t, "in.latents")
		got, _ := collect(t, d, z, zShape, nil)
		want, wantShape := fx.F32(t, "out.decode")
		testutil.AssertClose(t, "Load + decode", got, want, wantShape, testutil.ParityTol(want))
		if d.Options().Encoder {
			video, vShape := fx.F32(t, "in.video")
			mean, _, _, err := d.Encode(context.Background(), video, vShape)
			if err != nil {
				t.Fatal(err)
			}
			want, wantShape := fx.F32(t, "out.encode_mean")
			testutil.AssertClose(t, "Load + encode", mean, want, wantShape, testutil.ParityTol(want))
		}
	})
}

func TestErrors(t *testing.T) {
	testutil.ForEachFixture(t, kind, func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		be := testutil.Backend(t)
		if _, err := FromSource(be, cfg, fx.Weights(), Options{DType: dtypes.Int32}); err == nil || !strings.Contains(err.Error(), "DType") {
			t.Errorf("int32 dtype: %v", err)
		}
		if _, err := FromSource(be, cfg, fx.Weights(), Options{TileSize: 3}); err == nil || !strings.Contains(err.Error(), "TileSize") {
			t.Errorf("tile size 3: %v", err)
		}
		if _, err := FromSource(be, cfg, fx.Weights(), Options{TileSize: 64, TileStride: 128}); err == nil || !strings.Contains(err.Error(), "TileStride") {
			t.Errorf("stride > tile: %v", err)
		}
		bad := cfg
		bad.ZDim++
		if _, err := FromSource(be, bad, fx.Weights(), Options{}); err == nil {
			t.Error("z_dim+1: no error")
		}
		bad = cfg
		bad.NumResBlocks++
		if _, err := FromSource(be, bad, fx.Weights(), Options{}); err == nil || !strings.Contains(err.Error(), "missing") {
			t.Errorf("num_res_blocks+1 should report missing tensors: %v", err)
		}
		if _, err := ParseConfig([]byte(`{"z_dim": 48}`)); err == nil || !strings.Contains(err.Error(), "latents_mean") {
			t.Errorf("z_dim 48 with Wan2.1 statistics: %v", err)
		}

		d := openDecoder(t, fx, Options{})
		z, zShape := fx.F32(t, "in.latents")
		noop := func(Frames) error { return nil }
		wrong := append([]int(nil), zShape...)
		wrong[1]++
		if err := d.Decode(context.Background(), z, wrong, noop); err == nil || !strings.Contains(err.Error(), "z_dim") {
			t.Errorf("wrong channels: %v", err)
		}
		video, vShape := fx.F32(t, "in.video")
		if _, _, _, err := d.Encode(context.Background(), video, vShape); err == nil || !strings.Contains(err.Error(), "Encoder") {
			t.Errorf("Encode without the encoder: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := d.DecodeDenormalized(ctx, z, zShape, noop); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled context: %v", err)
		}
		stop := errors.New("stop")
		calls := 0
		err := d.DecodeDenormalized(context.Background(), z, zShape, func(Frames) error { calls++; return stop })
		if !errors.Is(err, stop) || calls != 1 {
			t.Errorf("emit error: %v after %d calls", err, calls)
		}
		_ = d.Close()
		if err := d.Decode(context.Background(), z, zShape, noop); err == nil {
			t.Error("decode after Close: no error")
		}
	})
}

// TestNewRandom builds a decoder with weights drawn on the backend (the benchmark's path) for a
// fixture geometry and checks that it decodes to a finite clamped video.
func TestNewRandom(t *testing.T) {
	testutil.ForEachFixture(t, kind, func(t *testing.T, fx *testutil.Fixture) {
		d, err := NewRandom(testutil.Backend(t), fixtureConfig(t, fx), Options{}, 3)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		z, shape := randomLatents(d.Config(), 2, 2, 2, 1)
		got, _ := collect(t, d, z, shape, nil)
		for i, v := range got {
			if !(v >= -1 && v <= 1) {
				t.Fatalf("sample %d = %g, want a finite value in [-1, 1]", i, v)
			}
		}
	})
}

func TestQuantize(t *testing.T) {
	for _, tc := range []struct {
		in   float32
		want uint8
	}{{0, 0}, {1, 255}, {0.5, 127}, {-0.1, 0}, {1.5, 255}, {float32(math.NaN()), 0}, {254.9 / 255, 254}} {
		if got := Quantize(tc.in); got != tc.want {
			t.Errorf("Quantize(%g) = %d, want %d", tc.in, got, tc.want)
		}
	}
	f := Frames{Count: 1, Height: 1, Width: 2, Sample: []float32{-1, 1, 0, 0.5, 1, -1}}
	if got := f.RGB24(nil); string(got) != string([]byte{0, 127, 255, 255, 191, 0}) {
		t.Errorf("RGB24 = %v", got)
	}
}
