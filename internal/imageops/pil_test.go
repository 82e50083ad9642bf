package imageops

import "testing"

// TestResizePILProperties needs no fixture: the normalized kernel keeps a flat image flat at
// every ratio, an unchanged size is a copy, and bad sizes are errors. (PIL's exact outputs are
// pinned by fastvideo/wan's wan_i2v fixture.)
func TestResizePILProperties(t *testing.T) {
	flat := NewImage(37, 23)
	for i := range flat.Pix {
		flat.Pix[i] = []byte{17, 128, 250}[i%3]
	}
	for _, s := range [][2]int{{37, 23}, {74, 46}, {12, 7}, {100, 3}, {1, 1}} {
		out, err := ResizePIL(flat, s[0], s[1])
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range out.Pix {
			if v != flat.Pix[i%3] {
				t.Fatalf("%dx%d: pixel byte %d is %d, want %d", s[0], s[1], i, v, flat.Pix[i%3])
			}
		}
	}
	same, _ := ResizePIL(flat, 37, 23)
	same.Pix[0] = 0
	if flat.Pix[0] != 17 {
		t.Error("an unchanged size shares memory with the source")
	}
	if _, err := ResizePIL(flat, 0, 5); err == nil {
		t.Error("a 0-wide resize succeeded")
	}
}
