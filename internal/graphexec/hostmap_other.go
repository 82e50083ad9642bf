//go:build !unix

package graphexec

import "errors"

// canMapHost: no staging regions where there is no mmap; outputs copy straight into their slices.
const canMapHost = false

func mapHost(int) ([]byte, error) { return nil, errors.New("graphexec: no anonymous mappings here") }

func unmapHost([]byte) error { return nil }
