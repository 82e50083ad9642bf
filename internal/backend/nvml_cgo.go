//go:build linux && cgo

package backend

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>

// The NVIDIA management library's memory record (nvml.h nvmlMemory_t), in bytes.
typedef struct { unsigned long long total, free, used; } fv_nvml_memory;

static int (*fv_nvml_handle)(unsigned int, void **);
static int (*fv_nvml_meminfo)(void *, fv_nvml_memory *);

// fv_nvml_open loads libnvidia-ml (shipped with the driver; nothing to link at build time) and
// initializes it: 0 on success.
static int fv_nvml_open(void) {
	void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) return -1;
	int (*init)(void) = (int (*)(void))dlsym(lib, "nvmlInit_v2");
	fv_nvml_handle = (int (*)(unsigned int, void **))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
	fv_nvml_meminfo = (int (*)(void *, fv_nvml_memory *))dlsym(lib, "nvmlDeviceGetMemoryInfo");
	if (init == NULL || fv_nvml_handle == NULL || fv_nvml_meminfo == NULL) return -2;
	return init();
}

static int fv_nvml_memory_of(unsigned int index, unsigned long long *used, unsigned long long *total) {
	void *dev;
	int r = fv_nvml_handle(index, &dev);
	if (r != 0) return r;
	fv_nvml_memory m;
	r = fv_nvml_meminfo(dev, &m);
	if (r != 0) return r;
	*used = m.used;
	*total = m.total;
	return 0;
}
*/
import "C"

import (
	"fmt"
	"sync"
)

var nvml struct {
	once sync.Once
	err  error
}

// NVIDIAMemory reads an NVIDIA GPU's used and total memory in bytes through the driver's
// management library (what nvidia-smi shows: every process's allocations, XLA's pool included).
// It fails where no NVIDIA driver is installed.
func NVIDIAMemory(index int) (used, total uint64, err error) {
	nvml.once.Do(func() {
		if r := C.fv_nvml_open(); r != 0 {
			nvml.err = fmt.Errorf("NVIDIA management library unavailable (code %d)", int(r))
		}
	})
	if nvml.err != nil {
		return 0, 0, nvml.err
	}
	var u, t C.ulonglong
	if r := C.fv_nvml_memory_of(C.uint(index), &u, &t); r != 0 {
		return 0, 0, fmt.Errorf("NVIDIA management library: device %d memory: code %d", index, int(r))
	}
	return uint64(u), uint64(t), nil
}
