package qwen3vl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/internal/blockfp8"
	"fastvideo/internal/hostmath"
	"fastvideo/internal/minifloat"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

// fp8Config is the smallest geometry whose every linear is a whole number of 128x128 blocks, with
// grouped-query attention.
func fp8Config() Config {
	return Config{VocabSize: 64, HiddenSize: 128, IntermediateSize: 256, NumHiddenLayers: 2, NumHeads: 8, NumKVHeads: 4,
		HeadDim: 32, RMSNormEps: 1e-6, RopeTheta: 5e6, MRoPESection: [3]int{6, 5, 5}, MRoPEInterleaved: true}
}

// quantizeBlockFP8 transcribes upstream's block quantizer, _h3_per_token_group_quant_fp8_row_major
// (fastvideo/models/encoders/minimax_h3_checkpoint_fp8.py), applied to each 128x128 weight block as
// the serialized checkpoint stores them: absmax = max(max|v|, 1e-10), scale = absmax / 448,
// q = clamp(v / scale, -448, 448) cast to float8_e4m3fn; the scale is weight_scale_inv.
func quantizeBlockFP8(w []float32, rows, cols int) ([]byte, []float32) {
	const block = 128
	codes := make([]byte, len(w))
	scales := make([]float32, rows/block*cols/block)
	for br := 0; br < rows/block; br++ {
		for bc := 0; bc < cols/block; bc++ {
			absmax := float32(1e-10)
			for r := br * block; r < (br+1)*block; r++ {
				for c := bc * block; c < (bc+1)*block; c++ {
					absmax = max(absmax, float32(math.Abs(float64(w[r*cols+c]))))
				}
			}
			scale := absmax / minifloat.E4M3FNMax
			scales[br*cols/block+bc] = scale
			for r := br * block; r < (br+1)*block; r++ {
				for c := bc * block; c < (bc+1)*block; c++ {
					v := min(max(w[r*cols+c]/scale, -minifloat.E4M3FNMax), minifloat.E4M3FNMax)
					codes[r*cols+c] = minifloat.EncodeE4M3FN(v)
				}
			}
		}
	}
	return codes, scales
}

// fp8Checkpoint is a random tiny text decoder, dense (float32) and block-FP8 serialized.
type fp8Checkpoint struct {
	dense, fp8 weights.MapSource
}

func f32Info(name string, shape []int, v []float32) safetensors.Info {
	return safetensors.Info{Name: name, DType: safetensors.F32, Shape: shape, Data: safetensors.F32Bytes(v)}
}

func newFP8Checkpoint(cfg Config, seed uint64) fp8Checkpoint {
	r := rand.New(rand.NewPCG(seed, 1))
	draw := func(shape []int, mean, std float64) []float32 {
		v := make([]float32, shape[0]*max(1, shapeCols(shape)))
		for i := range v {
			v[i] = float32(mean + std*r.NormFloat64())
		}
		return v
	}
	ck := fp8Checkpoint{dense: weights.MapSource{}, fp8: weights.MapSource{}}
	add := func(name string, shape []int, v []float32, quantize bool) {
		ck.dense[name] = f32Info(name, shape, v)
		if !quantize {
			ck.fp8[name] = ck.dense[name]
			return
		}
		codes, scales := quantizeBlockFP8(v, shape[0], shape[1])
		ck.fp8[name] = safetensors.Info{Name: name, DType: safetensors.F8E4M3, Shape: shape, Data: codes}
		sn := name + blockfp8.ScaleSuffix
		ck.fp8[sn] = f32Info(sn, []int{shape[0] / 128, shape[1] / 128}, scales)
	}
	add(DefaultPrefix+"embed_tokens.weight", []int{cfg.VocabSize, cfg.HiddenSize}, draw([]int{cfg.VocabSize, cfg.HiddenSize}, 0, 1), false)
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		for k, n := range LayerTensorNames {
			shape := LayerTensorShapes(cfg)[k]
			name := fmt.Sprintf("%slayers.%d.%s", DefaultPrefix, i, n)
			if len(shape) == 1 {
				add(name, shape, draw(shape, 1, 0.1), false)
				continue
			}
			add(name, shape, draw(shape, 0, 1/math.Sqrt(float64(shape[1]))), true)
		}
	}
	add(DefaultPrefix+"norm.weight", []int{cfg.HiddenSize}, draw([]int{cfg.HiddenSize}, 1, 0.1), false)
	// Upstream leaves the vision tower dense (modules_to_not_convert lists model.visual).
	ck.fp8["model.visual.patch_embed.proj.weight"] = f32Info("model.visual.patch_embed.proj.weight", []int{2, 2}, make([]float32, 4))
	return ck
}

func shapeCols(shape []int) int {
	if len(shape) < 2 {
		return 0
	}
	return shape[1]
}

// fp8QuantizationConfig is upstream's test contract (_checkpoint_quantization_config in
// fastvideo/tests/encoders/test_minimax_h3_qwen3_vl_checkpoint_fp8.py) with overrides.
func fp8QuantizationConfig(overrides map[string]any) map[string]any {
	c := map[string]any{"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
		"weight_block_size": []int{128, 128}, "modules_to_not_convert": []string{"model.visual", "lm_head"}}
	for k, v := range overrides {
		c[k] = v
	}
	return c
}

// writeFP8Folder writes src as a released text-encoder folder: config.json with the text config
// nested and the quantization_config at the top, as HF writes it.
func writeFP8Folder(t *testing.T, cfg Config, src weights.MapSource, quantization map[string]any) string {
	t.Helper()
	dir := t.TempDir()
	var ts []safetensors.Tensor
	for _, n := range src.Names() {
		info := src[n]
		ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: info.Data})
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	text, _ := json.Marshal(cfg)
	var textMap map[string]any
	_ = json.Unmarshal(text, &textMap)
	config, _ := json.Marshal(map[string]any{"architectures": []string{"Qwen3VLForConditionalGeneration"},
		"text_config": textMap, "quantization_config": quantization})
	if err := os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

var fp8PromptIDs = []int{3, 17, 42, 9, 63, 0, 28}

func encodeWith(t *testing.T, build func() (*Encoder, error)) []float32 {
	t.Helper()
	enc := testutil.Open(t, build)
	h, _, err := enc.Encode(context.Background(), fp8PromptIDs)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestBlockFP8Checkpoint loads a block-FP8 folder: each weight binds as the reference
// dequantization decode(q)·scale bit for bit (so the encoder equals the f32 encoder over the
// dequantized weights bit for bit, streamed and resident), and the hidden state stays within the
// FP8 rounding of the dense model's.
func TestBlockFP8Checkpoint(t *testing.T) {
	cfg := fp8Config()
	ck := newFP8Checkpoint(cfg, 7)
	dir := writeFP8Folder(t, cfg, ck.fp8, fp8QuantizationConfig(nil))
	loaded, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.BlockFP8 != blockfp8.H3Block {
		t.Fatalf("config.json's quantization_config read as %+v", loaded.BlockFP8)
	}
	reference := weights.MapSource{}
	for _, n := range ck.dense.Names() {
		reference[n] = ck.dense[n]
		scale, quantized := ck.fp8[n+blockfp8.ScaleSuffix]
		if !quantized {
			continue
		}
		reference[n] = f32Info(n, ck.fp8[n].Shape, referenceDequant(t, ck.fp8[n], scale))
	}
	wrapped, err := blockfp8.Wrap(ck.fp8, blockfp8.H3Block)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range reference.Names() {
		got, _ := wrapped.Tensor(n)
		a, _ := got.Float32s()
		b, _ := reference[n].Float32s()
		testutil.AssertBitExact(t, n, a, b)
	}
	opts := Options{HiddenStateIndex: cfg.NumHiddenLayers}
	want := encodeWith(t, func() (*Encoder, error) { return New(testutil.Backend(t), cfg, reference, opts) })
	for _, resident := range []bool{false, true} {
		o := opts
		o.Resident = resident
		got := encodeWith(t, func() (*Encoder, error) { return Open(testutil.Backend(t), dir, o) })
		testutil.AssertBitExact(t, fmt.Sprintf("block FP8 folder (resident %v) vs dequantized weights", resident), got, want)
	}
	dense := encodeWith(t, func() (*Encoder, error) { return New(testutil.Backend(t), cfg, ck.dense, opts) })
	checkFP8Error(t, want, dense)
}

// referenceDequant is upstream's weight semantics (the GEMM multiplies the FP8 product by
// weight_scale_inv per 128x128 block), with E4M3FN decoded from its definition:
// (-1)^s · 2^(e-7) · (1 + m/8), subnormal 2^-6 · m/8.
func referenceDequant(t *testing.T, w, scale safetensors.Info) []float32 {
	s, err := scale.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	rows, cols := w.Shape[0], w.Shape[1]
	out := make([]float32, rows*cols)
	for i, b := range w.Data {
		e, m := int(b>>3&15), float64(b&7)
		v := math.Ldexp(1+m/8, e-7)
		if e == 0 {
			v = math.Ldexp(m/8, -6)
		}
		if b&0x80 != 0 {
			v = -v
		}
		out[i] = float32(v) * s[(i/cols/128)*(cols/128)+(i%cols)/128]
	}
	return out
}

// checkFP8Error bounds the block-FP8 model's hidden state against the dense one. E4M3 keeps 3
// mantissa bits: rounding moves a weight by at most 2^-4 of its magnitude (half a unit in the last
// place). The bound is that worst case taken as the relative RMS error of the whole state (an SNR
// of 20·log10(2^4) = 24.1 dB): the RMS error of a sum of independently rounded products lies well
// below the worst case, but the MLP chains three rounded linears and the attention scores multiply
// two, so the errors compound; over seeds 1..11 this geometry measures 25.7 to 27.9 dB. A wrongly
// placed scale or a misdecoded code falls far below it.
func checkFP8Error(t *testing.T, got, dense []float32) {
	t.Helper()
	snr := hostmath.SNRdB(got, dense)
	limit := 20 * math.Log10(16)
	t.Logf("block FP8 vs dense hidden state: SNR %.1f dB (bound %.1f dB)", snr, limit)
	if !(snr >= limit) {
		t.Fatalf("block FP8 hidden state SNR %.1f dB against the dense model, below the E4M3 bound %.1f dB", snr, limit)
	}
}

// TestBlockFP8Errors: a checkpoint and config that disagree fail at load, naming the tensor.
func TestBlockFP8Errors(t *testing.T) {
	cfg := fp8Config()
	ck := newFP8Checkpoint(cfg, 3)
	q := DefaultPrefix + "layers.1.self_attn.q_proj.weight"
	edit := func(change func(m weights.MapSource)) weights.MapSource {
		m := weights.MapSource{}
		for k, v := range ck.fp8 {
			m[k] = v
		}
		change(m)
		return m
	}
	for _, c := range []struct {
		name  string
		src   weights.MapSource
		quant map[string]any
		err   error
		says  string
	}{
		{"missing scale", edit(func(m weights.MapSource) { delete(m, q+blockfp8.ScaleSuffix) }), nil, blockfp8.ErrMissingScale, q},
		{"scale shape", edit(func(m weights.MapSource) {
			m[q+blockfp8.ScaleSuffix] = f32Info(q+blockfp8.ScaleSuffix, []int{1, 1}, []float32{1})
		}), nil, blockfp8.ErrScale, "[2 1]"},
		{"negative scale", edit(func(m weights.MapSource) {
			m[q+blockfp8.ScaleSuffix] = f32Info(q+blockfp8.ScaleSuffix, []int{2, 1}, []float32{1, -1})
		}), nil, blockfp8.ErrScale, "[1, 0]"},
		{"orphan scale", edit(func(m weights.MapSource) { m[q] = ck.dense[q] }), nil, blockfp8.ErrOrphanScale, q},
		{"partially quantized", edit(func(m weights.MapSource) { m[q] = ck.dense[q]; delete(m, q+blockfp8.ScaleSuffix) }), nil, blockfp8.ErrConfig, q},
		{"block size", ck.fp8, map[string]any{"weight_block_size": []int{1, 128}}, blockfp8.ErrConfig, "weight_block_size=[128, 128]"},
		{"static activations", ck.fp8, map[string]any{"activation_scheme": "static"}, blockfp8.ErrConfig, "dynamic"},
		{"vision not excluded", ck.fp8, map[string]any{"modules_to_not_convert": []string{"lm_head"}}, blockfp8.ErrConfig, "vision stack"},
		{"language excluded", ck.fp8, map[string]any{"modules_to_not_convert": []string{"model.visual", "language_model.layers.3"}}, blockfp8.ErrConfig, "partially quantized"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeFP8Folder(t, cfg, c.src, fp8QuantizationConfig(c.quant))
			enc, err := Open(testutil.Backend(t), dir, Options{HiddenStateIndex: 2})
			if err == nil {
				enc.Close()
				t.Fatal("loaded")
			}
			if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("error %q, want %v naming %q", err, c.err, c.says)
			}
		})
	}
	t.Run("FP8 weights without quantization_config", func(t *testing.T) {
		dir := writeFP8Folder(t, cfg, ck.fp8, nil)
		_, err := Open(testutil.Backend(t), dir, Options{HiddenStateIndex: 2})
		if err == nil || !strings.Contains(err.Error(), "F8_E4M3 needs its block scales") {
			t.Fatalf("error %v", err)
		}
	})
}
