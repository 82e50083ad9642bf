package fastvideo

import (
	"fmt"
	"os"
	"strings"

	"fastvideo/internal/media"
)

// findMediaTools finds ffmpeg and ffprobe: $FASTVIDEO_FFMPEG and $FASTVIDEO_FFPROBE when set,
// else PATH.
func findMediaTools() (media.Tools, error) {
	return media.FindTools(os.Getenv(media.EnvFFmpeg), os.Getenv(media.EnvFFprobe))
}

// DType is the compute precision of the heavy components.
type DType string

const (
	// DTypeAuto picks bf16 on accelerators and f32 on the pure-Go backend, which
	// is both faster and exact in f32 (its half-precision kernels are slow).
	DTypeAuto DType = ""
	F32       DType = "f32"
	BF16      DType = "bf16"
)

// MemoryPolicy decides how many heavyweight components stay resident.
type MemoryPolicy string

const (
	// OneResident (the default) loads the text encoder, the DiT and the VAEs one at
	// a time and releases each before the next: peak memory is the largest
	// component, not their sum.
	OneResident MemoryPolicy = "one_resident"
	// AllResident keeps every component loaded between Generate calls, trading
	// memory for the load time of the next request.
	AllResident MemoryPolicy = "all_resident"
)

// Options configure a VideoGenerator. The zero value is usable. The ffmpeg executable is found on
// PATH, or named by $FASTVIDEO_FFMPEG.
type Options struct {
	// Backend is a GOMLX_BACKEND-style spec ("go", "xla:cuda", "xla:metal");
	// empty means GOMLX_BACKEND, then the pure-Go backend.
	Backend string
	DType   DType
	Memory  MemoryPolicy
	// PromptCacheDir stores encoded prompts; empty disables the cache.
	PromptCacheDir string
}

// Option edits Options.
type Option func(*Options) error

// applyOptions folds opts into Options; the first invalid one is the error.
func applyOptions(opts []Option) (Options, error) {
	var o Options
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return Options{}, err
		}
	}
	return o, nil
}

// WithBackend selects the compute backend.
func WithBackend(spec string) Option {
	return func(o *Options) error { o.Backend = spec; return nil }
}

// WithDType selects the compute precision.
func WithDType(d DType) Option {
	return func(o *Options) error {
		switch DType(strings.ToLower(string(d))) {
		case DTypeAuto, F32, BF16:
			o.DType = DType(strings.ToLower(string(d)))
			return nil
		}
		return &RequestError{Field: "dtype", Value: string(d), Allowed: `"f32", "bf16" or "" (auto)`}
	}
}

// WithMemoryPolicy selects how many components stay resident.
func WithMemoryPolicy(p MemoryPolicy) Option {
	return func(o *Options) error {
		switch p {
		case "", OneResident, AllResident:
			o.Memory = p
			return nil
		}
		return &RequestError{Field: "memory", Value: string(p), Allowed: fmt.Sprintf("%q or %q", OneResident, AllResident)}
	}
}

// WithPromptCache enables the prompt cache in dir.
func WithPromptCache(dir string) Option {
	return func(o *Options) error { o.PromptCacheDir = dir; return nil }
}
