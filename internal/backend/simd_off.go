//go:build !(amd64 && goexperiment.simd)

package backend

// cpuSIMD: without GOEXPERIMENT=simd (or off amd64) the pure-Go backend's matmuls are plain Go loops.
const cpuSIMD = false
