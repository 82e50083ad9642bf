package qwen3vl

import (
	"fmt"

	"fastvideo/internal/safetensors"
)

// GatherRows copies the embedding rows of ids out of table's raw bytes, keeping
// the stored dtype: only len(ids) rows of a (possibly memory-mapped) [V, D] table
// are touched, so a 1.5 GB embedding matrix costs a few pages per prompt.
func GatherRows(table safetensors.Info, ids []int) ([]byte, error) {
	if len(table.Shape) != 2 {
		return nil, fmt.Errorf("qwen3vl: embedding %q has shape %v; want [vocab, hidden]", table.Name, table.Shape)
	}
	if !table.DType.IsFloat() {
		return nil, fmt.Errorf("qwen3vl: embedding %q is %s; want F32, BF16, F16 or F64", table.Name, table.DType)
	}
	vocab, rowBytes := table.Shape[0], table.Shape[1]*table.DType.Size()
	out := make([]byte, len(ids)*rowBytes)
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("qwen3vl: token id %d at position %d is outside the vocabulary [0, %d) of %q: the tokenizer does not match this checkpoint", id, i, vocab, table.Name)
		}
		copy(out[i*rowBytes:(i+1)*rowBytes], table.Data[id*rowBytes:(id+1)*rowBytes])
	}
	return out, nil
}

// EmbeddingRows gathers the rows of ids and converts them to float32: [len(ids), D]
// (exact for F32, BF16 and F16 tables).
func EmbeddingRows(table safetensors.Info, ids []int) ([]float32, error) {
	raw, err := GatherRows(table, ids)
	if err != nil {
		return nil, err
	}
	rows := safetensors.Info{Name: table.Name, DType: table.DType, Shape: []int{len(ids), table.Shape[1]}, Data: raw}
	return rows.Float32s()
}
