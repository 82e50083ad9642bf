package testutil

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/backend"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// ParseConfig hands the fixture's JSON (with a key path, one of its fields, e.g. "arch_config") to a
// model package's ParseConfig, so a fixture's config is read exactly as a checkpoint's config.json
// would be. An error fails the test.
func ParseConfig[C any](t testing.TB, fx *Fixture, parse func([]byte) (C, error), path ...string) C {
	t.Helper()
	var raw json.RawMessage
	if err := fx.DecodeConfig(&raw, path...); err != nil {
		t.Fatal(err)
	}
	cfg, err := parse(raw)
	if err != nil {
		t.Fatalf("fixture %s config: %v", fx.Name, err)
	}
	return cfg
}

// ConfigReader is ParseConfig bound to a model package's parser and key path: the fixtureConfig of
// that package's tests.
func ConfigReader[C any](parse func([]byte) (C, error), path ...string) func(testing.TB, *Fixture) C {
	return func(t testing.TB, fx *Fixture) C {
		t.Helper()
		return ParseConfig(t, fx, parse, path...)
	}
}

// EditSource is a weights.Source over Base with names hidden (Hide returns true) and tensors replaced
// or added (Replace): a checkpoint with a missing, misshapen or unexpected tensor, for binding tests.
type EditSource struct {
	Base    weights.Source
	Hide    func(name string) bool
	Replace map[string]safetensors.Info
}

// Names lists the visible names, sorted.
func (e *EditSource) Names() []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range e.Base.Names() {
		if e.Hide != nil && e.Hide(n) {
			continue
		}
		seen[n] = true
		out = append(out, n)
	}
	for n := range e.Replace {
		if !seen[n] {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Tensor returns the replacement of name, else Base's tensor unless hidden.
func (e *EditSource) Tensor(name string) (safetensors.Info, bool) {
	if info, ok := e.Replace[name]; ok {
		return info, true
	}
	if e.Hide != nil && e.Hide(name) {
		return safetensors.Info{}, false
	}
	return e.Base.Tensor(name)
}

// MaxAbs is max|v| (0 for no values).
func MaxAbs(v []float32) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, math.Abs(float64(x)))
	}
	return m
}

// MaxAbsDiff is max|a[i] − b[i]| over the values of a (b at least as long); a NaN makes it NaN.
func MaxAbsDiff(a, b []float32) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

// MaxBF16Steps is the largest difference between got and want in bfloat16 steps: each value's
// |got - want| over the spacing of bfloat16 numbers at the larger magnitude of the two, never less
// than the spacing just below 1 (2^-8), so that a value near zero is held to the same absolute bound
// as one near 1/2. A kernel that rounds its bf16 output once lands within one step of another that
// does; a fixed 2^-8 would call a one-step difference at 1.1 (a step of 2^-7 there) two.
func MaxBF16Steps(got, want []float32) float64 {
	m := 0.0
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		m = math.Max(m, math.Abs(g-w)/BF16Spacing(math.Max(math.Max(math.Abs(g), math.Abs(w)), 0.5)))
	}
	return m
}

// BF16Spacing is the distance between adjacent bfloat16 numbers at magnitude v: the step of the binade
// holding v (8 significant bits), the smallest normal's below it.
func BF16Spacing(v float64) float64 {
	_, exp := math.Frexp(math.Max(v, 0x1p-126)) // v = f·2^exp, f in [0.5, 1)
	return math.Ldexp(1, exp-8)
}

// AssertBitExact fails the test at the first value of got whose bits differ from want's, or on a
// length mismatch: for results that must be bit-identical to the reference, not merely close.
func AssertBitExact(t testing.TB, label string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", label, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v (0x%08x), want %v (0x%08x): not bit-exact", label, i, got[i],
				math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// UnitRoundoff is the largest relative error of rounding a real number to dt: 2^-p for a dtype of p
// significant bits (24 for float32, 11 for float16, 8 for bfloat16).
func UnitRoundoff(dt dtypes.DType) float64 {
	switch dt {
	case dtypes.Float32:
		return 0x1p-24
	case dtypes.Float16:
		return 0x1p-11
	case dtypes.BFloat16:
		return 0x1p-8
	}
	return math.NaN()
}

// ReducedPrecisionRoundings is how many unit roundoffs of the output's largest magnitude a forward
// computed in a half-precision dtype may be from its float32 reference. Each stage of a model rounds
// its result to the dtype once (matmul outputs, residual adds, norm products) and the errors of the
// last few stages add up at the largest outputs; 8 roundings bound every bfloat16 forward of the
// fixtures (DiTs, VAEs, text encoders) whatever their output scale.
const ReducedPrecisionRoundings = 8

// DTypeTol is the absolute tolerance of a forward computed in dt against the float32 reference want:
// ParityTol for float32, else ReducedPrecisionRoundings unit roundoffs of dt times max|want|.
func DTypeTol(dt dtypes.DType, want []float32) float64 {
	if dt == dtypes.Float32 {
		return ParityTol(want)
	}
	return ReducedPrecisionRoundings * UnitRoundoff(dt) * MaxAbs(want)
}

// AssertAtDType checks a forward computed in dt against the float32 reference want with DTypeTol.
// The label gets the dtype appended.
func AssertAtDType(t testing.TB, label string, dt dtypes.DType, got, want []float32, shape []int) Diff {
	t.Helper()
	if math.IsNaN(UnitRoundoff(dt)) {
		t.Fatalf("%s: no bound for a %s forward; compute in Float32, BFloat16 or Float16", label, dt)
	}
	return AssertClose(t, label+" "+dt.String(), got, want, shape, DTypeTol(dt, want))
}

// GPUTestEnv must be 1 for the GPU tests to run (on a machine with an NVIDIA GPU).
const GPUTestEnv = "FASTVIDEO_GPU_TEST"

// MultiGPUBackend is GPUBackend for a test that needs at least n devices: it skips, saying why,
// where the backend has fewer.
func MultiGPUBackend(t testing.TB, spec string, n int) compute.Backend {
	t.Helper()
	b := GPUBackend(t, spec)
	if b.NumDevices() < n {
		t.Skipf("the backend %s has %d device(s); this test needs %d", b.Name(), b.NumDevices(), n)
	}
	return b
}

// GPUBackend skips the test unless $FASTVIDEO_GPU_TEST is 1, then returns the backend of spec (e.g.
// "xla:cuda,tf32=false"), one per spec for the whole test binary. It is never finalized: a test's
// device tensors are released by the garbage collector after the test, and a buffer destroyed after
// its client crashes the plugin (SIGSEGV in PJRT_Buffer_Destroy, seen when a second GPU test ran).
func GPUBackend(t testing.TB, spec string) compute.Backend {
	t.Helper()
	if os.Getenv(GPUTestEnv) != "1" {
		t.Skipf("set %s=1 on a machine with an NVIDIA GPU", GPUTestEnv)
	}
	gpuBackendsMu.Lock()
	defer gpuBackendsMu.Unlock()
	if b, ok := gpuBackends[spec]; ok {
		return b
	}
	b, err := backend.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	gpuBackends[spec] = b
	return b
}

var (
	gpuBackendsMu sync.Mutex
	gpuBackends   = map[string]compute.Backend{}
)

// Traced is one intermediate a model handed to its test trace hook.
type Traced struct {
	Shape  []int
	Values []float32
}

// Trace collects the named float32 intermediates of a forward (a model's trace hook appends to it).
type Trace map[string]Traced

// Record is a trace hook: it keeps copies of the shape and values under name.
func (tr Trace) Record(name string, shape []int, values []float32) {
	tr[name] = Traced{append([]int(nil), shape...), append([]float32(nil), values...)}
}

// TracedForward sets a model's trace hook to record into a new Trace, runs forward once and returns
// its output with the intermediates it traced.
func TracedForward[O any, H ~func(string, []int, []float32)](t testing.TB, hook *H, forward func() (O, error)) (O, Trace) {
	t.Helper()
	tr := Trace{}
	*hook = H(tr.Record)
	out, err := forward()
	if err != nil {
		t.Fatal(err)
	}
	return out, tr
}

// CheckActs compares every act.* tensor of the fixture with the intermediate traced under the same
// name without the prefix (row-major values; the fixture's batch axis of 1 is implicit), at the parity
// tolerance. layout, when set, returns a traced value in the fixture's layout, or nil when it checked
// that name itself.
func (tr Trace) CheckActs(t *testing.T, fx *Fixture, layout func(name string, got Traced) []float32) {
	t.Helper()
	for _, name := range fx.Names("act.") {
		key := name[len("act."):]
		got, ok := tr[key]
		if !ok {
			t.Errorf("%s: the forward traced no %q", name, key)
			continue
		}
		vals := got.Values
		if layout != nil {
			if vals = layout(key, got); vals == nil {
				continue
			}
		}
		want, shape := fx.F32(t, name)
		AssertClose(t, name, vals, want, shape, ParityTol(want))
	}
}

// Transpose01 swaps the first two axes of a row-major [a, b, c] array (c = 1 for a matrix).
func Transpose01(v []float32, a, b, c int) []float32 {
	out := make([]float32, len(v))
	for i := 0; i < a; i++ {
		for j := 0; j < b; j++ {
			copy(out[(j*a+i)*c:(j*a+i+1)*c], v[(i*b+j)*c:(i*b+j+1)*c])
		}
	}
	return out
}

// ReleaseFolder says how WriteReleaseFolder lays a fixture out.
type ReleaseFolder struct {
	// ConfigPath is the key path of the component's config in the fixture JSON (e.g. "arch_config");
	// empty: the whole JSON.
	ConfigPath []string
	// Extra keys are added to config.json, e.g. the "_class_name" diffusers writes, which loaders must
	// ignore.
	Extra map[string]any
	// Shards > 1 splits the weights round-robin over that many diffusers shards with their index;
	// otherwise they go to one diffusion_pytorch_model.safetensors.
	Shards int
}

// WriteReleaseFolder writes the fixture as a released component folder (transformer/, vae/, …) in a
// temporary directory and returns it: config.json and the w.* tensors under their released names.
func WriteReleaseFolder(t testing.TB, fx *Fixture, opts ReleaseFolder) string {
	t.Helper()
	dir := t.TempDir()
	var cfg map[string]any
	if err := fx.DecodeConfig(&cfg, opts.ConfigPath...); err != nil {
		t.Fatal(err)
	}
	for k, v := range opts.Extra {
		cfg[k] = v
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := safetensors.WriteAtomic(filepath.Join(dir, "config.json"), b); err != nil {
		t.Fatal(err)
	}
	n := max(opts.Shards, 1)
	files := make([]string, n)
	for k := range files {
		files[k] = fmt.Sprintf("diffusion_pytorch_model-%05d-of-%05d.safetensors", k+1, n)
	}
	if n == 1 {
		files[0] = "diffusion_pytorch_model.safetensors"
	}
	src := fx.Weights()
	shards := make([][]safetensors.Tensor, n)
	weightMap := map[string]string{}
	for i, name := range src.Names() {
		info, _ := src.Tensor(name)
		shards[i%n] = append(shards[i%n], safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: info.Data})
		weightMap[name] = files[i%n]
	}
	for k, f := range files {
		if err := safetensors.WriteFile(filepath.Join(dir, f), shards[k], nil); err != nil {
			t.Fatal(err)
		}
	}
	if n > 1 {
		idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
		if err := safetensors.WriteAtomic(filepath.Join(dir, "diffusion_pytorch_model.safetensors.index.json"), idx); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// assertBindsExactly binds src into set (float32 on the pure-Go test backend's host) and fails the
// test unless every declared parameter is bound (optional ones may be absent) and every tensor of src is
// declared: the parameter table and the checkpoint names agree. The set is released afterwards.
func assertBindsExactly(t testing.TB, src weights.Source, set *weights.Set) {
	t.Helper()
	if err := weights.Bind(src, set, weights.Options{}); err != nil {
		t.Fatal(err)
	}
	defer set.Release()
	declared := map[string]bool{}
	for _, p := range set.Params() {
		declared[p.Name] = true
		if !p.Bound() && !p.Optional {
			t.Errorf("%s not bound", p.Name)
		}
	}
	for _, n := range src.Names() {
		if !declared[n] {
			t.Errorf("fixture tensor %s is not declared", n)
		}
	}
}

// assertErrorLists fails the test unless err is an error whose message contains every one of want.
func assertErrorLists(t testing.TB, err error, what string, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s must fail", what)
	}
	for _, s := range want {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: the error does not list %q:\n%v", what, s, err)
		}
	}
}

// assertBindReports checks that a model's weight binding reports every problem of a checkpoint in one
// error: build (binding src) must fail naming the tensor gone (hidden from src) and the tensor
// reshaped (given shape instead), and the counts of both.
func assertBindReports(t testing.TB, src weights.Source, gone, reshaped string, shape []int, build func(*EditSource) error) {
	t.Helper()
	info, _ := src.Tensor(reshaped)
	info.Shape = shape
	bad := &EditSource{Base: src, Hide: func(n string) bool { return n == gone }, Replace: map[string]safetensors.Info{reshaped: info}}
	assertErrorLists(t, build(bad), "binding an incomplete checkpoint", "missing: "+gone, "mismatched: "+reshaped, "1 missing", "1 mismatched")
}

// assertReportsUnexpected checks that build, binding src with the extra tensors added, fails naming
// bogus as unexpected and never mentions ignored (tensors a loader skips on purpose, e.g. the VSA gate
// projections of distilled students).
func assertReportsUnexpected(t testing.TB, src weights.Source, extra map[string]safetensors.Info, bogus, ignored string,
	build func(*EditSource) error) {
	t.Helper()
	err := build(&EditSource{Base: src, Replace: extra})
	if err == nil || !strings.Contains(err.Error(), "unexpected: "+bogus) || strings.Contains(err.Error(), ignored) {
		t.Errorf("want exactly %s reported as unexpected, got %v", bogus, err)
	}
}

// Binding is a model package's checkpoint-binding contract, which CheckBinding checks on every
// fixture of Kind.
type Binding struct {
	Kind string
	// Declared is the parameter set the package declares for the fixture's config.
	Declared func(t *testing.T, fx *Fixture) *weights.Set
	// Open builds the model from src with the fixture's config.
	Open func(t *testing.T, fx *Fixture, src weights.Source) error
	// Gone is hidden and Reshaped given Reshape(its shape): a single error must name both.
	Gone, Reshaped string
	Reshape        func(shape []int) []int
	// Extra tensors (copies of ExtraOf) are added: Bogus, one of them, must be reported as
	// unexpected, and no name containing Ignored (tensors the loader skips on purpose).
	Extra                   []string
	ExtraOf, Bogus, Ignored string
}

// OpenSource is a Binding.Open for a model package: it builds the model with fromSource (the package's
// FromSource) from src, the fixture's config read by fixtureConfig and default options on the test
// backend, and closes it.
func OpenSource[C, O any, M Closer](fixtureConfig func(testing.TB, *Fixture) C,
	fromSource func(compute.Backend, C, weights.Source, O) (M, error)) func(*testing.T, *Fixture, weights.Source) error {
	return func(t *testing.T, fx *Fixture, src weights.Source) error {
		var opts O
		m, err := fromSource(Backend(t), fixtureConfig(t, fx), src, opts)
		if err != nil {
			return err
		}
		return m.Close()
	}
}

// CheckBinding checks that every tensor of each fixture binds and every declared parameter is in
// it, and that the binding errors list every problem of a damaged checkpoint.
func CheckBinding(t *testing.T, b Binding) {
	ForEachFixture(t, b.Kind, func(t *testing.T, fx *Fixture) {
		src := fx.Weights()
		assertBindsExactly(t, src, b.Declared(t, fx))
		build := func(s *EditSource) error { return b.Open(t, fx, s) }
		info, _ := src.Tensor(b.Reshaped)
		assertBindReports(t, src, b.Gone, b.Reshaped, b.Reshape(info.Shape), build)
		like, _ := src.Tensor(b.ExtraOf)
		extra := map[string]safetensors.Info{}
		for _, n := range b.Extra {
			extra[n] = like
		}
		assertReportsUnexpected(t, src, extra, b.Bogus, b.Ignored, build)
	})
}

// SlogCapture records, in order, the value of one attribute of the log records with one message, e.g.
// the "path" of every "quant.Linear" record, so a test can see which kernel a graph chose.
type SlogCapture struct {
	message, key string
	mu           sync.Mutex
	values       []string
}

// CaptureSlog makes a SlogCapture the default slog handler (every level) until the test ends.
func CaptureSlog(t testing.TB, message, key string) *SlogCapture {
	c := &SlogCapture{message: message, key: key}
	prev := slog.Default()
	slog.SetDefault(slog.New(c))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return c
}

// Take returns the values recorded since the last call and forgets them.
func (c *SlogCapture) Take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.values
	c.values = nil
	return v
}

// Enabled accepts every level: the records tests look for are Debug.
func (c *SlogCapture) Enabled(context.Context, slog.Level) bool { return true }

// Handle records the attribute of a record with the message.
func (c *SlogCapture) Handle(_ context.Context, r slog.Record) error {
	if r.Message != c.message {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == c.key {
			c.mu.Lock()
			c.values = append(c.values, a.Value.String())
			c.mu.Unlock()
		}
		return true
	})
	return nil
}

// WithAttrs and WithGroup keep the capture itself: attributes added to a logger are not recorded.
func (c *SlogCapture) WithAttrs([]slog.Attr) slog.Handler { return c }

// WithGroup: see WithAttrs.
func (c *SlogCapture) WithGroup(string) slog.Handler { return c }

// ParamCount is the number of parameters that params (a model package's Params) declares for cfg;
// an error fails the test.
func ParamCount[C any](t testing.TB, params func(C) (weights.Shapes, error), cfg C) int64 {
	t.Helper()
	s, err := params(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s.Count()
}

// ParamCase is a configuration and the parameter count it must declare (a released model's).
type ParamCase[C any] struct {
	Name string
	Cfg  C
	Want int64
}

// AssertParamCounts checks the parameter count that params declares for each case's configuration.
func AssertParamCounts[C any](t testing.TB, params func(C) (weights.Shapes, error), cases []ParamCase[C]) {
	t.Helper()
	for _, c := range cases {
		if got := ParamCount(t, params, c.Cfg); got != c.Want {
			t.Errorf("%s has %d parameters, want %d", c.Name, got, c.Want)
		}
	}
}

// Closer is a model a test builds and closes.
type Closer interface{ Close() error }

// Open builds a model with build (on the CPU test backend, from fixture weights, …) and closes it when
// the test ends; a build failure fails the test.
func Open[M Closer](t testing.TB, build func() (M, error)) M {
	t.Helper()
	m, err := build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// FixtureReaders returns the fixture readers of a model package's tests: fixtureConfig hands the
// fixture's config (at path, see ParseConfig) to parse, and fixtureModel opens a model with
// fromSource (the package's FromSource) on the CPU test backend from that config and the fixture's
// weights, closed when the test ends.
func FixtureReaders[C, O any, M Closer](parse func([]byte) (C, error), fromSource func(compute.Backend, C, weights.Source, O) (M, error),
	path ...string) (fixtureConfig func(testing.TB, *Fixture) C, fixtureModel func(testing.TB, *Fixture, O) M) {
	fixtureConfig = ConfigReader(parse, path...)
	return fixtureConfig, func(t testing.TB, fx *Fixture, opts O) M {
		t.Helper()
		return Open(t, func() (M, error) { return fromSource(Backend(t), fixtureConfig(t, fx), fx.Weights(), opts) })
	}
}

// Run builds a model with build, runs it once with run and closes it, failing the test on any error.
func Run[M Closer, O any](t testing.TB, build func() (M, error), run func(M) (O, error)) O {
	t.Helper()
	m, err := build()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out, err := run(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// GPUFixtures runs fn for every fixture of kind on xla:cuda with TF32 off (skipped unless
// $FASTVIDEO_GPU_TEST is 1), once in Float32 and once in BFloat16.
func GPUFixtures(t *testing.T, kind string, fn func(t *testing.T, b compute.Backend, fx *Fixture, dt dtypes.DType)) {
	b := GPUBackend(t, "xla:cuda,tf32=false")
	ForEachFixture(t, kind, func(t *testing.T, fx *Fixture) {
		for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
			fn(t, b, fx, dt)
		}
	})
}

// FrameCollector assembles the runs of frames a streaming video decoder emits (each channel-major
// [C, count, H, W]) into one [C, frames, H, W] buffer, checking that they arrive in order, without
// gaps and of the decoded size.
type FrameCollector struct {
	shape []int // [1, C, frames, H, W]
	buf   []float32
	next  int
}

// NewFrameCollector collects a decode whose output shape is [1, C, frames, H, W].
func NewFrameCollector(shape []int) *FrameCollector {
	return &FrameCollector{shape: shape, buf: make([]float32, shape[1]*shape[2]*shape[3]*shape[4])}
}

// Add copies one run of count frames starting at frame start.
func (c *FrameCollector) Add(t testing.TB, start, count, height, width int, sample []float32) {
	t.Helper()
	nc, nf, plane := c.shape[1], c.shape[2], c.shape[3]*c.shape[4]
	if start != c.next || height != c.shape[3] || width != c.shape[4] || len(sample) != nc*count*plane || start+count > nf {
		t.Fatalf("run start %d count %d %dx%d (len %d), want start %d %dx%d", start, count, height, width, len(sample),
			c.next, c.shape[3], c.shape[4])
	}
	for ch := 0; ch < nc; ch++ {
		copy(c.buf[(ch*nf+start)*plane:(ch*nf+start+count)*plane], sample[ch*count*plane:(ch+1)*count*plane])
	}
	c.next += count
}

// Frames checks that every frame arrived and returns them as [C, frames, H, W].
func (c *FrameCollector) Frames(t testing.TB) []float32 {
	t.Helper()
	if c.next != c.shape[2] {
		t.Fatalf("streamed %d frames, want %d", c.next, c.shape[2])
	}
	return c.buf
}

// UseKernelFilesFromEnv runs a package's tests with the kernel files $env lists (filepath.SplitList:
// colon-separated), each handed to use with its base name and contents in place of the embedded file of
// that name: a generator's output tested on the GPU machine before it is committed. Call it from TestMain
// before m.Run; a file that cannot be read or is refused ends the process with status 1.
func UseKernelFilesFromEnv(env string, use func(name string, data []byte) error) {
	for _, path := range filepath.SplitList(os.Getenv(env)) {
		data, err := os.ReadFile(path)
		if err == nil {
			err = use(filepath.Base(path), data)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", env, err)
			os.Exit(1)
		}
	}
}
