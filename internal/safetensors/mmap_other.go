//go:build !unix

package safetensors

import (
	"io"
	"os"
)

// Without mmap the file is read whole; only unix builds promise zero-copy loading.
func mapFile(f *os.File, size int64) ([]byte, func() error, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
