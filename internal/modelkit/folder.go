package modelkit

import (
	"fmt"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// LoadFolder reads the config of a released component folder (vae/, audio_vae/, …) with readConfig,
// opens its checkpoint (one file, a folder of files or shards with their index) and hands both to
// build, which must copy what it keeps (weights.Bind does): the checkpoint closes when build returns.
// what prefixes an open failure ("wan", "h3audio", …), as build's own errors are prefixed.
func LoadFolder[C, T any](dir, what string, readConfig func(string) (C, error), build func(C, weights.Source) (T, error)) (T, error) {
	cfg, err := readConfig(dir)
	if err != nil {
		var zero T
		return zero, err
	}
	return LoadCheckpoint(dir, what, func(src weights.Source) (T, error) { return build(cfg, src) })
}

// LoadCheckpoint opens the checkpoint in dir, builds a model on it with a config the caller already
// read (a model folder's configs are read once, when the folder is opened) and closes it: the
// model holds its own copy of the weights.
func LoadCheckpoint[T any](dir, what string, build func(weights.Source) (T, error)) (T, error) {
	ckpt, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		var zero T
		return zero, fmt.Errorf("%s: opening the weights: %w", what, err)
	}
	defer ckpt.Close()
	return build(ckpt)
}

// OpenFolder is LoadFolder for a model that keeps reading its checkpoint (a text encoder streaming
// its layers) or may alias it (same-dtype host tensors on the Go backend): on success the checkpoint
// stays open and keep hands its Close to the model, to call when the model closes.
func OpenFolder[C, T any](dir, what string, readConfig func(string) (C, error), build func(C, weights.Source) (T, error),
	keep func(T, func() error)) (T, error) {
	var zero T
	cfg, ckpt, err := openFolder(dir, what, readConfig)
	if err != nil {
		return zero, err
	}
	m, err := build(cfg, ckpt)
	if err != nil {
		ckpt.Close()
		return zero, err
	}
	keep(m, ckpt.Close)
	return m, nil
}

// openFolder reads a component folder's config and opens its checkpoint.
func openFolder[C any](dir, what string, readConfig func(string) (C, error)) (C, *safetensors.Checkpoint, error) {
	cfg, err := readConfig(dir)
	if err != nil {
		return cfg, nil, err
	}
	ckpt, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return cfg, nil, fmt.Errorf("%s: opening the weights: %w", what, err)
	}
	return cfg, ckpt, nil
}
