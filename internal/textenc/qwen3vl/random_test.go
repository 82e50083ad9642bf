package qwen3vl

import (
	"context"
	"testing"

	"fastvideo/internal/testutil"
)

// TestRandomWeights: a random encoder is a function of its seed: resident (layers drawn once) and
// streamed (each layer drawn when it runs) give the same hidden state, another seed another one.
func TestRandomWeights(t *testing.T) {
	cfg := Config{VocabSize: 1000, HiddenSize: 32, IntermediateSize: 64, NumHiddenLayers: 3, NumHeads: 4, NumKVHeads: 2,
		HeadDim: 8, RMSNormEps: 1e-6, RopeTheta: 5e6, MRoPESection: [3]int{2, 1, 1}, MRoPEInterleaved: true}
	encode := func(seed int64, resident bool) []float32 {
		enc := testutil.Open(t, func() (*Encoder, error) {
			return NewRandom(testutil.Backend(t), cfg, Options{Resident: resident, HiddenStateIndex: 2}, seed)
		})
		h, _, err := enc.Encode(context.Background(), []int{5, 999, 17})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	a, b, c := encode(1, true), encode(1, false), encode(2, true)
	if len(a) != 3*32 || !testutil.SameBits(a, b) || testutil.SameBits(a, c) {
		t.Fatalf("%d values; resident and streamed must agree, seeds must differ", len(a))
	}
}
