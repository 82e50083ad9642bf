package weights

import (
	"fmt"

	"fastvideo/internal/safetensors"
)

// FromFolder reads the config of a released component folder (vae/, audio_vae/, …) with
// readConfig, opens its checkpoint (one file, a folder of files or shards with their index) and
// hands both to build. build must copy what it keeps (Bind does), because the checkpoint closes
// when build returns: a model that streams from its checkpoint owns the file instead and opens it
// itself. what prefixes an open failure ("wan", "h3audio", …), as build's own errors are prefixed.
func FromFolder[C, T any](dir, what string, readConfig func(string) (C, error), build func(C, Source) (T, error)) (T, error) {
	var zero T
	cfg, err := readConfig(dir)
	if err != nil {
		return zero, err
	}
	ckpt, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return zero, fmt.Errorf("%s: opening the weights: %w", what, err)
	}
	defer ckpt.Close()
	return build(cfg, ckpt)
}
