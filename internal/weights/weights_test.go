package weights

import (
	"errors"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/safetensors"
)

func source(t *testing.T, ts ...safetensors.Tensor) *safetensors.File {
	t.Helper()
	f, err := safetensors.FromTensors(ts, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func f32(name string, shape []int, v ...float32) safetensors.Tensor {
	return safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: shape, Data: safetensors.F32Bytes(v)}
}

func TestBindConvertsAndKeepsBoundaryF32(t *testing.T) {
	src := source(t,
		f32("blocks.0.w", []int{2}, 1.0, 1.00390625),
		f32("proj.w", []int{2}, 1.0, 1.00390625),
		safetensors.Tensor{Name: "q", DType: safetensors.U32, Shape: []int{1}, Data: []byte{1, 0, 0, 0}},
	)
	s := NewSet("")
	w := s.Sub("blocks.0").Add("w", 2)
	proj := s.AddF32("proj.w", 2)
	q := s.AddTyped("q", dtypes.Uint32, 1)
	opt := s.AddOptional("absent", 3)
	if err := Bind(src, s, Options{DType: dtypes.BFloat16}); err != nil {
		t.Fatal(err)
	}
	if w.T.DType() != dtypes.BFloat16 || proj.T.DType() != dtypes.Float32 || q.T.DType() != dtypes.Uint32 || opt.Bound() {
		t.Fatalf("dtypes %s %s %s, optional bound %v", w.T.DType(), proj.T.DType(), q.T.DType(), opt.Bound())
	}
	// 1+2^-8 is a bf16 tie: round to even gives 1.0.
	if v := tensors.MustCopyFlatData[bfloat16.BFloat16](w.T); v[1].Float32() != 1.0 {
		t.Fatalf("bf16 rounding: %v", v[1].Float32())
	}
	if v := tensors.MustCopyFlatData[float32](proj.T); v[1] != 1.00390625 {
		t.Fatalf("fp32 boundary value changed: %v", v[1])
	}
	s.Release()
	if w.Bound() {
		t.Fatal("Release kept a tensor")
	}
}

func TestBindListsEveryProblem(t *testing.T) {
	src := source(t,
		f32("a", []int{2}, 1, 2),
		f32("b", []int{3}, 1, 2, 3),
		f32("stray", []int{1}, 0),
		f32("buffer.filter", []int{1}, 0),
		safetensors.Tensor{Name: "ints", DType: safetensors.I32, Shape: []int{1}, Data: make([]byte, 4)},
	)
	s := NewSet("")
	s.Add("a", 2)
	b := s.Add("b", 4)
	s.Add("gone", 5)
	s.Add("ints", 1)
	s.Ignore("buffer.")
	err := Bind(src, s, Options{})
	be, ok := err.(*BindError)
	if !ok {
		t.Fatalf("want *BindError, got %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"missing: gone [5]", "unexpected: stray", "b: checkpoint shape [3], model expects [4]", "ints: checkpoint dtype I32 cannot be stored as Float32"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "buffer.filter") || len(be.Missing) != 1 || len(be.Unexpected) != 1 || len(be.Mismatched) != 2 {
		t.Errorf("wrong classification: %+v", be)
	}
	if b.Bound() {
		t.Error("a failed bind left tensors bound")
	}
}

func TestSubsetBindByPrefix(t *testing.T) {
	src := source(t, f32("layers.0.w", []int{1}, 1), f32("layers.1.w", []int{1}, 2), f32("embed", []int{1}, 3))
	s := NewSet("layers.1.")
	w := s.Add("w", 1)
	if err := Bind(src, s, Options{}); err != nil {
		t.Fatal(err)
	}
	if v := tensors.MustCopyFlatData[float32](w.T); v[0] != 2 {
		t.Fatalf("bound the wrong layer: %v", v)
	}
}

func TestSyntheticIsDeterministicPerName(t *testing.T) {
	a := NewSynthetic(7, map[string][]int{"x.weight": {4, 8}, "x.bias": {4}, "norm.weight": {4}}, nil)
	b := NewSynthetic(7, map[string][]int{"x.weight": {4, 8}, "other": {3}}, nil)
	ia, _ := a.Tensor("x.weight")
	ib, _ := b.Tensor("x.weight")
	if string(ia.Data) != string(ib.Data) {
		t.Fatal("a tensor changed when another name was declared")
	}
	c := NewSynthetic(8, map[string][]int{"x.weight": {4, 8}}, nil)
	if ic, _ := c.Tensor("x.weight"); string(ic.Data) == string(ia.Data) {
		t.Fatal("seed ignored")
	}
	norm, _ := a.Tensor("norm.weight")
	v, _ := norm.Float32s()
	for _, x := range v {
		if x < 0.5 || x > 1.5 {
			t.Fatalf("norm gain %v far from 1", x)
		}
	}
	s := NewSet("")
	s.Add("x.weight", 4, 8)
	s.Add("x.bias", 4)
	s.Add("norm.weight", 4)
	if err := Bind(a, s, Options{}); err != nil {
		t.Fatal(err)
	}
}

func TestBindRejectsNilInputs(t *testing.T) {
	set := NewSet("")
	set.Add("w", 2)
	if err := Bind(nil, set, Options{}); err == nil || !strings.Contains(err.Error(), "weight source") {
		t.Errorf("Bind(nil source) = %v, want an error naming the weight source", err)
	}
	if err := Bind(source(t), nil, Options{}); err == nil || !strings.Contains(err.Error(), "parameter set") {
		t.Errorf("Bind(nil set) = %v, want an error naming the parameter set", err)
	}
}

func TestLoadRejectsNonFloatTarget(t *testing.T) {
	info := safetensors.Info{Name: "w", DType: safetensors.F32, Shape: []int{1}, Data: safetensors.F32Bytes([]float32{1})}
	if _, err := Load(info, dtypes.Int32, nil); err == nil || !strings.Contains(err.Error(), "Int32") {
		t.Errorf("Load(F32 -> Int32) = %v, want an error naming the target dtype", err)
	}
}

// A deferred parameter is checked like the others but left unbound for the model to load itself.
func TestBindChecksButSkipsDeferred(t *testing.T) {
	src := source(t, f32("a", []int{2}, 1, 2), f32("b", []int{2}, 3, 4))
	s := NewSet("")
	a, b := s.Add("a", 2), s.Add("b", 2)
	b.Deferred = true
	if err := Bind(src, s, Options{}); err != nil {
		t.Fatal(err)
	}
	if !a.Bound() || b.Bound() {
		t.Fatalf("bound: a %v, deferred b %v; want a only", a.Bound(), b.Bound())
	}
	s = NewSet("")
	s.Add("a", 2)
	s.Add("b", 3).Deferred = true
	if err := Bind(src, s, Options{}); err == nil || !strings.Contains(err.Error(), "b: checkpoint shape [2], model expects [3]") {
		t.Errorf("a deferred parameter of the wrong shape: %v", err)
	}
}

// AfterBind runs as each parameter lands, before the next one loads, and may replace its tensor; its
// error fails the bind with the parameter's name and leaves nothing bound.
func TestBindRunsAfterBindAsEachLands(t *testing.T) {
	src := source(t, f32("a", []int{2}, 1, 2), f32("b", []int{2}, 3, 4))
	s := NewSet("")
	a, b := s.Add("a", 2), s.Add("b", 2)
	var bLoadedBeforeA bool
	a.AfterBind = func(p *Param) error {
		bLoadedBeforeA = b.Bound()
		p.T = tensors.FromValue([]float32{7, 8})
		return nil
	}
	if err := Bind(src, s, Options{}); err != nil {
		t.Fatal(err)
	}
	if bLoadedBeforeA {
		t.Error("b was loaded before a's AfterBind ran")
	}
	if got := a.T.Value().([]float32); got[0] != 7 || got[1] != 8 {
		t.Errorf("a = %v after an AfterBind that replaced it with [7 8]", got)
	}
	s = NewSet("")
	a, b = s.Add("a", 2), s.Add("b", 2)
	b.AfterBind = func(*Param) error { return errors.New("no room") }
	err := Bind(src, s, Options{})
	if err == nil || !strings.Contains(err.Error(), "after loading b: no room") {
		t.Errorf("a failing AfterBind: %v", err)
	}
	if a.Bound() || b.Bound() {
		t.Errorf("after a failed bind: a bound %v, b bound %v; want neither", a.Bound(), b.Bound())
	}
}
