package weights

import (
	"fmt"

	"fastvideo/internal/safetensors"
)

// Span is the half-open index range [From, To) of one axis.
type Span struct{ From, To int }

// SliceInfo cuts a 2-D checkpoint tensor on the host: along axis (0 rows, 1 columns) it keeps the
// spans in order, concatenated (e.g. a value and a gate slice of a fused FFN-in). Rows that stay
// contiguous share info's bytes; anything else is copied. The size info claims is checked against its
// bytes first: checkpoints come from the internet.
func SliceInfo(info safetensors.Info, axis int, spans ...Span) (safetensors.Info, error) {
	if len(info.Shape) != 2 || axis < 0 || axis > 1 {
		return safetensors.Info{}, fmt.Errorf("weights: slicing %s %v along axis %d: only 2-D tensors along axis 0 or 1", info.Name, info.Shape, axis)
	}
	rows, cols, elem := info.Shape[0], info.Shape[1], info.DType.Size()
	if size, ok := safetensors.ByteSize(info.DType, info.Shape); !ok || size != int64(len(info.Data)) {
		return safetensors.Info{}, fmt.Errorf("weights: %s claims %v %s but holds %d bytes", info.Name, info.Shape, info.DType, len(info.Data))
	}
	n := 0
	for _, s := range spans {
		if s.From < 0 || s.To < s.From || s.To > info.Shape[axis] {
			return safetensors.Info{}, fmt.Errorf("weights: slicing %s %v: span [%d, %d) is outside axis %d", info.Name, info.Shape, s.From, s.To, axis)
		}
		n += s.To - s.From
	}
	out := safetensors.Info{Name: info.Name, DType: info.DType}
	rowBytes := cols * elem
	if axis == 0 {
		out.Shape = []int{n, cols}
		if len(spans) == 1 {
			out.Data = info.Data[spans[0].From*rowBytes : spans[0].To*rowBytes]
			return out, nil
		}
		out.Data = make([]byte, 0, n*rowBytes)
		for _, s := range spans {
			out.Data = append(out.Data, info.Data[s.From*rowBytes:s.To*rowBytes]...)
		}
		return out, nil
	}
	out.Shape = []int{rows, n}
	out.Data = make([]byte, 0, rows*n*elem)
	for r := range rows {
		row := info.Data[r*rowBytes : (r+1)*rowBytes]
		for _, s := range spans {
			out.Data = append(out.Data, row[s.From*elem:s.To*elem]...)
		}
	}
	return out, nil
}
