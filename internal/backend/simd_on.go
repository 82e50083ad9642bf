//go:build amd64 && goexperiment.simd

package backend

// cpuSIMD: built with GOEXPERIMENT=simd on amd64, GoMLX's pure-Go backend compiles its AVX2/AVX-512
// matmul kernels (github.com/gomlx/compute internal/gobackend/dot/matmul).
const cpuSIMD = true
