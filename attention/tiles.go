package attention

import (
	"fmt"
	"math"
)

// Tiling is the tile geometry of Video Sparse Attention over one packed sequence, as FastVideo builds it
// (fastvideo/attention/backends/video_sparse_attn_h3.py, _h3_tile_geometry; for Wan, with no prefix,
// fastvideo/attention/backends/video_sparse_attn.py): the prefix segments (H3: text, condition rows,
// audio; empty ones dropped) are cut into consecutive tiles of TileElems rows that never straddle a
// segment, then the video rows, a (frames, height, width) grid in row-major order, are cut into 3D tiles
// of TileShape, partial at the edges, ordered t, h, w. Each tile owns TileElems slots of a zero-padded
// buffer, its valid rows first.
type Tiling struct {
	// TileElems is the number of slots of a tile (64 or 256).
	TileElems int
	// TileShape is the (t, h, w) extent of a video tile.
	TileShape [3]int
	// Prefix are the non-empty prefix segment lengths; Grid the video grid (t, h, w).
	Prefix []int
	Grid   [3]int
	// Sizes are the valid rows of each tile, prefix tiles first.
	Sizes []int32
	// NumPrefix and NumVideo count the prefix and video tiles.
	NumPrefix, NumVideo int
	// RowSlot maps each packed row to its slot in the padded buffer (upstream's untile_combined_index).
	RowSlot []int32
}

// TileShapeFor returns the video tile shape of a tile size: (4,4,4) for 64 rows (the FastH3 trained
// setting and Wan's), (4,8,8) for 256.
func TileShapeFor(tileElems int) ([3]int, error) {
	switch tileElems {
	case 64:
		return [3]int{4, 4, 4}, nil
	case 256:
		return [3]int{4, 8, 8}, nil
	}
	return [3]int{}, fmt.Errorf("attention: VSA tile size %d is not supported; use 64 or 256", tileElems)
}

// NewTiling builds the tiling of a sequence made of the prefix segments followed by the video grid.
func NewTiling(prefix []int, grid [3]int, tileElems int) (*Tiling, error) {
	shape, err := TileShapeFor(tileElems)
	if err != nil {
		return nil, err
	}
	for i, n := range grid {
		if n <= 0 {
			return nil, fmt.Errorf("attention: VSA video grid %v has an empty axis %d", grid, i)
		}
	}
	t := &Tiling{TileElems: tileElems, TileShape: shape, Grid: grid}
	rows := 0
	for _, seg := range prefix {
		if seg < 0 {
			return nil, fmt.Errorf("attention: VSA prefix segment of %d rows", seg)
		}
		for start := 0; start < seg; start += tileElems {
			size := min(tileElems, seg-start)
			t.addTile(int32(size), func(i int) int32 { return int32(rows + start + i) })
		}
		if seg > 0 {
			t.Prefix = append(t.Prefix, seg)
		}
		rows += seg
	}
	t.NumPrefix = len(t.Sizes)
	t.addVideoTiles(rows)
	t.NumVideo = len(t.Sizes) - t.NumPrefix
	t.RowSlot = t.invert(t.RowSlot)
	return t, nil
}

// addTile appends a tile of size rows; row(i) is the packed row of its i-th slot. RowSlot temporarily
// holds slot -> row (inverted at the end).
func (t *Tiling) addTile(size int32, row func(i int) int32) {
	for i := 0; i < int(size); i++ {
		t.RowSlot = append(t.RowSlot, row(i))
	}
	for i := int(size); i < t.TileElems; i++ {
		t.RowSlot = append(t.RowSlot, -1)
	}
	t.Sizes = append(t.Sizes, size)
}

// addVideoTiles appends the 3D tiles of the video grid, whose rows start at offset.
func (t *Tiling) addVideoTiles(offset int) {
	gt, gh, gw := t.Grid[0], t.Grid[1], t.Grid[2]
	st, sh, sw := t.TileShape[0], t.TileShape[1], t.TileShape[2]
	for t0 := 0; t0 < gt; t0 += st {
		for h0 := 0; h0 < gh; h0 += sh {
			for w0 := 0; w0 < gw; w0 += sw {
				nt, nh, nw := min(st, gt-t0), min(sh, gh-h0), min(sw, gw-w0)
				t.addTile(int32(nt*nh*nw), func(i int) int32 {
					dt, dh, dw := i/(nh*nw), i/nw%nh, i%nw
					return int32(offset + ((t0+dt)*gh+h0+dh)*gw + w0 + dw)
				})
			}
		}
	}
}

// invert turns slot -> row (−1 for pads) into row -> slot.
func (t *Tiling) invert(slotRow []int32) []int32 {
	rowSlot := make([]int32, t.Rows())
	for slot, row := range slotRow {
		if row >= 0 {
			rowSlot[row] = int32(slot)
		}
	}
	return rowSlot
}

// Rows is the packed sequence length.
func (t *Tiling) Rows() int {
	n := t.Grid[0] * t.Grid[1] * t.Grid[2]
	for _, s := range t.Prefix {
		n += s
	}
	return n
}

// NumTiles is the number of tiles, prefix and video.
func (t *Tiling) NumTiles() int { return len(t.Sizes) }

// SlotRows maps each slot of the padded buffer to its packed row, Rows() for a pad slot.
func (t *Tiling) SlotRows() []int32 {
	out, pad := make([]int32, t.NumTiles()*t.TileElems), int32(t.Rows())
	for i := range out {
		out[i] = pad
	}
	for row, slot := range t.RowSlot {
		out[slot] = int32(row)
	}
	return out
}

// RowTiles maps each packed row to its tile.
func (t *Tiling) RowTiles() []int32 {
	out := make([]int32, len(t.RowSlot))
	for r, s := range t.RowSlot {
		out[r] = s / int32(t.TileElems)
	}
	return out
}

// TopKTiles is the number of video key tiles a video query tile keeps at a sparsity:
// max(1, min(ceil((1 − sparsity)·numVideo), numVideo)) (upstream's compute_topk).
func TopKTiles(sparsity float64, numVideo int) int {
	return max(1, min(int(math.Ceil((1-sparsity)*float64(numVideo))), numVideo))
}

// KeyTiles is the number of key tiles each video query tile attends at top-k (prefix tiles included,
// capped at all tiles).
func (t *Tiling) KeyTiles(topK int) int {
	if topK >= t.NumVideo {
		return t.NumTiles()
	}
	return min(topK+t.NumPrefix, t.NumTiles())
}

// AttendedPairs counts the (query row, key row) pairs the sparse attention computes at top-k, against
// Rows()² for dense attention: prefix rows attend every row; a video row attends the rows of its
// KeyTiles(topK) tiles, counted at the full tile size (an upper bound the plan reports).
func (t *Tiling) AttendedPairs(topK int) int64 {
	n, prefixRows := int64(t.Rows()), int64(t.PrefixRows())
	videoRows := n - prefixRows
	if topK >= t.NumVideo {
		return n * n
	}
	return prefixRows*n + videoRows*min(int64(t.KeyTiles(topK)*t.TileElems), n)
}

// PrefixRows is the number of prefix rows, the first rows of the sequence.
func (t *Tiling) PrefixRows() int { return t.Rows() - t.Grid[0]*t.Grid[1]*t.Grid[2] }
