package quant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// addRandom adds a random float32 tensor to m.
func addRandom(m weights.MapSource, r *rand.Rand, name string, shape ...int) {
	n := 1
	for _, d := range shape {
		n *= d
	}
	m[name] = safetensors.Info{Name: name, DType: safetensors.F32, Shape: shape, Data: safetensors.F32Bytes(randVec(r, n))}
}

// testFormat is a toy model's format: the stored names drop the "model." the model binds.
var testFormat = Format{
	TensorsFile: "toy.safetensors", ManifestFile: "toy.json",
	SourceName: func(stored string) string { return "model." + stored },
}

func storedName(source string) string { return strings.TrimPrefix(source, "model.") }

// toyMetadata is the toy model's part of the manifest.
type toyMetadata struct {
	Config json.RawMessage `json:"config"`
	Layers int             `json:"num_layers"`
}

// tinySource has two matrices the toy model quantizes (one of them 96 wide, which group 64 cannot
// split), a vector and a dense matrix.
func tinySource() weights.MapSource {
	r := rand.New(rand.NewPCG(21, 22))
	m := weights.MapSource{}
	addRandom(m, r, "model.layers.0.q.weight", 32, 128)
	addRandom(m, r, "model.layers.0.narrow.weight", 16, 96)
	addRandom(m, r, "model.layers.0.norm.weight", 64)
	addRandom(m, r, "model.proj_in.weight", 64, 96)
	return m
}

// toyConvert is the toy model's converter: its ".q." and ".narrow." matrices are quantized, the rest kept.
func toyConvert(t *testing.T, src weights.Source, scheme Scheme, scaleDType safetensors.DType) ([]safetensors.Tensor, *Manifest) {
	t.Helper()
	c, err := NewConversion(scheme, scaleDType)
	if err != nil {
		t.Fatal(err)
	}
	return toyConvertWith(t, src, c)
}

// toyConvertWith runs the toy model's converter with c.
func toyConvertWith(t *testing.T, src weights.Source, c *Conversion) ([]safetensors.Tensor, *Manifest) {
	t.Helper()
	for _, name := range src.Names() {
		info, _ := src.Tensor(name)
		if strings.Contains(name, ".q.") || strings.Contains(name, ".narrow.") {
			if _, err := c.Quantize(storedName(name), info); err != nil {
				t.Fatal(err)
			}
			continue
		}
		c.Keep(storedName(name), info)
	}
	ts, m := c.Result()
	if err := m.SetMetadata(toyMetadata{Config: json.RawMessage(`{"hidden_size": 64}`), Layers: 1}); err != nil {
		t.Fatal(err)
	}
	return ts, m
}

// convertAndOpen converts src, writes the checkpoint with Format.Write (and its checks) to a new
// folder and opens it; the checkpoint is closed when the test ends.
func convertAndOpen(t *testing.T, src weights.Source, scheme Scheme, scaleDType safetensors.DType) *Checkpoint {
	t.Helper()
	ts, m := toyConvert(t, src, scheme, scaleDType)
	dir := t.TempDir()
	if err := testFormat.Write(dir, ts, m); err != nil {
		t.Fatal(err)
	}
	c, err := testFormat.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func writeTiny(t *testing.T, bits int, edit func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor) string {
	t.Helper()
	ts, m := toyConvert(t, tinySource(), Scheme{Bits: bits, GroupSize: 64}, "")
	return writeEdited(t, ts, m, edit)
}

// writeEdited writes ts and m after edit, without Format.Write's checks.
func writeEdited(t *testing.T, ts []safetensors.Tensor, m *Manifest, edit func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor) string {
	t.Helper()
	if edit != nil {
		ts = edit(ts, m)
	}
	dir := t.TempDir()
	// Write without Format.Write's checks, so that broken folders can be built.
	if err := safetensors.WriteFile(filepath.Join(dir, testFormat.TensorsFile), ts, nil); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, testFormat.ManifestFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func drop(name string) func([]safetensors.Tensor, *Manifest) []safetensors.Tensor {
	return func(ts []safetensors.Tensor, _ *Manifest) []safetensors.Tensor {
		return slices.DeleteFunc(slices.Clone(ts), func(t safetensors.Tensor) bool { return t.Name == name })
	}
}

func TestOpenRejects(t *testing.T) {
	const key, narrow = "layers.0.q.weight", "layers.0.narrow.weight"
	cases := []struct {
		name string
		edit func([]safetensors.Tensor, *Manifest) []safetensors.Tensor
		want error
	}{
		{"format_version_2", func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor { m.FormatVersion = 2; return ts }, ErrFormatVersion},
		{"format_version_missing", func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor { m.FormatVersion = 0; return ts }, ErrFormatVersion},
		{"bits_5", func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor { m.Quantization.Bits = 5; return ts }, ErrBits},
		{"group_48", func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor {
			m.Quantization.GroupSize = 48
			return ts
		}, ErrGroupSize},
		{"missing_scales", drop(key + ScalesSuffix), ErrMissingScales},
		{"missing_biases", drop(key + BiasesSuffix), ErrMissingBiases},
		{"has_biases_false", func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor {
			m.QuantizedKeys[key] = QuantizedKey{DequantizedDType: "fp32"}
			return ts
		}, ErrMissingBiases},
		{"wrong_group_in_manifest", func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor {
			m.Quantization.GroupSize = 128
			return ts
		}, ErrShape},
		{"bits_disagree_with_words", func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor { m.Quantization.Bits = 4; return ts }, ErrShape},
		{"missing_words", drop(key), ErrManifest},
		{"orphan_scales", func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor {
			delete(m.QuantizedKeys, key)
			return drop(key)(ts, m)
		}, ErrManifest},
		{"mode_nvfp4", func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor {
			m.Quantization.Mode = "nvfp4"
			return ts
		}, ErrManifest},
		{"missing_dense_key", drop(narrow), ErrManifest},
		{"dense_and_quantized", func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor {
			m.DenseKeys[key] = "both"
			return ts
		}, ErrManifest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := testFormat.Open(writeTiny(t, 6, c.edit))
			if !errors.Is(err, c.want) {
				t.Fatalf("Open: got %v, want %v", err, c.want)
			}
			t.Log(err)
		})
	}
	_, err := testFormat.Open(writeTiny(t, 8, func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor { m.FormatVersion = 2; return ts }))
	var fv *FormatVersionError
	if !errors.As(err, &fv) || fv.Version != 2 {
		t.Fatalf("format_version 2: %v is not a *FormatVersionError{Version: 2}", err)
	}
	_, err = testFormat.Open(writeTiny(t, 8, drop(key+ScalesSuffix)))
	var mt *MissingTensorError
	if !errors.As(err, &mt) || mt.Key != key || mt.Tensor != key+ScalesSuffix {
		t.Fatalf("missing scales: %v does not name the key and tensor", err)
	}
	// Format.Write refuses to write an incomplete checkpoint.
	ts, m := toyConvert(t, tinySource(), Scheme{Bits: 4, GroupSize: 64}, "")
	dir := t.TempDir()
	if err := testFormat.Write(dir, drop(key+BiasesSuffix)(ts, m), m); !errors.Is(err, ErrMissingBiases) {
		t.Fatalf("Write without biases: %v", err)
	}
	if err := testFormat.Write(dir, drop(narrow)(ts, m), m); !errors.Is(err, ErrManifest) {
		t.Fatalf("Write without a dense key's tensor: %v", err)
	}
	if testFormat.Exists(dir) {
		t.Fatal("a manifest was written for an incomplete checkpoint")
	}
	if _, err := NewConversion(Scheme{Bits: 3, GroupSize: 64}, ""); !errors.Is(err, ErrBits) {
		t.Fatalf("NewConversion bits 3: %v", err)
	}
	if _, err := NewConversion(Scheme{Bits: 4, GroupSize: 64}, safetensors.U32); err == nil {
		t.Fatal("NewConversion accepted U32 scales")
	}
}

// TestConvertRoundTrip converts the tiny source at 8, 6 and 4 bits, writes, reopens, and checks that
// every tensor reads back under its source name: dense ones byte for byte (the 96-wide matrix the
// converter asked to quantize among them, listed in dense_keys with the reason), quantized ones equal
// to the in-memory quantization.
func TestConvertRoundTrip(t *testing.T) {
	src := tinySource()
	names := src.Names()
	for _, bits := range []int{8, 6, 4} {
		t.Run(fmt.Sprintf("int%d", bits), func(t *testing.T) {
			c := convertAndOpen(t, src, Scheme{Bits: bits, GroupSize: 64}, "")
			if got := c.QuantizedKeys(); !slices.Equal(got, []string{"model.layers.0.q.weight"}) {
				t.Fatalf("quantized keys %v", got)
			}
			if got := c.Names(); len(got) != len(names)+2 {
				t.Fatalf("%d names, want %d + scales and biases of 1 quantized key", len(got), len(names))
			}
			reason := c.Manifest.DenseKeys["layers.0.narrow.weight"]
			if len(c.Manifest.DenseKeys) != 1 || !strings.Contains(reason, "96") || !strings.Contains(reason, "64") {
				t.Fatalf("dense_keys %v: want the 96-wide matrix with the reason", c.Manifest.DenseKeys)
			}
			deq := c.Dequantized()
			if got := deq.Names(); !slices.Equal(got, names) {
				t.Fatalf("Dequantized() names %v, want %v", got, names)
			}
			for _, name := range names {
				checkReadBack(t, c, src, name, bits)
			}
			if qk := c.Manifest.QuantizedKeys["layers.0.q.weight"]; !qk.HasBiases || qk.DequantizedDType != "fp32" {
				t.Fatalf("quantized_keys entry %+v", qk)
			}
		})
	}
}

// checkReadBack compares the tensor name of the converted checkpoint c with the source's.
func checkReadBack(t *testing.T, c *Checkpoint, src weights.MapSource, name string, bits int) {
	t.Helper()
	want := src[name]
	s, quantized := c.Scheme(name)
	if !quantized {
		got, ok := c.Tensor(name)
		if !ok || got.DType != want.DType || !slices.Equal(got.Shape, want.Shape) || !bytes.Equal(got.Data, want.Data) {
			t.Fatalf("%s does not read back byte for byte", name)
		}
		return
	}
	if s.Bits != bits || s.GroupSize != 64 {
		t.Fatalf("%s: scheme %+v", name, s)
	}
	w, _ := want.Float32s()
	mem, err := Quantize(w, want.Shape[0], want.Shape[1], bits, 64, safetensors.F32)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Affine(name)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Words, mem.Words) || !slices.Equal(got.Scales, mem.Scales) || !slices.Equal(got.Biases, mem.Biases) {
		t.Fatalf("%s: the saved quantization differs from the in-memory one", name)
	}
	dense, ok := c.Dequantized().Tensor(name)
	memDeq, _ := mem.Dequantize()
	if !ok || dense.DType != safetensors.F32 || !bytes.Equal(dense.Data, safetensors.F32Bytes(memDeq)) {
		t.Fatalf("%s: Dequantized() differs from the in-memory dequantization", name)
	}
}

// TestManifestMetadata: the model's entries are written beside the quantization entries (one flat
// object, as MLX converters write it), read back verbatim, and may not redefine a quantization field.
func TestManifestMetadata(t *testing.T) {
	c := convertAndOpen(t, tinySource(), Scheme{Bits: 8, GroupSize: 64}, "")
	raw, err := os.ReadFile(filepath.Join(c.Dir, testFormat.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var flat map[string]json.RawMessage
	if err := json.Unmarshal(raw, &flat); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"format_version", "quantization", "quantized_keys", "dense_keys", "config", "num_layers"} {
		if _, ok := flat[k]; !ok {
			t.Errorf("the manifest has no top-level %q: %s", k, raw)
		}
	}
	var meta toyMetadata
	if err := c.Manifest.DecodeMetadata(&meta); err != nil || meta.Layers != 1 || !strings.Contains(string(meta.Config), "hidden_size") {
		t.Fatalf("metadata read back as %+v, %v", meta, err)
	}
	if err := testFormat.WriteManifest(c.Dir, c.Manifest); err != nil {
		t.Fatal(err)
	}
	again, err := testFormat.ReadManifest(c.Dir)
	if err != nil || again.Quantization.Bits != 8 {
		t.Fatalf("rewritten manifest: %+v, %v", again, err)
	}
	bad := *c.Manifest
	if err := bad.SetMetadata(map[string]any{"quantization": nil}); err != nil {
		t.Fatal(err)
	}
	if _, err := json.Marshal(bad); !errors.Is(err, ErrManifest) {
		t.Fatalf("metadata redefining \"quantization\": %v", err)
	}
	if err := testFormat.WriteManifest(t.TempDir(), &bad); !errors.Is(err, ErrManifest) {
		t.Fatalf("WriteManifest with metadata redefining \"quantization\": %v", err)
	}
}
