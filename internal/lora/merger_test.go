package lora

import (
	"math"
	"slices"
	"testing"
)

// TestMergerMatchesMerge: merging tensor by tensor (Merger, planned against shapes alone) gives Merge's
// bits, several adapters in order, a strength-0 adapter included, and leaves untouched tensors alone.
func TestMergerMatchesMerge(t *testing.T) {
	a1 := mustBuild(t, nil, ft("m.lora_A.weight", []int{2, 8}), ft("m.lora_B.weight", []int{8, 2}), ft("m.alpha", nil, 3),
		ft("m.lora_B.bias", []int{8}), ft("n.diff", []int{4}, 1, 2, 3, 4))
	a2 := mustBuild(t, nil, ft("m.lora_down.weight", []int{1, 8}), ft("m.lora_up.weight", []int{8, 1}), ft("m.diff_b", []int{8}))
	a3 := mustBuild(t, nil, ft("n.set_weight", []int{4}, 9, 9, 9, 9))
	ads := []Weighted{{a1, 0.7}, {a2, -1.3}, {a3, 0}}
	want := weightsFor(float32(math.Copysign(0, -1)))
	if _, err := Merge(ads, identity, want); err != nil {
		t.Fatal(err)
	}
	got := weightsFor(float32(math.Copysign(0, -1)))
	shapes := Shapes{}
	for n, x := range got {
		shapes[n] = x.Shape
	}
	m, err := NewMerger(ads, identity, shapes)
	if err != nil {
		t.Fatal(err)
	}
	if tn := m.Tensors(); !slices.Equal(tn, []string{"m.bias", "m.weight", "n.weight"}) {
		t.Errorf("tensors %v", tn)
	}
	for n, x := range got {
		if err := m.Apply(n, x.Data); err != nil {
			t.Fatal(err)
		}
	}
	ws, gs := snapshot(want), snapshot(got)
	for n := range ws {
		if !slices.Equal(ws[n], gs[n]) {
			t.Errorf("%s: Merger %x, Merge %x", n, gs[n], ws[n])
		}
	}
	if len(m.Touched()) != 3 || m.Touched()[2].Tensors[0] != "n.weight" {
		t.Errorf("touched %+v", m.Touched())
	}
	if _, err := NewMerger(ads, identity, Shapes{"m.weight": {8, 8}}); err == nil {
		t.Error("a plan without the bias and n.weight was accepted")
	}
}
