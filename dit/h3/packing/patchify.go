package packing

import (
	"fmt"

	"fastvideo/internal/parallel"
)

// PatchifyVideo turns a latent (C, T, H, W) (batch 1, row-major) into rows
// (T/pt * H/ph * W/pw, C*pt*ph*pw) with channel-major patch features
// (feature = ((c*pt + it)*ph + ih)*pw + iw), the checkpoint contract; the
// common patch-major order would silently scramble every feature.
func PatchifyVideo(latent []float32, c, t, h, w int, patch [3]int) ([]float32, error) {
	return permuteVideo(latent, c, t, h, w, patch, false)
}

// UnpatchifyVideo is the exact inverse of PatchifyVideo.
func UnpatchifyVideo(rows []float32, c, t, h, w int, patch [3]int) ([]float32, error) {
	return permuteVideo(rows, c, t, h, w, patch, true)
}

// permuteVideo moves the values of a latent into rows, or of rows back into the latent (toLatent).
func permuteVideo(in []float32, c, t, h, w int, patch [3]int, toLatent bool) ([]float32, error) {
	what := "latent has"
	if toLatent {
		what = "rows hold"
	}
	p, err := checkVideo(what, len(in), c, t, h, w, patch)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(in))
	move := func(src, dst int) { out[dst] = in[src] }
	if toLatent {
		move = func(src, dst int) { out[src] = in[dst] }
	}
	forEachPatchElement(c, t, h, w, p, move)
	return out, nil
}

// checkVideo resolves the patch and checks that n values (what: "latent has", "rows hold") fill the
// latent (c, t, h, w) and that the patch divides its grid.
func checkVideo(what string, n, c, t, h, w int, patch [3]int) ([3]int, error) {
	p := patchOrDefault(patch)
	if p[0] <= 0 || p[1] <= 0 || p[2] <= 0 {
		return p, fmt.Errorf("packing: patch size must be positive, got %v", p)
	}
	if !holdsExactly(n, c, t, h, w) {
		return p, fmt.Errorf("packing: %s %d values, which do not fill a latent (%d,%d,%d,%d)", what, n, c, t, h, w)
	}
	if t%p[0] != 0 || h%p[1] != 0 || w%p[2] != 0 {
		return p, fmt.Errorf("packing: latent (%d,%d,%d) is not divisible by the patch %v", t, h, w, p)
	}
	return p, nil
}

// forEachPatchElement maps each latent element (src, (C,T,H,W) order) to its
// row-feature position (dst). The (channel, frame) planes go to the cores: the map is one to one, so
// calls never touch the same src or dst, and a release latent's 1.4 M moves were tens of ms of a
// clip's idle GPU, before the first step and after the last.
func forEachPatchElement(c, t, h, w int, p [3]int, fn func(src, dst int)) {
	hn, wn := h/p[1], w/p[2]
	feat := c * p[0] * p[1] * p[2]
	parallel.Ranges(c*t, max(1, (1<<16)/max(1, h*w)), func(first, end int) {
		for plane := first; plane < end; plane++ {
			ci, ti := plane/t, plane%t
			for hi := 0; hi < h; hi++ {
				for wi := 0; wi < w; wi++ {
					src := (plane*h+hi)*w + wi
					row := ((ti/p[0])*hn+hi/p[1])*wn + wi/p[2]
					f := ((ci*p[0]+ti%p[0])*p[1]+hi%p[1])*p[2] + wi%p[2]
					fn(src, row*feat+f)
				}
			}
		}
	})
}

// PackAudio turns stereo latents (2, C, N) into rows (2N, C): row ch*N + n.
func PackAudio(latents []float32, channels, n int) ([]float32, error) {
	return permuteAudio(latents, channels, n, false)
}

// UnpackAudio is the inverse of PackAudio: rows (2N, C) -> latents (2, C, N).
func UnpackAudio(rows []float32, channels, n int) ([]float32, error) {
	return permuteAudio(rows, channels, n, true)
}

// permuteAudio moves the values of stereo latents into rows, or of rows back into latents (toLatent).
func permuteAudio(in []float32, channels, n int, toLatent bool) ([]float32, error) {
	if !holdsExactly(len(in), AudioChannels, channels, n) {
		if toLatent {
			return nil, fmt.Errorf("packing: audio rows hold %d values, which do not fill (2*%d,%d)", len(in), n, channels)
		}
		return nil, fmt.Errorf("packing: audio latents hold %d values, which do not fill (2,%d,%d)", len(in), channels, n)
	}
	out := make([]float32, len(in))
	move := func(latent, row int) { out[row] = in[latent] }
	if toLatent {
		move = func(latent, row int) { out[latent] = in[row] }
	}
	eachAudioValue(channels, n, move)
	return out, nil
}

// eachAudioValue calls fn with the index of every value in the stereo latents (2, C, N) and its
// index in the rows (2N, C).
func eachAudioValue(channels, n int, fn func(latent, row int)) {
	for ch := 0; ch < AudioChannels; ch++ {
		for ci := 0; ci < channels; ci++ {
			for k := 0; k < n; k++ {
				fn((ch*channels+ci)*n+k, (ch*n+k)*channels+ci)
			}
		}
	}
}

// holdsExactly reports whether n values fill a tensor of the given
// non-negative dimensions; it divides instead of multiplying, so no product
// can overflow.
func holdsExactly(n int, dims ...int) bool {
	rest, empty := n, false
	for _, d := range dims {
		switch {
		case d < 0:
			return false
		case d == 0:
			empty = true
		case rest%d != 0:
			return false
		default:
			rest /= d
		}
	}
	if empty {
		return n == 0
	}
	return rest == 1
}
