package taehv

import (
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/testutil"
)

// TestFixturesOnGPU decodes every TAEHV fixture on xla:cuda (TF32 off), in float32 at the parity
// tolerance and in bfloat16 at its own, through the pipelined float32 path and the on-device 8-bit RGB
// one (DecodeRGB24: within one level of the float32 frames quantized on the host). Built as the GPU
// build (bench/goxla-convprecision.patch): a plain go-xla leaves TF32 on in convolutions whatever
// tf32 says, and float32 frames come out about 1e-4 off.
//
//	bash bench/build_gpu.sh -test .gpu/taehv.test ./vae/taehv
//	cd vae/taehv && FASTVIDEO_GPU_TEST=1 ../../.gpu/taehv.test -test.run TestFixturesOnGPU -test.v
func TestFixturesOnGPU(t *testing.T) {
	testutil.GPUFixtures(t, "taehv", func(t *testing.T, b compute.Backend, fx *testutil.Fixture, dt dtypes.DType) {
		d, _ := openFixture(t, b, fx, Options{DType: dt})
		lat, lshape := fx.F32(t, "in.latents")
		z, zshape := toChannelMajor(lat, lshape)
		want, wshape := fx.F32(t, "out.frames")
		got, n, _ := decodeAll(t, d, z, zshape, zshape[1], true)
		plane := wshape[3] * wshape[4]
		testutil.AssertAtDType(t, "out.frames", dt, framesNTCHW(got, n, plane), want, wshape)
		var rgb []byte
		if err := d.DecodeRGB24(t.Context(), z, zshape, func(f RGBFrames) error { rgb = append(rgb, f.RGB...); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(rgb) != 3*n*plane {
			t.Fatalf("DecodeRGB24: %d bytes, want %d", len(rgb), 3*n*plane)
		}
		for f := range n {
			for p := range plane {
				for c := range 3 {
					q, r := int(Quantize(got[(c*n+f)*plane+p])), int(rgb[(f*plane+p)*3+c])
					if q-r > 1 || r-q > 1 {
						t.Fatalf("%s: DecodeRGB24 frame %d pixel %d channel %d = %d, the float frames quantize to %d", dt, f, p, c, r, q)
					}
				}
			}
		}
	})
}
