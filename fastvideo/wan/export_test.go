package wan

import "fastvideo/internal/weights"

// Hooks for the external tests (package wan_test), which run the family through fastvideo.New.

// TinySpec is tiny-wan's specification: the toy DiT, VAE and UMT5 configs, the text length and
// the flow shift.
func TinySpec() *Spec { return tinySpec() }

// TinyWeights are tiny-wan's synthetic weights and toy tokenizer, made as a tiny-wan generator
// makes them.
type TinyWeights struct {
	DiT, VAE, TextEncoder *weights.Synthetic
	// TokenizerJSON is the toy Unigram tokenizer as an HF tokenizer.json.
	TokenizerJSON []byte
}

// NewTinyWeights makes tiny-wan's synthetic weights and toy tokenizer for spec.
func NewTinyWeights(spec *Spec) (*TinyWeights, error) {
	src := newTinySource(spec)
	if err := src.sources(); err != nil {
		return nil, err
	}
	return &TinyWeights{DiT: src.dit, VAE: src.vae, TextEncoder: src.te, TokenizerJSON: src.tokenizerJSON}, nil
}

// Tiny22Spec is tiny-wan2.2's specification.
func Tiny22Spec() *Spec { return tiny22Spec() }
