package xlaext

import (
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
)

// MosaicGPUKernel is a Mosaic GPU kernel (JAX's Pallas with backend="mosaic_gpu") as the `mosaic_gpu_v2`
// custom call takes it: the kernel's module, which the handler that JAX links into its CUDA plugin
// compiles when the program loads (jaxlib/mosaic/gpu/custom_call.cc). Mosaic GPU kernels reach what
// Pallas's Triton backend cannot (warpgroup MMA from shared memory, TMA copies, warp-specialized
// pipelines: jax/experimental/pallas/ops/gpu/attention_mgpu.py).
type MosaicGPUKernel struct {
	// Name says which kernel an error is about.
	Name string
	// Module is the kernel's MLIR bytecode as JAX's lowering serializes it (the `module` of the call's
	// backend config; testdata/gen_mosaic_gpu.py extracts it). It must come from the JAX whose plugin
	// the binary loads.
	Module []byte
}

// MosaicGPUFunction is the method bench/goxla-triton.patch adds to go-xla's *xla.Function for it.
type MosaicGPUFunction interface {
	MosaicGPUCall(module []byte, operands []compute.Value, outputs []shapes.Shape) ([]compute.Value, error)
}

// MosaicGPUCall adds kernel to inputs' graph with inputs as its operands and returns one node per outputs
// shape (row-major, like the inputs); the kernel's grid and launch settings are in its module. The nodes
// have no gradient. Like TritonCall, it returns ErrNoKernelCall in a plain build and ErrKernelBackend
// on a backend other than XLA's, and leaves the graph unchanged then. The plugin looks for the Mosaic
// GPU runtime library through $MOSAIC_GPU_RUNTIME_LIB_PATH, which internal/backend sets beside the
// plugin it opens.
func MosaicGPUCall(kernel MosaicGPUKernel, inputs []*graph.Node, outputs []shapes.Shape) ([]*graph.Node, error) {
	if len(inputs) == 0 || len(outputs) == 0 || len(kernel.Module) == 0 {
		return nil, fmt.Errorf("mosaic gpu kernel %q: needs its module, at least one input and one output", kernel.Name)
	}
	return kernelCall("mosaic gpu kernel", kernel.Name, inputs, func(mf MosaicGPUFunction, operands []compute.Value) ([]compute.Value, error) {
		return mf.MosaicGPUCall(kernel.Module, operands, outputs)
	})
}
