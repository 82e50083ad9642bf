package backend

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gomlx/compute"

	"fastvideo/internal/compilecache"
)

// compileCacher is the method bench/goxla-compilecache.patch gives go-xla's backend (spelled out so
// that a plain build, whose backend lacks it, compiles and installs nothing).
type compileCacher interface {
	SetCompileCache(interface {
		Compile(key []byte, load func(serialized []byte) error, compile func() error, serialize func() ([]byte, error)) error
	})
}

// autotuneFlag is XLA's per-fusion autotune cache: GEMM and fusion tunings kept on disk, which helps
// every program that still compiles (a plain build's, or a cache miss). The kernel cache file
// (--xla_gpu_kernel_cache_file) is never set: a process that reads one fails at execution.
const autotuneFlag = "--xla_gpu_per_fusion_autotune_cache_dir"

// setAutotuneFlag points XLA's per-fusion autotune cache at dir/autotune unless XLA_FLAGS already
// names one; it returns what it did, for the plan.
func setAutotuneFlag(dir string) string {
	if xlaFlagSet(autotuneFlag) {
		return "XLA_FLAGS already sets " + autotuneFlag
	}
	at := filepath.Join(dir, compilecache.AutotuneDir)
	if err := os.MkdirAll(at, 0o755); err != nil {
		return fmt.Sprintf("no autotune cache: %v", err)
	}
	appendXLAFlag(autotuneFlag, at)
	return autotuneFlag + "=" + at
}

// installCompileCache routes b's compilations through a cache in dir when b can (the GPU build's
// go-xla); it returns the cache, or nil where b has no such method.
func installCompileCache(b compute.Backend, dir string, warn func(error)) *compilecache.Cache {
	cc, ok := b.(compileCacher)
	if !ok || dir == "" {
		return nil
	}
	c := compilecache.New(dir, warn)
	cc.SetCompileCache(c)
	return c
}
