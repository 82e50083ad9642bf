package weights

import (
	"sort"

	"fastvideo/internal/safetensors"
)

// MapSource is a Source held in memory: tensors by name (tests, benchmarks, checkpoints rewritten
// on the host).
type MapSource map[string]safetensors.Info

// Names lists the tensors, sorted.
func (m MapSource) Names() []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Tensor returns the tensor called name.
func (m MapSource) Tensor(name string) (safetensors.Info, bool) {
	info, ok := m[name]
	return info, ok
}
