package h3

import "fastvideo/internal/weights"

// Hooks for the external tests (package h3_test), which run the family through fastvideo.New.

// TinySpec is tiny-h3's specification: the toy DiT, video VAE and audio VAE configs.
func TinySpec() *Spec { return tinySpec() }

// TinyTextEncoder is tiny-h3's Qwen3-VL text stack config.
var TinyTextEncoder = tinyTextEncoder

// TinyWeights are tiny-h3's synthetic weights, made as a tiny-h3 generator makes them.
type TinyWeights struct {
	DiT, VideoVAE, AudioVAE, TextEncoder *weights.Synthetic
	// VideoEncoder is the video VAE's encoder, which FL2VA encodes keyframes with.
	VideoEncoder *weights.Synthetic
}

// NewTinyWeights makes tiny-h3's synthetic weights for spec.
func NewTinyWeights(spec *Spec) (*TinyWeights, error) {
	src := newTinySource(spec)
	if err := src.sources(); err != nil {
		return nil, err
	}
	return &TinyWeights{DiT: src.dit, VideoVAE: src.video, AudioVAE: src.audio, TextEncoder: src.te, VideoEncoder: src.encoder}, nil
}
