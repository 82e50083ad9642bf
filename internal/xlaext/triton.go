// Package xlaext reaches the operations the GPU build (bench/build_gpu.sh) adds to GoMLX and go-xla,
// found by type assertions so that a plain build compiles and reports them missing: a GPU kernel inside
// a graph, a Triton kernel as XLA's `__gpu$xla.gpu.triton` custom call or a Mosaic GPU kernel as the
// `mosaic_gpu_v2` one (docs/architecture.md, "The GPU build").
package xlaext

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
)

// ErrNoKernelCall: this binary's GoMLX and go-xla are the plain modules, without the custom calls that
// run a GPU kernel inside a graph.
var ErrNoKernelCall = errors.New("this binary cannot call GPU kernels (Triton, Mosaic GPU) from a graph: build with bash bench/build_gpu.sh")

// ErrKernelBackend: the graph's backend cannot run GPU kernels (only XLA's CUDA plugin can).
var ErrKernelBackend = errors.New("the backend cannot run GPU kernels (Triton, Mosaic GPU: they need xla:cuda)")

// TritonKernel is a Triton kernel as XLA's custom call takes it: what JAX's Pallas (backend="triton")
// writes into the call's backend config (testdata/gen_triton.py extracts it).
type TritonKernel struct {
	// Name is the Triton function's name.
	Name string
	// IR is the Triton module as MLIR bytecode. It must come from the Triton that the plugin's XLA
	// links: make it with the JAX whose plugin the binary loads.
	IR []byte
	// Grid is the launch grid (x, y, z); zero entries count as 1.
	Grid [3]int
	// NumWarps and NumStages are Triton's compile parameters.
	NumWarps, NumStages int
}

// TritonRecord is a Triton kernel as this project's kernel files store it (testdata/gen_triton.py's fields,
// which the generators of attention/ and internal/fusedops write): the module as base64 of its MLIR
// bytecode and Triton's compile parameters. A file's parser decodes it once (Decode); graphs launch it.
type TritonRecord struct {
	IR        string `json:"ir"`
	NumWarps  int    `json:"num_warps"`
	NumStages int    `json:"num_stages"`
	bytecode  []byte
}

// Decode reads the record's module, or says what the record lacks.
func (r *TritonRecord) Decode() error {
	ir, err := base64.StdEncoding.DecodeString(r.IR)
	if err != nil || len(ir) == 0 || r.NumWarps <= 0 || r.NumStages <= 0 {
		return fmt.Errorf("ir %d bytes, %d warps, %d stages, %v", len(ir), r.NumWarps, r.NumStages, err)
	}
	r.bytecode = ir
	return nil
}

// Bytecode is the module Decode read (nil before).
func (r *TritonRecord) Bytecode() []byte { return r.bytecode }

// Launch is the record as the Triton function name, launched on grid.
func (r *TritonRecord) Launch(name string, grid [3]int) TritonKernel {
	return TritonKernel{Name: name, IR: r.bytecode, Grid: grid, NumWarps: r.NumWarps, NumStages: r.NumStages}
}

// TritonFunction is the method bench/goxla-triton.patch adds to go-xla's *xla.Function.
type TritonFunction interface {
	TritonCall(name string, ir []byte, grid [3]int, numWarps, numStages int,
		operands []compute.Value, outputs []shapes.Shape) ([]compute.Value, error)
}

// graphBackendCall is the method bench/gomlx-backendcall.patch adds to GoMLX's *graph.Graph.
type graphBackendCall interface {
	BackendCall(name string, inputs []*graph.Node,
		call func(fn compute.Function, operands []compute.Value) ([]compute.Value, error)) ([]*graph.Node, error)
}

// GraphBackendCall reports whether this binary's GoMLX lets a graph call a backend operation that
// compute.Function does not declare (the GPU build's gomlx patch).
func GraphBackendCall() bool {
	_, ok := any((*graph.Graph)(nil)).(graphBackendCall)
	return ok
}

// TritonCall adds kernel to inputs' graph, launched on its grid with inputs as its operands, and
// returns one node per outputs shape (row-major, like the inputs). The nodes have no gradient. It
// returns ErrNoKernelCall in a plain build and ErrKernelBackend on a backend other than XLA's (go-xla's
// own error, wrapping compute.ErrNotImplemented, on an XLA plugin other than CUDA); the graph is
// unchanged then.
func TritonCall(kernel TritonKernel, inputs []*graph.Node, outputs []shapes.Shape) ([]*graph.Node, error) {
	if len(inputs) == 0 || len(outputs) == 0 {
		return nil, fmt.Errorf("triton kernel %q: needs at least one input and one output", kernel.Name)
	}
	return kernelCall("triton kernel", kernel.Name, inputs, func(tf TritonFunction, operands []compute.Value) ([]compute.Value, error) {
		return tf.TritonCall(kernel.Name, kernel.IR, kernel.Grid, kernel.NumWarps, kernel.NumStages, operands, outputs)
	})
}

// kernelCall adds a node to inputs' graph whose outputs call builds on the backend's Function, found as
// F (the method a go-xla patch adds): ErrNoKernelCall without GoMLX's patch, ErrKernelBackend when the
// backend's Function is not F.
func kernelCall[F any](kind, name string, inputs []*graph.Node, call func(F, []compute.Value) ([]compute.Value, error)) ([]*graph.Node, error) {
	g, ok := any(inputs[0].Graph()).(graphBackendCall)
	if !ok {
		return nil, fmt.Errorf("%s %q: %w", kind, name, ErrNoKernelCall)
	}
	return g.BackendCall(strings.ReplaceAll(kind, " ", "_")+":"+name, inputs, func(fn compute.Function, operands []compute.Value) ([]compute.Value, error) {
		f, ok := fn.(F)
		if !ok {
			return nil, fmt.Errorf("%s %q on %T: %w", kind, name, fn, ErrKernelBackend)
		}
		return call(f, operands)
	})
}

// plugins holds, per backend, the version of the PJRT plugin it loaded ("jax-cuda13-plugin 0.11.2"),
// set by internal/backend when it opens one. Triton IR is bytecode for the Triton linked into that
// plugin's XLA, and a Mosaic GPU module for the Mosaic GPU linked into the plugin, so a kernel made with
// another plugin is not handed to it.
var plugins sync.Map // compute.Backend -> string

// SetPlugin records the plugin version backend runs on ("" forgets it).
func SetPlugin(backend compute.Backend, version string) {
	if version == "" {
		plugins.Delete(backend)
		return
	}
	plugins.Store(backend, version)
}

// Plugin is the plugin version recorded for backend, "" when none is.
func Plugin(backend compute.Backend) string {
	v, _ := plugins.Load(backend)
	s, _ := v.(string)
	return s
}

// Compatible reports why a kernel made with the plugin madeWith cannot run on backend (nil: it can, as
// far as the versions go; TritonCall and MosaicGPUCall still report a backend other than XLA's CUDA
// plugin).
func Compatible(backend compute.Backend, madeWith string) error {
	if !GraphBackendCall() {
		return ErrNoKernelCall
	}
	have := Plugin(backend)
	switch {
	case have == "":
		return fmt.Errorf("the backend's plugin version is not known (a GPU kernel needs the plugin it was made for, %s)", madeWith)
	case normalizePlugin(have) != normalizePlugin(madeWith):
		return fmt.Errorf("the kernel was made for %s and the backend runs %s: regenerate it with that plugin's JAX", madeWith, have)
	}
	return nil
}

// normalizePlugin folds the spellings of a Python distribution name in "name version" (case, '_' for '-').
func normalizePlugin(s string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), "_", "-"))
}
