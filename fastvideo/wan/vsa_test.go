package wan

import (
	"errors"
	"testing"

	"fastvideo/attention"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/familykit"
)

// The FastWan plans report their VSA tiling: 480×832×81 is a 21×30×52 token grid, 6·8·13 = 624 tiles
// of (4,4,4), of which sparsity 0.8 keeps ceil(0.2·624) = 125; dense first steps save less; the base
// models plan no VSA and refuse it. Without a request for VSA, FastWan runs dense attention and says
// why where this build has no block-sparse kernel, and VSA with the kernel where it has one.
func TestPlanVSA(t *testing.T) {
	req := api.Request{Height: 480, Width: 832, NumFrames: 81}
	if _, d := mustPlan(t, "fastwan2.1-t2v-1.3b", req, api.DTypeAuto); attention.BlockSparseKernel() {
		if d.VSA == nil || d.VSA.FineStage != "triton" {
			t.Errorf("fastwan2.1-t2v-1.3b by default in a build with the kernel: VSA %+v, want it through the kernel", d.VSA)
		}
	} else if d.VSA != nil || d.Attention != familykit.DenseByDefault {
		t.Errorf("fastwan2.1-t2v-1.3b by default: VSA %+v, attention %q; want dense", d.VSA, d.Attention)
	}
	req.Options = &Options{VSA: &VSA{}}
	_, d := mustPlan(t, "fastwan2.1-t2v-1.3b", req, api.DTypeAuto)
	v := d.VSA
	if v == nil || v.Tiles != 624 || v.TopK != 125 || v.Sparsity != 0.8 || v.TileSize != 64 || v.AttentionTFLOPsSaved <= 0 ||
		v.FineStage != (&familykit.VSA{TileSize: 64}).FineStage(api.DTypeAuto) {
		t.Fatalf("fastwan2.1-t2v-1.3b VSA plan %+v, want 624 tiles, k 125 at 0.8, work saved", v)
	}
	if _, d14 := mustPlan(t, "fastwan2.1-t2v-14b-480p", req, api.DTypeAuto); d14.VSA == nil || d14.VSA.Sparsity != 0.9 {
		t.Errorf("fastwan2.1-t2v-14b-480p VSA plan %+v, want sparsity 0.9", d14.VSA)
	}
	req.Options = &Options{VSA: &VSA{DenseFirstSteps: 1, Sparsity: api.Ptr(0.5)}}
	if _, d1 := mustPlan(t, "fastwan2.1-t2v-1.3b", req, api.DTypeAuto); d1.VSA == nil || d1.VSA.TopK != 312 ||
		d1.VSA.AttentionTFLOPsSaved >= v.AttentionTFLOPsSaved {
		t.Errorf("sparsity 0.5 after one dense step: %+v, want k 312 and less work saved than %+v", d1.VSA, v)
	}
	req.Options = &Options{VSA: &VSA{Off: true}}
	if _, d = mustPlan(t, "fastwan2.1-t2v-1.3b", req, api.DTypeAuto); d.VSA != nil {
		t.Errorf("VSA off plans %+v", d.VSA)
	}
	req.Options = nil
	if _, d = mustPlan(t, "wan2.1-t2v-1.3b", req, api.DTypeAuto); d.VSA != nil {
		t.Errorf("base Wan plans VSA %+v; it has no gates", d.VSA)
	}
	for _, c := range []struct {
		model, field string
		vsa          *VSA
	}{
		{"wan2.1-t2v-1.3b", "vsa", &VSA{}},
		{"fastwan2.1-t2v-1.3b", "vsa_sparsity", &VSA{Sparsity: api.Ptr(1.0)}},
		{"fastwan2.1-t2v-1.3b", "vsa_dense_first_n_steps", &VSA{DenseFirstSteps: -1}},
		{"fastwan2.1-t2v-1.3b", "vsa_dense_layers", &VSA{DenseLayers: []int{30}}},
	} {
		_, _, err := plan(t, builtin(t, c.model), api.Request{Options: &Options{VSA: c.vsa}}, api.DTypeAuto)
		var re *api.RequestError
		if !errors.As(err, &re) || re.Field != c.field {
			t.Errorf("%s %+v: error %v, want a request error on %s", c.model, c.vsa, err, c.field)
		}
	}
}
