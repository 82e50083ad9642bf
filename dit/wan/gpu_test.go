package wan

import (
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"fastvideo/attention"
	"fastvideo/internal/testutil"
)

// TestFixturesOnGPU runs the fixtures on xla:cuda: f32 with TF32 off (exact attention path) at the parity
// tolerance, and bf16 through the fused cuDNN attention checked loosely against the f32 reference:
//
//	bash bench/build_gpu.sh -test .gpu/wan.test ./dit/wan
//	cd dit/wan && FASTVIDEO_GPU_TEST=1 ../../.gpu/wan.test -test.run TestFixturesOnGPU -test.v
func TestFixturesOnGPU(t *testing.T) {
	testutil.GPUFixtures(t, "wan_dit", func(t *testing.T, b compute.Backend, fx *testutil.Fixture, dt dtypes.DType) {
		path, err := attention.Resolve(b, dt, fixtureConfig(t, fx).AttentionHeadDim, attention.Options{})
		if err != nil {
			t.Fatal(err)
		}
		out := testutil.Run(t, func() (*Model, error) { return FromSource(b, fixtureConfig(t, fx), fx.Weights(), Options{DType: dt}) },
			func(m *Model) ([]float32, error) { return m.Forward(fixtureInputs(t, fx)) })
		want, sh := fx.F32(t, "out.sample")
		testutil.AssertAtDType(t, "out.sample/"+path.String(), dt, out, want, sh)
	})
}
