package weights

import (
	"maps"
	"slices"

	"fastvideo/internal/safetensors"
)

// MapSource is a Source held in memory: tensors by name (tests, benchmarks, checkpoints rewritten
// on the host).
type MapSource map[string]safetensors.Info

// Names lists the tensors, sorted.
func (m MapSource) Names() []string {
	return slices.Sorted(maps.Keys(m))
}

// Tensor returns the tensor called name.
func (m MapSource) Tensor(name string) (safetensors.Info, bool) {
	info, ok := m[name]
	return info, ok
}
