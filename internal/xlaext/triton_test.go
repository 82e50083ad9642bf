package xlaext_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/testutil"
	"fastvideo/internal/xlaext"
)

var addKernel = xlaext.TritonKernel{Name: "add_kernel", IR: []byte("not compiled here"), Grid: [3]int{4}, NumWarps: 4, NumStages: 2}

var matmulKernel = xlaext.MosaicGPUKernel{Name: "matmul", Module: []byte("not compiled here")}

// TritonCall and MosaicGPUCall never panic where they cannot run: a plain build says to build with
// bench/build_gpu.sh, the GPU build on the pure-Go backend says the backend cannot; the graph goes on
// without the kernel.
func TestKernelCallsUnavailable(t *testing.T) {
	calls := map[string]func(in []*graph.Node, out []shapes.Shape) ([]*graph.Node, error){
		"triton": func(in []*graph.Node, out []shapes.Shape) ([]*graph.Node, error) {
			return xlaext.TritonCall(addKernel, in, out)
		},
		"mosaic gpu": func(in []*graph.Node, out []shapes.Shape) ([]*graph.Node, error) {
			return xlaext.MosaicGPUCall(matmulKernel, in, out)
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			var callErr error
			exec, err := graph.NewExec(testutil.Backend(t), func(x *graph.Node) *graph.Node {
				_, callErr = call([]*graph.Node{x, x}, []shapes.Shape{x.Shape()})
				return graph.AddScalar(x, 1)
			})
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Call1([]float32{1, 2})
			if err != nil {
				t.Fatal(err)
			}
			if got := tensors.MustCopyFlatData[float32](out); !slices.Equal(got, []float32{2, 3}) {
				t.Errorf("x+1 = %v", got)
			}
			if xlaext.GraphBackendCall() {
				if !errors.Is(callErr, xlaext.ErrKernelBackend) {
					t.Errorf("GPU build, pure-Go backend: %v", callErr)
				}
			} else if !errors.Is(callErr, xlaext.ErrNoKernelCall) || !strings.Contains(callErr.Error(), "bash bench/build_gpu.sh") {
				t.Errorf("plain build: %v", callErr)
			}
			t.Logf("%v", callErr)
			if _, err := call(nil, []shapes.Shape{shapes.Make(dtypes.Float32, 2)}); err == nil {
				t.Error("no inputs: no error")
			}
		})
	}
	if _, err := xlaext.MosaicGPUCall(xlaext.MosaicGPUKernel{Name: "empty"}, []*graph.Node{nil}, []shapes.Shape{shapes.Make(dtypes.Float32, 2)}); err == nil {
		t.Error("no module: no error")
	}
}

// TestBackendCall runs the GPU build's graph hatch (bench/gomlx-backendcall.patch) on the pure-Go
// backend, two outputs built on the backend Function directly; a plain build skips it.
func TestBackendCall(t *testing.T) {
	if !xlaext.GraphBackendCall() {
		t.Skip("plain build: GoMLX has no Graph.BackendCall (bash bench/build_gpu.sh -gotest ./internal/xlaext runs this)")
	}
	type hatch interface {
		BackendCall(string, []*graph.Node, func(compute.Function, []compute.Value) ([]compute.Value, error)) ([]*graph.Node, error)
	}
	exec, err := graph.NewExec(testutil.Backend(t), func(x, y *graph.Node) (*graph.Node, *graph.Node) {
		outs, err := any(x.Graph()).(hatch).BackendCall("sum-and-product", []*graph.Node{x, y},
			func(fn compute.Function, v []compute.Value) ([]compute.Value, error) {
				sum, err := fn.Add(v[0], v[1])
				if err != nil {
					return nil, err
				}
				prod, err := fn.Mul(v[0], v[1])
				return []compute.Value{sum, prod}, err
			})
		if err != nil {
			panic(err)
		}
		return outs[0], graph.Neg(outs[1])
	})
	if err != nil {
		t.Fatal(err)
	}
	outs, err := exec.Call([]float32{1, 2}, []float32{3, 4})
	if err != nil {
		t.Fatal(err)
	}
	if got := tensors.MustCopyFlatData[float32](outs[0]); !slices.Equal(got, []float32{4, 6}) {
		t.Errorf("sum %v", got)
	}
	if got := tensors.MustCopyFlatData[float32](outs[1]); !slices.Equal(got, []float32{-3, -8}) {
		t.Errorf("-product %v", got)
	}
}

// A kernel runs only on the plugin it was made with: the version is recorded per backend, compared in
// its spellings' normal form, and a missing or different one says what to do.
func TestCompatible(t *testing.T) {
	b := testutil.Backend(t)
	const made = "jax-cuda13-plugin 0.11.2"
	if !xlaext.GraphBackendCall() {
		if err := xlaext.Compatible(b, made); !errors.Is(err, xlaext.ErrNoKernelCall) {
			t.Errorf("plain build: %v", err)
		}
		return
	}
	if err := xlaext.Compatible(b, made); err == nil || !strings.Contains(err.Error(), "not known") {
		t.Errorf("no version recorded: %v", err)
	}
	xlaext.SetPlugin(b, "JAX_CUDA13_PLUGIN 0.11.2")
	t.Cleanup(func() { xlaext.SetPlugin(b, "") })
	if got := xlaext.Plugin(b); got != "JAX_CUDA13_PLUGIN 0.11.2" {
		t.Errorf("Plugin = %q", got)
	}
	if err := xlaext.Compatible(b, made); err != nil {
		t.Errorf("same plugin, other spelling: %v", err)
	}
	xlaext.SetPlugin(b, "jax-cuda13-plugin 0.12.0")
	if err := xlaext.Compatible(b, made); err == nil || !strings.Contains(err.Error(), "regenerate") {
		t.Errorf("another plugin: %v", err)
	}
	xlaext.SetPlugin(b, "")
	if got := xlaext.Plugin(b); got != "" {
		t.Errorf("after forgetting: %q", got)
	}
}

// TestTritonRecord: a kernel file's record decodes its base64 module once and launches with its compile
// parameters; a record without a module, warps or stages, or with a module that is not base64, is refused.
func TestTritonRecord(t *testing.T) {
	r := xlaext.TritonRecord{IR: "AAAA", NumWarps: 16, NumStages: 3}
	if err := r.Decode(); err != nil {
		t.Fatal(err)
	}
	k := r.Launch("qk", [3]int{7, 1, 1})
	if k.Name != "qk" || len(k.IR) != 3 || k.Grid != [3]int{7, 1, 1} || k.NumWarps != 16 || k.NumStages != 3 || len(r.Bytecode()) != 3 {
		t.Fatalf("launched %+v", k)
	}
	for _, bad := range []xlaext.TritonRecord{{NumWarps: 4, NumStages: 1}, {IR: "!!", NumWarps: 4, NumStages: 1},
		{IR: "AAAA", NumStages: 1}, {IR: "AAAA", NumWarps: 4}} {
		if err := bad.Decode(); err == nil || bad.Bytecode() != nil {
			t.Errorf("%+v decoded", bad)
		}
	}
}
