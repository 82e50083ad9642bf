//go:build !(((linux && (amd64 || arm64)) || (darwin && arm64) || (windows && amd64)) && !noxla)

package backend

// xlaFeatures: this binary has no XLA backend.
func xlaFeatures() Features { return Features{} }
