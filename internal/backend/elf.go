package backend

import (
	"debug/elf"
	"strings"
)

// readELFSearchPath returns the raw DT_RUNPATH and DT_RPATH entries of a shared object.
// Only the section headers and the dynamic section are read, so a 400 MB plugin costs nothing.
func readELFSearchPath(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var entries []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, err := f.DynString(tag)
		if err != nil {
			return nil, err
		}
		for _, v := range vals {
			for _, e := range strings.Split(v, ":") {
				if e != "" {
					entries = append(entries, e)
				}
			}
		}
	}
	return entries, nil
}
