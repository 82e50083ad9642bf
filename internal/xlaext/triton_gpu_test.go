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
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/testutil"
	"fastvideo/internal/xlaext"
)

// tritonFixture is testdata/triton_kernels.json, written by testdata/gen_triton.py on the GPU machine.
const tritonFixture = "testdata/triton_kernels.json"

type fixtureArray struct {
	Shape []int  `json:"shape"`
	DType string `json:"dtype"`
	Data  string `json:"data"` // base64 of the little-endian values
}

func (a fixtureArray) float32s(t *testing.T) []float32 {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(a.Data)
	n := 1
	for _, d := range a.Shape {
		n *= d
	}
	if err != nil || a.DType != "float32" || len(raw) != 4*n {
		t.Fatalf("fixture array %v %s: %d bytes, %v", a.Shape, a.DType, len(raw), err)
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return v
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
	if os.Getenv(testutil.GPUTestEnv) != "1" {
		t.Skipf("set %s=1 on a machine with an NVIDIA GPU", testutil.GPUTestEnv)
	}
	if !xlaext.GraphBackendCall() {
		t.Skip("plain build: build the test with bash bench/build_gpu.sh -test .gpu/xlaext.test ./internal/xlaext")
	}
	raw, err := os.ReadFile(tritonFixture)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("no %s: make it on the GPU machine with python3 internal/xlaext/testdata/gen_triton.py (JAX with CUDA)", tritonFixture)
	} else if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		JAX     string          `json:"jax"`
		Kernels []fixtureKernel `json:"kernels"`
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	t.Logf("fixture from JAX %s", fx.JAX)
	b := testutil.GPUBackend(t, "xla:cuda")
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
	inputs := make([]any, len(k.Inputs))
	for i, in := range k.Inputs {
		inputs[i] = tensors.FromFlatDataAndDimensions(in.float32s(t), in.Shape...)
	}
	// x*1 before and y+0 after: the custom call sits between ordinary ops of the same program.
	exec, err := graph.NewExec(b, func(in []*graph.Node) []*graph.Node {
		ops := make([]*graph.Node, len(in))
		for i, x := range in {
			ops[i] = graph.MulScalar(x, 1)
		}
		outs, err := xlaext.TritonCall(kernel, ops, outShapes)
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
	got, err := exec.Call(inputs...)
	if err != nil {
		t.Fatalf("%s on %s: %v", k.Name, b.Name(), err)
	}
	for i, o := range k.Outputs {
		want := o.float32s(t)
		g := tensors.MustCopyFlatData[float32](got[i])
		if d := testutil.MaxAbsDiff(g, want); d > 1e-5*math.Max(1, testutil.MaxAbs(want)) {
			t.Errorf("output %d: max|got-want| %.3g (max|want| %.3g)", i, d, testutil.MaxAbs(want))
		} else {
			t.Logf("output %d %v: max|got-want| %.3g", i, o.Shape, d)
		}
	}
}
