package qwen3vl

import (
	"fmt"

	"fastvideo/internal/embedrows"
	"fastvideo/internal/safetensors"
)

// EmbeddingRows gathers the rows of ids from an embedding table [vocab, D] and converts them to
// float32: [len(ids), D] (exact for F32, BF16 and F16 tables). Only those rows are read.
func EmbeddingRows(table safetensors.Info, ids []int) ([]float32, error) {
	rows, err := embedrows.GatherRows(table, ids)
	if err != nil {
		return nil, fmt.Errorf("qwen3vl: %w", err)
	}
	return rows.Float32s()
}
