package geometry

import "testing"

func TestWanTable(t *testing.T) { // fastvideo/configs/pipelines/wan.py
	for _, c := range []struct {
		vae     VAE
		h, w, f int
		shape   [4]int
		tokens  [3]int
		l       int
	}{
		{Wan21, 480, 832, 81, [4]int{16, 21, 60, 104}, [3]int{21, 30, 52}, 32760},
		{Wan21, 448, 832, 61, [4]int{16, 16, 56, 104}, [3]int{16, 28, 52}, 23296},
		{Wan21, 720, 1280, 81, [4]int{16, 21, 90, 160}, [3]int{21, 45, 80}, 75600},
		{Wan21, 720, 1280, 125, [4]int{16, 32, 90, 160}, [3]int{32, 45, 80}, 115200},
		{Wan22, 704, 1280, 121, [4]int{48, 31, 44, 80}, [3]int{31, 22, 40}, 27280},
		{Wan22, 480, 832, 81, [4]int{48, 21, 30, 52}, [3]int{21, 15, 26}, 8190},
	} {
		g, err := New(c.vae, c.h, c.w, c.f, [3]int{})
		if err != nil {
			t.Fatalf("%s %dx%dx%d: %v", c.vae.Name, c.h, c.w, c.f, err)
		}
		if g.LatentShape() != c.shape || [3]int{g.TokenFrames, g.TokenHeight, g.TokenWidth} != c.tokens ||
			g.Tokens != c.l || g.DecodedFrames() != c.f {
			t.Errorf("%s %dx%dx%d: %+v", c.vae.Name, c.h, c.w, c.f, g)
		}
	}
	for _, c := range []struct {
		vae     VAE
		h, w, f int
	}{
		{Wan21, 480, 832, 80},  // 80 frames would decode to 77
		{Wan21, 488, 832, 81},  // not a multiple of 16
		{Wan22, 720, 1280, 81}, // 720 is not a multiple of 32
		{Wan21, 0, 832, 81},
	} {
		if _, err := New(c.vae, c.h, c.w, c.f, [3]int{}); err == nil {
			t.Errorf("%s %dx%dx%d must be rejected", c.vae.Name, c.h, c.w, c.f)
		}
	}
}
