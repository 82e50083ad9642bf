// Package fifotest makes named pipes for the tests that check a reader refuses them at once: opening a
// FIFO for reading blocks until a writer appears, forever in practice. It imports only the standard
// library, so the packages below internal/testutil (safefile, safetensors) can use it too.
package fifotest

import (
	"syscall"
	"testing"
	"time"
)

// Make creates a named pipe at path, skipping the test where the file system has none.
func Make(t testing.TB, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
}

// Within returns call's result, failing t when call has not returned after d: it is blocked on a FIFO.
func Within[T any](t testing.TB, d time.Duration, call func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- call() }()
	select {
	case v := <-done:
		return v
	case <-time.After(d):
		t.Fatal("blocked on a FIFO: the call did not return")
		var zero T
		return zero
	}
}
