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
	"sort"
	"strings"
	"testing"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

// memSource is an in-memory weights.Source.
type memSource map[string]safetensors.Info

func (m memSource) Names() []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (m memSource) Tensor(name string) (safetensors.Info, bool) { i, ok := m[name]; return i, ok }

func (m memSource) add(r *rand.Rand, name string, shape ...int) {
	n := 1
	for _, d := range shape {
		n *= d
	}
	m[name] = safetensors.Info{Name: name, DType: safetensors.F32, Shape: shape, Data: safetensors.F32Bytes(randVec(r, n))}
}

const tinyConfig = `{"num_layers": 1, "num_refiner_layers": 1, "hidden_size": 64}`

// tinySource is a two-module H3-shaped source: one block and one refiner block
// with a quantized and a dense tensor each, an AdaLN projection and a top-level tensor.
func tinySource() memSource {
	r := rand.New(rand.NewPCG(21, 22))
	m := memSource{}
	m.add(r, "transformer_blocks.0.attn.to_q.weight", 32, 128)
	m.add(r, "transformer_blocks.0.norm1.weight", 64)
	m.add(r, "transformer_blocks.0.adaln_proj.linear.weight", 1152, 32)
	m.add(r, "token_refiner.refiner_blocks.0.ff.net.2.weight", 64, 256)
	m.add(r, "token_refiner.final_norm.weight", 64)
	m.add(r, "proj_in.weight", 64, 96)
	return m
}

// convertAndOpen converts src with opts, writes the checkpoint with WriteCheckpoint (and its checks)
// to a new folder and opens it; the checkpoint is closed when the test ends.
func convertAndOpen(t *testing.T, src weights.Source, config json.RawMessage, opts ConvertOptions) *Checkpoint {
	t.Helper()
	ts, m, err := Convert(src, config, opts)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteCheckpoint(dir, ts, m); err != nil {
		t.Fatal(err)
	}
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func writeTiny(t *testing.T, bits int, edit func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor) string {
	t.Helper()
	ts, m, err := Convert(tinySource(), json.RawMessage(tinyConfig), ConvertOptions{Scheme: Scheme{Bits: bits, GroupSize: 64}})
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		ts = edit(ts, m)
	}
	dir := t.TempDir()
	// Write without WriteCheckpoint's checks, so that broken folders can be built.
	if err := safetensors.WriteFile(filepath.Join(dir, CheckpointFile), ts, nil); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func drop(name string) func([]safetensors.Tensor, *Manifest) []safetensors.Tensor {
	return func(ts []safetensors.Tensor, _ *Manifest) []safetensors.Tensor {
		return slices.DeleteFunc(ts, func(t safetensors.Tensor) bool { return t.Name == name })
	}
}

func TestOpenRejects(t *testing.T) {
	key := "blocks.0.attn.to_q.weight"
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
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Open(writeTiny(t, 6, c.edit))
			if !errors.Is(err, c.want) {
				t.Fatalf("Open: got %v, want %v", err, c.want)
			}
			t.Log(err)
		})
	}
	_, err := Open(writeTiny(t, 8, func(ts []safetensors.Tensor, m *Manifest) []safetensors.Tensor { m.FormatVersion = 2; return ts }))
	var fv *FormatVersionError
	if !errors.As(err, &fv) || fv.Version != 2 {
		t.Fatalf("format_version 2: %v is not a *FormatVersionError{Version: 2}", err)
	}
	_, err = Open(writeTiny(t, 8, drop(key+ScalesSuffix)))
	var mt *MissingTensorError
	if !errors.As(err, &mt) || mt.Key != key || mt.Tensor != key+ScalesSuffix {
		t.Fatalf("missing scales: %v does not name the key and tensor", err)
	}
	// WriteCheckpoint refuses to write an incomplete checkpoint.
	ts, m, err := Convert(tinySource(), json.RawMessage(tinyConfig), ConvertOptions{Scheme: Scheme{Bits: 4, GroupSize: 64}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteCheckpoint(dir, drop(key+BiasesSuffix)(ts, m), m); !errors.Is(err, ErrMissingBiases) {
		t.Fatalf("WriteCheckpoint without biases: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestFile)); err == nil {
		t.Fatal("a manifest was written for an incomplete checkpoint")
	}
	if _, _, err := Convert(tinySource(), json.RawMessage(tinyConfig), ConvertOptions{Scheme: Scheme{Bits: 3, GroupSize: 64}}); !errors.Is(err, ErrBits) {
		t.Fatalf("Convert bits 3: %v", err)
	}
	src := tinySource()
	src.add(rand.New(rand.NewPCG(1, 1)), "transformer_blocks.0.attn.to_k.weight", 32, 96)
	if _, _, err := Convert(src, json.RawMessage(tinyConfig), ConvertOptions{Scheme: Scheme{Bits: 8, GroupSize: 64}}); !errors.Is(err, ErrGroupSize) {
		t.Fatalf("Convert with in=96: %v", err)
	}
}

func TestNames(t *testing.T) {
	for _, c := range [][2]string{
		{"transformer_blocks.12.attn.to_q.weight", "blocks.12.attn.to_q.weight"},
		{"token_refiner.refiner_blocks.1.ff.net.2.weight", "refiner.1.ff.net.2.weight"},
		{"token_refiner.final_norm.weight", "token_refiner.final_norm.weight"},
		{"proj_in.weight", "proj_in.weight"},
		{"__adaln_cache.block.3.table.5", "__adaln_cache.block.3.table.5"},
	} {
		if got := MLXName(c[0]); got != c[1] {
			t.Errorf("MLXName(%q) = %q, want %q", c[0], got, c[1])
		}
		if got := ReleasedName(c[1]); got != c[0] {
			t.Errorf("ReleasedName(%q) = %q, want %q", c[1], got, c[0])
		}
	}
}

// TestConvertFixture converts the h3_dit_tiny weights at 8, 6 and 4 bits,
// writes, reopens, and checks that every tensor reads back: dense ones
// byte for byte, quantized ones equal to the in-memory quantization.
func TestConvertFixture(t *testing.T) {
	fx, err := testutil.OpenFixture("testdata/h3_dit_tiny.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer fx.File.Close()
	var arch map[string]any
	if err := fx.DecodeConfig(&arch, "arch_config"); err != nil {
		t.Fatal(err)
	}
	config, _ := json.Marshal(arch)
	src := fx.Weights()
	released := src.Names()
	sort.Strings(released)
	for _, bits := range []int{8, 6, 4} {
		t.Run(fmt.Sprintf("int%d", bits), func(t *testing.T) {
			c := convertAndOpen(t, src, config, ConvertOptions{Scheme: Scheme{Bits: bits, GroupSize: 64}})
			if got := c.Names(); len(got) != len(released)+2*len(c.QuantizedKeys()) {
				t.Fatalf("%d names, want %d released + scales/biases of %d quantized keys", len(got), len(released), len(c.QuantizedKeys()))
			}
			// 2 blocks + 1 refiner block, 6 linears each.
			if n := len(c.QuantizedKeys()); n != 18 {
				t.Fatalf("%d quantized keys, want 18: %v", n, c.QuantizedKeys())
			}
			raw, err := safetensors.Open(filepath.Join(c.Dir, CheckpointFile))
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			if _, ok := raw.Tensor("blocks.1.attn.to_out.0.weight"); !ok {
				t.Fatal("stored names are not MLX names (blocks.1.attn.to_out.0.weight missing)")
			}
			if _, ok := raw.Tensor("refiner.0.ff.net.0.proj.weight.scales"); !ok {
				t.Fatal("refiner.0.ff.net.0.proj.weight.scales missing")
			}
			deq := c.Dequantized()
			if got := deq.Names(); !slices.Equal(got, released) {
				t.Fatalf("Dequantized() names differ from the released names")
			}
			for _, name := range released {
				want, _ := src.Tensor(name)
				s, quantized := c.Scheme(name)
				if !quantized {
					got, ok := c.Tensor(name)
					if !ok || got.DType != want.DType || !slices.Equal(got.Shape, want.Shape) || !bytes.Equal(got.Data, want.Data) {
						t.Fatalf("%s does not read back byte for byte", name)
					}
					continue
				}
				if s.Bits != bits || s.GroupSize != 64 || !isQuantizedKey(name, false) {
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
				dense, ok := deq.Tensor(name)
				memDeq, _ := mem.Dequantize()
				if !ok || dense.DType != safetensors.F32 || !bytes.Equal(dense.Data, safetensors.F32Bytes(memDeq)) {
					t.Fatalf("%s: Dequantized() differs from the in-memory dequantization", name)
				}
			}
			man := c.Manifest
			if man.Quantization.Bits != bits || man.NumBlocks != 2 || man.NumRefinerBlocks != 1 || man.AdaLNCache != nil {
				t.Fatalf("manifest %+v", man)
			}
			if qk := man.QuantizedKeys["blocks.0.attn.to_q.weight"]; !qk.HasBiases || qk.DequantizedDType != "fp32" {
				t.Fatalf("quantized_keys entry %+v", qk)
			}
			var back map[string]any
			if err := json.Unmarshal(man.Config, &back); err != nil || back["hidden_size"] != arch["hidden_size"] {
				t.Fatalf("config did not round-trip: %v %v", err, back)
			}
		})
	}
}

// TestConvertAdaLN: with a cache the AdaLN projections are left out and the
// cache tensors and manifest entry are written; without, they are kept.
func TestConvertAdaLN(t *testing.T) {
	cache := &AdaLNCache{Timesteps: []float32{0, 0.25, 1}, NumBlocks: 1, TablesPerBlock: 6, Steps: 1}
	var cts []safetensors.Tensor
	for k := 0; k < 6; k++ {
		cts = append(cts, safetensors.Tensor{Name: fmt.Sprintf("__adaln_cache.block.0.table.%d", k), DType: safetensors.F32, Shape: []int{9, 64}, Data: make([]byte, 9*64*4)})
	}
	for _, n := range []string{"norm_out_shift", "norm_out_scale"} {
		cts = append(cts, safetensors.Tensor{Name: "__adaln_cache." + n, DType: safetensors.F32, Shape: []int{3, 64}, Data: make([]byte, 3*64*4)})
	}
	opts := ConvertOptions{Scheme: Scheme{Bits: 8, GroupSize: 64}, AdaLN: cache, AdaLNTensors: cts}
	c := convertAndOpen(t, tinySource(), json.RawMessage(tinyConfig), opts)
	names := strings.Join(c.Names(), " ")
	if strings.Contains(names, "adaln_proj") || !strings.Contains(names, "__adaln_cache.block.0.table.5") {
		t.Fatalf("names: %s", names)
	}
	if a := c.Manifest.AdaLNCache; a == nil || !slices.Equal(a.Timesteps, cache.Timesteps) || a.TablesPerBlock != 6 || a.Steps != 1 {
		t.Fatalf("adaln_cache entry %+v", c.Manifest.AdaLNCache)
	}
	// The manifest's adaln_cache is what dit/h3 reads (timesteps, num_blocks, tables_per_block).
	raw, _ := os.ReadFile(filepath.Join(c.Dir, ManifestFile))
	var doc struct {
		AdaLN struct {
			Timesteps      []float32 `json:"timesteps"`
			NumBlocks      int       `json:"num_blocks"`
			TablesPerBlock int       `json:"tables_per_block"`
		} `json:"adaln_cache"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil || doc.AdaLN.NumBlocks != 1 || len(doc.AdaLN.Timesteps) != 3 {
		t.Fatalf("manifest adaln_cache as read by a consumer: %+v %v", doc.AdaLN, err)
	}
	opts.AdaLNTensors = cts[:7]
	if _, _, err := Convert(tinySource(), json.RawMessage(tinyConfig), opts); !errors.Is(err, ErrManifest) {
		t.Fatalf("cache with 7 of 8 tensors: %v", err)
	}
}
