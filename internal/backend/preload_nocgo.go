//go:build !(linux && cgo)

package backend

import "errors"

// dlopenGlobal needs cgo on linux; elsewhere (darwin's Metal plugin) nothing is preloaded.
func dlopenGlobal(path string) error {
	return errors.New("preloading needs a linux build with cgo; start the program with LD_LIBRARY_PATH set to the NVIDIA library folders instead")
}
