package main

import (
	"testing"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/attention"
	"fastvideo/internal/testutil"
)

// chainInputs gives every later attention of a chain its own k, v and gate: each the drawn one rolled by
// the link's shift along the sequence, no two alike (identical inputs would let XLA compute their tile
// copies once for the whole chain).
func TestChainInputsRollEachLink(t *testing.T) {
	b := testutil.Backend(t)
	const l, h, d, n = 10, 2, 3, 4
	randn := randnSource(7, 1)
	var kvg []*tensors.Tensor
	var host [][]float32
	for range 3 {
		v := randn(l * h * d)
		host = append(host, v)
		kvg = append(kvg, tensors.FromFlatDataAndDimensions(v, 1, l, h, d))
	}
	more, err := chainInputs(b, kvg, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(more) != 3*(n-1) {
		t.Fatalf("%d tensors for a chain of %d, want %d", len(more), n, 3*(n-1))
	}
	seen := map[int]bool{0: true}
	for i := 1; i < n; i++ {
		s := chainShift(i, l)
		if seen[s] {
			t.Errorf("link %d: shift %d is another link's (or none)", i, s)
		}
		seen[s] = true
		for j, x := range more[3*(i-1) : 3*i] {
			got := tensors.MustCopyFlatData[float32](x)
			for r := range l {
				src := (r + s) % l
				for c := range h * d {
					if got[r*h*d+c] != host[j][src*h*d+c] {
						t.Fatalf("link %d input %d: row %d is not row %d of the drawn one", i, j, r, src)
					}
				}
			}
		}
	}
	if none, err := chainInputs(b, kvg, 1); err != nil || none != nil {
		t.Errorf("a chain of one: %v, %v; want nothing", none, err)
	}
}

// chainAttend feeds each attention its own k, v and gate: with every value row of link i equal to i, the
// chain's output is the last link's values, whatever q and k are.
func TestChainAttendUsesEachLinksInputs(t *testing.T) {
	b := testutil.Backend(t)
	const l, h, d = 6, 1, 4
	randn := randnSource(3, 2)
	for _, links := range []int{1, 3} {
		in := []*tensors.Tensor{tensors.FromFlatDataAndDimensions(randn(l*h*d), 1, l, h, d)}
		for i := 1; i <= links; i++ {
			v := make([]float32, l*h*d)
			for j := range v {
				v[j] = float32(i)
			}
			in = append(in, tensors.FromFlatDataAndDimensions(randn(l*h*d), 1, l, h, d),
				tensors.FromFlatDataAndDimensions(v, 1, l, h, d), tensors.FromFlatDataAndDimensions(randn(l*h*d), 1, l, h, d))
		}
		exec, err := NewExec(b, func(in []*Node) *Node {
			return ConvertDType(chainAttend(in, nil, attention.Options{Path: attention.PathExact}), dtypes.Float32)
		})
		if err != nil {
			t.Fatal(err)
		}
		args := make([]any, len(in))
		for i, x := range in {
			args[i] = x
		}
		out, err := exec.Call1(args...)
		exec.Finalize()
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range tensors.MustCopyFlatData[float32](out) {
			if diff := x - float32(links); diff > 1e-5 || diff < -1e-5 {
				t.Fatalf("%d links: output %d is %v, want the last link's values %d", links, i, x, links)
			}
		}
	}
}
