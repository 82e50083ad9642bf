package modelkit

import (
	"bytes"
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/media"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

func TestDType(t *testing.T) {
	for _, c := range []struct {
		in, want dtypes.DType
		allowed  []dtypes.DType
	}{
		{dtypes.InvalidDType, dtypes.Float32, DiTDTypes}, {dtypes.Float32, dtypes.Float32, DiTDTypes},
		{dtypes.BFloat16, dtypes.BFloat16, DiTDTypes}, {dtypes.Float16, dtypes.Float16, HalfDTypes},
	} {
		if got, err := DType(c.in, c.allowed); got != c.want || err != nil {
			t.Errorf("DType(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	if _, err := DType(dtypes.Float16, DiTDTypes); err == nil || !strings.Contains(err.Error(), "Options.DType = Float16") {
		t.Errorf("DType(Float16) for a DiT must name the field and value: %v", err)
	}
	if err := CheckBackend(nil); err == nil {
		t.Error("a nil backend must be refused")
	}
}

func writeFolder(t *testing.T) string {
	dir := t.TempDir()
	w := safetensors.Tensor{Name: "w", DType: safetensors.F32, Shape: []int{2}, Data: safetensors.F32Bytes([]float32{1, 2})}
	if err := safetensors.WriteFile(filepath.Join(dir, "m.safetensors"), []safetensors.Tensor{w}, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoadAndOpenFolder(t *testing.T) {
	dir := writeFolder(t)
	readCfg := func(d string) (string, error) { return "cfg:" + filepath.Base(d), nil }
	build := func(cfg string, src weights.Source) (string, error) {
		info, ok := src.Tensor("w")
		if !ok || len(info.Shape) != 1 {
			return "", errors.New("tensor w not found")
		}
		return cfg, nil
	}
	got, err := LoadFolder(dir, "test", readCfg, build)
	if err != nil || got != "cfg:"+filepath.Base(dir) {
		t.Fatalf("LoadFolder = %q, %v", got, err)
	}
	var closeFn func() error
	keep := func(_ string, c func() error) { closeFn = c }
	got, err = OpenFolder(dir, "test", readCfg, build, keep)
	if err != nil || got != "cfg:"+filepath.Base(dir) || closeFn == nil {
		t.Fatalf("OpenFolder = %q, %v", got, err)
	}
	if err := closeFn(); err != nil {
		t.Error(err)
	}

	// A config failure is returned as is; a folder without weights names the caller.
	bad := errors.New("bad config")
	if _, err := LoadFolder(dir, "test", func(string) (string, error) { return "", bad }, build); !errors.Is(err, bad) {
		t.Errorf("config failure = %v, want %v", err, bad)
	}
	if _, err := OpenFolder(t.TempDir(), "test", readCfg, build, keep); err == nil || !strings.HasPrefix(err.Error(), "test: opening the weights") {
		t.Errorf("empty folder = %v, want an error starting with the caller's name", err)
	}
	if _, err := OpenFolder(dir, "test", readCfg, func(string, weights.Source) (int, error) { return 0, bad },
		func(int, func() error) { t.Error("keep called after a failed build") }); !errors.Is(err, bad) {
		t.Errorf("build failure = %v, want %v", err, bad)
	}
}

type counter struct{ traced, finalized *int }

func (c counter) Finalize() { *c.finalized++ }

func TestStages(t *testing.T) {
	var traced, finalized, built int
	s := NewStages(func(tr bool) counter {
		built++
		if tr {
			traced++
		}
		return counter{&traced, &finalized}
	})
	s.Get(false)
	s.Get(true)
	s.Get(true)
	if built != 2 || traced != 1 {
		t.Errorf("built %d sets (%d traced), want 2 (1 traced)", built, traced)
	}
	s.Finalize()
	if finalized != 2 {
		t.Errorf("finalized %d sets, want 2", finalized)
	}
}

func TestRopeCacheAndTextRows(t *testing.T) {
	b := testutil.Backend(t)
	calls := 0
	tables := func() ([]float32, []float32) { calls++; return []float32{1, 2}, []float32{3, 4} }
	c := NewRopeCache(func(a, b [3]int) bool { return a == b })
	defer c.Finalize()
	cos, _, err := c.Tables(b, [3]int{1, 1, 2}, 1, 2, tables)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := graphexec.HostF32(cos); !slices.Equal(v, []float32{1, 2}) {
		t.Errorf("cos = %v", v)
	}
	_, _, _ = c.Tables(b, [3]int{1, 1, 2}, 1, 2, tables)
	_, _, _ = c.Tables(b, [3]int{1, 2, 1}, 1, 2, tables)
	if calls != 2 {
		t.Errorf("tables computed %d times, want 2 (same geometry reused)", calls)
	}

	r := NewTextRows(3, tensors.FromValue([]float32{1, 2, 3}))
	if r.Rows() != 3 || r.Tensor() == nil {
		t.Errorf("TextRows: %d rows, tensor %v", r.Rows(), r.Tensor())
	}
	r.Close()
	r.Close()
	if r.Tensor() != nil {
		t.Error("a closed TextRows must drop its tensor")
	}
	if n, err := TextCount(make([]float32, 6), 3, "text"); n != 2 || err != nil {
		t.Errorf("TextCount = %d, %v", n, err)
	}
	if _, err := TextCount(make([]float32, 5), 3, "text"); err == nil {
		t.Error("5 values of width 3 must be refused")
	}
	if err := CheckFinite("T", []float32{1, float32(math.Inf(1))}); err == nil || !strings.Contains(err.Error(), "T[1]") {
		t.Errorf("CheckFinite: %v", err)
	}
}

func TestGuard(t *testing.T) {
	var g Guard
	unlock, err := g.Lock("closed")
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	released := 0
	release := func() error { released++; return nil }
	if err := g.Close(release); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(release); err != nil || released != 1 {
		t.Errorf("second Close: %v, released %d times, want once", err, released)
	}
	if _, err := g.RLock("decode after close"); err == nil || err.Error() != "decode after close" {
		t.Errorf("RLock after Close = %v", err)
	}
}

func TestGuardContext(t *testing.T) {
	var g Guard
	type key struct{}
	given := context.WithValue(context.Background(), key{}, 1)
	for _, lock := range []func(context.Context, string) (context.Context, func(), error){g.LockContext, g.RLockContext} {
		ctx, unlock, err := lock(nil, "closed") //nolint:staticcheck // a nil context is what this checks
		if err != nil || ctx == nil || ctx.Err() != nil {
			t.Fatalf("nil context: %v, %v", ctx, err)
		}
		unlock()
		if ctx, unlock, err = lock(given, "closed"); err != nil || ctx != given {
			t.Fatalf("given context: %v, %v", ctx, err)
		}
		unlock()
	}
	if err := g.Close(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.LockContext(given, "call after close"); err == nil || err.Error() != "call after close" {
		t.Errorf("LockContext after Close = %v", err)
	}
}

type run struct{ start, count int }

func (r run) Span() (int, int, []float32) {
	pix := make([]float32, 2*r.count) // 2 channels, 1×1 frames
	for i := range pix {
		pix[i] = float32(100*(i/r.count) + r.start + i%r.count)
	}
	return r.start, r.count, pix
}

func TestDecodeToPixels(t *testing.T) {
	outShape := func([]int) ([]int, error) { return []int{1, 2, 3, 1, 1}, nil }
	decode := func(_ context.Context, _ []float32, _ []int, emit func(run) error) error {
		if err := emit(run{0, 2}); err != nil {
			return err
		}
		return emit(run{2, 1})
	}
	video, shape, err := DecodeToPixels(context.Background(), nil, nil, outShape, decode)
	if err != nil || !slices.Equal(shape, []int{1, 2, 3, 1, 1}) {
		t.Fatal(shape, err)
	}
	if want := []float32{0, 1, 2, 100, 101, 102}; !slices.Equal(video, want) {
		t.Errorf("video %v, want channel-major frames %v", video, want)
	}
	double := func(z []float32, _ []int) ([]float32, error) { return []float32{2 * z[0]}, nil }
	var got float32
	err = DecodeLatents(context.Background(), []float32{3}, nil, nil, double,
		func(_ context.Context, z []float32, _ []int, _ func(run) error) error { got = z[0]; return nil })
	if err != nil || got != 6 {
		t.Errorf("DecodeLatents decoded %v (%v), want the de-normalized 6", got, err)
	}
}

// A constructor returns the model only when both declaring and filling succeed, and the first error.
func TestPopulate(t *testing.T) {
	model := new(int)
	declareErr, fillErr := errors.New("declare"), errors.New("fill")
	ok := func() (*int, error) { return model, nil }
	for _, c := range []struct {
		name    string
		declare func() (*int, error)
		fill    error
		want    *int
		wantErr error
	}{
		{"both succeed", ok, nil, model, nil},
		{"declare fails", func() (*int, error) { return model, declareErr }, nil, nil, declareErr},
		{"fill fails", ok, fillErr, nil, fillErr},
	} {
		filled := false
		got, err := Populate(c.declare, func(m *int) error { filled = m == model; return c.fill })
		if got != c.want || !errors.Is(err, c.wantErr) || (err == nil) != (c.wantErr == nil) {
			t.Errorf("%s: got (%v, %v), want (%v, %v)", c.name, got, err, c.want, c.wantErr)
		}
		if filled != (c.wantErr != declareErr) {
			t.Errorf("%s: fill called with the declared model: %v", c.name, filled)
		}
	}
}

// halfPixels is a test pixel space: channel c maps v to v/(c+2), clamped.
type halfPixels struct{}

func (halfPixels) ToUnit(c int, v float32) float32 { return min(max(v/float32(c+2), 0), 1) }

// TestRGB24MatchesPixels: the fused, parallel RGB24 pass gives exactly the bytes of Pixels then
// media.AppendRGB24 (the two-pass definition), on frames large enough to split over goroutines,
// NaN, out-of-range values and an odd size included, appended after existing bytes.
func TestRGB24MatchesPixels(t *testing.T) {
	const count, h, w = 3, 61, 1013 // 185,379 pixels a channel: several parallel ranges
	plane := count * h * w
	f := Frames[halfPixels]{Count: count, Height: h, Width: w, Sample: make([]float32, 3*plane)}
	for i := range f.Sample {
		f.Sample[i] = float32(i%977)/300 - 0.5
	}
	f.Sample[5], f.Sample[plane+7] = float32(math.NaN()), float32(math.Inf(1))
	want := media.AppendRGB24([]byte{9}, f.Pixels(), plane)
	got := f.RGB24([]byte{9})
	if !bytes.Equal(got, want) {
		t.Fatalf("RGB24 differs from AppendRGB24(Pixels()) (%d vs %d bytes)", len(got), len(want))
	}
	if got[1+3*5] != 0 || got[1+3*7+1] != 255 {
		t.Errorf("NaN gave %d, +Inf gave %d; want 0 and 255", got[1+3*5], got[1+3*7+1])
	}
}

func TestElements(t *testing.T) {
	for _, c := range []struct {
		dims []int
		want int
	}{{nil, 1}, {[]int{7}, 7}, {[]int{1, 4, 3, 5, 5}, 300}, {[]int{2, 0, 3}, 0}} {
		if got := Elements(c.dims); got != c.want {
			t.Errorf("Elements(%v) = %d, want %d", c.dims, got, c.want)
		}
	}
}
