//go:build !(linux && cgo)

package backend

import "errors"

// NVIDIAMemory needs cgo on linux (the driver's management library is loaded at run time).
func NVIDIAMemory(index int) (used, total uint64, err error) {
	return 0, 0, errors.New("GPU memory statistics need a linux build with cgo")
}
