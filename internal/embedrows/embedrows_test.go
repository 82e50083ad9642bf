package embedrows

import (
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
)

func TestGatherRows(t *testing.T) {
	table := safetensors.Info{Name: "emb", DType: safetensors.F32, Shape: []int{3, 2}, Data: safetensors.F32Bytes([]float32{0, 1, 10, 11, 20, 21})}
	rows, err := GatherRows(table, []int{2, 0, 2})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := rows.Float32s(); !slices.Equal(v, []float32{20, 21, 0, 1, 20, 21}) || !slices.Equal(rows.Shape, []int{3, 2}) {
		t.Errorf("rows %v %v", v, rows.Shape)
	}
	if _, err := GatherRows(table, []int{3}); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Errorf("id 3 of 3: %v", err)
	}
	x, err := LoadRows(table, []int{1}, dtypes.BFloat16, testutil.Backend(t))
	if err != nil {
		t.Fatal(err)
	}
	defer x.FinalizeAll()
	if v, _ := graphexec.HostF32(x); !slices.Equal(v, []float32{10, 11}) || x.DType() != dtypes.BFloat16 {
		t.Errorf("LoadRows: %v %s", v, x.DType())
	}
}
