package testutil

import (
	"encoding/json"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

func TestEditSource(t *testing.T) {
	base := weights.MapSource{"a": {Name: "a", Shape: []int{1}}, "b": {Name: "b", Shape: []int{2}}}
	e := &EditSource{Base: base, Hide: func(n string) bool { return n == "a" },
		Replace: map[string]safetensors.Info{"b": {Name: "b", Shape: []int{3}}, "c": {Name: "c"}}}
	if got := e.Names(); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("Names() = %v, want [b c]", got)
	}
	if _, ok := e.Tensor("a"); ok {
		t.Error("a hidden name is visible")
	}
	if info, ok := e.Tensor("b"); !ok || info.Shape[0] != 3 {
		t.Errorf("b = %v, %v; want the replacement", info, ok)
	}
}

func TestParseConfigAndReleaseFolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.safetensors")
	var ts []safetensors.Tensor
	for _, n := range []string{"w.a", "w.b", "w.c", "in.x"} {
		ts = append(ts, safetensors.Tensor{Name: n, DType: safetensors.F32, Shape: []int{1}, Data: safetensors.F32Bytes([]float32{1})})
	}
	meta := map[string]string{"refgen": `{"kind": "tiny", "arch_config": {"width": 4}}`}
	if err := safetensors.WriteFile(path, ts, meta); err != nil {
		t.Fatal(err)
	}
	fx, err := OpenFixture(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fx.File.Close()
	type cfg struct{ Width int }
	c := ParseConfig(t, fx, func(b []byte) (c cfg, err error) { return c, json.Unmarshal(b, &c) }, "arch_config")
	if c.Width != 4 {
		t.Errorf("ParseConfig(arch_config) = %+v, want width 4", c)
	}
	for _, shards := range []int{1, 2} {
		dir := WriteReleaseFolder(t, fx, ReleaseFolder{ConfigPath: []string{"arch_config"}, Extra: map[string]any{"_class_name": "X"}, Shards: shards})
		ck, err := safetensors.OpenCheckpoint(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := ck.Names(); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Errorf("%d shards: names %v, want [a b c]", shards, got)
		}
		ck.Close()
		b, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil || string(b) != `{"_class_name":"X","width":4}` {
			t.Errorf("config.json = %s, %v", b, err)
		}
	}
}

func TestRelativeHelpers(t *testing.T) {
	if MaxAbs([]float32{1, -3, 2}) != 3 || MaxAbsDiff([]float32{1, 2}, []float32{1.5, 0}) != 2 {
		t.Error("MaxAbs or MaxAbsDiff")
	}
	if !math.IsNaN(MaxAbsDiff([]float32{float32(math.NaN())}, []float32{0})) {
		t.Error("MaxAbsDiff must propagate NaN")
	}
	// The bound follows the dtype's precision and the reference's scale: 8 bf16 roundoffs (2^-8) of
	// max|ref| = 100 is 3.125.
	if tol := DTypeTol(dtypes.BFloat16, []float32{-100, 1}); tol != 3.125 {
		t.Errorf("DTypeTol(bf16, max|ref| 100) = %v, want 3.125", tol)
	}
	if tol := DTypeTol(dtypes.Float32, []float32{-100, 1}); tol != ParityTol([]float32{-100}) {
		t.Errorf("DTypeTol(f32) = %v, want the parity tolerance", tol)
	}
	// Within each dtype's bound: equal values in f32, a 0.25 % error in bf16.
	AssertAtDType(t, "f32", dtypes.Float32, []float32{1, 2}, []float32{1, 2}, nil)
	AssertAtDType(t, "bf16", dtypes.BFloat16, []float32{1, 2.005}, []float32{1, 2}, nil)
	if got := Transpose01([]float32{1, 2, 3, 4, 5, 6}, 2, 3, 1); !slices.Equal(got, []float32{1, 4, 2, 5, 3, 6}) {
		t.Errorf("Transpose01 = %v", got)
	}
}

func TestCaptureSlog(t *testing.T) {
	c := CaptureSlog(t, "quant.Linear", "path")
	slog.Debug("quant.Linear", "rows", 4, "path", "dense")
	slog.Debug("other", "path", "ignored")
	slog.Info("quant.Linear", "path", "quantized")
	if got := c.Take(); !slices.Equal(got, []string{"dense", "quantized"}) {
		t.Errorf("Take = %q, want [dense quantized]", got)
	}
	if got := c.Take(); len(got) != 0 {
		t.Errorf("a second Take = %q, want nothing", got)
	}
}

func TestMaxBF16Steps(t *testing.T) {
	for _, c := range []struct {
		got, want float32
		steps     float64
	}{
		{1.09375, 1.1015625, 1}, // adjacent bf16 values above 1: a step of 2^-7
		{1, 1.015625, 2},
		{0.5, 0.50390625, 1}, // below 1 a step is 2^-8
		{0, 0.00390625, 1},   // near zero the bound stays 2^-8, not the tiny spacing there
		{-3, -3.015625, 1},   // [2, 4): 2^-6
		{0.25, 0.25, 0},
	} {
		if got := MaxBF16Steps([]float32{c.got}, []float32{c.want}); got != c.steps {
			t.Errorf("MaxBF16Steps(%g, %g) = %g, want %g", c.got, c.want, got, c.steps)
		}
	}
}

func TestBF16Spacing(t *testing.T) {
	for _, c := range []struct{ v, spacing float64 }{
		{1, 0x1p-7}, {1.7734375, 0x1p-7}, // 1.7734375 and 1.78125 are adjacent
		{0.5, 0x1p-8}, {12.5, 0x1p-4}, {3, 0x1p-6},
		{0, 0x1p-133}, // below the smallest normal, its spacing
	} {
		if got := BF16Spacing(c.v); got != c.spacing {
			t.Errorf("BF16Spacing(%g) = %g, want %g", c.v, got, c.spacing)
		}
	}
}
