package graphexec

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/testutil"
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

// TakeF32 reads device outputs (here the go backend's) once and frees them; the values must survive
// the tensor, and a tensor large enough to widen in parallel must come back whole.
func TestTakeF32(t *testing.T) {
	out, want := rampOutputs(t, testutil.Backend(t), 3<<20+5)
	for i, o := range out {
		dt := o.DType()
		got, err := TakeF32(o)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("output %d (%s): %d values, equal %v, %v", i, dt, len(got), slices.Equal(got, want), err)
		}
		if o.Ok() {
			t.Errorf("output %d: TakeF32 must free the tensor", i)
		}
	}
	if _, err := TakeF32(tensors.FromValue([]int32{1})); err == nil {
		t.Error("an int32 tensor must be refused")
	}
}

func TestTrace(t *testing.T) {
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

// CopyAllToDevice gives separate device copies with the same values, keeps nil entries nil, and
// names the tensor it could not place. (The pure-Go backend has no device-to-device copy, so only host
// sources are exercised here.)
func TestCopyAllToDevice(t *testing.T) {
	b := testutil.Backend(t)
	src := []*tensors.Tensor{tensors.FromValue([]float32{1, 2}), nil}
	copies, err := CopyAllToDevice(b, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer Finalize(copies...)
	if copies[1] != nil || copies[0] == src[0] || !copies[0].IsOnAnyDevice() {
		t.Fatalf("copies %v of %v: want a new device tensor and nil kept", copies, src)
	}
	if got := tensors.MustCopyFlatData[float32](copies[0]); !slices.Equal(got, []float32{1, 2}) {
		t.Errorf("the copy holds %v, want [1 2]", got)
	}
	if _, err := CopyAllToDevice(b, src, 7); err == nil || !strings.Contains(err.Error(), "tensor 1 of 2") {
		t.Errorf("a device the backend lacks: %v", err)
	}
}

// TestCompileCounter: Call counts one compile per new input shape of an executable and none for a
// repeated call.
func TestCompileCounter(t *testing.T) {
	exe := MustExec(testutil.Backend(t), "double", func(x *Node) *Node { return MulScalar(x, 2) })
	defer FinalizeExecs(exe, nil)
	programs0, took0 := Compiles()
	for i, c := range []struct {
		in   any
		want int64
	}{{tensors.FromValue([]float32{1, 2}), 1}, {[]float32{3, 4}, 1}, {tensors.FromValue([]float32{1, 2, 3}), 2}, {[]float32{5, 6, 7}, 2}} {
		out, err := Call1(exe, c.in)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := HostF32(out)
		Finalize(out)
		if len(got) < 2 || got[1] <= got[0] {
			t.Errorf("call %d: %v", i, got)
		}
		if n, took := Compiles(); n-programs0 != c.want || took <= took0 {
			t.Errorf("call %d: %d compiles in %v, want %d", i, n-programs0, took-took0, c.want)
		}
	}
}

// rampOutputs runs a program on b whose outputs are n values exact in bfloat16, as float32 and as
// bfloat16 device tensors, and returns them with the values.
func rampOutputs(t *testing.T, b compute.Backend, n int) ([]*tensors.Tensor, []float32) {
	t.Helper()
	e := MustExec(b, "test.ramp", func(in []*Node) []*Node {
		return []*Node{in[0], ConvertDType(in[0], in[1].DType())}
	})
	t.Cleanup(func() { FinalizeExecs(e) })
	want := make([]float32, n)
	for i := range want {
		want[i] = float32(i%256) - 128
	}
	out, err := Call(e, tensors.FromFlatDataAndDimensions(want, n), tensors.FromValue(bfloat16.FromFloat32s(0)))
	if err != nil {
		t.Fatal(err)
	}
	return out, want
}

// TestCompileAhead: Compile counts the program without a call and returns its output shapes; a
// call of those shapes afterwards compiles nothing, and only a call's own compiles count in
// CallCompiles.
func TestCompileAhead(t *testing.T) {
	exe := MustExec(testutil.Backend(t), "pair", func(x *Node) []*Node { return []*Node{MulScalar(x, 2), ReduceAllSum(x)} })
	defer FinalizeExecs(exe)
	programs0, _ := Compiles()
	byCalls0 := CallCompiles()
	out, err := Compile(exe, shapes.Make(dtypes.Float32, 3))
	if err != nil {
		t.Fatal(err)
	}
	if want := []shapes.Shape{shapes.Make(dtypes.Float32, 3), shapes.Make(dtypes.Float32)}; !slices.EqualFunc(out, want, shapes.Shape.Equal) {
		t.Errorf("Compile returned output shapes %v, want %v", out, want)
	}
	check := func(when string, programs, byCalls int64) {
		t.Helper()
		if n, _ := Compiles(); n-programs0 != programs || CallCompiles()-byCalls0 != byCalls {
			t.Errorf("%s: %d programs, %d by calls; want %d and %d", when, n-programs0, CallCompiles()-byCalls0, programs, byCalls)
		}
	}
	check("after Compile", 1, 0)
	res, err := Call(exe, tensors.FromValue([]float32{1, 2, 3}))
	if err != nil {
		t.Fatal(err)
	}
	Finalize(res...)
	check("after a call of the compiled shape", 1, 0)
	res, err = Call(exe, tensors.FromValue([]float32{1, 2}))
	if err != nil {
		t.Fatal(err)
	}
	Finalize(res...)
	check("after a call of a new shape", 2, 1)
}
