package h3video

import (
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/testutil"
)

// TestClipParallelOnGPU decodes the fixtures' latents (several clips) with the clips spread over two
// GPUs, each holding its own copy of the weights, against the same decoder on one GPU (f32, TF32
// off) at the parity tolerance; a second decode reuses the placed weights and compiled programs.
// Built and run on a machine with 2 GPUs:
//
//	bash bench/build_gpu.sh -test .gpu/h3video.test ./vae/h3video
//	cd vae/h3video && FASTVIDEO_GPU_TEST=1 ../../.gpu/h3video.test -test.run TestClipParallelOnGPU -test.v
func TestClipParallelOnGPU(t *testing.T) {
	b := testutil.MultiGPUBackend(t, "xla:cuda,tf32=false", 2)
	testutil.ForEachFixture(t, "h3_video_vae", func(t *testing.T, fx *testutil.Fixture) {
		r := fixtureConfig(t, fx).SpatialRatio()
		load := func(devices int) *Decoder {
			return testutil.Open(t, func() (*Decoder, error) {
				return FromSource(b, fixtureConfig(t, fx), fx.Weights(), Options{DType: dtypes.Float32, TileSize: 3 * r, TileOverlap: r, Devices: devices})
			})
		}
		z, s := laneLatents(t, fx)
		want, shape := collect(t, load(1), z, s)
		d := load(2)
		if d.Devices() != 2 {
			t.Fatalf("Devices 2 decodes over %d devices", d.Devices())
		}
		for run := range 2 {
			got, _ := collect(t, d, z, s)
			diff := testutil.Compare(got, want)
			t.Logf("decode %d over 2 GPUs vs 1: max abs %.3g", run, diff.MaxAbs)
			testutil.AssertClose(t, "2 GPUs vs 1", got, want, shape, testutil.ParityTol(want))
		}
	})
}
