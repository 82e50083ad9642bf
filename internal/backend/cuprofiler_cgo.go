//go:build linux && cgo

package backend

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>

// The CUDA driver API (cuda.h) as far as the profiler range needs it; the _v2 names are what cuda.h's
// macros resolve cuCtxPushCurrent, cuCtxPopCurrent and cuDevicePrimaryCtxRelease to since CUDA 11.
typedef int (*fv_cu_init)(unsigned int);
typedef int (*fv_cu_device_get)(int *, int);
typedef int (*fv_cu_primary_retain)(void **, int);
typedef int (*fv_cu_primary_release)(int);
typedef int (*fv_cu_ctx_push)(void *);
typedef int (*fv_cu_ctx_pop)(void **);
typedef int (*fv_cu_void)(void);

static fv_cu_device_get fv_cu_dev_get;
static fv_cu_primary_retain fv_cu_retain;
static fv_cu_primary_release fv_cu_release;
static fv_cu_ctx_push fv_cu_push;
static fv_cu_ctx_pop fv_cu_pop;
static fv_cu_void fv_cu_prof_start, fv_cu_prof_stop;

// fv_cuda_open loads the driver library (already in the process when XLA runs on CUDA) and its
// entry points: 0, -1 without libcuda.so.1, -2 when a symbol is missing, else cuInit's error.
static int fv_cuda_open(void) {
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) return -1;
	fv_cu_init init = (fv_cu_init)dlsym(lib, "cuInit");
	fv_cu_dev_get = (fv_cu_device_get)dlsym(lib, "cuDeviceGet");
	fv_cu_retain = (fv_cu_primary_retain)dlsym(lib, "cuDevicePrimaryCtxRetain");
	fv_cu_release = (fv_cu_primary_release)dlsym(lib, "cuDevicePrimaryCtxRelease_v2");
	fv_cu_push = (fv_cu_ctx_push)dlsym(lib, "cuCtxPushCurrent_v2");
	fv_cu_pop = (fv_cu_ctx_pop)dlsym(lib, "cuCtxPopCurrent_v2");
	fv_cu_prof_start = (fv_cu_void)dlsym(lib, "cuProfilerStart");
	fv_cu_prof_stop = (fv_cu_void)dlsym(lib, "cuProfilerStop");
	if (init == NULL || fv_cu_dev_get == NULL || fv_cu_retain == NULL || fv_cu_release == NULL ||
	    fv_cu_push == NULL || fv_cu_pop == NULL || fv_cu_prof_start == NULL || fv_cu_prof_stop == NULL) return -2;
	return init(0);
}

// fv_cuda_profiler calls cuProfilerStart (start != 0) or cuProfilerStop with the device's primary
// context current: the calling OS thread is a Go thread that usually has no context, while XLA runs
// its kernels in the primary context. Push, call and pop happen in this one C call, so the Go
// scheduler cannot move the goroutine between them. Returns a CUresult.
static int fv_cuda_profiler(int start, int ordinal) {
	int dev;
	void *ctx = NULL, *popped = NULL;
	int r = fv_cu_dev_get(&dev, ordinal);
	if (r != 0) return r;
	r = fv_cu_retain(&ctx, dev);
	if (r != 0) return r;
	r = fv_cu_push(ctx);
	if (r == 0) {
		r = start ? fv_cu_prof_start() : fv_cu_prof_stop();
		fv_cu_pop(&popped);
	}
	fv_cu_release(dev);
	return r;
}
*/
import "C"

import (
	"fmt"
	"sync"
)

var cudaDriver struct {
	once sync.Once
	err  error
}

func cudaProfiler(start bool, device int) error {
	cudaDriver.once.Do(func() {
		switch r := C.fv_cuda_open(); r {
		case 0:
		case -1:
			cudaDriver.err = fmt.Errorf("CUDA driver library libcuda.so.1 not found (no NVIDIA driver)")
		case -2:
			cudaDriver.err = fmt.Errorf("CUDA driver library lacks the profiler or primary-context entry points")
		default:
			cudaDriver.err = fmt.Errorf("cuInit: CUresult %d", int(r))
		}
	})
	if cudaDriver.err != nil {
		return cudaDriver.err
	}
	flag, name := C.int(0), "cuProfilerStop"
	if start {
		flag, name = 1, "cuProfilerStart"
	}
	if r := C.fv_cuda_profiler(flag, C.int(device)); r != 0 {
		return fmt.Errorf("%s on device %d: CUresult %d", name, device, int(r))
	}
	return nil
}
