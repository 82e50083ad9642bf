package h3video

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
)

// fixtureConfig decodes the tiny config a fixture was generated with; openDecoder opens the decoder of
// a fixture on the test backend.
var fixtureConfig, openDecoder = testutil.FixtureReaders(ParseConfig, FromSource)

// collect runs a streamed decode and concatenates the emitted samples into [3, frames, H, W],
// checking that runs arrive in order and without gaps.
func collect(t *testing.T, d *Decoder, z []float32, shape []int) ([]float32, []int) {
	t.Helper()
	out, err := d.cfg.OutputShape(shape)
	if err != nil {
		t.Fatal(err)
	}
	frames := testutil.NewFrameCollector(out)
	err = d.DecodeDenormalized(context.Background(), z, shape, func(f Frames) error {
		frames.Add(t, f.Start, f.Count, f.Height, f.Width, f.Sample)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return frames.Frames(t), out
}

// fixtureLatents is the fixture's normalized latents zn and, de-normalized with cfg, the VAE-space
// latents z that Decode takes.
func fixtureLatents(t *testing.T, fx *testutil.Fixture, cfg Config) (zn, z []float32, shape []int) {
	t.Helper()
	zn, shape = fx.F32(t, "in.latents_normalized")
	z, err := cfg.DenormalizeLatents(zn, shape)
	if err != nil {
		t.Fatal(err)
	}
	return zn, z, shape
}

func TestParity(t *testing.T) {
	testutil.ForEachFixture(t, "h3_video_vae", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		zn, z, shape := fixtureLatents(t, fx, cfg)
		want, _ := fx.F32(t, "out.latents_denormalized")
		testutil.AssertClose(t, "latents_denormalized", z, want, shape, testutil.ParityTol(want))

		d := openDecoder(t, fx, Options{})
		checkClip0Acts(t, fx, d, z, shape)

		sample, outShape := collect(t, d, z, shape)
		want, wantShape := fx.F32(t, "out.decode_sample")
		if !reflect.DeepEqual(outShape, wantShape) {
			t.Fatalf("decode shape %v, want %v", outShape, wantShape)
		}
		testutil.AssertClose(t, "decode_sample", sample, want, wantShape, testutil.ParityTol(want))

		pix, pixShape, err := d.DecodeToPixels(context.Background(), zn, shape)
		if err != nil {
			t.Fatal(err)
		}
		want, wantShape = fx.F32(t, "out.decode_to_pixels")
		if !reflect.DeepEqual(pixShape, wantShape) {
			t.Fatalf("pixel shape %v, want %v", pixShape, wantShape)
		}
		testutil.AssertClose(t, "decode_to_pixels", pix, want, wantShape, testutil.ParityTol(want))
	})
}

// checkClip0Acts compares the first temporal clip's intermediates (act.decode_clip0.*) when the
// fixture's canvas is one tile, as the reference recorded them per decoder call.
func checkClip0Acts(t *testing.T, fx *testutil.Fixture, d *Decoder, z []float32, shape []int) {
	t.Helper()
	if !fx.Has("act.decode_clip0.decoder_out") {
		return
	}
	th, tw, _, _ := d.tileSizes()
	if shape[3]*d.cfg.SpatialRatio() > th || shape[4]*d.cfg.SpatialRatio() > tw {
		t.Logf("canvas is tiled: act.decode_clip0.* (first tile only) not compared")
		return
	}
	lat := latentView{data: z, c: shape[1], t: shape[2], h: shape[3], w: shape[4]}
	nt := d.cfg.ClipTokens()
	acts := map[string][]float32{}
	out, err := d.decodeTile(context.Background(), lat.tile(0, nt, 0, lat.h, 0, lat.w), func(name string, v *tensors.Tensor) {
		acts[name] = tensors.MustCopyFlatData[float32](v)
	})
	if err != nil {
		t.Fatal(err)
	}
	n := nt * lat.h * lat.w
	// post_quant_conv: ours is token-major [n, C]; the reference is [1, C, T, H, W].
	want, wshape := fx.F32(t, "act.decode_clip0.post_quant_conv")
	got := make([]float32, len(want))
	for c := 0; c < lat.c; c++ {
		for i := 0; i < n; i++ {
			got[c*n+i] = acts["post_quant_conv"][i*lat.c+c]
		}
	}
	testutil.AssertClose(t, "act.decode_clip0.post_quant_conv", got, want, wshape, testutil.ParityTol(want))
	want, wshape = fx.F32(t, "act.decode_clip0.decoder_proj_in")
	testutil.AssertClose(t, "act.decode_clip0.decoder_proj_in", acts["proj_in"][:len(want)], want, wshape, testutil.ParityTol(want))
	want, wshape = fx.F32(t, "act.decode_clip0.decoder_block0")
	testutil.AssertClose(t, "act.decode_clip0.decoder_block0", acts["block0"], want, wshape, testutil.ParityTol(want))
	want, wshape = fx.F32(t, "act.decode_clip0.decoder_out")
	testutil.AssertClose(t, "act.decode_clip0.decoder_out", out, want, wshape, testutil.ParityTol(want))
}

// TestTiledDecode forces several overlapping tiles on the fixture canvas. The stitched result must
// equal an independent port of the reference's _stitch_tiles (whole tiles blended, cropped and
// concatenated) bit for bit; its distance to the single-tile decode is measured and logged (tiles see
// tile-relative RoPE positions and less context, so they differ by design, as in the reference).
func TestTiledDecode(t *testing.T) {
	testutil.ForEachFixture(t, "h3_video_vae", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		_, z, shape := fixtureLatents(t, fx, cfg)
		r := cfg.SpatialRatio()
		hh, ww := shape[3]*r, shape[4]*r
		tile := 3 * r // smaller than both canvas edges of the tiny fixture
		if tile >= hh || tile >= ww {
			t.Skipf("canvas %dx%d too small to tile with %d px tiles", hh, ww, tile)
		}
		whole := openDecoder(t, fx, Options{})
		tiled := openDecoder(t, fx, Options{TileSize: tile, TileOverlap: r})
		ys, _ := SplitTiles(hh, tile, r, r)
		xs, _ := SplitTiles(ww, tile, r, r)
		t.Logf("canvas %dx%d, tiles %d px: rows %v overlaps %v, cols %v overlaps %v", hh, ww, tile, ys.Starts, ys.Overlaps, xs.Starts, xs.Overlaps)
		if len(ys.Starts) < 2 || len(xs.Starts) < 2 {
			t.Fatalf("expected a 2-D tiling")
		}

		lat := latentView{data: z, c: shape[1], t: shape[2], h: shape[3], w: shape[4]}
		got := make([]float32, 3*cfg.ClipTokens()*cfg.TemporalRatio()*hh*ww)
		frames, err := tiled.decodeClip(context.Background(), lat, 0, got)
		if err != nil {
			t.Fatal(err)
		}
		want := stitchOracle(t, tiled, lat, ys, xs, frames)
		if d := testutil.Compare(got, want); d.MaxAbs != 0 {
			t.Fatalf("tiled clip differs from the stitch oracle by %g at %v", d.MaxAbs, testutil.Unravel(d.Index, []int{3, frames, hh, ww}))
		}

		a, _ := collect(t, whole, z, shape)
		b, outShape := collect(t, tiled, z, shape)
		diff := testutil.Compare(b, a)
		var mean float64
		for i := range a {
			mean += math.Abs(float64(a[i] - b[i]))
		}
		mean /= float64(len(a))
		t.Logf("tiled (%d px, overlap %d) vs single-tile decode: max abs %.4g at %v, mean abs %.4g, max|ref| %.4g",
			tile, r, diff.MaxAbs, testutil.Unravel(diff.Index, outShape[1:]), mean, diff.MaxRef)
		if diff.NaNFound || math.IsInf(diff.MaxAbs, 0) {
			t.Fatal("tiled decode produced non-finite values")
		}
	})
}

// stitchOracle decodes every tile and stitches them the way FastVideo's _stitch_tiles does.
func stitchOracle(t *testing.T, d *Decoder, lat latentView, ys, xs Tiles, frames int) []float32 {
	r := d.cfg.SpatialRatio()
	nt := d.cfg.ClipTokens()
	type tl struct {
		v       []float32
		p, h, w int
	}
	tiles := make([][]tl, len(ys.Starts))
	for i := range ys.Starts {
		for j := range xs.Starts {
			lh := min(ys.Sizes[i]/r, lat.h-ys.Starts[i]/r)
			lw := min(xs.Sizes[j]/r, lat.w-xs.Starts[j]/r)
			v, err := d.decodeTile(context.Background(), lat.tile(0, nt, ys.Starts[i]/r, lh, xs.Starts[j]/r, lw), nil)
			if err != nil {
				t.Fatal(err)
			}
			tiles[i] = append(tiles[i], tl{v, 3 * frames, lh * r, lw * r})
		}
	}
	at := func(x tl, p, y, c int) float32 { return x.v[(p*x.h+y)*x.w+c] }
	blend := func(a, b tl, e int, vertical bool) tl {
		out := tl{append([]float32(nil), b.v...), b.p, b.h, b.w}
		if vertical {
			e = min(a.h, b.h, e)
		} else {
			e = min(a.w, b.w, e)
		}
		for p := 0; p < b.p; p++ {
			for y := 0; y < b.h; y++ {
				for c := 0; c < b.w; c++ {
					var i int
					var src float32
					if vertical {
						if y >= e {
							continue
						}
						i, src = y, at(a, p, a.h-e+y, c)
					} else {
						if c >= e {
							continue
						}
						i, src = c, at(a, p, y, a.w-e+c)
					}
					wb := float32(i) / float32(e)
					out.v[(p*b.h+y)*b.w+c] = float32(src*(1-wb)) + float32(at(b, p, y, c)*wb)
				}
			}
		}
		return out
	}
	var rows [][]tl
	for i, row := range tiles {
		var out []tl
		for j := range row {
			cur := row[j]
			if i > 0 {
				cur = blend(tiles[i-1][j], cur, ys.Overlaps[i-1], true)
			}
			if j > 0 {
				cur = blend(row[j-1], cur, xs.Overlaps[j-1], false)
			}
			kh, kw := cur.h, cur.w
			if i < len(tiles)-1 {
				kh -= ys.Overlaps[i]
			}
			if j < len(row)-1 {
				kw -= xs.Overlaps[j]
			}
			crop := tl{make([]float32, cur.p*kh*kw), cur.p, kh, kw}
			for p := 0; p < cur.p; p++ {
				for y := 0; y < kh; y++ {
					copy(crop.v[(p*kh+y)*kw:(p*kh+y+1)*kw], cur.v[(p*cur.h+y)*cur.w:(p*cur.h+y)*cur.w+kw])
				}
			}
			out = append(out, crop)
		}
		rows = append(rows, out)
	}
	hh, ww := lat.h*r, lat.w*r
	canvas := make([]float32, 3*frames*hh*ww)
	y0 := 0
	for _, row := range rows {
		x0 := 0
		for _, c := range row {
			for p := 0; p < c.p; p++ {
				for y := 0; y < c.h; y++ {
					copy(canvas[(p*hh+y0+y)*ww+x0:], c.v[(p*c.h+y)*c.w:(p*c.h+y+1)*c.w])
				}
			}
			x0 += c.w
		}
		y0 += row[0].h
	}
	return canvas
}

// TestStreamingMatchesLegacy checks the temporal chunking, padding and blending for several latent
// lengths against a port of the reference's pre-streaming _decode (the oracle FastVideo's own
// streaming test uses), bit for bit.
func TestStreamingMatchesLegacy(t *testing.T) {
	testutil.ForEachFixture(t, "h3_video_vae", func(t *testing.T, fx *testutil.Fixture) {
		d := openDecoder(t, fx, Options{})
		_, shape := fx.F32(t, "in.latents_normalized")
		rng := rand.New(rand.NewPCG(20260811, 0))
		for _, frames := range []int{3, 6, 12, 13} { // the cases of FastVideo's test_decode_matches_legacy_algorithm
			s := []int{1, shape[1], frames, shape[3], shape[4]}
			z := make([]float32, s[1]*frames*s[3]*s[4])
			for i := range z {
				z[i] = float32(rng.NormFloat64())
			}
			got, outShape := collect(t, d, z, s)
			want := legacyDecode(t, d, z, s)
			if len(want) != len(got) {
				t.Fatalf("T=%d: legacy decode has %d values, streamed %d (%v)", frames, len(want), len(got), outShape)
			}
			if diff := testutil.Compare(got, want); diff.MaxAbs != 0 {
				t.Errorf("T=%d: streamed differs from legacy by %g at %v", frames, diff.MaxAbs, testutil.Unravel(diff.Index, outShape[1:]))
			}
		}
	})
}

// legacyDecode ports FastVideo's _legacy_decode: decode all clips, concatenate kept runs and the
// final tail, then drop the padded frames at the end.
func legacyDecode(t *testing.T, d *Decoder, z []float32, shape []int) []float32 {
	c := d.cfg
	chunk, pt, pre := c.TokensChunkSize(), c.TemporalRatio(), c.FramePrePadding()
	chunkFrames := chunk * pt
	n := shape[2] + c.TokenDrop
	pad := mod(-n, chunk)
	chunks := (n+pad)/chunk - b2i(c.TokenDrop > 0)
	lat := latentView{data: z, c: shape[1], t: shape[2], h: shape[3], w: shape[4]}
	plane := shape[3] * shape[4] * c.SpatialRatio() * c.SpatialRatio()
	var runs [][]float32 // each [3][k][plane]
	var counts []int
	var overlap []float32
	nOverlap := 0
	take := func(clip []float32, nf, from, to int) []float32 {
		out := make([]float32, 3*(to-from)*plane)
		for ch := 0; ch < 3; ch++ {
			copy(out[ch*(to-from)*plane:], clip[(ch*nf+from)*plane:(ch*nf+to)*plane])
		}
		return out
	}
	for k := 0; k < chunks; k++ {
		clip := make([]float32, 3*c.ClipTokens()*pt*plane)
		nf, err := d.decodeClip(context.Background(), lat, k*chunk, clip)
		if err != nil {
			t.Fatal(err)
		}
		for oi := 0; oi <= b2i(c.TokenDrop > 0); oi++ {
			fs := oi * chunkFrames
			run := take(clip, nf, min(fs+pre, nf), min(fs+chunkFrames, nf))
			cnt := min(fs+chunkFrames, nf) - min(fs+pre, nf)
			if oi == 0 {
				if overlap != nil {
					blendFrames(overlap, nOverlap, run, cnt, plane, 3, c.FrameOverlap())
				}
				runs, counts = append(runs, run), append(counts, cnt)
			} else {
				overlap, nOverlap = run, cnt
			}
		}
	}
	if overlap != nil {
		runs, counts = append(runs, overlap), append(counts, nOverlap)
	}
	total := 0
	for _, k := range counts {
		total += k
	}
	if pad > 0 {
		tail := c.ClipLength % pt
		before := shape[2] // latent frames before padding
		for o := 0; o < pad; o++ {
			if tail != 0 && (before+o)%chunk == 0 {
				total -= tail
			} else {
				total -= pt
			}
		}
	}
	out := make([]float32, 3*total*plane)
	f := 0
	for i, run := range runs {
		for j := 0; j < counts[i] && f < total; j++ {
			for ch := 0; ch < 3; ch++ {
				copy(out[(ch*total+f)*plane:(ch*total+f+1)*plane], run[(ch*counts[i]+j)*plane:(ch*counts[i]+j+1)*plane])
			}
			f++
		}
	}
	return out
}

func TestQuantize(t *testing.T) {
	nan := float32(math.NaN())
	cases := []struct {
		in   float32
		want uint8
	}{
		{0, 0}, {1, 255}, {0.5, 127}, // 127.5 truncates (rounding would give 128)
		{1.0 / 255, 1}, {254.5 / 255, 254}, {math.Nextafter32(1, 0), 254},
		{-0.25, 0}, {-1e30, 0}, {1.5, 255}, {1e30, 255}, {float32(math.Inf(1)), 255}, {float32(math.Inf(-1)), 0},
		{nan, 0}, {0.999, 254}, {0.002, 0},
	}
	for _, c := range cases {
		if got := Quantize(c.in); got != c.want {
			t.Errorf("Quantize(%v) = %d, want %d", c.in, got, c.want)
		}
	}

	// Out-of-range samples clamp in pixel space before quantization; layout is HWC per frame.
	f := Frames{Count: 2, Height: 1, Width: 2, Sample: make([]float32, 3*2*2)}
	vals := [][3]float32{{-10, 0, 10}, {(1 - 0.485) / 0.229, (0.5 - 0.456) / 0.224, 0}, {nan, 3, -3}, {5, -5, (0.25 - 0.406) / 0.225}}
	for i, v := range vals {
		for c := 0; c < 3; c++ {
			f.Sample[c*4+i] = v[c]
		}
	}
	p := f.Pixels()
	for c := 0; c < 3; c++ {
		for i := 0; i < 4; i++ {
			if v := p[c*4+i]; !math.IsNaN(float64(v)) && (v < 0 || v > 1) {
				t.Errorf("pixel %d channel %d = %v outside [0, 1]", i, c, v)
			}
		}
	}
	if !math.IsNaN(float64(p[2])) {
		t.Errorf("NaN sample should stay NaN in Pixels (torch.clamp), got %v", p[2])
	}
	rgb := f.RGB24([]byte{9})
	want := []byte{9,
		0, 116, 255, // frame 0, pixel 0: clamped low, mean 0.456 (116.28 truncated), clamped high
		Quantize(p[1]), 127, 103, // pixel 1: ~1.0, ~0.5 (127.5 truncates to 127), mean 0.406
		0, 255, 0, // frame 1, pixel 0: NaN -> 0, clamped high, clamped low
		255, 0, 63, // pixel 1: clamped, clamped, 0.25 (63.75 truncated)
	}
	if !reflect.DeepEqual(rgb, want) || want[4] < 254 {
		t.Errorf("RGB24 = %v, want %v", rgb, want)
	}
}

func TestPlanAndTiles(t *testing.T) {
	c := DefaultConfig()
	if c.FramePrePadding() != 3 || c.TokensChunkSize() != 5 || c.TokenOverlap() != 2 || c.FrameOverlap() != 5 {
		t.Fatalf("derived constants %d %d %d %d", c.FramePrePadding(), c.TokensChunkSize(), c.TokenOverlap(), c.FrameOverlap())
	}
	for lat, frames := range map[int]int{2: 5, 7: 22, 22: 73, 37: 124, 42: 141, 72: 243, 107: 362} {
		p, err := c.Plan(lat)
		if err != nil || p.Frames != frames {
			t.Errorf("Plan(%d) = %+v, %v; want %d frames", lat, p, err, frames)
		}
	}
	if p, _ := c.Plan(37); p.Chunks != 7 || p.PadTokens != 0 {
		t.Errorf("Plan(37) = %+v, want 7 chunks without padding", p)
	}
	if _, err := c.Plan(0); err == nil {
		t.Error("Plan(0) should fail")
	}
	for _, tc := range []struct {
		length        int
		starts, overs []int
	}{
		{480, []int{0, 112, 224}, []int{144, 144}},
		{832, []int{0, 192, 384, 576}, []int{64, 64, 64}},
		{416, []int{0, 160}, []int{96}},
		{256, []int{0}, nil},
		{736, []int{0, 160, 320, 480}, []int{96, 96, 96}},
		{768, []int{0, 160, 336, 512}, []int{96, 80, 80}},
		{1280, []int{0, 160, 320, 496, 672, 848, 1024}, []int{96, 96, 80, 80, 80, 80}},
		{1344, []int{0, 176, 352, 528, 704, 896, 1088}, []int{80, 80, 80, 80, 64, 64}},
	} {
		got, err := SplitTiles(tc.length, 256, 64, 16)
		if err != nil || !reflect.DeepEqual(got.Starts, tc.starts) || len(got.Overlaps) != len(tc.overs) ||
			(len(tc.overs) > 0 && !reflect.DeepEqual(got.Overlaps, tc.overs)) {
			t.Errorf("SplitTiles(%d) = %+v, %v; want starts %v overlaps %v", tc.length, got, err, tc.starts, tc.overs)
		}
	}
}

func TestErrors(t *testing.T) {
	testutil.ForEachFixture(t, "h3_video_vae", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		be := testutil.Backend(t)
		if _, err := FromSource(be, cfg, fx.Weights(), Options{TileSize: 12}); err == nil {
			t.Error("a tile size that is not a multiple of the spatial ratio should fail")
		}
		if _, err := FromSource(be, cfg, fx.Weights(), Options{TileSize: 16, TileOverlap: 16}); err == nil {
			t.Error("an overlap as large as the tile should fail")
		}
		bad := cfg
		bad.DecoderNumLayers++
		if _, err := FromSource(be, bad, fx.Weights(), Options{}); err == nil {
			t.Error("a config with an extra layer should report missing weights")
		}
		d := openDecoder(t, fx, Options{})
		zn, shape := fx.F32(t, "in.latents_normalized")
		if err := d.Decode(context.Background(), zn[1:], shape, func(Frames) error { return nil }); err == nil {
			t.Error("a latent slice of the wrong length should fail")
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := d.Decode(ctx, zn, shape, func(Frames) error { return nil }); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled decode returned %v", err)
		}
		stop := errors.New("stop")
		if err := d.Decode(context.Background(), zn, shape, func(Frames) error { return stop }); !errors.Is(err, stop) {
			t.Errorf("emit error not returned: %v", err)
		}
		_ = d.Close()
		if err := d.Decode(context.Background(), zn, shape, func(Frames) error { return nil }); err == nil {
			t.Error("Decode after Close should fail")
		}
	})
}

func jsonOf(v any) ([]byte, error) { return json.Marshal(v) }

// TestNewRandom checks that a decoder with weights drawn on the backend decodes to finite values and
// is reproducible from its seed.
func TestNewRandom(t *testing.T) {
	testutil.ForEachFixture(t, "h3_video_vae", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		zn, shape := fx.F32(t, "in.latents_normalized")
		run := func(seed int64) []float32 {
			d, err := NewRandom(testutil.Backend(t), cfg, Options{}, seed)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			pix, _, err := d.DecodeToPixels(context.Background(), zn, shape)
			if err != nil {
				t.Fatal(err)
			}
			return pix
		}
		a, b, c := run(7), run(7), run(8)
		if !reflect.DeepEqual(a, b) {
			t.Error("same seed, different weights")
		}
		if reflect.DeepEqual(a, c) {
			t.Error("different seeds, same output")
		}
		for _, v := range a {
			if math.IsNaN(float64(v)) {
				t.Fatal("NaN in a random-weight decode")
			}
		}
	})
}

// TestBFloat16 runs the bf16 option (weights and matmul inputs in bf16, float32 elsewhere) against the
// float32 reference output, at the bound bfloat16's precision gives for the output's scale.
func TestBFloat16(t *testing.T) {
	testutil.ForEachFixture(t, "h3_video_vae", func(t *testing.T, fx *testutil.Fixture) {
		d := openDecoder(t, fx, Options{DType: dtypes.BFloat16})
		_, z, shape := fixtureLatents(t, fx, d.cfg)
		got, outShape := collect(t, d, z, shape)
		want, _ := fx.F32(t, "out.decode_sample")
		testutil.AssertAtDType(t, "decode_sample", dtypes.BFloat16, got, want, outShape)
	})
}

// TestLoadFolder writes the fixture as a released vae/ folder (config.json with the arch fields at
// the top level, weights under diffusers names, encoder included) and decodes through Load.
func TestLoadFolder(t *testing.T) {
	testutil.ForEachFixture(t, "h3_video_vae", func(t *testing.T, fx *testutil.Fixture) {
		dir := t.TempDir()
		arch, ok := fx.Config["arch_config"]
		if !ok {
			t.Skip("fixture has no arch_config")
		}
		raw, err := json.Marshal(arch)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		src := fx.Weights()
		var ts []safetensors.Tensor
		for _, n := range src.Names() {
			info, _ := src.Tensor(n)
			ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: info.Data})
		}
		if err := safetensors.WriteFile(filepath.Join(dir, "diffusion_pytorch_model.safetensors"), ts, nil); err != nil {
			t.Fatal(err)
		}
		d, err := Load(testutil.Backend(t), dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		zn, shape := fx.F32(t, "in.latents_normalized")
		pix, pshape, err := d.DecodeToPixels(context.Background(), zn, shape)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := fx.F32(t, "out.decode_to_pixels")
		testutil.AssertClose(t, "Load: decode_to_pixels", pix, want, pshape, testutil.ParityTol(want))

		if _, err := Load(testutil.Backend(t), t.TempDir(), Options{}); err == nil {
			t.Error("Load of an empty folder should fail")
		}
	})
}

// TestEncoderParity compares the encoder (FL2VA/Ref2VA conditioning) with the fixture's encode_pixels,
// normalize_latents and encode_keyframe outputs and the first clip's intermediates.
func TestEncoderParity(t *testing.T) {
	testutil.ForEachFixture(t, "h3_video_vae", func(t *testing.T, fx *testutil.Fixture) {
		if !fx.Has("out.encode_mean") {
			t.Skip("fixture has no encoder outputs")
		}
		cfg := fixtureConfig(t, fx)
		e, err := EncoderFromSource(testutil.Backend(t), cfg, fx.Weights(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		pix, shape := fx.F32(t, "in.pixels")
		ctx := context.Background()

		if fx.Has("act.encode_clip0.encoder_out") {
			nt, hh, ww := cfg.ClipLength, shape[3], shape[4]
			plane := hh * ww
			clip := make([]float32, 3*nt*plane)
			for c := 0; c < 3; c++ {
				for f := 0; f < nt; f++ {
					src := pix[(c*shape[2]+min(f, shape[2]-1))*plane:][:plane]
					for i, v := range src {
						clip[(c*nt+f)*plane+i] = (v - PixelMean[c]) / PixelStd[c]
					}
				}
			}
			th, tw, _, _ := tileGeometry(cfg, Options{})
			if hh <= th && ww <= tw {
				acts := map[string][]float32{}
				if _, _, err := e.encodeClip(ctx, clip, nt, hh, ww, func(name string, v *tensors.Tensor) {
					acts[name] = tensors.MustCopyFlatData[float32](v)
				}); err != nil {
					t.Fatal(err)
				}
				for _, n := range []string{"encoder_conv_in", "encoder_out"} {
					want, ws := fx.F32(t, "act.encode_clip0."+n)
					testutil.AssertClose(t, "act.encode_clip0."+n, acts[n], want, ws, testutil.ParityTol(want))
				}
			}
		}

		post, err := e.EncodePixels(ctx, pix, shape)
		if err != nil {
			t.Fatal(err)
		}
		want, ws := fx.F32(t, "out.encode_mean")
		if !reflect.DeepEqual(post.Shape, ws) {
			t.Fatalf("posterior shape %v, want %v", post.Shape, ws)
		}
		testutil.AssertClose(t, "encode_mean", post.Mean, want, ws, testutil.ParityTol(want))
		want, ws = fx.F32(t, "out.encode_logvar")
		testutil.AssertClose(t, "encode_logvar", post.LogVar, want, ws, testutil.ParityTol(want))
		norm, err := cfg.NormalizeLatents(post.Mean, post.Shape)
		if err != nil {
			t.Fatal(err)
		}
		want, ws = fx.F32(t, "out.encode_mode_normalized")
		testutil.AssertClose(t, "encode_mode_normalized", norm, want, ws, testutil.ParityTol(want))

		if fx.Has("out.encode_keyframe_mean") {
			plane := shape[3] * shape[4]
			frame := make([]float32, 3*plane)
			for c := 0; c < 3; c++ {
				copy(frame[c*plane:(c+1)*plane], pix[c*shape[2]*plane:])
			}
			kp, err := e.EncodeKeyframe(ctx, frame, []int{1, 3, 1, shape[3], shape[4]})
			if err != nil {
				t.Fatal(err)
			}
			want, ws = fx.F32(t, "out.encode_keyframe_mean")
			testutil.AssertClose(t, "encode_keyframe_mean", kp.Mean, want, ws, testutil.ParityTol(want))
		}
	})
}

// TestStream checks the iterator form: same frames as DecodeToPixels, and an early break stops.
func TestStream(t *testing.T) {
	testutil.ForEachFixture(t, "h3_video_vae", func(t *testing.T, fx *testutil.Fixture) {
		d := openDecoder(t, fx, Options{})
		zn, shape := fx.F32(t, "in.latents_normalized")
		want, wshape := fx.F32(t, "out.decode_to_pixels")
		nf, plane := wshape[2], wshape[3]*wshape[4]
		got := make([]float32, len(want))
		n := 0
		for f, err := range d.Stream(context.Background(), zn, shape) {
			if err != nil {
				t.Fatal(err)
			}
			p := f.Pixels()
			for c := 0; c < 3; c++ {
				copy(got[(c*nf+f.Start)*plane:], p[c*f.Count*plane:(c+1)*f.Count*plane])
			}
			n += f.Count
		}
		if n != nf {
			t.Fatalf("stream gave %d frames, want %d", n, nf)
		}
		testutil.AssertClose(t, "Stream pixels", got, want, wshape, testutil.ParityTol(want))
		for _, err := range d.Stream(context.Background(), zn, shape) {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	})
}
