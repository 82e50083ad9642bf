// Package fusedops holds elementwise passes of the DiT blocks in two forms that compute the same
// products, rounded where the graph rounds: graph ops, which every backend runs, and a Triton kernel that
// the GPU build runs on XLA's CUDA plugin (fused_triton.json, made by testdata/gen_fused_triton.py on the
// GPU machine). The kernel reads what the pass needs once where XLA's fusions of the graph form read it
// several times (BENCHMARKS.md, "Fused elementwise passes").
package fusedops

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/gomlx/compute"

	"fastvideo/internal/xlaext"
)

// Form chooses which form of a pass a graph gets.
type Form int

const (
	// FormAuto (the zero value): the kernel where it can run, the graph ops otherwise.
	FormAuto Form = iota
	// FormGraph: the graph ops everywhere (the CPU form, and the GPU tests' reference).
	FormGraph
	// FormKernel: the kernel; building the graph fails where it cannot run.
	FormKernel
)

//go:embed fused_triton.json
var kernelFileData []byte

// kernelFile is fused_triton.json: the kernels and what they were made with.
type kernelFile struct {
	Generator string `json:"generator"`
	JAX       string `json:"jax"`
	Plugin    string `json:"plugin"`
	// Head is the head width of qk_norm_rope's rows and Heads the most heads of a token it takes.
	Head, Heads int
	// Width is the widest row the norm kernels take, read in runs of Vec lanes (0: a file made before
	// them, which has no norm kernels).
	Width, Vec int
	Kernels    map[string]*kernelRecord `json:"kernels"`
}

type kernelRecord struct {
	xlaext.TritonRecord
	// GeometryFree: the generator lowered the kernel at two geometries and their modules differ only in
	// the whole-array operands' block offsets (0 times the array's size), so the IR serves every sequence
	// length.
	GeometryFree bool `json:"geometry_free"`
}

var loadKernels = sync.OnceValues(func() (*kernelFile, error) { return parseKernelFile(kernelFileData) })

// UseKernelFile makes this process run the kernels of data, a fused_triton.json that the generator has just
// written, in place of the embedded file: the bench times a file on the GPU machine before it is
// committed. Call it before any graph is built.
func UseKernelFile(data []byte) error {
	f, err := parseKernelFile(data)
	if err != nil {
		return err
	}
	loadKernels = func() (*kernelFile, error) { return f, nil }
	return nil
}

// parseKernelFile reads fused_triton.json, refusing a kernel whose IR depends on the geometry.
func parseKernelFile(data []byte) (*kernelFile, error) {
	f := &kernelFile{}
	if err := json.Unmarshal(data, f); err != nil {
		return nil, fmt.Errorf("fusedops: fused_triton.json: %w", err)
	}
	if f.Plugin == "" || f.Head <= 0 || f.Heads <= 0 {
		return nil, fmt.Errorf("fusedops: fused_triton.json is incomplete (plugin %q, head %d, heads %d)", f.Plugin, f.Head, f.Heads)
	}
	for name, k := range f.Kernels {
		if k == nil {
			return nil, fmt.Errorf("fusedops: fused_triton.json: kernel %s is empty", name)
		}
		if err := k.Decode(); err != nil {
			return nil, fmt.Errorf("fusedops: fused_triton.json: kernel %s is incomplete (%v)", name, err)
		}
		if !k.GeometryFree {
			return nil, fmt.Errorf("fusedops: fused_triton.json: kernel %s's IR depends on the geometry it was lowered at; regenerate it with testdata/gen_fused_triton.py", name)
		}
	}
	return f, nil
}

// Kernels reports whether this build runs the package's kernels where the backend allows: the GPU build
// (bash bench/build_gpu.sh), with a kernel file that loads. Each pass still checks its backend (XLA's
// CUDA plugin the kernels were made with), dtype and shape.
func Kernels() bool {
	_, err := loadKernels()
	return err == nil && xlaext.GraphBackendCall()
}

// kernel returns the named kernel and its file, or why it cannot run on backend.
func kernel(name string, backend compute.Backend) (*kernelRecord, *kernelFile, error) {
	f, err := loadKernels()
	if err != nil {
		return nil, nil, err
	}
	k, ok := f.Kernels[name]
	if !ok {
		return nil, nil, fmt.Errorf("fusedops: fused_triton.json has no kernel %s; regenerate it with testdata/gen_fused_triton.py", name)
	}
	if err := xlaext.Compatible(backend, f.Plugin); err != nil {
		return nil, nil, err
	}
	return k, f, nil
}
