package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"fastvideo/dit/h3"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/quant"
	"fastvideo/schedule"

	"fastvideo/examples/internal/clitest"
)

// releasedFolder writes the tiny DiT fixture as a released transformer/ folder: config.json and two
// shards with an index.
func releasedFolder(t *testing.T) string {
	t.Helper()
	fx, err := testutil.OpenFixture("../../dit/h3/testdata/h3_dit_tiny.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer fx.File.Close()
	var arch map[string]any
	if err := fx.DecodeConfig(&arch, "arch_config"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg, _ := json.Marshal(arch)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	src := fx.Weights()
	var shards [2][]safetensors.Tensor
	index := map[string]any{"metadata": map[string]any{}, "weight_map": map[string]string{}}
	for i, name := range src.Names() {
		info, _ := src.Tensor(name)
		data := append([]byte(nil), info.Data...)
		shards[i%2] = append(shards[i%2], safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: data})
		index["weight_map"].(map[string]string)[name] = []string{"a.safetensors", "b.safetensors"}[i%2]
	}
	for i, f := range []string{"a.safetensors", "b.safetensors"} {
		if err := safetensors.WriteFile(filepath.Join(dir, f), shards[i], nil); err != nil {
			t.Fatal(err)
		}
	}
	idx, _ := json.Marshal(index)
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// convertAndOpen runs the converter from in to out with args and opens the result (closed when the
// test ends).
func convertAndOpen(t *testing.T, in, out string, args ...string) (*quant.Checkpoint, *h3.ConvertedManifest) {
	t.Helper()
	var log strings.Builder
	if err := run(append([]string{"-in", in, "-out", out}, args...), &log); err != nil {
		t.Fatal(err)
	}
	t.Log(log.String())
	ck, cm, err := h3.OpenConverted(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck, cm
}

func TestConvertWithAdaLNCache(t *testing.T) {
	in := releasedFolder(t)
	out := filepath.Join(t.TempDir(), "int6")
	ck, cm := convertAndOpen(t, in, out, "-bits", "6", "-adaln-steps", "4", "-adaln-dtype", "f32", "-backend", "go:ops_sequential")
	sched, _ := schedule.NewH3Schedule(4)
	want := sched.AdaLNCacheTimesteps()
	if a := cm.AdaLNCache; a == nil || !slices.Equal(a.Timesteps, want) || a.NumBlocks != 2 || a.Steps != 4 {
		t.Fatalf("adaln_cache %+v, want timesteps %v", cm.AdaLNCache, want)
	}
	// dit/h3 finds the cache in the manifest.
	man, err := h3.ReadAdaLNManifest(out)
	if err != nil || man == nil || !slices.Equal(man.Timesteps, want) {
		t.Fatalf("h3.ReadAdaLNManifest: %+v, %v", man, err)
	}
	for _, n := range ck.Names() {
		if strings.Contains(n, "adaln_proj") || strings.HasPrefix(n, "norm_out.linear") {
			t.Fatalf("%s kept next to the AdaLN cache", n)
		}
	}
	table, ok := ck.Tensor(h3.CacheTableName(1, 5))
	if !ok || !slices.Equal(table.Shape, []int{len(want) * 3, 128}) {
		t.Fatalf("cache table %v (ok %v), want [%d, 128]", table.Shape, ok, len(want)*3)
	}
	if len(ck.QuantizedKeys()) != 18 || cm.Quant.Quantization.Bits != 6 {
		t.Fatalf("%d quantized keys, bits %d", len(ck.QuantizedKeys()), cm.Quant.Quantization.Bits)
	}
	// The converted checkpoint is shared like the release it came from (a temp file alone is 0600).
	files, _ := os.ReadDir(out)
	for _, f := range files {
		if info, err := f.Info(); err != nil || info.Mode().Perm()&0o044 != 0o044 {
			t.Errorf("%s is not readable by group and others: %v %v", f.Name(), info.Mode(), err)
		}
	}
	// Converting the output again is refused as such, not as a folder without config.json.
	if err := run([]string{"-in", out, "-out", t.TempDir()}, io.Discard); err == nil || !strings.Contains(err.Error(), "already a converted checkpoint") {
		t.Errorf("converting a converted checkpoint: %v", err)
	}
}

func TestConvertFlagErrors(t *testing.T) {
	in := releasedFolder(t)
	out := t.TempDir()
	if err := run([]string{"-in", in, "-out", out, "-bits", "5"}, io.Discard); !errors.Is(err, quant.ErrBits) {
		t.Errorf("-bits 5: %v", err)
	}
	if err := run([]string{"-in", in, "-out", out, "-group", "48"}, io.Discard); !errors.Is(err, quant.ErrGroupSize) {
		t.Errorf("-group 48: %v", err)
	}
	if err := run([]string{"-out", out}, io.Discard); err == nil {
		t.Error("missing -in accepted")
	}
	if err := run([]string{"-in", in, "-out", out, "-scale-dtype", "int8"}, io.Discard); err == nil {
		t.Error("-scale-dtype int8 accepted")
	}
	if _, err := os.Stat(filepath.Join(out, h3.ManifestFile)); err == nil {
		t.Error("a failed conversion wrote a manifest")
	}
}

func TestConvertExitCodes(t *testing.T) {
	in := releasedFolder(t)
	out := t.TempDir()
	empty := t.TempDir()
	noConfig := t.TempDir()
	if err := os.WriteFile(filepath.Join(noConfig, "model.safetensors"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link-to-in")
	if err := os.Symlink(in, link); err != nil {
		t.Fatal(err)
	}
	fifoConfig := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(fifoConfig, "config.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	notH3 := t.TempDir()
	if err := os.WriteFile(filepath.Join(notH3, "config.json"), []byte(`{"model_type": "wan"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want int
		says []string // the message names the flag, the value and the fix
	}{
		{[]string{"-help"}, 0, nil},
		{[]string{"-nonsense"}, 2, nil},
		{[]string{"-out", out}, 2, []string{"-in"}},
		{[]string{"-in", in, "-out", out, "-bits", "5"}, 2, []string{"-bits 5"}},
		{[]string{"-in", in, "-out", out, "-scale-dtype", "int8"}, 2, []string{"-scale-dtype", "int8"}},
		{[]string{"-in", in, "-out", out, "-adaln-dtype", "f64"}, 2, []string{"-adaln-dtype", "f64"}},
		{[]string{"-in", filepath.Join(in, "missing"), "-out", out}, 2, []string{"-in", "missing", "released transformer/ folder"}},
		{[]string{"-in", empty, "-out", out}, 2, []string{"-in", empty, "empty", "released transformer/ folder"}},
		{[]string{"-in", noConfig, "-out", out}, 2, []string{"-in", noConfig, "config.json"}},
		{[]string{"-in", notH3, "-out", out}, 2, []string{"-in", notH3, "not a released H3 transformer"}},
		{[]string{"-in", in, "-out", in}, 2, []string{"-out", in, "outside"}},
		{[]string{"-in", in, "-out", filepath.Join(in, "int6")}, 2, []string{"-out", "inside"}},
		{[]string{"-in", in, "-out", link}, 2, []string{"-out", link, "outside"}},
		{[]string{"-in", fifoConfig, "-out", out}, 2, []string{"-in", "config.json", "not a regular file"}},
		{[]string{"-in", in, "-out", filepath.Join(link, "new", "int6")}, 2, []string{"-out", "inside"}},
	} {
		var stderr strings.Builder
		if got := exitCode(run(c.args, io.Discard), &stderr); got != c.want {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, got, c.want, stderr.String())
		}
		for _, s := range c.says {
			if !strings.Contains(stderr.String(), s) {
				t.Errorf("%v: message %q does not say %q", c.args, stderr.String(), s)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(in, "int6")); err == nil {
		t.Error("a refused -out inside -in was created")
	}
	// A panic is an internal error (1), never invalid input (2).
	var stderr strings.Builder
	if got := exitCode(guarded(func() error { panic("boom") }), &stderr); got != 1 || !strings.Contains(stderr.String(), "internal error: boom") {
		t.Errorf("panic: exit %d, message %q; want 1 and an internal error", got, stderr.String())
	}
}

// TestConvertFloatMode: -mode nvfp4 -global-scale writes a folder that h3.Load reads (the 18 core
// linears in the manifest, no affine key), and the flags a float mode does not use are refused.
func TestConvertFloatMode(t *testing.T) {
	in := releasedFolder(t)
	out := filepath.Join(t.TempDir(), "nvfp4")
	ck, cm := convertAndOpen(t, in, out, "-mode", "nvfp4", "-global-scale")
	q := cm.Quant.Quantization
	if q.Mode != quant.ModeNVFP4 || len(cm.Quant.QuantizedKeys) != 18 || len(ck.QuantizedKeys()) != 0 {
		t.Fatalf("quantization %+v, %d quantized keys, %d affine", q, len(cm.Quant.QuantizedKeys), len(ck.QuantizedKeys()))
	}
	for k, e := range cm.Quant.QuantizedKeys {
		if g, err := e.Global(k); err != nil || g <= 0 {
			t.Fatalf("%s: global scale %g, %v", k, g, err)
		}
	}
	m, err := h3.Load(testutil.Backend(t), out, h3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	for _, args := range [][]string{
		{"-mode", "fp6"}, {"-mode", "mxfp8", "-bits", "8"}, {"-mode", "mxfp4", "-scale-dtype", "f32"},
		{"-mode", "mxfp8", "-global-scale"}, {"-global-scale"},
		{"-adaln-steps", "101"}, {"-adaln-steps", "1000000000"}, // bounded before anything is computed
	} {
		err := run(append([]string{"-in", in, "-out", t.TempDir()}, args...), io.Discard)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: want a usage error, got %v", args, err)
		}
	}
}

// TestReadmeListsEveryFlag: the README's flag table of convert is complete.
func TestReadmeListsEveryFlag(t *testing.T) {
	var help bytes.Buffer
	run([]string{"-h"}, &help)
	clitest.CheckReadmeFlags(t, "convert", help.String())
}
