package wan

import (
	"testing"

	"fastvideo/internal/lora"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

// The DiT forward with a LoRA adapter merged against FastVideo's (gen_wan_lora_forward.py): the fixture's
// adapter (native Wan names) is opened and mapped as any adapter (testutil.FixtureAdapter, LoRANames),
// merged into the fixture's base weights in float32 (lora.Merge, the arithmetic familykit.LoadMerged
// runs tensor by tensor at load), and the forward compared with upstream's after its
// BaseLayerWithLoRA.set_lora_weights merge; it must also differ from the base forward.
func TestLoRAForwardParity(t *testing.T) {
	testutil.ForEachPendingFixture(t, "wan_dit_lora", "dit/wan/testdata/gen_wan_lora_forward.py", func(t *testing.T, fx *testutil.Fixture) {
		var meta struct {
			Strength float64        `json:"strength"`
			Modules  map[string]any `json:"modules"`
		}
		if err := fx.DecodeConfig(&meta, "lora"); err != nil {
			t.Fatal(err)
		}
		ad := testutil.FixtureAdapter(t, fx)
		merged := loraTensors(t, fx.Weights())
		touched, err := lora.Merge([]lora.Weighted{{Adapter: ad, Strength: meta.Strength}}, LoRANames(), merged)
		if err != nil {
			t.Fatal(err)
		}
		if len(touched) != 1 || touched[0].Modules != len(meta.Modules) || len(touched[0].Skipped) != 0 {
			t.Fatalf("merged %+v, the fixture's adapter has %d modules", touched, len(meta.Modules))
		}
		src := weights.MapSource{}
		for n, x := range merged {
			src[n] = safetensors.Info{Name: n, DType: safetensors.F32, Shape: x.Shape, Data: safetensors.F32Bytes(x.Data)}
		}
		m := testutil.Open(t, func() (*Model, error) { return FromSource(testutil.Backend(t), fixtureConfig(t, fx), src, Options{}) })
		got, err := m.Forward(fixtureInputs(t, fx))
		if err != nil {
			t.Fatal(err)
		}
		want, sh := fx.F32(t, "out.lora.sample")
		tol := testutil.ParityTol(want)
		testutil.AssertClose(t, "out.lora.sample", got, want, sh, tol)
		if before, _ := fx.F32(t, "out.base.sample"); testutil.MaxAbsDiff(got, before) <= 100*tol {
			t.Error("the merged forward is within 100x the tolerance of the base one: the adapter exercises nothing")
		}
	})
}
