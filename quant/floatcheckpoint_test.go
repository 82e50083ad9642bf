package quant

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// floatCase is one float-mode conversion: the mode and whether nvfp4 matrices get a global scale.
type floatCase struct {
	mode   string
	global bool
}

var floatCases = []floatCase{{ModeMXFP8, false}, {ModeMXFP4, false}, {ModeNVFP4, false}, {ModeNVFP4, true}}

func (c floatCase) String() string {
	if c.global {
		return c.mode + "_global"
	}
	return c.mode
}

func floatConvert(t *testing.T, src weights.Source, c floatCase) ([]safetensors.Tensor, *Manifest) {
	t.Helper()
	conv, err := NewFloatConversion(c.mode, c.global)
	if err != nil {
		t.Fatal(err)
	}
	return toyConvertWith(t, src, conv)
}

// TestFloatCheckpointRoundTrip converts the tiny source in each float mode, writes it with
// Format.Write, reopens it, and checks what a model binds: the manifest as
// fastvideo/mlx_runtime/checkpoint.py writes it (bits and group_size null, has_biases false, the
// nvfp4 global scale max|w| when asked), no Scheme for the float keys (so models declare them dense),
// their scales hidden, each float key read back as DequantizeFloat of QuantizeFloat's output, and
// described by Header without its data; dense tensors byte for byte.
func TestFloatCheckpointRoundTrip(t *testing.T) {
	src := tinySource()
	const key = "model.layers.0.q.weight"
	for _, fc := range floatCases {
		t.Run(fc.String(), func(t *testing.T) {
			ts, m := floatConvert(t, src, fc)
			dir := t.TempDir()
			if err := testFormat.Write(dir, ts, m); err != nil {
				t.Fatal(err)
			}
			checkFloatManifestJSON(t, dir, fc)
			c, err := testFormat.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := c.Names(); !slices.Equal(got, src.Names()) {
				t.Fatalf("Names() = %v, want the source's %v (scales hidden)", got, src.Names())
			}
			if len(c.QuantizedKeys()) != 0 || SchemeOf(c, key) != nil {
				t.Fatalf("a float-mode checkpoint reports affine keys %v", c.QuantizedKeys())
			}
			if _, ok := c.Tensor(key + ScalesSuffix); ok {
				t.Fatal("the scales of a float key are visible")
			}
			mode, global, ok := c.FloatMode(key)
			if !ok || mode.Name != fc.mode || (global != 0) != fc.global {
				t.Fatalf("FloatMode(%s) = %v, %g, %v", key, mode, global, ok)
			}
			want := src[key]
			w, _ := want.Float32s()
			words, scales, err := QuantizeFloat(mode, w, want.Shape[0], want.Shape[1], global)
			if err != nil {
				t.Fatal(err)
			}
			deq := mlxFPDequantize(mode, words, scales, want.Shape[1], global)
			got, ok := c.Tensor(key)
			if !ok || got.DType != safetensors.F32 || !slices.Equal(got.Shape, want.Shape) || !bytes.Equal(got.Data, safetensors.F32Bytes(deq)) {
				t.Fatalf("%s does not read back as MLX's dequantization of its quantization", key)
			}
			h, ok := weights.HeaderOf(c, key)
			if !ok || h.Data != nil || h.DType != safetensors.F32 || !slices.Equal(h.Shape, want.Shape) {
				t.Fatalf("Header(%s) = %s %v (data %d bytes), want F32 %v without data", key, h.DType, h.Shape, len(h.Data), want.Shape)
			}
			for _, name := range []string{"model.layers.0.norm.weight", "model.proj_in.weight"} {
				if got, ok := c.Tensor(name); !ok || !bytes.Equal(got.Data, src[name].Data) {
					t.Fatalf("dense %s does not read back byte for byte", name)
				}
			}
			if d := c.Dequantized(); !slices.Equal(d.Names(), src.Names()) {
				t.Fatalf("Dequantized().Names() = %v", d.Names())
			}
		})
	}
}

// checkFloatManifestJSON reads dir's manifest as JSON: the fields MLX's loader reads.
func checkFloatManifestJSON(t *testing.T, dir string, fc floatCase) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, testFormat.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Quantization  map[string]any            `json:"quantization"`
		QuantizedKeys map[string]map[string]any `json:"quantized_keys"`
		DenseKeys     map[string]string         `json:"dense_keys"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	q := m.Quantization
	if q["mode"] != fc.mode || q["bits"] != nil || q["group_size"] != nil {
		t.Fatalf("quantization = %v, want mode %q with bits and group_size null", q, fc.mode)
	}
	// 96 columns split into mxfp groups of 32 and nvfp4 groups of 16: both matrices quantized.
	if len(m.QuantizedKeys) != 2 || len(m.DenseKeys) != 0 {
		t.Fatalf("quantized_keys %v, dense_keys %v: want both toy matrices quantized", m.QuantizedKeys, m.DenseKeys)
	}
	for k, e := range m.QuantizedKeys {
		g, hasGlobal := e["global_scale"]
		if e["has_biases"] != false || e["dequantized_dtype"] != "fp32" || hasGlobal != fc.global || (hasGlobal && !(g.(float64) > 0)) {
			t.Fatalf("quantized_keys[%q] = %v", k, e)
		}
	}
}

// TestFloatCheckpointRejects: every broken float-mode folder fails at Open with a named error.
func TestFloatCheckpointRejects(t *testing.T) {
	const key = "layers.0.q.weight"
	type edit = func([]safetensors.Tensor, *Manifest) []safetensors.Tensor
	setKey := func(f func(*QuantizedKey)) edit {
		return func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor {
			e := m.QuantizedKeys[key]
			f(&e)
			m.QuantizedKeys[key] = e
			return ts
		}
	}
	setScale := func(code byte) edit {
		return func(ts []safetensors.Tensor, _ *Manifest) []safetensors.Tensor {
			ts = slices.Clone(ts)
			for i, tn := range ts {
				if tn.Name == key+ScalesSuffix {
					ts[i].Data = append([]byte{code}, tn.Data[1:]...)
				}
			}
			return ts
		}
	}
	cases := []struct {
		name string
		fc   floatCase
		edit edit
		want error
		text string
	}{
		{"bits_6", floatCase{ModeMXFP8, false}, func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor {
			m.Quantization.Bits = 6
			return ts
		}, ErrManifest, "requires bits 8 and group_size 32"},
		{"group_32_nvfp4", floatCase{ModeNVFP4, false}, func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor {
			m.Quantization.GroupSize = 32
			return ts
		}, ErrManifest, "requires bits 4 and group_size 16"},
		{"has_biases", floatCase{ModeMXFP4, false}, setKey(func(e *QuantizedKey) { e.HasBiases = true }), ErrManifest, "stores no biases"},
		{"global_on_mxfp8", floatCase{ModeMXFP8, false}, setKey(func(e *QuantizedKey) { e.GlobalScale = json.RawMessage("2.5") }), ErrManifest, "only nvfp4"},
		{"global_negative", floatCase{ModeNVFP4, true}, setKey(func(e *QuantizedKey) { e.GlobalScale = json.RawMessage("-1") }), ErrManifest, "finite positive"},
		{"global_string", floatCase{ModeNVFP4, true}, setKey(func(e *QuantizedKey) { e.GlobalScale = json.RawMessage(`"big"`) }), ErrManifest, "finite positive"},
		{"missing_scales", floatCase{ModeMXFP8, false}, drop(key + ScalesSuffix), ErrMissingScales, key + ScalesSuffix},
		{"extra_biases", floatCase{ModeMXFP8, false}, func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor {
			return append(slices.Clone(ts), safetensors.Tensor{Name: key + BiasesSuffix, DType: safetensors.F32, Shape: []int{1}, Data: make([]byte, 4)})
		}, ErrManifest, "stores no biases"},
		{"nan_e8m0_scale", floatCase{ModeMXFP4, false}, setScale(0xff), ErrManifest, "NaN"},
		{"nan_e4m3_scale", floatCase{ModeNVFP4, false}, setScale(0x7f), ErrManifest, "NaN"},
		{"f32_scales", floatCase{ModeMXFP8, false}, func(ts []safetensors.Tensor, _ *Manifest) []safetensors.Tensor {
			ts = slices.Clone(ts)
			for i, tn := range ts {
				if tn.Name == key+ScalesSuffix {
					ts[i].DType, ts[i].Shape, ts[i].Data = safetensors.F32, []int{tn.Shape[0], tn.Shape[1] / 4}, tn.Data
				}
			}
			return ts
		}, ErrShape, "U8 scales"},
		{"mode_mismatch_words", floatCase{ModeMXFP4, false}, func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor {
			m.Quantization.Mode = ModeMXFP8 // 4-bit words read as 8-bit: half the columns per row
			return ts
		}, ErrShape, "32-value mxfp8 groups"},
		{"unknown_mode", floatCase{ModeMXFP8, false}, func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor {
			m.Quantization.Mode = "fp6"
			return ts
		}, ErrManifest, "mxfp8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts, m := floatConvert(t, tinySource(), c.fc)
			_, err := testFormat.Open(writeEdited(t, ts, m, c.edit))
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("Open: got %v, want %v mentioning %q", err, c.want, c.text)
			}
			t.Log(err)
		})
	}
	if _, err := NewFloatConversion("fp6", false); !errors.Is(err, ErrManifest) {
		t.Fatalf("NewFloatConversion(fp6): %v", err)
	}
	if _, err := NewFloatConversion(ModeMXFP4, true); !errors.Is(err, ErrManifest) {
		t.Fatalf("NewFloatConversion(mxfp4, global): %v", err)
	}
	ts, m := floatConvert(t, tinySource(), floatCase{ModeMXFP8, false})
	if err := testFormat.Write(t.TempDir(), drop(key+ScalesSuffix)(ts, m), m); !errors.Is(err, ErrMissingScales) {
		t.Fatalf("Write without scales: %v", err)
	}
}
