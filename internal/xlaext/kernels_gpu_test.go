package xlaext_test

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/dtypes/float16"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/testutil"
	"fastvideo/internal/xlaext"
)

// tritonFixture is testdata/triton_kernels.json, written by testdata/gen_triton.py on the GPU machine.
const tritonFixture = "testdata/triton_kernels.json"

// fixtureArray is an array of a fixture: float32, or bfloat16 / float16 as their 16-bit patterns.
type fixtureArray struct {
	Shape []int  `json:"shape"`
	DType string `json:"dtype"`
	Data  string `json:"data"` // base64 of the little-endian values
}

// tensor is the array as a tensor of its own dtype, and its values as float32 for the comparison.
func (a fixtureArray) tensor(t *testing.T) (*tensors.Tensor, []float32) {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(a.Data)
	n := 1
	for _, d := range a.Shape {
		n *= d
	}
	width := map[string]int{"float32": 4, "bfloat16": 2, "float16": 2}[a.DType]
	if err != nil || width == 0 || len(raw) != width*n {
		t.Fatalf("fixture array %v %s: %d bytes, %v", a.Shape, a.DType, len(raw), err)
	}
	values := make([]float32, n)
	switch a.DType {
	case "float32":
		for i := range values {
			values[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return tensors.FromFlatDataAndDimensions(values, a.Shape...), values
	case "bfloat16":
		return halfTensor(raw, values, a.Shape, bfloat16.BFloat16.Float32), values
	default:
		return halfTensor(raw, values, a.Shape, float16.Float16.Float32), values
	}
}

// halfTensor is raw's 16-bit values as a tensor of type T, their float32 values written into values.
func halfTensor[T bfloat16.BFloat16 | float16.Float16](raw []byte, values []float32, shape []int, toFloat32 func(T) float32) *tensors.Tensor {
	data := make([]T, len(values))
	for i := range data {
		data[i] = T(binary.LittleEndian.Uint16(raw[2*i:]))
		values[i] = toFloat32(data[i])
	}
	return tensors.FromFlatDataAndDimensions(data, shape...)
}

// readGPUFixture skips t unless it runs on the GPU machine with the GPU build and the fixture at path
// (made there by generator) exists; it decodes the fixture into fx and returns the CUDA backend.
func readGPUFixture(t *testing.T, path, generator string, fx any) compute.Backend {
	t.Helper()
	if os.Getenv(testutil.GPUTestEnv) != "1" {
		t.Skipf("set %s=1 on a machine with an NVIDIA GPU", testutil.GPUTestEnv)
	}
	if !xlaext.GraphBackendCall() {
		t.Skip("plain build: build the test with bash bench/build_gpu.sh -test .gpu/xlaext.test ./internal/xlaext")
	}
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("no %s: make it on the GPU machine with python3 %s (JAX with CUDA)", path, generator)
	} else if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, fx); err != nil {
		t.Fatal(err)
	}
	return testutil.GPUBackend(t, "xla:cuda")
}

// runBetweenOps runs call on inputs on b with an ordinary op before it and one after (x*1, y+0), so that
// the custom call sits inside a program as a model's would.
func runBetweenOps(t *testing.T, b compute.Backend, inputs []fixtureArray, call func([]*graph.Node) ([]*graph.Node, error)) []*tensors.Tensor {
	t.Helper()
	args := make([]any, len(inputs))
	for i, in := range inputs {
		args[i], _ = in.tensor(t)
	}
	exec, err := graph.NewExec(b, func(in []*graph.Node) []*graph.Node {
		ops := make([]*graph.Node, len(in))
		for i, x := range in {
			ops[i] = graph.MulScalar(x, 1)
		}
		outs, err := call(ops)
		if err != nil {
			panic(err)
		}
		for i := range outs {
			outs[i] = graph.AddScalar(outs[i], 0)
		}
		return outs
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := exec.Call(args...)
	if err != nil {
		t.Fatalf("on %s: %v", b.Name(), err)
	}
	return got
}

type fixtureKernel struct {
	Case      string         `json:"case"`
	Name      string         `json:"name"`
	IR        []byte         `json:"ir"` // base64 in the file
	Grid      [3]int         `json:"grid"`
	NumWarps  int            `json:"num_warps"`
	NumStages int            `json:"num_stages"`
	Other     []string       `json:"other_config_keys"`
	Inputs    []fixtureArray `json:"inputs"`
	Outputs   []fixtureArray `json:"outputs"`
}

// TestTritonCallOnGPU runs JAX-made Pallas kernels (an add on a 1-D grid, a tl.dot on a 2-D grid)
// through xlaext.TritonCall on the CUDA plugin, inside a graph with an op before and after, and
// compares with JAX's own outputs of the same kernels:
//
//	python3 internal/xlaext/testdata/gen_triton.py    # on the GPU machine, with the plugin's JAX
//	bash bench/build_gpu.sh -test .gpu/xlaext.test ./internal/xlaext
//	cd internal/xlaext && FASTVIDEO_GPU_TEST=1 ../../.gpu/xlaext.test -test.run TestTritonCallOnGPU -test.v
func TestTritonCallOnGPU(t *testing.T) {
	var fx struct {
		JAX     string          `json:"jax"`
		Kernels []fixtureKernel `json:"kernels"`
	}
	b := readGPUFixture(t, tritonFixture, "internal/xlaext/testdata/gen_triton.py", &fx)
	t.Logf("fixture from JAX %s", fx.JAX)
	for _, k := range fx.Kernels {
		t.Run(k.Case, func(t *testing.T) {
			if len(k.Other) > 0 {
				t.Logf("JAX's backend config also has %v, which TritonCall does not write", k.Other)
			}
			runFixtureKernel(t, b, k)
		})
	}
}

func runFixtureKernel(t *testing.T, b compute.Backend, k fixtureKernel) {
	kernel := xlaext.TritonKernel{Name: k.Name, IR: k.IR, Grid: k.Grid, NumWarps: k.NumWarps, NumStages: k.NumStages}
	outShapes := make([]shapes.Shape, len(k.Outputs))
	for i, o := range k.Outputs {
		outShapes[i] = shapes.Make(dtypes.Float32, o.Shape...)
	}
	got := runBetweenOps(t, b, k.Inputs, func(ops []*graph.Node) ([]*graph.Node, error) {
		return xlaext.TritonCall(kernel, ops, outShapes)
	})
	for i, o := range k.Outputs {
		_, want := o.tensor(t)
		g := tensors.MustCopyFlatData[float32](got[i])
		if d := testutil.MaxAbsDiff(g, want); d > 1e-5*math.Max(1, testutil.MaxAbs(want)) {
			t.Errorf("output %d: max|got-want| %.3g (max|want| %.3g)", i, d, testutil.MaxAbs(want))
		} else {
			t.Logf("output %d %v: max|got-want| %.3g", i, o.Shape, d)
		}
	}
}

// mosaicFixture is testdata/mosaic_gpu_kernels.json, written by testdata/gen_mosaic_gpu.py on the GPU machine.
const mosaicFixture = "testdata/mosaic_gpu_kernels.json"

// TestMosaicGPUCallOnGPU runs JAX-made Mosaic GPU kernels (an add, and JAX's FlashAttention-3 forward for
// Hopper) through xlaext.MosaicGPUCall on the CUDA plugin, inside a graph with an op before and after,
// and asks for JAX's own outputs of the same kernels on the same inputs, bit for bit:
//
//	python3 internal/xlaext/testdata/gen_mosaic_gpu.py    # on the GPU machine, with the plugin's JAX
//	bash bench/build_gpu.sh -test .gpu/xlaext.test ./internal/xlaext
//	cd internal/xlaext && FASTVIDEO_GPU_TEST=1 ../../.gpu/xlaext.test -test.run TestMosaicGPUCallOnGPU -test.v
func TestMosaicGPUCallOnGPU(t *testing.T) {
	var fx struct {
		JAX     string `json:"jax"`
		Kernels []struct {
			Case    string         `json:"case"`
			Module  []byte         `json:"module"` // base64 in the file
			Inputs  []fixtureArray `json:"inputs"`
			Outputs []fixtureArray `json:"outputs"`
		} `json:"kernels"`
	}
	b := readGPUFixture(t, mosaicFixture, "internal/xlaext/testdata/gen_mosaic_gpu.py", &fx)
	t.Logf("fixture from JAX %s", fx.JAX)
	for _, k := range fx.Kernels {
		t.Run(k.Case, func(t *testing.T) {
			outShapes := make([]shapes.Shape, len(k.Outputs))
			wants := make([][]float32, len(k.Outputs))
			for i, o := range k.Outputs {
				tensor, values := o.tensor(t)
				outShapes[i], wants[i] = tensor.Shape(), values
			}
			kernel := xlaext.MosaicGPUKernel{Name: k.Case, Module: k.Module}
			got := runBetweenOps(t, b, k.Inputs, func(ops []*graph.Node) ([]*graph.Node, error) {
				return xlaext.MosaicGPUCall(kernel, ops, outShapes)
			})
			for i, want := range wants {
				// The same kernel on the same inputs and device: JAX's numbers exactly.
				values, err := graphexec.HostF32(got[i])
				if err != nil {
					t.Fatal(err)
				}
				if d := testutil.MaxAbsDiff(values, want); d != 0 {
					t.Errorf("output %d: max|got-want| %.3g (max|want| %.3g)", i, d, testutil.MaxAbs(want))
				} else {
					t.Logf("output %d %v: equal to JAX's", i, outShapes[i])
				}
			}
		})
	}
}
