package h3

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
	"fastvideo/quant"
)

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
			t.Errorf("ReleasedName(%q) = %q, want %q", c[0], got, c[0])
		}
	}
}

// openFixtureConverted converts the h3_dit_tiny weights with opts, writes them with WriteConverted and
// opens the folder; the checkpoint is closed when the test ends.
func openFixtureConverted(t *testing.T, fx *testutil.Fixture, opts ConvertOptions) (*quant.Checkpoint, *ConvertedManifest) {
	t.Helper()
	ck, man, err := OpenConverted(writeConvertedFixture(t, fx, opts))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck, man
}

func fixtureArch(t *testing.T, fx *testutil.Fixture) json.RawMessage {
	t.Helper()
	var arch map[string]any
	if err := fx.DecodeConfig(&arch, "arch_config"); err != nil {
		t.Fatal(err)
	}
	config, err := json.Marshal(arch)
	if err != nil {
		t.Fatal(err)
	}
	return config
}

func tinyFixture(t *testing.T) *testutil.Fixture {
	t.Helper()
	fx, err := testutil.OpenFixture("testdata/h3_dit_tiny.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fx.File.Close() })
	return fx
}

// TestConvertFixture converts the h3_dit_tiny weights at 8, 6 and 4 bits, writes, reopens, and checks
// that every tensor reads back under its released name: dense ones byte for byte, quantized ones (the
// six core linears of the 2 blocks and the refiner block) equal to the in-memory quantization; the
// stored names are MLX names.
func TestConvertFixture(t *testing.T) {
	fx := tinyFixture(t)
	src := fx.Weights()
	released := src.Names()
	sort.Strings(released)
	for _, bits := range []int{8, 6, 4} {
		t.Run(fmt.Sprintf("int%d", bits), func(t *testing.T) {
			c, man := openFixtureConverted(t, fx, ConvertOptions{Scheme: quant.Scheme{Bits: bits, GroupSize: 64}})
			if got := c.Names(); len(got) != len(released)+2*len(c.QuantizedKeys()) {
				t.Fatalf("%d names, want %d released + scales/biases of %d quantized keys", len(got), len(released), len(c.QuantizedKeys()))
			}
			if n := len(c.QuantizedKeys()); n != 18 {
				t.Fatalf("%d quantized keys, want 18: %v", n, c.QuantizedKeys())
			}
			raw, err := safetensors.Open(filepath.Join(c.Dir, CheckpointFile))
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			for _, n := range []string{"blocks.1.attn.to_out.0.weight", "refiner.0.ff.net.0.proj.weight.scales"} {
				if _, ok := raw.Tensor(n); !ok {
					t.Fatalf("stored names are not MLX names (%s missing)", n)
				}
			}
			if got := c.Dequantized().Names(); !slices.Equal(got, released) {
				t.Fatalf("Dequantized() names differ from the released names")
			}
			for _, name := range released {
				checkConverted(t, c, src, name, bits)
			}
			if man.Quant.Quantization.Bits != bits || man.NumBlocks != 2 || man.NumRefinerBlocks != 1 || man.AdaLNCache != nil || len(man.Quant.DenseKeys) != 0 {
				t.Fatalf("manifest %+v, quantization %+v", man, man.Quant)
			}
			if qk := man.Quant.QuantizedKeys["blocks.0.attn.to_q.weight"]; !qk.HasBiases || qk.DequantizedDType != "fp32" {
				t.Fatalf("quantized_keys entry %+v", qk)
			}
			var back map[string]any
			if err := json.Unmarshal(man.Config, &back); err != nil || back["hidden_size"] != float64(128) {
				t.Fatalf("config did not round-trip: %v %v", err, back)
			}
		})
	}
}

// checkConverted checks the released tensor name of the converted checkpoint c against src: exactly the
// core linears are quantized, with the scheme asked for (their data is checked by quant's round-trip test
// and, through the forward, by TestQuantizedForward), and every other tensor reads back byte for byte.
func checkConverted(t *testing.T, c *quant.Checkpoint, src weights.Source, name string, bits int) {
	t.Helper()
	s, quantized := c.Scheme(name)
	if quantized != isCoreLinear(name) || (quantized && (s.Bits != bits || s.GroupSize != 64)) {
		t.Fatalf("%s: quantized = %v, scheme %+v", name, quantized, s)
	}
	if quantized {
		return
	}
	want, _ := src.Tensor(name)
	got, ok := c.Tensor(name)
	if !ok || got.DType != want.DType || !slices.Equal(got.Shape, want.Shape) || !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("%s does not read back byte for byte", name)
	}
}

// TestConvertAdaLN: with a cache the AdaLN projections are left out and the cache tensors and manifest
// entry are written (where ReadAdaLNManifest finds it); a cache with a tensor missing is refused.
func TestConvertAdaLN(t *testing.T) {
	fx := tinyFixture(t)
	cache := &AdaLNManifest{Timesteps: []float32{0, 0.25, 1}, NumBlocks: 2, TablesPerBlock: 6, Steps: 1}
	var cts []safetensors.Tensor
	for b := 0; b < 2; b++ {
		for k := 0; k < 6; k++ {
			cts = append(cts, safetensors.Tensor{Name: CacheTableName(b, k), DType: safetensors.F32, Shape: []int{9, 128}, Data: make([]byte, 9*128*4)})
		}
	}
	for _, n := range []string{CacheNormOutShift, CacheNormOutScale} {
		cts = append(cts, safetensors.Tensor{Name: n, DType: safetensors.F32, Shape: []int{3, 128}, Data: make([]byte, 3*128*4)})
	}
	opts := ConvertOptions{Scheme: quant.Scheme{Bits: 8, GroupSize: 64}, AdaLN: cache, AdaLNTensors: cts}
	c, man := openFixtureConverted(t, fx, opts)
	names := strings.Join(c.Names(), " ")
	if strings.Contains(names, "adaln_proj") || strings.Contains(names, "norm_out.linear") || !strings.Contains(names, CacheTableName(1, 5)) {
		t.Fatalf("names: %s", names)
	}
	if a := man.AdaLNCache; a == nil || !slices.Equal(a.Timesteps, cache.Timesteps) || a.TablesPerBlock != 6 || a.Steps != 1 {
		t.Fatalf("adaln_cache entry %+v", man.AdaLNCache)
	}
	got, err := ReadAdaLNManifest(c.Dir)
	if err != nil || got == nil || got.NumBlocks != 2 || !slices.Equal(got.Timesteps, cache.Timesteps) {
		t.Fatalf("ReadAdaLNManifest of the converted folder: %+v, %v", got, err)
	}
	opts.AdaLNTensors = cts[:len(cts)-1]
	if _, _, err := Convert(fx.Weights(), fixtureArch(t, fx), opts); !errors.Is(err, quant.ErrManifest) {
		t.Fatalf("cache with a tensor missing: %v", err)
	}
}

// TestConvertedManifestErrors: a manifest without the transformer config is refused when read; a source
// that is not an H3 transformer, or a bad scheme, is refused by Convert.
func TestConvertedManifestErrors(t *testing.T) {
	fx := tinyFixture(t)
	c, man := openFixtureConverted(t, fx, ConvertOptions{Scheme: quant.Scheme{Bits: 8, GroupSize: 64}})
	man.Config = nil
	if err := WriteConvertedManifest(c.Dir, man); !errors.Is(err, quant.ErrManifest) {
		t.Fatalf("writing a manifest without config: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(c.Dir, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "config")
	raw, _ = json.Marshal(doc)
	if err := os.WriteFile(filepath.Join(c.Dir, ManifestFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadConvertedManifest(c.Dir); !errors.Is(err, quant.ErrManifest) || !strings.Contains(err.Error(), "config") {
		t.Fatalf("reading a manifest without config: %v", err)
	}
	if _, _, err := Convert(weights.NewSynthetic(1, map[string][]int{"proj_in.weight": {4, 4}}, nil), fixtureArch(t, fx), ConvertOptions{Scheme: quant.Scheme{Bits: 8, GroupSize: 64}}); err == nil {
		t.Fatal("Convert accepted a source without transformer blocks")
	}
	if _, _, err := Convert(fx.Weights(), fixtureArch(t, fx), ConvertOptions{Scheme: quant.Scheme{Bits: 3, GroupSize: 64}}); !errors.Is(err, quant.ErrBits) {
		t.Fatalf("Convert bits 3: %v", err)
	}
}
