package backend

// StartCUDAProfiler opens a profiler range on a CUDA device (its ordinal as the driver numbers it,
// 0 for XLA's first GPU): it calls the driver's cuProfilerStart in the device's primary context, the
// one XLA launches into, so that `ncu --profile-from-start off` collects only the kernels launched
// until StopCUDAProfiler. Without a profiler attached it changes nothing. It fails, and nothing
// happens, where the NVIDIA driver is absent; callers must not call it on a non-CUDA backend, where
// it would initialize the driver for nothing.
func StartCUDAProfiler(device int) error { return cudaProfiler(true, device) }

// StopCUDAProfiler closes the range StartCUDAProfiler opened (cuProfilerStop). The kernels must have
// been launched by then; they need not have finished.
func StopCUDAProfiler(device int) error { return cudaProfiler(false, device) }
