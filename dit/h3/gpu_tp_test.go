package h3

import (
	"strings"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/testutil"
)

// TestTensorParallelOnGPU runs the fixtures tensor-parallel over two GPUs (each joint block one SPMD
// program, shard k on device k, the partial outputs all-reduced) in f32 with TF32 off, against the same
// model on one GPU at the parity tolerance, and against the fixture; the traced block outputs (device
// 0's) too. Built and run on a machine with 2 GPUs:
//
//	bash bench/build_gpu.sh -test .gpu/h3.test ./dit/h3
//	cd dit/h3 && FASTVIDEO_GPU_TEST=1 ../../.gpu/h3.test -test.run TestTensorParallelOnGPU -test.v
func TestTensorParallelOnGPU(t *testing.T) {
	b := testutil.MultiGPUBackend(t, "xla:cuda,tf32=false", 2)
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		load := func(shards int) *Model { return openOn(t, b, fx, Options{DType: dtypes.Float32, Shards: shards}) }
		one := load(1)
		want, wantActs := testutil.TracedForward(t, &one.trace, func() (ForwardOutputs, error) { return one.Forward(fixtureInputs(t, fx)) })
		m := load(2)
		if tp := m.TensorParallel(); !strings.Contains(tp, "SPMD") {
			t.Fatalf("Shards 2 on %d devices ran %q, want the SPMD path", b.NumDevices(), tp)
		}
		t.Logf("tensor parallel: %s", m.TensorParallel())
		for step := range 2 { // the second forward reuses the compiled program and the placed weights
			out, acts := testutil.TracedForward(t, &m.trace, func() (ForwardOutputs, error) { return m.Forward(fixtureInputs(t, fx)) })
			checkOutputs(t, fx, out, acts)
			assertSameForward(t, "2 GPUs vs 1", out, want, acts, wantActs)
			if step == 0 {
				t.Logf("weights: %d bytes on 2 GPUs (norm copies included), %d on one", m.WeightMemory().Total, one.WeightMemory().Total)
			}
		}
	})
}

// TestTensorParallelBF16OnGPU runs the SPMD path in bf16 (the fused attention) on the fixtures, checked
// against the f32 reference at the bf16 tolerance:
//
//	cd dit/h3 && FASTVIDEO_GPU_TEST=1 ../../.gpu/h3.test -test.run TestTensorParallelBF16OnGPU -test.v
func TestTensorParallelBF16OnGPU(t *testing.T) {
	b := testutil.MultiGPUBackend(t, "xla:cuda", 2)
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		skipUnlessSplitsInTwo(t, fx)
		out := mustForward(t, openOn(t, b, fx, Options{DType: dtypes.BFloat16, Shards: 2}), fixtureInputs(t, fx))
		assertOutputsAtDType(t, fx, out, dtypes.BFloat16, " bf16 over 2 GPUs")
	})
}

// TestTensorParallelVSAOnGPU runs every case of the VSA fixtures tensor-parallel over 2 GPUs (one head
// per GPU at the fixture's size, each with its rows of the gate) in float32 with TF32 off, against
// FastVideo's VSA outputs:
//
//	bash bench/build_gpu.sh -test .gpu/h3.test ./dit/h3
//	cd dit/h3 && FASTVIDEO_GPU_TEST=1 ../../.gpu/h3.test -test.run TestTensorParallelVSAOnGPU -test.v
func TestTensorParallelVSAOnGPU(t *testing.T) {
	b := testutil.MultiGPUBackend(t, "xla:cuda,tf32=false", 2)
	testutil.ForEachFixture(t, "h3_dit_vsa", func(t *testing.T, fx *testutil.Fixture) {
		skipUnlessSplitsInTwo(t, fx)
		m := openOn(t, b, fx, Options{DType: dtypes.Float32, Shards: 2})
		if tp := m.TensorParallel(); !strings.Contains(tp, "SPMD") {
			t.Fatalf("Shards 2 on %d devices ran %q, want the SPMD path", b.NumDevices(), tp)
		}
		in := fixtureInputs(t, fx)
		for name, v := range vsaCases(t, fx) {
			in.VSA = v
			out := mustForward(t, m, in)
			want, sh := fx.F32(t, "out."+name+".video")
			testutil.AssertClose(t, name+" video over 2 GPUs", out.Video, want, sh, testutil.ParityTol(want))
		}
	})
}

// openOn is fixtureModel on backend b: the fixture's model on the GPUs, closed when the test ends.
func openOn(t *testing.T, b compute.Backend, fx *testutil.Fixture, opts Options) *Model {
	t.Helper()
	return testutil.Open(t, func() (*Model, error) { return FromSource(b, fixtureConfig(t, fx), fx.Weights(), opts) })
}

// skipUnlessSplitsInTwo skips a fixture whose heads do not split over the two GPUs these tests hold.
func skipUnlessSplitsInTwo(t *testing.T, fx *testutil.Fixture) {
	t.Helper()
	if err := checkShards(fixtureConfig(t, fx), 2); err != nil {
		t.Skipf("two GPUs: %v", err)
	}
}
