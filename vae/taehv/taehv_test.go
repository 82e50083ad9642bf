package taehv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/x448/float16"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

// fixtureConfig is the "config" object gen_taehv.py writes.
type fixtureConfig struct {
	LatentChannels     int    `json:"latent_channels"`
	PatchSize          int    `json:"patch_size"`
	H3Trim             bool   `json:"h3_trim"`
	DecoderTimeUpscale []bool `json:"decoder_time_upscale"`
}

func (fc fixtureConfig) config(t *testing.T) Config {
	t.Helper()
	cfg := Config{LatentChannels: fc.LatentChannels, PatchSize: fc.PatchSize, H3Trim: fc.H3Trim}
	switch {
	case slices.Equal(fc.DecoderTimeUpscale, []bool{false, true, true}):
	case slices.Equal(fc.DecoderTimeUpscale, []bool{false, false, false}):
		cfg.NoTimeUpscale = true
	default:
		t.Fatalf("decoder_time_upscale %v: only upstream's default and (False, False) are supported", fc.DecoderTimeUpscale)
	}
	return cfg
}

// toChannelMajor turns NTCHW latents [1, T, C, h, w] into [C, T, h, w].
func toChannelMajor(v []float32, shape []int) ([]float32, []int) {
	tt, c, plane := shape[1], shape[2], shape[3]*shape[4]
	out := make([]float32, len(v))
	for t := range tt {
		for ch := range c {
			copy(out[(ch*tt+t)*plane:(ch*tt+t+1)*plane], v[(t*c+ch)*plane:(t*c+ch+1)*plane])
		}
	}
	return out, []int{c, tt, shape[3], shape[4]}
}

// framesNTCHW turns a [3][F][H][W] video into upstream's [1, F, 3, H, W].
func framesNTCHW(v []float32, f, plane int) []float32 {
	out := make([]float32, len(v))
	for c := range 3 {
		for i := range f {
			copy(out[(i*3+c)*plane:(i*3+c+1)*plane], v[(c*f+i)*plane:(c*f+i+1)*plane])
		}
	}
	return out
}

// decodeAll runs a stream over latents [C, T, h, w] in chunks of chunk frames (total announced or
// not) and returns the frames [3][F][H][W] with the activations of the first chunk.
func decodeAll(t *testing.T, d *Decoder, z []float32, shape []int, chunk int, announce bool) ([]float32, int, map[string][]float32) {
	t.Helper()
	total := shape[1]
	s := d.NewStream(map[bool]int{true: total, false: 0}[announce])
	defer s.Close()
	acts := map[string][]float32{}
	s.taps = func(layer int, _ []int, vals []float32) {
		name := fmt.Sprintf("act.decoder.%d", layer)
		if _, ok := acts[name]; !ok {
			acts[name] = vals
		}
	}
	var runs []Frames
	n := 0
	collect := func(f Frames) error {
		if f.Start != n {
			return fmt.Errorf("frames start at %d, want %d", f.Start, n)
		}
		runs = append(runs, f)
		n += f.Count
		return nil
	}
	for t0 := 0; t0 < total; t0 += chunk {
		part, pshape := sliceLatents(z, shape, t0, min(chunk, total-t0))
		if err := s.Push(context.Background(), part, pshape, collect); err != nil {
			t.Fatal(err)
		}
		s.taps = nil
	}
	if err := s.Finish(collect); err != nil {
		t.Fatal(err)
	}
	var video []float32
	for c := range 3 { // runs are [3][count][H][W] each: gather channel c of every run
		for _, f := range runs {
			k := len(f.Sample) / 3
			video = append(video, f.Sample[c*k:(c+1)*k]...)
		}
	}
	return video, n, acts
}

// f16Bytes encodes values as little-endian IEEE half floats.
func f16Bytes(v []float32) []byte {
	out := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(out[2*i:], float16.Fromfloat32(x).Bits())
	}
	return out
}

// openFixture is a decoder of the fixture's layout with the formula weights its generator used, closed
// when the test ends.
func openFixture(t *testing.T, b compute.Backend, fx *testutil.Fixture, opts Options) (*Decoder, Config) {
	t.Helper()
	var fc fixtureConfig
	if err := fx.DecodeConfig(&fc, "config"); err != nil {
		t.Fatal(err)
	}
	cfg := fc.config(t)
	return testutil.Open(t, func() (*Decoder, error) { return FromSource(b, cfg, FormulaSource(cfg), opts) }), cfg
}

func TestDecoderParity(t *testing.T) {
	backend := testutil.Backend(t)
	testutil.ForEachFixture(t, "taehv", func(t *testing.T, fx *testutil.Fixture) {
		d, cfg := openFixture(t, backend, fx, Options{})
		lat, lshape := fx.F32(t, "in.latents")
		z, zshape := toChannelMajor(lat, lshape)
		want, wshape := fx.F32(t, "out.frames")
		if n := cfg.NumFrames(zshape[1]); n != wshape[1] {
			t.Fatalf("NumFrames(%d) = %d, upstream decoded %d", zshape[1], n, wshape[1])
		}
		start := time.Now()
		got, n, acts := decodeAll(t, d, z, zshape, zshape[1], true)
		t.Logf("decoded %v -> %d frames in %v", zshape, n, time.Since(start))
		plane := wshape[3] * wshape[4]
		testutil.AssertClose(t, "out.frames", framesNTCHW(got, n, plane), want, wshape, testutil.ParityTol(want))
		for _, name := range fx.Names("act.") {
			ref, shape := fx.F32(t, name)
			testutil.AssertClose(t, name, acts[name], ref, shape, testutil.ParityTol(ref))
		}
		var seq struct {
			Diff *float64 `json:"sequential_max_abs_diff"`
		}
		if err := fx.DecodeConfig(&seq); err == nil && seq.Diff != nil && *seq.Diff > 1e-5 {
			t.Errorf("upstream's sequential and parallel decodes differ by %g", *seq.Diff)
		}
		checkChunked(t, d, z, zshape, got)
		checkPicked(t, d, z, zshape, got, n, plane)
		checkRGB24(t, d, z, zshape, got, n, plane)
	})
}

// checkRGB24 wants DecodeRGB24's bytes to be the one-shot frames quantized on the host (Quantize),
// interleaved frame by frame.
func checkRGB24(t *testing.T, d *Decoder, z []float32, zshape []int, oneShot []float32, n, plane int) {
	t.Helper()
	if zshape[1] > 10 {
		return
	}
	var got []byte
	frames := 0
	err := d.DecodeRGB24(context.Background(), z, zshape, func(f RGBFrames) error {
		if f.Start != frames || len(f.RGB) != 3*f.Count*f.Height*f.Width || f.Height*f.Width != plane {
			return fmt.Errorf("run at %d: start %d, %d frames %dx%d, %d bytes", frames, f.Start, f.Count, f.Width, f.Height, len(f.RGB))
		}
		frames += f.Count
		got = append(got, f.RGB...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 0, 3*n*plane)
	for f := range n {
		for p := range plane {
			for c := range 3 {
				want = append(want, Quantize(oneShot[(c*n+f)*plane+p]))
			}
		}
	}
	if frames != n || !bytes.Equal(got, want) {
		diff := 0
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				diff++
			}
		}
		t.Errorf("DecodeRGB24: %d frames (want %d), %d of %d bytes differ from the quantized decode", frames, n, diff, len(want))
	}
}

// checkPicked wants DecodeFrames' frames (last, first, middle: the order given, not the video's) to be
// the one-shot decode's, and an out-of-range pick refused.
func checkPicked(t *testing.T, d *Decoder, z []float32, zshape []int, oneShot []float32, n, plane int) {
	t.Helper()
	if zshape[1] > 10 {
		return
	}
	picks := []int{n - 1, 0, n / 2}
	got, shape, err := d.DecodeFrames(context.Background(), z, zshape, picks)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 3, len(picks), shape[3], shape[4]}; !slices.Equal(shape, want) || shape[3]*shape[4] != plane {
		t.Fatalf("DecodeFrames shape %v, want [1 3 %d H W] with H·W = %d", shape, len(picks), plane)
	}
	want := make([]float32, 0, len(got))
	for c := range 3 {
		for _, p := range picks {
			want = append(want, oneShot[(c*n+p)*plane:(c*n+p+1)*plane]...)
		}
	}
	if dd := testutil.Compare(got, want); len(got) != len(want) || dd.MaxAbs != 0 {
		t.Errorf("DecodeFrames%v: %d values, max abs diff %g from the one-shot decode's frames", picks, len(got), dd.MaxAbs)
	}
	if _, _, err := d.DecodeFrames(context.Background(), z, zshape, []int{n}); err == nil {
		t.Errorf("DecodeFrames of frame %d of %d must be refused", n, n)
	}
}

// checkChunked decodes again in chunks of 2 latents, as an open-ended stream where the trim needs no
// end adjustment (Wan; H3 with 5k+2 latents), else announced, and wants the one-shot frames.
func checkChunked(t *testing.T, d *Decoder, z []float32, zshape []int, oneShot []float32) {
	t.Helper()
	total := zshape[1]
	if total < 3 || total > 10 { // the longer fixtures would double the package's runtime
		return
	}
	chunk := 2
	open := !d.cfg.H3Trim || total%5 == 2
	got, _, _ := decodeAll(t, d, z, zshape, chunk, !open)
	d0 := testutil.Compare(got, oneShot)
	if len(got) != len(oneShot) || d0.MaxAbs > 1e-5 {
		t.Errorf("chunks of %d (announced %v): %d values, max abs diff %g from the one-shot decode (%d values)",
			chunk, !open, len(got), d0.MaxAbs, len(oneShot))
	} else {
		t.Logf("chunks of %d (announced %v) match the one-shot decode (max abs diff %g)", chunk, !open, d0.MaxAbs)
	}
}

func TestNumFrames(t *testing.T) {
	cases := []struct {
		cfg  Config
		t, n int
	}{
		{Taew21(), 1, 1}, {Taew21(), 21, 81}, {Taew21(), 31, 121}, {Taew22(), 2, 5},
		{Taeh3(), 2, 5}, {Taeh3(), 7, 22}, {Taeh3(), 37, 124}, {Taeh3(), 1, 5}, {Taeh3(), 5, 5},
		{Config{LatentChannels: 16, PatchSize: 1, NoTimeUpscale: true}, 7, 7},
		{Config{LatentChannels: 24, PatchSize: 2, H3Trim: true, NoTimeUpscale: true}, 7, 7},
	}
	for _, c := range cases {
		if got := c.cfg.NumFrames(c.t); got != c.n {
			t.Errorf("%+v NumFrames(%d) = %d, want %d", c.cfg, c.t, got, c.n)
		}
	}
}

// TestDecodeH3Padding checks H3's end rule where it keeps upstream's zero padding (T = 1: 4 raw
// frames, 5 kept) through the public Decode, and that ChunkLatents does not change the frames.
func TestDecodeH3Padding(t *testing.T) {
	backend := testutil.Backend(t)
	cfg := Config{LatentChannels: 24, PatchSize: 2, H3Trim: true, NoTimeUpscale: true}
	z := make([]float32, 24*3)
	for i := range z {
		z[i] = float32(math.Sin(float64(i)))
	}
	var videos [][]float32
	for _, chunk := range []int{0, 1} {
		d, err := FromSource(backend, cfg, FormulaSource(cfg), Options{ChunkLatents: chunk})
		if err != nil {
			t.Fatal(err)
		}
		video, shape, err := d.DecodeToPixels(context.Background(), z, []int{1, 24, 3, 1, 1})
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
		// u = 1: raw frames 0..2, padded to 5, upstream keeps 5 and drops the last 3: frames 0, 1.
		if !slices.Equal(shape, []int{1, 3, 2, 16, 16}) {
			t.Fatalf("shape %v", shape)
		}
		videos = append(videos, video)
	}
	if d := testutil.Compare(videos[1], videos[0]); d.MaxAbs > 1e-5 {
		t.Errorf("ChunkLatents=1 differs from the one-shot decode by %g", d.MaxAbs)
	}
	cfg.NoTimeUpscale = false
	d, err := FromSource(backend, cfg, FormulaSource(cfg), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	video, shape, err := d.DecodeToPixels(context.Background(), z[:24], []int{24, 1, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(shape, []int{1, 3, 5, 16, 16}) {
		t.Fatalf("shape %v, want 5 frames", shape)
	}
	plane := 16 * 16
	for c := range 3 { // kept raw frames 3 (real), then 4..7 (upstream's zero padding)
		for i := 1; i < 5; i++ {
			for _, v := range video[(c*5+i)*plane : (c*5+i+1)*plane] {
				if v != 0 {
					t.Fatalf("frame %d channel %d: %g, want the zero padding", i, c, v)
				}
			}
		}
	}
	// The RGB24 decode gives the same frames, the padding's included, quantized.
	var rgb []byte
	err = d.DecodeRGB24(context.Background(), z[:24], []int{24, 1, 1, 1}, func(f RGBFrames) error {
		rgb = append(rgb, f.RGB...)
		return nil
	})
	if err != nil || len(rgb) != 3*5*plane {
		t.Fatalf("DecodeRGB24: %d bytes, %v", len(rgb), err)
	}
	for f := range 5 {
		for p := range plane {
			for c := range 3 {
				if got, want := rgb[(f*plane+p)*3+c], Quantize(video[(c*5+f)*plane+p]); got != want {
					t.Fatalf("DecodeRGB24 frame %d pixel %d channel %d: %d, want %d", f, p, c, got, want)
				}
			}
		}
	}
	// A pick in the padding (frame 3) and the real frame 0, in that order.
	picked, _, err := d.DecodeFrames(context.Background(), z[:24], []int{24, 1, 1, 1}, []int{3, 0})
	if err != nil {
		t.Fatal(err)
	}
	for c := range 3 {
		got, want := picked[(c*2)*plane:(c*2+2)*plane], append(slices.Clone(video[(c*5+3)*plane:(c*5+4)*plane]), video[c*5*plane:(c*5+1)*plane]...)
		if !slices.Equal(got, want) {
			t.Fatalf("DecodeFrames([3 0]) channel %d differs from the decode's frames 3 and 0", c)
		}
	}
}

func TestCheckpointErrors(t *testing.T) {
	wan21 := Taew21()
	src := FormulaSource(wan21)
	if got, err := DetectConfig(src); err != nil || got != wan21 {
		t.Fatalf("DetectConfig(taew2_1 layout) = %+v, %v", got, err)
	}
	if got, err := DetectConfig(FormulaSource(Taew22())); err != nil || got != Taew22() {
		t.Fatalf("DetectConfig(taew2_2 layout) = %+v, %v", got, err)
	}
	h3 := Taeh3()
	h3.H3Trim = false
	if got, err := DetectConfig(FormulaSource(Taeh3())); err != nil || got != h3 {
		t.Fatalf("DetectConfig(taeh3 layout) = %+v, %v", got, err)
	}
	noTime := wan21
	noTime.NoTimeUpscale = true
	if err := CheckSource(src, noTime); err != nil {
		t.Errorf("a time-upscaled checkpoint must load without time upscaling: %v", err)
	}
	cases := []struct {
		name   string
		cfg    Config
		edit   func(map[string]safetensors.Info)
		wanted []string
	}{
		{"wrong latent channels", Taew22(), nil, []string{"decoder.1.weight", "[256 16 3 3]", "[256 48 3 3]", "latent channels 48"}},
		{"missing key", wan21, func(m map[string]safetensors.Info) { delete(m, "decoder.10.conv.2.bias") },
			[]string{"no decoder.10.conv.2.bias", "[128]"}},
		{"wrong shape", wan21, func(m map[string]safetensors.Info) {
			i := m["decoder.15.conv.0.weight"]
			i.Shape = []int{64, 64, 3, 3, 2}
			m["decoder.15.conv.0.weight"] = i
		}, []string{"decoder.15.conv.0.weight", "[64 64 3 3 2]", "[64 128 3 3]"}},
		{"TGrow with too few rows", wan21, func(m map[string]safetensors.Info) {
			i := m["decoder.19.conv.weight"]
			i.Shape, i.Data = []int{64, 64, 1, 1}, i.Data[:64*64*4]
			m["decoder.19.conv.weight"] = i
		}, []string{"decoder.19.conv.weight", "[64 64 1 1]", "[128 64 1 1]"}},
	}
	for _, c := range cases {
		m := FormulaSource(wan21)
		if c.edit != nil {
			c.edit(m)
		}
		_, err := FromSource(testutil.Backend(t), c.cfg, m, Options{})
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.wanted {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", c.name, err, w)
			}
		}
	}
	noEnc := FormulaSource(wan21)
	delete(noEnc, "encoder.9.conv.4.weight")
	if _, err := FromSource(testutil.Backend(t), wan21, noEnc, Options{}); err != nil {
		t.Errorf("a file without encoder tensors must load without Options.Encoder: %v", err)
	}
	if _, err := FromSource(testutil.Backend(t), wan21, noEnc, Options{Encoder: true}); err == nil ||
		!strings.Contains(err.Error(), "no encoder.9.conv.4.weight (want shape [64 64 3 3])") {
		t.Errorf("missing encoder tensor: %v", err)
	}
	if _, err := DetectConfig(weights.MapSource{}); err == nil || !strings.Contains(err.Error(), "decoder.1.weight") {
		t.Errorf("DetectConfig on an empty source: %v", err)
	}
}

// TestLoadFile loads a formula checkpoint written as fp16 safetensors under a taeh3 name, with the
// encoder keys a released file has (ignored without Options.Encoder, bound with it).
func TestLoadFile(t *testing.T) {
	src := FormulaSource(Taeh3())
	var ts []safetensors.Tensor
	for name, info := range src {
		vals, err := info.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: safetensors.F16, Shape: info.Shape, Data: f16Bytes(vals)})
	}
	path := filepath.Join(t.TempDir(), "taeh3.safetensors")
	if err := safetensors.WriteFile(path, ts, nil); err != nil {
		t.Fatal(err)
	}
	d, err := Load(testutil.Backend(t), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Config() != Taeh3() {
		t.Errorf("Load detected %+v, want %+v", d.Config(), Taeh3())
	}
	if _, _, err := d.Encode(context.Background(), make([]float32, 3*16*16), []int{3, 1, 16, 16}); err == nil {
		t.Error("Encode without Options.Encoder: no error")
	}
	de, err := Load(testutil.Backend(t), path, Options{Encoder: true})
	if err != nil {
		t.Fatal(err)
	}
	defer de.Close()
	bad := filepath.Join(t.TempDir(), "taew2_1.safetensors")
	if err := os.WriteFile(bad, []byte("not a safetensors file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(testutil.Backend(t), bad, Options{}); err == nil {
		t.Error("Load of a broken file: no error")
	}
}

func TestNewRandom(t *testing.T) {
	cfg := Config{LatentChannels: 4, PatchSize: 1, NoTimeUpscale: true}
	d, err := NewRandom(testutil.Backend(t), cfg, Options{Encoder: true}, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	video, shape, err := d.DecodeToPixels(context.Background(), make([]float32, 4*2), []int{4, 2, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(shape, []int{1, 3, 2, 8, 8}) || len(video) != 3*2*64 {
		t.Fatalf("shape %v, %d values", shape, len(video))
	}
	for _, v := range video {
		if !(v >= 0 && v <= 1) {
			t.Fatalf("pixel %g outside [0, 1]", v)
		}
	}
	lat, lshape, err := d.Encode(context.Background(), video, shape)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(lshape, []int{1, 4, 1, 1, 1}) || len(lat) != 4 {
		t.Errorf("Encode of 2 frames: shape %v, %d values", lshape, len(lat))
	}
}

// swap01 transposes [a][b][plane] into [b][a][plane].
func swap01(v []float32, a, b, plane int) []float32 {
	out := make([]float32, len(v))
	for i := range a {
		for j := range b {
			copy(out[(j*a+i)*plane:(j*a+i+1)*plane], v[(i*b+j)*plane:(i*b+j+1)*plane])
		}
	}
	return out
}

func TestEncoderParity(t *testing.T) {
	backend := testutil.Backend(t)
	testutil.ForEachFixture(t, "taehv_encoder", func(t *testing.T, fx *testutil.Fixture) {
		d, _ := openFixture(t, backend, fx, Options{Encoder: true})
		frames, fshape := fx.F32(t, "in.frames") // [1, F, 3, H, W]
		plane := fshape[3] * fshape[4]
		x := swap01(frames, fshape[1], 3, plane)
		want, wshape := fx.F32(t, "out.latents") // [1, T, C, h, w]
		got, gshape, err := d.Encode(context.Background(), x, []int{1, 3, fshape[1], fshape[3], fshape[4]})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(gshape, []int{1, wshape[2], wshape[1], wshape[3], wshape[4]}) {
			t.Fatalf("latent shape %v, upstream %v (NTCHW)", gshape, wshape)
		}
		testutil.AssertClose(t, "out.latents", swap01(got, gshape[1], gshape[2], gshape[3]*gshape[4]), want, wshape, testutil.ParityTol(want))
	})
}

// TestHalfDType runs the decoder and encoder in bfloat16 (the GPU choice) and wants the float32
// frames within bfloat16 rounding.
func TestHalfDType(t *testing.T) {
	cfg := Taew21()
	cfg.NoTimeUpscale = true
	z := make([]float32, 16*2)
	for i := range z {
		z[i] = float32(math.Cos(float64(3 * i)))
	}
	var videos [][]float32
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
		d, err := FromSource(testutil.Backend(t), cfg, FormulaSource(cfg), Options{DType: dt, Encoder: true})
		if err != nil {
			t.Fatal(err)
		}
		video, shape, err := d.DecodeToPixels(context.Background(), z, []int{16, 2, 1, 1})
		if err == nil {
			_, _, err = d.Encode(context.Background(), video, shape)
		}
		d.Close()
		if err != nil {
			t.Fatalf("%s: %v", dt, err)
		}
		videos = append(videos, video)
	}
	if d := testutil.Compare(videos[1], videos[0]); d.MaxAbs > 0.03 {
		t.Errorf("bfloat16 frames differ from float32 by %g", d.MaxAbs)
	} else {
		t.Logf("bfloat16 frames within %g of float32", d.MaxAbs)
	}
}

func TestPipelineChunk(t *testing.T) {
	wan, h3 := Taew21(), Taeh3()
	h3.H3Trim = true
	frame := 3 * 480 * 832
	cases := []struct {
		cfg               Config
		t, frameBytes, is int
	}{
		{wan, 21, frame, 6},     // 97 MiB of rgb24: quarters
		{wan, 21, 4 * frame, 6}, // float32
		{wan, 2, frame, 2},      // small: one run
		{h3, 37, frame, 10},     // quarters rounded up to whole trim periods
		{h3, 7, frame, 7},       // 22 frames, 26 MB: one run
		{wan, 21, 3 * 64 * 64, 21},
	}
	for _, c := range cases {
		if got := c.cfg.pipelineChunk(c.t, c.frameBytes); got != c.is {
			t.Errorf("pipelineChunk(%d latents, %d-byte frames) H3 %v = %d, want %d", c.t, c.frameBytes, c.cfg.H3Trim, got, c.is)
		}
	}
}

// An error from emit stops a chunked decode and is returned; the runs decoded ahead are freed.
func TestDecodeStopsOnEmitError(t *testing.T) {
	cfg := Taew21()
	d, err := FromSource(testutil.Backend(t), cfg, FormulaSource(cfg), Options{ChunkLatents: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	stop := errors.New("stop")
	calls := 0
	err = d.Decode(context.Background(), make([]float32, 16*5*2*2), []int{16, 5, 2, 2}, func(Frames) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("Decode: %v after %d emits, want the emit's error after one", err, calls)
	}
}
