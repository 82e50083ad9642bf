package lora

import (
	"slices"
	"strings"
	"testing"
)

// fused maps "qkv" onto thirds of q/k/v.weight and "ff" onto ff.weight with its halves swapped; "bad.*"
// modules get broken row blocks (a map bug); everything else is identity.
var fused = NameMap{Model: "the fused model", Map: func(m string, _ bool) (Target, bool) {
	switch m {
	case "qkv":
		return Target{Rows: []RowBlock{{"q.weight", 0, 3, 0, 1}, {"k.weight", 1, 3, 0, 1}, {"v.weight", 2, 3, 0, 1}}}, true
	case "ff":
		return Target{Rows: []RowBlock{{"ff.weight", 1, 2, 0, 2}, {"ff.weight", 0, 2, 1, 2}}}, true
	case "bad.gap":
		return Target{Rows: []RowBlock{{"q.weight", 0, 3, 0, 1}, {"k.weight", 1, 3, 0, 1}}}, true
	case "bad.twice":
		return Target{Rows: []RowBlock{{"ff.weight", 0, 2, 0, 2}, {"ff.weight", 1, 2, 0, 2}}}, true
	}
	return identity.Map(m, false)
}}

func fusedWeights() TensorMap {
	w := TensorMap{}
	for _, n := range []string{"q.weight", "k.weight", "v.weight"} {
		w[n] = &Tensor{Shape: []int{2, 3}, Data: make([]float32, 6)}
	}
	w["ff.weight"] = &Tensor{Shape: []int{4, 3}, Data: make([]float32, 12)}
	return w
}

// TestMergeRows: a fused module's B·A rows land in the row blocks its target names (thirds of three
// weights; the swapped halves of one), Merger gives Merge's bits, and Touched lists every weight.
func TestMergeRows(t *testing.T) {
	a := []float32{1, 0, 2, 0, 1, -1} // [2, 3]
	b := make([]float32, 12)          // [6, 2]: row o = (o+1, -o)
	for o := 0; o < 6; o++ {
		b[2*o], b[2*o+1] = float32(o+1), float32(-o)
	}
	ad := mustBuild(t, nil, ft("qkv.lora_A.weight", []int{2, 3}, a...), ft("qkv.lora_B.weight", []int{6, 2}, b...), ft("qkv.alpha", nil, 4),
		ft("ff.lora_A.weight", []int{2, 3}, a...), ft("ff.lora_B.weight", []int{4, 2}, b[:8]...))
	w := fusedWeights()
	touched, err := Merge([]Weighted{{ad, 0.5}}, fused, w)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(touched[0].Tensors, ","); got != "ff.weight,k.weight,q.weight,v.weight" || touched[0].Modules != 2 {
		t.Errorf("touched %+v", touched)
	}
	row := func(o int, s float32) []float32 { // s·(B·A)[o]
		out := make([]float32, 3)
		for i := range out {
			out[i] = s * (b[2*o]*a[i] + b[2*o+1]*a[3+i])
		}
		return out
	}
	check := func(name string, rows ...[]float32) {
		t.Helper()
		if want := slices.Concat(rows...); !slices.Equal(w[name].Data, want) {
			t.Errorf("%s = %v, want %v", name, w[name].Data, want)
		}
	}
	// qkv: strength 0.5 · alpha 4 / rank 2 = 1; ff: 0.5 · 2/2.
	check("q.weight", row(0, 1), row(1, 1))
	check("k.weight", row(2, 1), row(3, 1))
	check("v.weight", row(4, 1), row(5, 1))
	check("ff.weight", row(2, 0.5), row(3, 0.5), row(0, 0.5), row(1, 0.5))

	got := fusedWeights()
	shapes := Shapes{}
	for n, x := range got {
		shapes[n] = x.Shape
	}
	m, err := NewMerger([]Weighted{{ad, 0.5}}, fused, shapes)
	if err != nil {
		t.Fatal(err)
	}
	for n, x := range got {
		if err := m.Apply(n, x.Data); err != nil {
			t.Fatal(err)
		}
	}
	for n := range w {
		if !slices.Equal(snapshot(w)[n], snapshot(got)[n]) {
			t.Errorf("%s: Merger %v, Merge %v", n, got[n].Data, w[n].Data)
		}
	}
	// LowRankTerms lays each term's B on the weight's rows: Scale·(B·A) is the same change.
	for n, x := range w {
		out, in := x.Shape[0], x.Shape[1]
		terms, ok, err := m.LowRankTerms(n, out, in)
		if err != nil || !ok || len(terms) != 1 {
			t.Fatalf("%s: %d terms, %v, %v", n, len(terms), ok, err)
		}
		tm := terms[0]
		for o := range out {
			for i := range in {
				var s float32
				for k := range tm.Rank {
					s += tm.B[o*tm.Rank+k] * tm.A[k*in+i]
				}
				if got := tm.Scale * s; got != x.Data[o*in+i] {
					t.Fatalf("%s[%d,%d]: LowRankTerms give %g, Apply %g", n, o, i, got, x.Data[o*in+i])
				}
			}
		}
	}
}

// TestMergeRowsRefusals: a split module with a bias or dense part, a size that does not fit the blocks,
// a missing weight, a spelling clash, and a map whose blocks leave rows out or write some twice are refused
// before any weight changes.
func TestMergeRowsRefusals(t *testing.T) {
	pair := func(m string, out int) []tens {
		return []tens{ft(m+".lora_A.weight", []int{2, 3}), ft(m+".lora_B.weight", []int{out, 2})}
	}
	for _, c := range []struct {
		name string
		ts   []tens
		w    func(TensorMap)
		want []string
	}{
		{"bias delta", append(pair("qkv", 6), ft("qkv.lora_B.bias", []int{6})), nil,
			[]string{`"qkv"`, "fused projection", "only a plain low-rank pair"}},
		{"dense part", append(pair("ff", 4), ft("ff.diff", []int{4, 3})), nil, []string{`"ff"`, "only a plain low-rank pair"}},
		{"size", pair("qkv", 9), nil, []string{`"qkv.lora_B.weight"`, "[9, 3]", "part 1 of 3", `"q.weight"`, "another size"}},
		{"missing weight", pair("qkv", 6), func(w TensorMap) { delete(w, "k.weight") }, []string{`"k.weight"`, "lack"}},
		{"two spellings", append(pair("qkv", 6), pair("q", 2)...), nil, []string{`"q.weight"`, "two spellings"}},
		{"gap", pair("bad.gap", 6), nil, []string{`"bad.gap"`, "do not cover the 6 rows", "bug"}},
		{"twice", pair("bad.twice", 4), nil, []string{`"bad.twice"`, `"ff.weight" twice`, "bug"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := fusedWeights()
			if c.w != nil {
				c.w(w)
			}
			before := snapshot(w)
			_, err := Merge([]Weighted{{mustBuild(t, nil, c.ts...), 1}}, fused, w)
			wantErr(t, err, c.want...)
			assertUnchanged(t, w, before)
		})
	}
}

// TestPEFTAdapterAndCheck: an update records its keys' PEFT adapter name (also when a scalar key sorts
// first), and NameMap.Check refuses a module Map accepted.
func TestPEFTAdapterAndCheck(t *testing.T) {
	ad := mustBuild(t, nil, ft("m.alpha", nil, 2), ft("m.lora_A.default.weight", []int{2, 8}), ft("m.lora_B.default.weight", []int{8, 2}))
	if ad.Updates[0].PEFTAdapter != "default" {
		t.Errorf("PEFTAdapter %q", ad.Updates[0].PEFTAdapter)
	}
	names := identity
	names.Check = func(u *Update, tg Target) error {
		if u.PEFTAdapter != "" {
			return errorString("module " + u.Module + " refused for " + tg.Weight)
		}
		return nil
	}
	_, err := Merge([]Weighted{{ad, 1}}, names, weightsFor(0))
	wantErr(t, err, "module m refused for m.weight")
}

type errorString string

func (e errorString) Error() string { return string(e) }
