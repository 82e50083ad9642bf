package fusedops

import (
	"os"
	"testing"

	"fastvideo/internal/testutil"
)

// TestMain: $FASTVIDEO_FUSED_KERNELS names a fused_triton.json to test in place of the embedded one, the
// generator's output on the GPU machine before it is committed.
func TestMain(m *testing.M) {
	testutil.UseKernelFilesFromEnv("FASTVIDEO_FUSED_KERNELS", func(_ string, data []byte) error { return UseKernelFile(data) })
	os.Exit(m.Run())
}
