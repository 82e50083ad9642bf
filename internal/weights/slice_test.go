package weights

import (
	"slices"
	"testing"

	"fastvideo/internal/safetensors"
)

// SliceInfo keeps the requested rows or columns of a 2-D tensor, spans concatenated in order, and
// refuses spans outside the tensor, other ranks and sizes its bytes do not back.
func TestSliceInfo(t *testing.T) {
	// A 4×3 uint16 matrix whose element (r, c) is 10r + c.
	data := make([]byte, 0, 24)
	for r := range 4 {
		for c := range 3 {
			v := 10*r + c
			data = append(data, byte(v), byte(v>>8))
		}
	}
	m := safetensors.Info{Name: "w", DType: safetensors.BF16, Shape: []int{4, 3}, Data: data}
	values := func(i safetensors.Info) []int {
		var out []int
		for k := 0; k < len(i.Data); k += 2 {
			out = append(out, int(i.Data[k])|int(i.Data[k+1])<<8)
		}
		return out
	}
	for _, c := range []struct {
		axis  int
		spans []Span
		shape []int
		want  []int
	}{
		{0, []Span{{1, 3}}, []int{2, 3}, []int{10, 11, 12, 20, 21, 22}},
		{0, []Span{{0, 1}, {2, 3}}, []int{2, 3}, []int{0, 1, 2, 20, 21, 22}},
		{1, []Span{{1, 2}}, []int{4, 1}, []int{1, 11, 21, 31}},
		{1, []Span{{0, 1}, {2, 3}}, []int{4, 2}, []int{0, 2, 10, 12, 20, 22, 30, 32}},
	} {
		got, err := SliceInfo(m, c.axis, c.spans...)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Shape, c.shape) || !slices.Equal(values(got), c.want) {
			t.Errorf("axis %d spans %v: %v %v, want %v %v", c.axis, c.spans, got.Shape, values(got), c.shape, c.want)
		}
	}
	for _, bad := range []struct {
		info  safetensors.Info
		axis  int
		spans []Span
	}{
		{m, 0, []Span{{3, 5}}},
		{m, 1, []Span{{2, 1}}},
		{m, 2, []Span{{0, 1}}},
		{safetensors.Info{Name: "v", DType: safetensors.BF16, Shape: []int{6}, Data: data[:12]}, 0, []Span{{0, 1}}},
		{safetensors.Info{Name: "short", DType: safetensors.BF16, Shape: []int{4, 3}, Data: data[:22]}, 0, []Span{{0, 1}}},
		{safetensors.Info{Name: "huge", DType: safetensors.BF16, Shape: []int{1 << 62, 1 << 62}, Data: data}, 0, []Span{{0, 1}}},
	} {
		if _, err := SliceInfo(bad.info, bad.axis, bad.spans...); err == nil {
			t.Errorf("%s %v axis %d spans %v: accepted", bad.info.Name, bad.info.Shape, bad.axis, bad.spans)
		}
	}
}
