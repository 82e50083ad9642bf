//go:build unix

package graphexec

import "syscall"

// canMapHost: staging regions are anonymous mappings, page-aligned and outside Go's heap, as
// registering memory for DMA wants.
const canMapHost = true

func mapHost(n int) ([]byte, error) {
	return syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
}

func unmapHost(b []byte) error { return syscall.Munmap(b) }
