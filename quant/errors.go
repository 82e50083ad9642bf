package quant

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error this package returns for one of these conditions
// wraps the matching sentinel, so callers test with errors.Is and read the
// details (names, values, the fix) from the message or with errors.As on the
// typed errors below.
var (
	// ErrGroupSize: the group size is not one MLX supports (32, 64, 128), or the
	// input dimension is not a multiple of it.
	ErrGroupSize = errors.New("quant: bad group size")
	// ErrBits: the bit width is not 4, 6 or 8.
	ErrBits = errors.New("quant: unsupported bit width")
	// ErrFormatVersion: a manifest's format_version is not one this package reads.
	ErrFormatVersion = errors.New("quant: unsupported manifest format_version")
	// ErrMissingScales: a quantized key has no "<key>.scales" tensor.
	ErrMissingScales = errors.New("quant: missing scales")
	// ErrMissingBiases: a quantized key has no "<key>.biases" tensor (affine
	// quantization always has them).
	ErrMissingBiases = errors.New("quant: missing biases")
	// ErrShape: a packed, scale or bias tensor disagrees with the shape the
	// quantization parameters imply.
	ErrShape = errors.New("quant: shape mismatch")
	// ErrManifest: a manifest is unreadable or inconsistent in another way.
	ErrManifest = errors.New("quant: bad manifest")
)

// GroupSizeError reports a matrix whose input dimension cannot be split into
// groups, or a group size MLX does not support.
type GroupSizeError struct {
	Rows, Cols, Group int
}

func (e *GroupSizeError) Error() string {
	if !validGroup(e.Group) {
		return fmt.Sprintf("quant: group size %d is not supported (MLX affine quantization uses 32, 64 or 128)", e.Group)
	}
	return fmt.Sprintf("quant: a [%d, %d] matrix cannot be quantized with group size %d: the input dimension %d is not a multiple of %d (keep such matrices dense)",
		e.Rows, e.Cols, e.Group, e.Cols, e.Group)
}

func (e *GroupSizeError) Unwrap() error { return ErrGroupSize }

// BitsError reports a bit width other than 4, 6 or 8.
type BitsError struct {
	Bits int
	// Where names the source of the value (a manifest path, a flag), if any.
	Where string
}

func (e *BitsError) Error() string {
	w := ""
	if e.Where != "" {
		w = e.Where + ": "
	}
	return fmt.Sprintf("quant: %sbits = %d is not supported; use 8, 6 or 4", w, e.Bits)
}

func (e *BitsError) Unwrap() error { return ErrBits }

// FormatVersionError reports a manifest format_version this package cannot read.
type FormatVersionError struct {
	Path    string
	Version int
}

func (e *FormatVersionError) Error() string {
	return fmt.Sprintf("quant: %s: format_version = %d, this runtime reads format_version %d; re-convert the checkpoint",
		e.Path, e.Version, FormatVersion)
}

func (e *FormatVersionError) Unwrap() error { return ErrFormatVersion }

// MissingTensorError reports a quantized key whose scales or biases are absent.
type MissingTensorError struct {
	Key    string // the quantized weight (stored name), e.g. "layers.0.q.weight"
	Tensor string // the missing tensor, e.g. "layers.0.q.weight.scales"
	What   error  // ErrMissingScales or ErrMissingBiases
}

func (e *MissingTensorError) Error() string {
	return fmt.Sprintf("quant: quantized weight %q has no %q tensor; the checkpoint is incomplete, re-convert it", e.Key, e.Tensor)
}

func (e *MissingTensorError) Unwrap() error { return e.What }
