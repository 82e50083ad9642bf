package main

import (
	"math"
	"testing"
)

// frameDrift's PSNR and mean absolute difference on frames whose differences are known.
func TestFrameDrift(t *testing.T) {
	ref := [][]byte{{10, 20, 30, 40}, {0, 0, 255, 255}}
	if psnr, mad, err := frameDrift(ref, ref); err != nil || !math.IsInf(psnr, 1) || mad != 0 {
		t.Errorf("identical frames: PSNR %v, MAD %v, %v", psnr, mad, err)
	}
	off := [][]byte{{12, 20, 30, 40}, {0, 0, 255, 251}} // squared errors 4 and 16 over 8 bytes
	psnr, mad, err := frameDrift(off, ref)
	if want := 10 * math.Log10(255*255/2.5); err != nil || math.Abs(psnr-want) > 1e-9 || mad != 0.75 {
		t.Errorf("PSNR %v (want %v), MAD %v (want 0.75), %v", psnr, want, mad, err)
	}
	for _, bad := range [][][]byte{ref[:1], {{1, 2, 3}, {4, 5, 6, 7}}, {}} {
		if _, _, err := frameDrift(bad, ref); err == nil {
			t.Errorf("frames %v against %v: no error", bad, ref)
		}
	}
}
