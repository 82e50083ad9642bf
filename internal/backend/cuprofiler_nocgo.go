//go:build !(linux && cgo)

package backend

import "errors"

// cudaProfiler needs cgo on linux (the CUDA driver library is loaded at run time).
func cudaProfiler(start bool, device int) error {
	return errors.New("the CUDA profiler range needs a linux build with cgo")
}
