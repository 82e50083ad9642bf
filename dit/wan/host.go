package wan

import "math"

// Host-side tables. They are small (L×Dh/2) and their exact bits matter more than their
// speed, so they are computed in Go following the reference's rounding rather than in the graph.

// RopeTables returns cos and sin [L, Dh/2] for the token grid t×h×w (tokens t-major, w fastest), one
// entry per rotated channel pair: pairs [0, dt/2) rotate by the frame index, the next dh/2 by the row,
// the last dw/2 by the column, with ω_j = 1/10000^(2j/d_axis). The reference builds these tables in
// float64 (angles included) and casts them to float32 once; so do we. Its cos/sin are the same values
// repeated per pair ([c0, c0, c1, c1, ...] over Dh), applied to interleaved pairs (GPT-J style).
func RopeTables(cfg Config, t, h, w int) (cos, sin []float32) {
	dims := cfg.RopeDims()
	half := cfg.AttentionHeadDim / 2
	var freqs [3][]float64
	for a, d := range dims {
		freqs[a] = make([]float64, d/2)
		for j := range freqs[a] {
			// 1.0 / theta ** (arange(0, d, 2)[j] / d), all float64.
			freqs[a][j] = 1 / math.Pow(10000, float64(2*j)/float64(d))
		}
	}
	l := t * h * w
	cos = make([]float32, l*half)
	sin = make([]float32, l*half)
	for ti := 0; ti < t; ti++ {
		for hi := 0; hi < h; hi++ {
			for wi := 0; wi < w; wi++ {
				row := ((ti*h+hi)*w + wi) * half
				k := 0
				for a, p := range [3]int{ti, hi, wi} {
					for _, f := range freqs[a] {
						angle := float64(p) * f
						cos[row+k], sin[row+k] = float32(math.Cos(angle)), float32(math.Sin(angle))
						k++
					}
				}
			}
		}
	}
	return cos, sin
}
