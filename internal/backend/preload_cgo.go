//go:build linux && cgo

package backend

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

// dlopen and dlerror in one call: dlerror is per thread and a goroutine may move between calls.
static void *fv_dlopen_global(const char *path, char **err) {
	void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (h == NULL) {
		const char *e = dlerror();
		*err = e ? strdup(e) : NULL;
	}
	return h;
}
*/
import "C"

import (
	"errors"
	"unsafe"
)

// dlopenGlobal loads a library for the rest of the process (the handle is never closed), so that
// later dlopen calls by soname and the plugin's undefined symbols resolve to it.
func dlopenGlobal(path string) error {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var cerr *C.char
	if h := C.fv_dlopen_global(cpath, &cerr); h != nil {
		return nil
	}
	if cerr == nil {
		return errors.New("dlopen failed")
	}
	defer C.free(unsafe.Pointer(cerr))
	return errors.New(C.GoString(cerr))
}
