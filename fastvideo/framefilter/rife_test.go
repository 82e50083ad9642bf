package framefilter

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/internal/rife"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
)

// TestRIFEBatches: calls of at most max pairs, power-of-two sizes, every pair used once.
func TestRIFEBatches(t *testing.T) {
	for _, c := range []struct {
		n, max      int
		sizes, used []int
	}{
		{0, 8, nil, nil},
		{3, 1, []int{1, 1, 1}, []int{1, 1, 1}},
		{5, 8, []int{8}, []int{5}},
		{19, 8, []int{8, 8, 4}, []int{8, 8, 3}},
		{2, 8, []int{2}, []int{2}},
	} {
		sizes, used := RIFEBatches(c.n, c.max)
		if !slices.Equal(sizes, c.sizes) || !slices.Equal(used, c.used) {
			t.Errorf("RIFEBatches(%d, %d) = %v, %v; want %v, %v", c.n, c.max, sizes, used, c.sizes, c.used)
		}
	}
}

// TestRIFEPaddedBatchesEqualSinglePairs: three pairs in one padded call of four (an accelerator's
// batching) give each pair's frame from a call of its own (the pure-Go backend's).
func TestRIFEPaddedBatchesEqualSinglePairs(t *testing.T) {
	m := testutil.Open(t, func() (*rife.Model, error) {
		return rife.Random(testutil.Backend(t), rife.Tiny(), dtypes.Float32, 5)
	})
	const w, h, n = 24, 16, 3
	a, b := family.Frames{Width: w, Height: h, Count: n}, family.Frames{Width: w, Height: h, Count: n}
	for i := range n * w * h * 3 {
		a.RGB, b.RGB = append(a.RGB, byte(i*7)), append(b.RGB, byte(i*13+5))
	}
	ts := []float64{0.25, 0.5, 0.75}
	batched, err := (&rifeInterpolator{m: m, batch: RIFEBatch}).Interpolate(context.Background(), a, b, ts)
	if err != nil {
		t.Fatal(err)
	}
	single, err := (&rifeInterpolator{m: m, batch: 1}).Interpolate(context.Background(), a, b, ts)
	if err != nil {
		t.Fatal(err)
	}
	if batched.Count != n || !bytes.Equal(batched.RGB, single.RGB) {
		t.Fatalf("padded batch of %d pairs differs from single pairs", batched.Count)
	}
}

// TestRIFEFolderChecksEveryTensor: a RIFE folder whose file holds a misshapen tensor is invalid input
// naming the tensor when the generator opens it, not a failure in the middle of a generation.
func TestRIFEFolderChecksEveryTensor(t *testing.T) {
	table, err := rife.Params(rife.Tiny(), rife.PyTorch)
	if err != nil {
		t.Fatal(err)
	}
	write := func(bad string) string {
		dir := t.TempDir()
		var ts []safetensors.Tensor
		for _, p := range table {
			shape := p.Shape
			if p.Name == bad {
				shape = []int{1}
			}
			n := 1
			for _, d := range shape {
				n *= d
			}
			ts = append(ts, safetensors.Tensor{Name: p.Name, DType: safetensors.F32, Shape: shape, Data: make([]byte, 4*n)})
		}
		if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	if _, err := RIFEFolder("rife", write("")); err != nil {
		t.Fatalf("a whole tiny RIFE: %v", err)
	}
	bad := table[len(table)/2].Name
	_, err = RIFEFolder("rife", write(bad))
	var re *api.RequestError
	if !errors.As(err, &re) || re.Field != "rife" || !strings.Contains(err.Error(), bad) {
		t.Errorf("a misshapen %s: %v", bad, err)
	}
}
