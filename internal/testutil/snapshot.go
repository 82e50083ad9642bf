package testutil

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// SnapshotWriter writes the files of a test model snapshot folder (configs, safetensors weights,
// tokenizer files) under Dir; any error fails the test.
type SnapshotWriter struct {
	T   testing.TB
	Dir string
}

// File writes data to the path rel of the snapshot, creating its folders.
func (w SnapshotWriter) File(rel string, data []byte) {
	w.T.Helper()
	p := filepath.Join(w.Dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		w.T.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		w.T.Fatal(err)
	}
}

// Config writes v as a JSON config; a non-empty class is added as its diffusers "_class_name".
func (w SnapshotWriter) Config(rel, class string, v any) {
	w.T.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		w.T.Fatal(err)
	}
	if class != "" {
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			w.T.Fatal(err)
		}
		m["_class_name"] = class
		if data, err = json.Marshal(m); err != nil {
			w.T.Fatal(err)
		}
	}
	w.File(rel, data)
}

// Weights writes every tensor of src, unchanged, to the safetensors file rel.
func (w SnapshotWriter) Weights(rel string, src weights.Source) {
	w.T.Helper()
	var ts []safetensors.Tensor
	for _, n := range src.Names() {
		info, _ := src.Tensor(n)
		ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: info.Data})
	}
	p := filepath.Join(w.Dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		w.T.Fatal(err)
	}
	if err := safetensors.WriteFile(p, ts, nil); err != nil {
		w.T.Fatal(err)
	}
}

// MissingFile is a file of a snapshot that opening the snapshot must name when it is missing, and
// whether the error is then invalid input (rather than another error).
type MissingFile struct {
	Remove, Named string
	Invalid       bool
}

// CheckEachMissing moves each file of the snapshot dir away in turn and checks that open fails
// with an error naming it, of the kind invalid reports; the file is put back after each check.
func CheckEachMissing(t testing.TB, dir string, files []MissingFile, open func() error, invalid func(error) bool) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(dir, f.Remove)
		if err := os.Rename(p, p+".away"); err != nil {
			t.Fatal(err)
		}
		err := open()
		if err == nil || !strings.Contains(err.Error(), f.Named) {
			t.Errorf("without %s: error %v, want one naming %q", f.Remove, err, f.Named)
		} else if invalid(err) != f.Invalid {
			t.Errorf("without %s: error %v: invalid input %v, want %v", f.Remove, err, invalid(err), f.Invalid)
		}
		if err := os.Rename(p+".away", p); err != nil {
			t.Fatal(err)
		}
	}
}

// DirNames lists the names in dir, for tests that check what a writer left behind (a failed or
// cancelled write must leave no temporary file); an unreadable dir fails the test.
func DirNames(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// SameBits reports whether a and b hold the very same float32 values, bit for bit.
func SameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// JSONObject is v marshalled and read back as a JSON object: the keys and values a client of the
// JSON sees.
func JSONObject(t testing.TB, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
