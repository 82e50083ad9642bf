//go:build unix

package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDataDir takes the data folder for this server alone: two servers on one folder each think
// they own the jobs the other runs (one's event streams never end, its DELETE answers 404). The
// lock is the kernel's (flock), so a process that dies for any reason releases it.
func lockDataDir(dir string) (release func() error, err error) {
	path := filepath.Join(dir, "serve.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another server is using the data folder %s (it holds %s): stop it, or give this one its own -data", dir, path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return f.Close, nil
}
