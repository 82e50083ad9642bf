package h3

import (
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/hostmath"
	"fastvideo/internal/testutil"
	"fastvideo/quant"
)

// fp8MinSNR is issue 18's accuracy floor for the FP8 forward against the reference outputs.
const fp8MinSNR = 30

// TestFP8Forward runs every H3 DiT fixture with the joint blocks' linears in FP8 (emulated on the CPU
// backend), in float32 and bf16, and requires SNR ≥ 30 dB against the fixture's reference outputs
// (FastVideo's module in float32) and against the dense forward in the same dtype. It also checks what the conversion leaves on the device: every
// joint-block linear as Uint8 codes [out, in] and float32 scales [out], the refiner's linears dense.
func TestFP8Forward(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		in := fixtureInputs(t, fx)
		refV, _ := fx.F32(t, "out.video")
		refA, _ := fx.F32(t, "out.audio")
		for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
			m := fixtureModel(t, fx, Options{DType: dt, FP8: true, Dispatch: quant.Dispatch{FP8: quant.FP8Emulated}})
			out := mustForward(t, m, in)
			dense := mustForward(t, fixtureModel(t, fx, Options{DType: dt}), in)
			for _, ref := range []struct {
				name       string
				video, aud []float32
			}{{"the reference", refV, refA}, {"the dense " + dt.String() + " forward", dense.Video, dense.Audio}} {
				sv, sa := hostmath.SNRdB(out.Video, ref.video), hostmath.SNRdB(out.Audio, ref.aud)
				t.Logf("FP8 %s: SNR vs %s: video %.1f dB, audio %.1f dB", dt, ref.name, sv, sa)
				if min(sv, sa) < fp8MinSNR {
					t.Errorf("FP8 %s: SNR vs %s %.1f dB below %d dB", dt, ref.name, min(sv, sa), fp8MinSNR)
				}
			}
			checkFP8Memory(t, m)
		}
	})
}

func checkFP8Memory(t *testing.T, m *Model) {
	t.Helper()
	var fp8, dense int64
	for i := range m.p.Blocks {
		for _, w := range m.p.Blocks[i].linears() {
			if !w.FP8 || w.W.T.DType() != dtypes.Uint8 || w.Scales.T.DType() != dtypes.Float32 || w.Scales.T.Shape().Dim(0) != w.Out {
				t.Fatalf("%s: not converted to Uint8 codes with float32 scales [%d]", w.Name, w.Out)
			}
			fp8 += int64(w.Out*w.In + 4*w.Out)
		}
	}
	for j := range m.p.Refiner {
		for _, w := range m.p.Refiner[j].linears() {
			if w.FP8 {
				t.Fatalf("%s: a refiner linear was converted; FP8 is for the joint blocks", w.Name)
			}
			dense += w.W.T.Shape().ByteSize()
		}
	}
	if wm := m.WeightMemory(); wm.FP8Linears != fp8 || wm.DenseCoreLinears != dense {
		t.Errorf("WeightMemory: FP8 linears %d B, dense core linears %d B; want %d and %d", wm.FP8Linears, wm.DenseCoreLinears, fp8, dense)
	}
}

// TestFP8Refusals: FP8 converts dense weights only, so a quantized checkpoint is refused by name, and
// an invalid FP8 path is refused before anything loads.
func TestFP8Refusals(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		dir := convertFixture(t, fx, 8, ConvertOptions{})
		if m, err := Load(testutil.Backend(t), dir, Options{FP8: true}); err == nil || !strings.Contains(err.Error(), "Options.FP8") {
			if m != nil {
				m.Close()
			}
			t.Errorf("FP8 on an INT8 checkpoint: %v, want an error naming Options.FP8", err)
		}
		_, err := FromSource(testutil.Backend(t), fixtureConfig(t, fx), fx.Weights(), Options{FP8: true, Dispatch: quant.Dispatch{FP8: 7}})
		if err == nil || !strings.Contains(err.Error(), "FP8 path") {
			t.Errorf("an invalid FP8 path: %v, want an error naming the FP8 path", err)
		}
	})
}
