// Package testutil is the golden-fixture harness shared by every parity test.
//
// Fixtures are safetensors files produced by running FastVideo's own PyTorch
// modules on tiny random configs; their JSON (the `refgen` metadata key, also the
// `.json` sidecar) holds the config and a "kind". A parity test names a kind and
// runs every fixture of that kind in its package's testdata/ and in the folder
// named by FASTVIDEO_EXTRA_FIXTURES, one subtest per file, so that a new golden
// case is tested by dropping a file in, without touching code.
package testutil

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/gomlx/compute"

	"fastvideo/internal/backend"
	"fastvideo/internal/safetensors"
)

// ExtraFixturesEnv names a folder of additional fixtures to run beside testdata/.
const ExtraFixturesEnv = "FASTVIDEO_EXTRA_FIXTURES"

// Fixture is one opened golden file.
type Fixture struct {
	Name   string // file name without extension: the subtest name
	Path   string
	Kind   string
	Config map[string]any // the whole refgen JSON
	raw    []byte
	File   *safetensors.File
}

// DecodeConfig unmarshals the refgen JSON (or, with a key path, one of its
// fields, e.g. DecodeConfig(&cfg, "arch_config")) into v.
func (fx *Fixture) DecodeConfig(v any, path ...string) error {
	var cur any = fx.Config
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok || m[p] == nil {
			return fmt.Errorf("fixture %s: no %q in its JSON", fx.Name, strings.Join(path, "."))
		}
		cur = m[p]
	}
	b, err := json.Marshal(cur)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Has reports whether the fixture stores a tensor.
func (fx *Fixture) Has(name string) bool { _, ok := fx.File.Tensor(name); return ok }

// Names lists stored tensors with the prefix, sorted.
func (fx *Fixture) Names(prefix string) []string {
	var out []string
	for _, n := range fx.File.Names() {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Info returns a tensor's raw description, failing the test when it is missing.
func (fx *Fixture) Info(t testing.TB, name string) safetensors.Info {
	t.Helper()
	info, ok := fx.File.Tensor(name)
	if !ok {
		t.Fatalf("fixture %s has no tensor %q", fx.Name, name)
	}
	return info
}

// F32 reads a floating tensor as float32 with its shape.
func (fx *Fixture) F32(t testing.TB, name string) ([]float32, []int) {
	return read(t, fx, name, safetensors.Info.Float32s)
}

// F64 reads a floating tensor as float64 (exact for F64 tensors).
func (fx *Fixture) F64(t testing.TB, name string) ([]float64, []int) {
	return read(t, fx, name, safetensors.Info.Float64s)
}

// I64 reads an integer tensor of any width as int64.
func (fx *Fixture) I64(t testing.TB, name string) ([]int64, []int) {
	return read(t, fx, name, safetensors.Info.Int64s)
}

// TokenIDs reads a [1, S] integer tensor (a text encoder's input ids or attention mask) as ints; the
// encoders are batch-1, so another shape fails the test rather than being flattened.
func (fx *Fixture) TokenIDs(t testing.TB, name string) []int {
	t.Helper()
	v, shape := fx.I64(t, name)
	if len(shape) != 2 || shape[0] != 1 {
		t.Fatalf("%s has shape %v; the encoder is batch-1, want [1, S]", name, shape)
	}
	ids := make([]int, len(v))
	for i, x := range v {
		ids[i] = int(x)
	}
	return ids
}

// read converts tensor name with convert and returns it with its shape; a failure fails the test.
func read[T any](t testing.TB, fx *Fixture, name string, convert func(safetensors.Info) ([]T, error)) ([]T, []int) {
	t.Helper()
	info := fx.Info(t, name)
	v, err := convert(info)
	if err != nil {
		t.Fatalf("fixture %s: %v", fx.Name, err)
	}
	return v, info.Shape
}

// Weights is the fixture's `w.` namespace with the prefix stripped: the released
// checkpoint names, ready for weight binding.
func (fx *Fixture) Weights() *PrefixSource { return &PrefixSource{File: fx.File, Prefix: "w."} }

// PrefixSource exposes the tensors of a file that share a prefix, without it.
type PrefixSource struct {
	File   *safetensors.File
	Prefix string
}

// Names lists the stripped names, sorted.
func (p *PrefixSource) Names() []string {
	var out []string
	for _, n := range p.File.Names() {
		if strings.HasPrefix(n, p.Prefix) {
			out = append(out, strings.TrimPrefix(n, p.Prefix))
		}
	}
	sort.Strings(out)
	return out
}

// Tensor looks a stripped name up.
func (p *PrefixSource) Tensor(name string) (safetensors.Info, bool) {
	info, ok := p.File.Tensor(p.Prefix + name)
	if ok {
		info.Name = name
	}
	return info, ok
}

// OpenFixture opens one fixture file and parses its refgen JSON.
func OpenFixture(path string) (*Fixture, error) {
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, err
	}
	raw := f.Metadata["refgen"]
	if raw == "" {
		f.Close()
		return nil, fmt.Errorf("fixture %s has no refgen metadata", path)
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		f.Close()
		return nil, fmt.Errorf("fixture %s: refgen metadata is not JSON: %v", path, err)
	}
	kind, _ := cfg["kind"].(string)
	return &Fixture{
		Name:   strings.TrimSuffix(filepath.Base(path), ".safetensors"),
		Path:   path,
		Kind:   kind,
		Config: cfg,
		raw:    []byte(raw),
		File:   f,
	}, nil
}

// FixturePaths lists the fixtures of a kind in dir (not recursive).
func FixturePaths(dir, kind string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var out []string
	for _, p := range paths {
		fx, err := OpenFixture(p)
		if err != nil {
			continue // not a fixture (e.g. a checkpoint used by another test)
		}
		if fx.Kind == kind {
			out = append(out, p)
		}
		fx.File.Close()
	}
	return out, nil
}

// ForEachFixture runs fn as a subtest for every fixture of kind found in
// testdata/ and in $FASTVIDEO_EXTRA_FIXTURES. It fails when testdata/ holds none,
// so that a lost fixture cannot turn a parity test into one that passes vacuously.
func ForEachFixture(t *testing.T, kind string, fn func(t *testing.T, fx *Fixture)) {
	t.Helper()
	local, err := FixturePaths("testdata", kind)
	if err != nil {
		t.Fatal(err)
	}
	if len(local) == 0 {
		t.Fatalf("no fixture of kind %q in testdata/: copy one from ../shared/fixtures", kind)
	}
	all := local
	if extra := os.Getenv(ExtraFixturesEnv); extra != "" {
		more, err := FixturePaths(extra, kind)
		if err != nil {
			t.Fatalf("%s=%s: %v", ExtraFixturesEnv, extra, err)
		}
		all = append(all, more...)
	}
	for _, p := range all {
		fx, err := OpenFixture(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(fx.Name, func(t *testing.T) {
			defer fx.File.Close()
			fn(t, fx)
		})
	}
}

// ForEachPendingFixture is ForEachFixture for a fixture kind whose golden file is generated on the
// GPU machine and committed after the code: while testdata/ holds none it skips, naming the
// generator to run; once one is there it behaves exactly like ForEachFixture.
func ForEachPendingFixture(t *testing.T, kind, generator string, fn func(t *testing.T, fx *Fixture)) {
	t.Helper()
	local, err := FixturePaths("testdata", kind)
	if err != nil {
		t.Fatal(err)
	}
	if len(local) == 0 {
		t.Skipf("no fixture of kind %q in testdata/ yet: generate it with %s on the GPU machine", kind, generator)
	}
	ForEachFixture(t, kind, fn)
}

// ParityTol is the project's f32 parity tolerance: 1e-4 x max(1, max|ref|).
func ParityTol(want []float32) float64 {
	m := 0.0
	for _, v := range want {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return 1e-4 * math.Max(1, m)
}

// Diff summarizes the worst element of got against want.
type Diff struct {
	MaxAbs   float64
	Index    int
	Got      float64
	Want     float64
	MaxRef   float64
	NaNFound bool
}

// Compare returns the worst absolute difference; a NaN on either side counts as
// infinitely wrong so that it can never hide below a tolerance.
func Compare(got, want []float32) Diff {
	var d Diff
	d.Index = -1
	for i := range want {
		w := float64(want[i])
		d.MaxRef = math.Max(d.MaxRef, math.Abs(w))
		if i >= len(got) {
			break
		}
		g := float64(got[i])
		diff := math.Abs(g - w)
		if math.IsNaN(diff) {
			diff = math.Inf(1)
			d.NaNFound = true
		}
		if diff > d.MaxAbs || d.Index < 0 {
			d.MaxAbs, d.Index, d.Got, d.Want = diff, i, g, w
		}
	}
	return d
}

// Unravel turns a flat index into coordinates of shape.
func Unravel(i int, shape []int) []int {
	idx := make([]int, len(shape))
	for k := len(shape) - 1; k >= 0; k-- {
		if shape[k] > 0 {
			idx[k] = i % shape[k]
			i /= shape[k]
		}
	}
	return idx
}

// AssertClose fails the test when any element differs by more than atol,
// reporting the worst element's coordinates and values.
func AssertClose(t testing.TB, label string, got, want []float32, shape []int, atol float64) Diff {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: got %d values, want %d (shape %v)", label, len(got), len(want), shape)
		return Diff{MaxAbs: math.Inf(1)}
	}
	d := Compare(got, want)
	if d.MaxAbs > atol {
		t.Errorf("%s: max abs error %.3g > tol %.3g at %v (got %.7g, want %.7g; max|ref| %.4g)",
			label, d.MaxAbs, atol, Unravel(d.Index, shape), d.Got, d.Want, d.MaxRef)
	} else {
		t.Logf("%s: max abs error %.3g (tol %.3g, max|ref| %.4g)", label, d.MaxAbs, atol, d.MaxRef)
	}
	return d
}

// TestBackendEnv overrides the backend parity tests run on (default: the pure-Go
// backend, sequential, because its default parallelism can deadlock).
const TestBackendEnv = "FASTVIDEO_TEST_BACKEND"

var (
	backendOnce sync.Once
	backendVal  compute.Backend
	backendErr  error
)

// BackendSpec is the backend tests run on: $FASTVIDEO_TEST_BACKEND, else the pure-Go backend.
func BackendSpec() string {
	if v := os.Getenv(TestBackendEnv); v != "" {
		return v
	}
	return "go:ops_sequential"
}

// Backend returns the shared backend for tests.
func Backend(t testing.TB) compute.Backend {
	t.Helper()
	backendOnce.Do(func() { backendVal, backendErr = backend.New(BackendSpec()) })
	if backendErr != nil {
		t.Fatalf("test backend: %v", backendErr)
	}
	return backendVal
}
