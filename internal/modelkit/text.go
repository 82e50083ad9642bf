package modelkit

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/core/tensors"
)

// TextRows is a prompt prepared once per generation on the device, [rows, width] in the compute
// dtype, reused by every step. The DiTs embed it in their own TextState types so that a prompt
// prepared by one model cannot be passed to another.
type TextRows struct {
	rows int
	x    *tensors.Tensor
}

// NewTextRows wraps a prepared [rows, width] tensor.
func NewTextRows(rows int, x *tensors.Tensor) TextRows { return TextRows{rows: rows, x: x} }

// Rows is the number of text tokens.
func (t *TextRows) Rows() int { return t.rows }

// Tensor is the device tensor, nil once closed.
func (t *TextRows) Tensor() *tensors.Tensor { return t.x }

// Close frees the device tensor.
func (t *TextRows) Close() {
	if t != nil && t.x != nil {
		t.x.FinalizeAll()
		t.x = nil
	}
}

// TextCount checks host text features [S, width] (row-major) and returns S.
func TextCount(text []float32, width int, what string) (int, error) {
	if len(text) == 0 || len(text)%width != 0 {
		return 0, fmt.Errorf("%s have %d values, want S × text_dim (%d) with S >= 1", what, len(text), width)
	}
	return len(text) / width, nil
}

// CheckFinite refuses a NaN or infinite value of the field named field.
func CheckFinite(field string, values []float32) error {
	for i, t := range values {
		if math.IsNaN(float64(t)) || math.IsInf(float64(t), 0) {
			return fmt.Errorf("%s[%d] = %v is not finite", field, i, t)
		}
	}
	return nil
}
