package attention

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestMain: $FASTVIDEO_VSA_KERNELS lists VSA kernel files (filepath.SplitList: colon-separated) to test in
// place of the embedded ones of the same names, a generator's output on the GPU machine before it is
// committed (UseKernelFile).
func TestMain(m *testing.M) {
	for _, path := range filepath.SplitList(os.Getenv("FASTVIDEO_VSA_KERNELS")) {
		data, err := os.ReadFile(path)
		if err == nil {
			err = UseKernelFile(filepath.Base(path), data)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "FASTVIDEO_VSA_KERNELS:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}
