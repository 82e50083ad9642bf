//go:build !unix

package server

// lockDataDir: no advisory lock on this platform; run one server per data folder.
func lockDataDir(string) (func() error, error) { return func() error { return nil }, nil }
