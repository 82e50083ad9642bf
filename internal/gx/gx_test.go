package gx

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

func TestRecoverAndCatch(t *testing.T) {
	boom := errors.New("boom")
	f := func() (err error) {
		defer Recover(&err, "pkg: step")
		panic(boom)
	}
	if err := f(); !errors.Is(err, boom) || err.Error() != "pkg: step: boom" {
		t.Errorf("Recover: %v", err)
	}
	err := Catch("pkg", func() error { panic("not an error") })
	if err == nil || !strings.HasPrefix(err.Error(), "pkg: not an error\n") || !strings.Contains(err.Error(), "goroutine") {
		t.Errorf("Catch of a non-error panic must keep the stack: %v", err)
	}
	if err := Catch("", func() error { return boom }); err != boom {
		t.Errorf("Catch must return fn's error as is: %v", err)
	}
}

func TestCallNamesTheExec(t *testing.T) {
	b := testutil.Backend(t)
	e := MustExec(b, "test.add", func(in []*Node) []*Node { return []*Node{Add(in[0], in[1])} })
	defer FinalizeExecs(e, nil)
	out, err := Call(e, tensors.FromValue([]float32{1, 2}), tensors.FromValue([]float32{3, 4}))
	if err != nil {
		t.Fatal(err)
	}
	defer Finalize(out...)
	if v, _ := HostF32(out[0]); !slices.Equal(v, []float32{4, 6}) {
		t.Errorf("sum %v", v)
	}
	if _, err := Call(e, tensors.FromValue([]float32{1, 2}), tensors.FromValue([]float32{3, 4, 5})); err == nil || !strings.Contains(err.Error(), "test.add") {
		t.Errorf("a failing call must name the executable: %v", err)
	}
}

func TestHostF32(t *testing.T) {
	v, err := HostF32(tensors.FromValue(bfloat16.FromFloat32s(1.5, -2)))
	if err != nil || !slices.Equal(v, []float32{1.5, -2}) {
		t.Errorf("bf16: %v, %v", v, err)
	}
	if _, err := HostF32(tensors.FromValue([]int32{1})); err == nil {
		t.Error("an int32 tensor must be refused")
	}
}

// TestFillRandom: the same seed gives the same values, another seed others; draw's scale and offset
// apply; uint32 words are drawn too.
func TestFillRandom(t *testing.T) {
	b := testutil.Backend(t)
	draw := func(seed int64) *weights.Set {
		s := weights.NewSet("")
		s.Add("m.weight", 64, 32)
		s.AddF32("n.weight", 4096)
		s.AddTyped("q.words", dtypes.Uint32, 8)
		err := FillRandom(b, s, dtypes.BFloat16, seed, func(p *weights.Param) (float32, float32) {
			if p.Name == "n.weight" {
				return 0.1, 1
			}
			return 1 / float32(math.Sqrt(float64(FanIn(p.Shape)))), 0
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, a2, c := draw(3), draw(3), draw(4)
	defer a.Release()
	defer a2.Release()
	defer c.Release()
	for i, p := range a.Params() {
		if p.T.DType() != []dtypes.DType{dtypes.BFloat16, dtypes.Float32, dtypes.Uint32}[i] {
			t.Errorf("%s has dtype %s", p.Name, p.T.DType())
		}
		same := p.T.Equal(a2.Params()[i].T)
		other := p.T.Equal(c.Params()[i].T)
		if !same || other {
			t.Errorf("%s: same seed equal %v (want true), other seed equal %v (want false)", p.Name, same, other)
		}
	}
	n, _ := HostF32(a.Params()[1].T)
	var mean float64
	for _, x := range n {
		mean += float64(x) / float64(len(n))
	}
	if math.Abs(mean-1) > 0.01 {
		t.Errorf("n.weight mean %.4f, want 1 ± 0.01 (offset 1, scale 0.1)", mean)
	}
}

func TestGatherRows(t *testing.T) {
	table := safetensors.Info{Name: "emb", DType: safetensors.F32, Shape: []int{3, 2}, Data: safetensors.F32Bytes([]float32{0, 1, 10, 11, 20, 21})}
	rows, err := GatherRows(table, []int{2, 0, 2})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := rows.Float32s(); !slices.Equal(v, []float32{20, 21, 0, 1, 20, 21}) || !slices.Equal(rows.Shape, []int{3, 2}) {
		t.Errorf("rows %v %v", v, rows.Shape)
	}
	if _, err := GatherRows(table, []int{3}); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Errorf("id 3 of 3: %v", err)
	}
	x, err := LoadRows(table, []int{1}, dtypes.BFloat16, testutil.Backend(t))
	if err != nil {
		t.Fatal(err)
	}
	defer x.FinalizeAll()
	if v, _ := HostF32(x); !slices.Equal(v, []float32{10, 11}) || x.DType() != dtypes.BFloat16 {
		t.Errorf("LoadRows: %v %s", v, x.DType())
	}
}

// TestOps checks the shared graph operations against their formulas on a small input.
func TestOps(t *testing.T) {
	b := testutil.Backend(t)
	x := []float32{1, -2, 3, 0.5, 4, -1}
	w := []float32{1, 0, -1, 2, 1, 0.5}
	bias := []float32{0.25, -0.5}
	run := func(fn func(x, w, b *Node) *Node) []float32 {
		e := MustExec(b, "test.op", func(in []*Node) []*Node { return []*Node{fn(in[0], in[1], in[2])} })
		defer e.Finalize()
		out, err := Call(e, tensors.FromFlatDataAndDimensions(x, 2, 3), tensors.FromFlatDataAndDimensions(w, 2, 3), tensors.FromValue(bias))
		if err != nil {
			t.Fatal(err)
		}
		defer Finalize(out...)
		v, _ := HostF32(out[0])
		return v
	}
	// x·wᵀ + b
	want := []float32{1 + 0 - 3 + 0.25, 2 - 2 + 1.5 - 0.5, 0.5 + 0 + 1 + 0.25, 1 + 4 - 0.5 - 0.5}
	testutil.AssertClose(t, "Linear", run(Linear), want, []int{2, 2}, 1e-6)
	testutil.AssertClose(t, "LinearF32", run(LinearF32), want, []int{2, 2}, 1e-6)
	// LayerNorm of row [1, −2, 3]: mean 2/3, biased variance 38/9.
	ln := run(func(x, _, _ *Node) *Node { return LayerNorm(x, nil, nil, 0) })
	for i, v := range []float64{1, -2, 3} {
		want := (v - 2.0/3) / math.Sqrt(38.0/9)
		if math.Abs(float64(ln[i])-want) > 1e-6 {
			t.Errorf("LayerNorm[%d] = %v, want %v", i, ln[i], want)
		}
	}
	// RMSNorm of row [1, −2, 3]: rms √(14/3).
	rn := run(func(x, _, _ *Node) *Node { return RMSNorm(x, nil, 0) })
	if want := 3 / math.Sqrt(14.0/3); math.Abs(float64(rn[2])-want) > 1e-6 {
		t.Errorf("RMSNorm[2] = %v, want %v", rn[2], want)
	}
	g := run(func(x, _, _ *Node) *Node { return GeluTanh(x) })
	if want := 0.5 * 3 * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(3+0.044715*27))); math.Abs(float64(g[2])-want) > 1e-6 {
		t.Errorf("GeluTanh(3) = %v, want %v", g[2], want)
	}
}

func TestComputeDTypeAndTrace(t *testing.T) {
	for _, c := range []struct{ in, want dtypes.DType }{
		{dtypes.InvalidDType, dtypes.Float32}, {dtypes.Float32, dtypes.Float32}, {dtypes.BFloat16, dtypes.BFloat16},
	} {
		if got, err := ComputeDType(c.in); got != c.want || err != nil {
			t.Errorf("ComputeDType(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	if _, err := ComputeDType(dtypes.Float16); err == nil || !strings.Contains(err.Error(), "Options.DType = Float16") {
		t.Errorf("ComputeDType(Float16) must name the field and value: %v", err)
	}

	var none Trace
	if err := none.Emit("pkg", "x", tensors.FromValue([]int32{1})); err != nil {
		t.Errorf("a nil Trace must read nothing: %v", err)
	}
	got := map[string][]float32{}
	tr := Trace(func(name string, shape []int, v []float32) { got[name] = v })
	if err := tr.Emit("pkg", "x", tensors.FromValue(bfloat16.FromFloat32s(0.5, 3))); err != nil || !slices.Equal(got["x"], []float32{0.5, 3}) {
		t.Errorf("Emit: %v, %v", got, err)
	}
	if err := tr.Emit("pkg", "ids", tensors.FromValue([]int32{1})); err == nil || !strings.HasPrefix(err.Error(), "pkg: trace ids: ") {
		t.Errorf("Emit of an int tensor must fail naming the context and the name: %v", err)
	}
}

func TestFixtureDraw(t *testing.T) {
	for _, c := range []struct {
		name          string
		shape         []int
		scale, offset float32
	}{
		{"a.bias", []int{8}, 0.05, 0},
		{"a.weight", []int{8, 16}, 0.25, 0},
		{"conv.weight", []int{8, 4, 1, 2, 2}, 0.25, 0},
		{"norm.weight", []int{8}, 0.1, 1},
	} {
		s, o := FixtureDraw(&weights.Param{Name: c.name, Shape: c.shape})
		if s != c.scale || o != c.offset {
			t.Errorf("%s %v: (%v, %v), want (%v, %v)", c.name, c.shape, s, o, c.scale, c.offset)
		}
	}
}
