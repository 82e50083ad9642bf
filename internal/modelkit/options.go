// Package modelkit is the lifecycle every model package (dit/h3, dit/wan, the VAEs, the text encoders)
// shares, written once: resolving Options.DType, checking the backend, opening a released folder
// (copying its weights, or keeping the checkpoint for the model's lifetime), the plain and traced
// executable sets, device tables cached by geometry, prepared text rows, and the checks on the host
// inputs every model makes the same way. Each model package keeps only what is that model.
package modelkit

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
)

// Float dtypes the models accept in Options.DType: DiTs compute in Float32 or BFloat16; the VAEs and
// text encoders also take Float16.
var (
	DiTDTypes  = []dtypes.DType{dtypes.Float32, dtypes.BFloat16}
	HalfDTypes = []dtypes.DType{dtypes.Float32, dtypes.BFloat16, dtypes.Float16}
)

// DType resolves a model's Options.DType: the zero value means Float32 (exact, the CPU choice); any
// dtype outside allowed is refused, naming the field and the choices.
func DType(dt dtypes.DType, allowed []dtypes.DType) (dtypes.DType, error) {
	if dt == dtypes.InvalidDType {
		return dtypes.Float32, nil
	}
	for _, a := range allowed {
		if dt == a {
			return dt, nil
		}
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = a.String()
	}
	return dt, fmt.Errorf("Options.DType = %s is not supported; use %s", dt, strings.Join(names, ", "))
}

// CheckBackend refuses a nil backend with the fix.
func CheckBackend(backend compute.Backend) error {
	if backend == nil {
		return errors.New("backend is nil; create one with fastvideo/internal/backend")
	}
	return nil
}

// Validator is a model configuration.
type Validator interface{ Validate() error }

// Prepare makes the checks every model makes before declaring its parameters: the configuration, the
// backend, and Options.DType, which it resolves among allowed. Errors other than the config's own are
// prefixed with what ("h3", "wan", …).
func Prepare(what string, cfg Validator, backend compute.Backend, dt dtypes.DType, allowed []dtypes.DType) (dtypes.DType, error) {
	if err := cfg.Validate(); err != nil {
		return dt, err
	}
	if err := CheckBackend(backend); err != nil {
		return dt, fmt.Errorf("%s: %w", what, err)
	}
	dt, err := DType(dt, allowed)
	if err != nil {
		return dt, fmt.Errorf("%s: %w", what, err)
	}
	return dt, nil
}
