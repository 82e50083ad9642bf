package familykit

import (
	"errors"
	"slices"
	"testing"

	"fastvideo/attention"
	"fastvideo/fastvideo/api"
)

func TestResolveVSA(t *testing.T) {
	ck := VSACheckpoint{Gates: true, GatesHint: "a VSA checkpoint", Default: VSA{Sparsity: 0.9, TileSize: 64, Mode: attention.ModeExempt}, NumLayers: 4}
	half, on := 0.5, &VSAKnobs{}
	if c, why, err := ResolveVSA(nil, ck); err != nil || (c == nil) != !attention.BlockSparseKernel() || (c == nil && why != DenseByDefault) {
		t.Errorf("no knobs: %+v, %q, %v; want the default, or dense with its reason without the kernel", c, why, err)
	}
	if c, _, err := ResolveVSA(on, ck); err != nil || c.Sparsity != 0.9 || c.TileSize != 64 || c.Mode != attention.ModeExempt {
		t.Errorf("knobs at zero: %+v, %v; want the checkpoint's defaults", c, err)
	}
	c, _, err := ResolveVSA(&VSAKnobs{Sparsity: &half, TileSize: 256, Mode: "compete", DenseFirstSteps: 2, DenseLayers: []int{3}}, ck)
	if err != nil || c.Sparsity != 0.5 || c.TileSize != 256 || c.Mode != attention.ModeCompete || !slices.Equal(c.DenseLayers, []int{3}) {
		t.Fatalf("knobs: %+v, %v", c, err)
	}
	if c.SparsityAt(1) != 0 || c.SparsityAt(2) != 0.5 {
		t.Errorf("SparsityAt(1), (2) = %v, %v; want 0 during the dense first steps, then 0.5", c.SparsityAt(1), c.SparsityAt(2))
	}
	if c, _, err := ResolveVSA(&VSAKnobs{Off: true}, ck); c != nil || err != nil {
		t.Errorf("Off: %+v, %v; want dense", c, err)
	}
	for _, bad := range []struct {
		knobs *VSAKnobs
		ck    VSACheckpoint
		field string
	}{
		{on, VSACheckpoint{GatesHint: "x"}, "vsa"},
		{&VSAKnobs{TileSize: 128}, ck, "vsa_tile_size"},
		{&VSAKnobs{Mode: "sideways"}, ck, "vsa_mode"},
		{&VSAKnobs{DenseLayers: []int{4}}, ck, "vsa_dense_layers"},
	} {
		var re *api.RequestError
		if _, _, err := ResolveVSA(bad.knobs, bad.ck); !errors.As(err, &re) || re.Field != bad.field {
			t.Errorf("%+v: %v; want a RequestError for %s", bad.knobs, err, bad.field)
		}
	}
	if c, _, err := ResolveVSA(nil, VSACheckpoint{}); c != nil || err != nil {
		t.Errorf("a checkpoint without gates: %+v, %v; want dense, no error", c, err)
	}
}

// The plan's fine stage: the Triton kernel only where the build has it, for 64-row tiles and not in
// float32; the gathered tiles otherwise.
func TestFineStage(t *testing.T) {
	want := "gather"
	if attention.BlockSparseKernel() {
		want = "triton"
	}
	for _, c := range []struct {
		tile  int
		dtype api.DType
		want  string
	}{{64, api.DTypeAuto, want}, {64, api.BF16, want}, {64, api.FP8, want}, {64, api.F32, "gather"}, {256, api.BF16, "gather"}} {
		if got := (&VSA{TileSize: c.tile}).FineStage(c.dtype); got != c.want {
			t.Errorf("tile %d, %q: %q, want %q", c.tile, c.dtype, got, c.want)
		}
	}
}

// The window's key tiles are read in place where the build has the window kernel, at any dtype but
// float32 (the kernel is bf16), and gathered otherwise.
func TestWindowFineStage(t *testing.T) {
	kernel := "read in place (Triton kernel)"
	if !attention.WindowKernel() {
		kernel = "gathered"
	}
	for _, c := range []struct {
		dtype api.DType
		want  string
	}{{api.DTypeAuto, kernel}, {api.BF16, kernel}, {api.F32, "gathered"}} {
		if got := WindowFineStage(c.dtype); got != c.want {
			t.Errorf("%q: %q, want %q", c.dtype, got, c.want)
		}
	}
}
