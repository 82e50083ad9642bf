package attention

import (
	"os"
	"testing"

	"fastvideo/internal/testutil"
)

// TestMain: $FASTVIDEO_VSA_KERNELS lists VSA kernel files (colon-separated) to test in place of the embedded
// ones of the same names (UseKernelFile).
func TestMain(m *testing.M) {
	testutil.UseKernelFilesFromEnv("FASTVIDEO_VSA_KERNELS", UseKernelFile)
	os.Exit(m.Run())
}
