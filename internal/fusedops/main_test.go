package fusedops

import (
	"fmt"
	"os"
	"testing"
)

// TestMain: $FASTVIDEO_FUSED_KERNELS names a fused_triton.json to test in place of the embedded one, the
// generator's output on the GPU machine before it is committed.
func TestMain(m *testing.M) {
	if path := os.Getenv("FASTVIDEO_FUSED_KERNELS"); path != "" {
		data, err := os.ReadFile(path)
		if err == nil {
			err = UseKernelFile(data)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "FASTVIDEO_FUSED_KERNELS:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}
