package h3

import (
	"fmt"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"fastvideo/attention"
	"fastvideo/internal/hostmath"
	"fastvideo/internal/testutil"
	"fastvideo/quant"
)

// TestFixturesOnGPU runs the fixtures on xla:cuda: f32 with TF32 off (exact attention path) at the parity
// tolerance, and bf16 through the fused cuDNN attention checked loosely against the f32 reference:
//
//	bash bench/build_gpu.sh -test .gpu/h3.test ./dit/h3
//	cd dit/h3 && FASTVIDEO_GPU_TEST=1 ../../.gpu/h3.test -test.run TestFixturesOnGPU -test.v
func TestFixturesOnGPU(t *testing.T) {
	testutil.GPUFixtures(t, "h3_dit", func(t *testing.T, b compute.Backend, fx *testutil.Fixture, dt dtypes.DType) {
		path, err := attention.Resolve(b, dt, fixtureConfig(t, fx).AttentionHeadDim, attention.Options{})
		if err != nil {
			t.Fatal(err)
		}
		out := testutil.Run(t, func() (*Model, error) { return FromSource(b, fixtureConfig(t, fx), fx.Weights(), Options{DType: dt}) },
			func(m *Model) (ForwardOutputs, error) { return m.Forward(fixtureInputs(t, fx)) })
		assertOutputsAtDType(t, fx, out, dt, "/"+path.String())
	})
}

// TestQuantizedOnGPU runs INT8 and INT4 conversions of the fixtures (group 64, bf16 scales) on xla:cuda.
// In f32 with TF32 off, both dispatch routes (the dispatch of FASTVIDEO_DQ_GEMM=0: the quantized
// contraction; of FASTVIDEO_DQ_GEMM=1: dequantize then GEMM) must match the CPU quantized forward at the parity
// tolerance and reach the SNR floors (40 dB INT8, 18 dB INT4) against the dense reference outputs; in
// bf16 the default dispatch must reach the same floors:
//
//	bash bench/build_gpu.sh -test .gpu/h3.test ./dit/h3
//	cd dit/h3 && FASTVIDEO_GPU_TEST=1 ../../.gpu/h3.test -test.run TestQuantizedOnGPU -test.v
func TestQuantizedOnGPU(t *testing.T) {
	b := testutil.GPUBackend(t, "xla:cuda,tf32=false")
	minSNR := map[int]float64{8: 40, 4: 18}
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		in := fixtureInputs(t, fx)
		refV, _ := fx.F32(t, "out.video")
		refA, _ := fx.F32(t, "out.audio")
		forward := func(be compute.Backend, dir string, dt dtypes.DType, d quant.Dispatch) ForwardOutputs {
			t.Helper()
			return testutil.Run(t, func() (*Model, error) { return Load(be, dir, Options{DType: dt, Dispatch: d}) },
				func(m *Model) (ForwardOutputs, error) { return m.Forward(in) })
		}
		snr := func(label string, bits int, out ForwardOutputs) {
			t.Helper()
			sv, sa := hostmath.SNRdB(out.Video, refV), hostmath.SNRdB(out.Audio, refA)
			t.Logf("%s: SNR vs the dense reference: video %.1f dB, audio %.1f dB", label, sv, sa)
			if min(sv, sa) < minSNR[bits] {
				t.Errorf("%s: SNR %.1f dB below %.0f dB", label, min(sv, sa), minSNR[bits])
			}
		}
		for _, bits := range []int{8, 4} {
			dir := convertFixture(t, fx, bits, ConvertOptions{})
			cpu := forward(testutil.Backend(t), dir, dtypes.Float32, quant.Dispatch{})
			for _, env := range []string{"0", "1"} {
				d, err := quant.ParseDispatch(env)
				if err != nil {
					t.Fatal(err)
				}
				got := forward(b, dir, dtypes.Float32, d)
				label := fmt.Sprintf("int%d f32 %s=%s", bits, quant.DQGEMMEnv, env)
				testutil.AssertClose(t, label+" video vs CPU", got.Video, cpu.Video, []int{len(cpu.Video)}, testutil.ParityTol(cpu.Video))
				testutil.AssertClose(t, label+" audio vs CPU", got.Audio, cpu.Audio, []int{len(cpu.Audio)}, testutil.ParityTol(cpu.Audio))
				snr(label, bits, got)
			}
			snr(fmt.Sprintf("int%d bf16", bits), bits, forward(b, dir, dtypes.BFloat16, quant.Dispatch{}))
		}
	})
}

// TestFP8OnGPU runs the fixtures with Options.FP8 on xla:cuda in bf16: the emulated graph must reach the
// FP8 SNR floor against the reference, and the native F8E4M3FN graph, where the backend declares the
// dtype, must match the emulation at the bf16 tolerance; where it does not (go-xla v0.4.1 writes no f8
// type into StableHLO), the native graph must be refused. Both cases: the first with a plain build, the
// second with the GPU build:
//
//	go test -c -o .gpu/h3_plain.test ./dit/h3
//	bash bench/build_gpu.sh -test .gpu/h3_f8.test ./dit/h3
//	cd dit/h3 && FASTVIDEO_GPU_TEST=1 ../../.gpu/h3_plain.test -test.run TestFP8OnGPU -test.v  # then h3_f8.test
func TestFP8OnGPU(t *testing.T) {
	b := testutil.GPUBackend(t, "xla:cuda")
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		in := fixtureInputs(t, fx)
		refV, _ := fx.F32(t, "out.video")
		forward := func(path quant.FP8Path) (ForwardOutputs, error) {
			m, err := FromSource(b, fixtureConfig(t, fx), fx.Weights(), Options{DType: dtypes.BFloat16, FP8: true, Dispatch: quant.Dispatch{FP8: path}})
			if err != nil {
				return ForwardOutputs{}, err
			}
			defer m.Close()
			return m.Forward(in)
		}
		emulated, err := forward(quant.FP8Emulated)
		if err != nil {
			t.Fatal(err)
		}
		snr := hostmath.SNRdB(emulated.Video, refV)
		t.Logf("FP8 emulated bf16 on the GPU: video SNR %.1f dB; backend declares F8E4M3FN: %v", snr, quant.SupportsNativeFP8(b))
		if snr < fp8MinSNR {
			t.Errorf("FP8 emulated: SNR %.1f dB below %d dB", snr, fp8MinSNR)
		}
		native, err := forward(quant.FP8Native)
		if !quant.SupportsNativeFP8(b) {
			if err == nil {
				t.Error("the native FP8 graph ran on a backend that does not declare F8E4M3FN")
			}
			t.Logf("native FP8 refused, as expected: %v", err)
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		testutil.AssertAtDType(t, "native vs emulated FP8", dtypes.BFloat16, native.Video, emulated.Video, []int{len(emulated.Video)})
	})
}
