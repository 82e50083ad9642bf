package qwen3vl

import (
	"fmt"
	"math"
)

// InvFreq returns the head_dim/2 rotary inverse frequencies theta^(-2i/head_dim),
// evaluated in float32 the way the reference builds its buffer
// (arange(0, d, 2, float32) / d, then a float32 power and reciprocal).
func InvFreq(theta float64, headDim int) []float32 {
	half := headDim / 2
	out := make([]float32, half)
	for i := range out {
		e := float32(2*i) / float32(headDim)
		p := float32(math.Pow(float64(float32(theta)), float64(e)))
		out[i] = 1 / p
	}
	return out
}

// RopeTables returns cos and sin tables [S, head_dim] for 3-axis positions
// (temporal, height, width; each of length S), with Qwen3-VL's interleaved M-RoPE:
// frequency slot j takes the height position when j%3 == 1 and j < 3*section[1],
// the width position when j%3 == 2 and j < 3*section[2], the temporal position
// otherwise; the half-size angle table is repeated to the full head dimension
// (half-split rotation). Angles are formed in float32 as in the reference.
func RopeTables(cfg Config, pos [3][]int) (cos, sin []float32, err error) {
	s := len(pos[0])
	if len(pos[1]) != s || len(pos[2]) != s {
		return nil, nil, fmt.Errorf("qwen3vl: rotary positions have lengths %d/%d/%d; the three axes must have one entry per token", len(pos[0]), len(pos[1]), len(pos[2]))
	}
	d, half := cfg.HeadDim, cfg.HeadDim/2
	inv := InvFreq(cfg.RopeTheta, d)
	axis := make([]int, half)
	if cfg.MRoPEInterleaved {
		for j := range axis {
			switch {
			case j%3 == 1 && j < 3*cfg.MRoPESection[1]:
				axis[j] = 1
			case j%3 == 2 && j < 3*cfg.MRoPESection[2]:
				axis[j] = 2
			}
		}
	} else if cfg.MRoPESection != [3]int{} {
		// Chunked (non-interleaved) M-RoPE, as in Qwen2-VL: consecutive sections.
		j := 0
		for a, n := range cfg.MRoPESection {
			for k := 0; k < n && j < half; k++ {
				axis[j] = a
				j++
			}
		}
	}
	cos = make([]float32, s*d)
	sin = make([]float32, s*d)
	for t := 0; t < s; t++ {
		for j := 0; j < half; j++ {
			ang := inv[j] * float32(pos[axis[j]][t])
			c, sn := float32(math.Cos(float64(ang))), float32(math.Sin(float64(ang)))
			cos[t*d+j], cos[t*d+half+j] = c, c
			sin[t*d+j], sin[t*d+half+j] = sn, sn
		}
	}
	return cos, sin, nil
}

// TextPositions gives the text-only positions 0..s-1 on all three M-RoPE axes,
// which makes interleaved M-RoPE equal to plain 1-D RoPE.
func TextPositions(s int) [3][]int {
	p := make([]int, s)
	for i := range p {
		p[i] = i
	}
	return [3][]int{p, p, p}
}
