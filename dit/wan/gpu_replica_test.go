package wan

import (
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/testutil"
)

// TestReplicaOnGPU copies the fixture models to a second GPU (the CFG-parallel step's unconditional
// branch) and runs both at once: the replica on device 1 gives the device-0 output within the parity
// tolerance in f32 with TF32 off, twice (the second reuses its compiled programs), and both agree with
// the fixture. Built and run on a machine with 2 GPUs:
//
//	bash bench/build_gpu.sh -test .gpu/wan.test ./dit/wan
//	cd dit/wan && FASTVIDEO_GPU_TEST=1 ../../.gpu/wan.test -test.run TestReplicaOnGPU -test.v
func TestReplicaOnGPU(t *testing.T) {
	b := testutil.MultiGPUBackend(t, "xla:cuda,tf32=false", 2)
	testutil.ForEachFixture(t, "wan_dit", func(t *testing.T, fx *testutil.Fixture) {
		m := testutil.Open(t, func() (*Model, error) {
			return FromSource(b, fixtureConfig(t, fx), fx.Weights(), Options{DType: dtypes.Float32})
		})
		r := testutil.Open(t, func() (*Model, error) { return m.Replica(1) })
		if r.sharesWeights || r.Device() != 1 {
			t.Fatalf("replica: shares %v, device %d; want its own copies on device 1", r.sharesWeights, r.Device())
		}
		in := fixtureInputs(t, fx)
		want, sh := fx.F32(t, "out.sample")
		for range 2 {
			got, gotR := forwardPair(t, m, r, in)
			testutil.AssertClose(t, "device 0", got, want, sh, testutil.ParityTol(want))
			testutil.AssertClose(t, "device 1 vs device 0", gotR, got, sh, testutil.ParityTol(got))
		}
	})
}
