package fastvideo

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"fastvideo/attention"
	"fastvideo/internal/backend"
	"fastvideo/internal/fusedops"
)

// GPUBuildCommand builds every binary with the GPU build's patches (README, "The GPU build").
const GPUBuildCommand = "bash bench/build_gpu.sh OUTDIR"

// Feature is a fast path this binary has or lacks, and how to get it.
type Feature struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	// Note says what it gives, or the command or work that gets it.
	Note string `json:"note"`
}

// BuildFeatures lists the fast paths of this binary: nothing fails for lack of one, it is only slower
// (or reports less).
func BuildFeatures() []Feature {
	f := backend.BuildFeatures()
	unless := func(have bool, yes, no string) string {
		if have {
			return yes
		}
		return no
	}
	return []Feature{
		{"native FP8 GEMMs (-dtype fp8)", f.NativeFP8, unless(f.NativeFP8, "FP8 linears run as FP8 GEMMs on Hopper",
			"emulated (same numbers, bf16 speed); "+GPUBuildCommand+" gets them")},
		{"XLA allocator statistics", f.AllocatorStats, unless(f.AllocatorStats, "the allocator's own bytes in use and peak",
			"device memory is NVML's pool size; "+GPUBuildCommand+" gets them")},
		{"page-locked host staging", f.PinnedHost, unless(f.PinnedHost, "large outputs (decoded frames) cross to the host by DMA while the next program runs",
			"outputs cross into pageable memory, slower and not overlapped with the device; "+GPUBuildCommand+" gets it")},
		{"CPU SIMD kernels (AVX2/AVX-512)", f.CPUSIMD, unless(f.CPUSIMD, "the pure-Go backend's matmuls use GoMLX's AVX2/AVX-512 kernels",
			"the pure-Go backend's matmuls are plain Go (TAEHV decodes 2.6-2.8x slower on the CPU); build with GOEXPERIMENT=simd (Go 1.26+, amd64) to get them")},
		{"queued execution", f.QueuedExecute, unless(f.QueuedExecute, "a program returns once queued, so the host launches the next while the GPU runs (no idle GPU between the DiT's block programs)",
			"each program is awaited before the next is launched, and the GPU idles in between; "+GPUBuildCommand+" gets it")},
		{"persistent compile cache", f.CompileCache, unless(f.CompileCache, "XLA programs compiled once load from the cache folder (-compile-cache) in later runs",
			"each process compiles every XLA program again (only XLA's autotune results are kept); "+GPUBuildCommand+" gets it")},
		{"Triton kernels in XLA graphs", f.TritonCall, unless(f.TritonCall, "graphs can call Triton kernels (IR made by JAX's Pallas) as XLA's __gpu$xla.gpu.triton custom call on CUDA",
			"no Triton custom call; "+GPUBuildCommand+" gets it")},
		{"Mosaic GPU kernels in XLA graphs", f.MosaicGPUCall, unless(f.MosaicGPUCall, "graphs can call Mosaic GPU kernels (modules made by JAX's Pallas) as the mosaic_gpu_v2 custom call on CUDA; VSA's fine stage can run as one (attention.SparseMosaic, opt-in: Hopper)",
			"no Mosaic GPU custom call; "+GPUBuildCommand+" gets it")},
		{"block-sparse attention kernel", attention.BlockSparseKernel(), unless(attention.BlockSparseKernel(), "VSA reads the selected tiles in place (a Triton kernel; the CUDA plugin it was made with, bf16, 64-row tiles), and is the default",
			"VSA gathers the selected tiles, slower than dense attention, so dense is the default; "+GPUBuildCommand+" gets it")},
		{"fused q/k pass", fusedops.Kernels(), unless(fusedops.Kernels(), "MiniMax H3's q/k RMSNorm and rotation run as one Triton kernel a tensor (the CUDA plugin it was made with, bf16)",
			"MiniMax H3's q/k RMSNorm and rotation run as XLA's fusions of graph ops; "+GPUBuildCommand+" gets the kernel")},
	}
}

// WriteVersion prints the module's version, the toolchain, the XLA backend and BuildFeatures.
func WriteVersion(w io.Writer, binary string) error {
	version := "(devel)"
	deps := ""
	if info, ok := debug.ReadBuildInfo(); ok {
		version = info.Main.Version
		for _, d := range info.Deps {
			switch d.Path {
			case "github.com/gomlx/gomlx", "github.com/gomlx/go-xla":
				v := d.Version
				if d.Replace != nil {
					v += " (patched)"
				}
				deps += fmt.Sprintf(", %s %s", d.Path[len("github.com/gomlx/"):], v)
			}
		}
	}
	if _, err := fmt.Fprintf(w, "%s (fastvideo %s, %s%s; XLA backend: %v)\n", binary, version, runtime.Version(), deps, backend.BuildFeatures().XLA); err != nil {
		return err
	}
	for _, f := range BuildFeatures() {
		mark := "no "
		if f.Available {
			mark = "yes"
		}
		if _, err := fmt.Fprintf(w, "  %s  %s: %s\n", mark, f.Name, f.Note); err != nil {
			return err
		}
	}
	return nil
}

// compileCacheNote describes the compile cache of a run in dir ("": off), for plans.
func compileCacheNote(dir string) string {
	switch {
	case dir == "":
		return "off: every XLA program compiles in every run"
	case backend.BuildFeatures().CompileCache:
		return dir + ": XLA programs compiled once load from there in later runs (on CUDA XLA's autotune results too)"
	}
	return dir + ": XLA's autotune results only (CUDA); this build compiles every program in every run (" + GPUBuildCommand + " gets the cache)"
}
