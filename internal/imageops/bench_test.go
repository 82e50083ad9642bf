package imageops

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkUpsample832x480 is one frame of the spatial fast mode at FastH3's default size: a
// 416x240 stage-1 frame resized to 832x480 with each kernel, then the default 0.4 unsharp pass.
func BenchmarkUpsample832x480(b *testing.B) {
	src := NewImage(416, 240)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range src.Pix {
		src.Pix[i] = byte(rng.IntN(256))
	}
	for _, mode := range []Interpolation{Lanczos, Cubic, Bilinear, Nearest} {
		b.Run(mode.String(), func(b *testing.B) {
			b.SetBytes(832 * 480 * Channels)
			for b.Loop() {
				m, err := Resize(src, 832, 480, mode)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := Unsharp(m, 0.4); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("sharpen-only", func(b *testing.B) {
		m, _ := Resize(src, 832, 480, Nearest)
		for b.Loop() {
			if _, err := Unsharp(m, 0.4); err != nil {
				b.Fatal(err)
			}
		}
	})
}
