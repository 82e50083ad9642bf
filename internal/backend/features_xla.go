//go:build ((linux && (amd64 || arm64)) || (darwin && arm64) || (windows && amd64)) && !noxla

package backend

import (
	"unsafe"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/go-xla/compute/xla"
	"github.com/gomlx/go-xla/pjrt"

	"fastvideo/internal/xlaext"
)

// xlaFeatures reads what the go-xla compiled into this binary can do: the GPU build's patches
// (bench/build_gpu.sh) declare float8, add the allocator's statistics, host-memory pinning and the
// compile cache's hook, the Triton and Mosaic GPU custom calls (with GoMLX's Graph.BackendCall to reach them) and the
// execute that does not await the program.
func xlaFeatures() Features {
	_, stats := any((*xla.Backend)(nil)).(interface {
		DeviceMemoryStats(compute.DeviceNum) (inUse, peak int64, err error)
	})
	_, pinned := any((*xla.Backend)(nil)).(interface {
		PinHostMemory(data unsafe.Pointer, size int) (unpin func() error, err error)
	})
	_, cache := any((*xla.Backend)(nil)).(compileCacher)
	_, triton := any((*xla.Function)(nil)).(xlaext.TritonFunction)
	_, mosaic := any((*xla.Function)(nil)).(xlaext.MosaicGPUFunction)
	_, queued := any((*pjrt.LoadedExecutable)(nil)).(interface{ QueuesWithoutWaiting() bool })
	return Features{XLA: true, NativeFP8: xla.Capabilities.DTypes[dtypes.F8E4M3FN] && hasGoType(dtypes.F8E4M3FN), AllocatorStats: stats,
		PinnedHost: pinned, CompileCache: cache, TritonCall: triton && xlaext.GraphBackendCall(),
		MosaicGPUCall: mosaic && xlaext.GraphBackendCall(), QueuedExecute: queued}
}
