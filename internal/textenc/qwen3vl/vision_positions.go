package qwen3vl

import (
	"math"

	"fastvideo/internal/hostmath"
)

// positionInterpolation returns the four bilinear neighbours' rows of the learned position grid
// and their weights [4][N], per patch in merge order, as fast_pos_embed_interpolate builds them
// (float32 linspace over the grid, truncation, clipped upper neighbour).
func positionInterpolation(c VisionConfig, grid [3]int) ([]int32, []float32) {
	side := c.gridSide()
	t, h, w, m := grid[0], grid[1], grid[2], c.SpatialMergeSize
	hs, wsF := hostmath.TorchLinspaceF32(0, float32(side-1), h), hostmath.TorchLinspaceF32(0, float32(side-1), w)
	n := t * h * w
	idx, wt := make([]int32, 4*n), make([]float32, 4*n)
	forEachPatch(grid, m, func(row, py, px int) {
		y, x := hs[py], wsF[px]
		y0, x0 := int(y), int(x)
		y1, x1 := min(y0+1, side-1), min(x0+1, side-1)
		dy, dx := y-float32(y0), x-float32(x0)
		cells := [4]int{y0*side + x0, y0*side + x1, y1*side + x0, y1*side + x1}
		ws := [4]float32{(1 - dy) * (1 - dx), (1 - dy) * dx, dy * (1 - dx), dy * dx}
		for k := 0; k < 4; k++ {
			idx[k*n+row], wt[k*n+row] = int32(cells[k]), ws[k]
		}
	})
	return idx, wt
}

// visionRotary returns the vision blocks' rotary tables [N, head_dim]: each patch's (row, column)
// in the full-resolution grid, in merge order, looked up in a theta-10000 frequency table of
// head_dim/4 frequencies per axis; the row and column angles are concatenated and the result
// repeated to the head width (rot_pos_emb).
func visionRotary(c VisionConfig, grid [3]int) (cos, sin []float32) {
	hd := c.HeadDim()
	inv := InvFreq(10000, hd/2)
	q := len(inv)
	n := grid[0] * grid[1] * grid[2]
	cos, sin = make([]float32, n*hd), make([]float32, n*hd)
	forEachPatch(grid, c.SpatialMergeSize, func(row, py, px int) {
		pos := [2]float32{float32(py), float32(px)}
		for a := 0; a < 2; a++ {
			for j := 0; j < q; j++ {
				ang := pos[a] * inv[j]
				cv, sv := float32(math.Cos(float64(ang))), float32(math.Sin(float64(ang)))
				for _, off := range []int{a*q + j, hd/2 + a*q + j} {
					cos[row*hd+off], sin[row*hd+off] = cv, sv
				}
			}
		}
	})
	return cos, sin
}

// forEachPatch visits a t x h x w patch grid in merge order (the m x m patches of each merge block
// together, blocks row by row, frame by frame, as the patch embedder's input arrives) with each
// patch's running index and its row and column in the full-resolution grid.
func forEachPatch(grid [3]int, m int, visit func(row, y, x int)) {
	t, h, w := grid[0], grid[1], grid[2]
	row := 0
	for f := 0; f < t; f++ {
		for bh := 0; bh < h/m; bh++ {
			for bw := 0; bw < w/m; bw++ {
				for mh := 0; mh < m; mh++ {
					for mw := 0; mw < m; mw++ {
						visit(row, bh*m+mh, bw*m+mw)
						row++
					}
				}
			}
		}
	}
}
