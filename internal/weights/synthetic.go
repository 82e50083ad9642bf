package weights

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"

	"fastvideo/internal/safetensors"
)

// InitFunc fills one synthetic tensor. It returns nil to use the default rule.
type InitFunc func(name string, shape []int, rng *rand.Rand) []float32

// Synthetic is a Source of deterministic pseudo-random float32 tensors for a
// declared set of names and shapes. Built-in toy models (tiny-h3) and
// benchmarks use it so that they need no files; each tensor depends only on the
// seed and its own name, so adding a parameter does not change the others.
type Synthetic struct {
	seed   uint64
	shapes map[string][]int
	names  []string
	init   InitFunc

	mu    sync.Mutex
	cache map[string]safetensors.Info
}

// NewSynthetic declares the tensors. init may be nil.
func NewSynthetic(seed int64, shapes map[string][]int, init InitFunc) *Synthetic {
	s := &Synthetic{seed: uint64(seed), shapes: map[string][]int{}, init: init, cache: map[string]safetensors.Info{}}
	for n, sh := range shapes {
		s.shapes[n] = append([]int(nil), sh...)
		s.names = append(s.names, n)
	}
	sort.Strings(s.names)
	return s
}

// Names lists the declared tensors, sorted.
func (s *Synthetic) Names() []string { return append([]string(nil), s.names...) }

// Tensor generates (once) and returns a declared tensor as F32.
func (s *Synthetic) Tensor(name string) (safetensors.Info, bool) {
	shape, ok := s.shapes[name]
	if !ok {
		return safetensors.Info{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if info, ok := s.cache[name]; ok {
		return info, true
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	rng := rand.New(rand.NewPCG(s.seed, h.Sum64()))
	var vals []float32
	if s.init != nil {
		vals = s.init(name, shape, rng)
	}
	if vals == nil {
		vals = DefaultInit(name, shape, rng)
	}
	info := safetensors.Info{Name: name, DType: safetensors.F32, Shape: shape, Data: safetensors.F32Bytes(vals)}
	s.cache[name] = info
	return info, true
}

// DefaultInit follows the golden-fixture generator's scales so that activations
// of a random model stay in a sane range: matrices randn/sqrt(fan_in), biases
// 0.05·randn, other vectors (norm gains, weight-norm g) 1 + 0.1·randn.
func DefaultInit(name string, shape []int, rng *rand.Rand) []float32 {
	n := 1
	for _, d := range shape {
		n *= d
	}
	out := make([]float32, n)
	switch {
	case len(shape) >= 2:
		fanIn := n / shape[0]
		scale := 1 / math.Sqrt(float64(max(fanIn, 1)))
		for i := range out {
			out[i] = float32(rng.NormFloat64() * scale)
		}
	case strings.HasSuffix(name, "bias"):
		for i := range out {
			out[i] = float32(0.05 * rng.NormFloat64())
		}
	default:
		for i := range out {
			out[i] = float32(1 + 0.1*rng.NormFloat64())
		}
	}
	return out
}
