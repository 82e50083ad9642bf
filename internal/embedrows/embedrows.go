// Package embedrows reads the rows of an embedding table that a prompt's token ids select, straight
// from the checkpoint bytes, for the text encoders that stream their weights.
package embedrows

import (
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// GatherRows copies the rows ids of an embedding table [vocab, width] out of its raw bytes, keeping the
// stored dtype: only len(ids) rows of a (possibly memory-mapped) table are touched, so a 1.5 GB
// embedding matrix costs a few pages per prompt. The result is the table's Info for [len(ids), width].
func GatherRows(table safetensors.Info, ids []int) (safetensors.Info, error) {
	if len(table.Shape) != 2 {
		return safetensors.Info{}, fmt.Errorf("embedding %q has shape %v; want [vocab, width]", table.Name, table.Shape)
	}
	if !table.DType.IsFloat() {
		return safetensors.Info{}, fmt.Errorf("embedding %q is %s; want F32, BF16, F16 or F64", table.Name, table.DType)
	}
	if err := CheckTokenIDs(ids, table.Shape[0]); err != nil {
		return safetensors.Info{}, fmt.Errorf("embedding %q: %w", table.Name, err)
	}
	rowBytes := table.Shape[1] * table.DType.Size()
	raw := make([]byte, len(ids)*rowBytes)
	for i, id := range ids {
		copy(raw[i*rowBytes:(i+1)*rowBytes], table.Data[id*rowBytes:(id+1)*rowBytes])
	}
	return safetensors.Info{Name: table.Name, DType: table.DType, Shape: []int{len(ids), table.Shape[1]}, Data: raw}, nil
}

// LoadRows is GatherRows converted to dt (with weights.Load's host rounding) and uploaded to backend:
// the embedding lookup of a streamed text encoder.
func LoadRows(table safetensors.Info, ids []int, dt dtypes.DType, backend compute.Backend) (*tensors.Tensor, error) {
	rows, err := GatherRows(table, ids)
	if err != nil {
		return nil, err
	}
	return weights.Load(rows, dt, backend)
}

// CheckTokenIDs checks that every id indexes a vocabulary of vocab rows. The text encoders check
// before any device work, so that a tokenizer paired with the wrong checkpoint is reported as such
// instead of as an out-of-range gather.
func CheckTokenIDs(ids []int, vocab int) error {
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return fmt.Errorf("token id %d at position %d is outside the vocabulary [0, %d): the tokenizer does not match this checkpoint", id, i, vocab)
		}
	}
	return nil
}
