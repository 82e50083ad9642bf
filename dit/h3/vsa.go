package h3

import (
	"fmt"

	"fastvideo/attention"
	"fastvideo/dit/h3/packing"
)

// VSA turns Video Sparse Attention on for one forward, as FastVideo's VSA-H3 backend runs the joint
// blocks (fastvideo/attention/backends/video_sparse_attn_h3.py; the token refiner stays dense). The
// packed rows must be the prefix segments in order (text, condition video rows, audio) followed by the
// generated video rows in (frame, height, width) row-major order, as dit/h3/packing lays them out.
type VSA struct {
	// Sparsity is the fraction of video key tiles each video query tile drops (0: every tile).
	Sparsity float64
	// TileSize is 64 (the trained setting) or 256 rows per tile.
	TileSize int
	// Mode routes the prefix key tiles (exempt or compete).
	Mode attention.Mode
	// DenseLayers run with every tile selected (the compression branch still runs).
	DenseLayers []int
	// Prefix holds the text, condition and audio row counts; Grid the generated video's (frames, height,
	// width) token grid.
	Prefix [3]int
	Grid   [3]int
	// Kernel chooses the fine stage's implementation (attention.Sparse.Kernel; zero: the Triton kernel
	// where it runs).
	Kernel attention.SparseKernel
}

// LayoutVSA is the VSA of a packed document (dit/h3/packing's layout: text, condition video rows and
// audio before the generated video) at the given sparsity, tile size and mode.
func LayoutVSA(l *packing.Layout, sparsity float64, tileSize int, mode attention.Mode) *VSA {
	return &VSA{Sparsity: sparsity, TileSize: tileSize, Mode: mode,
		Prefix: [3]int{l.NumTextRows, l.NumConditionVideoRows, l.NumAudioRows},
		Grid:   [3]int{l.LatentFrames / l.PatchSize[0], l.LatentHeight / l.PatchSize[1], l.LatentWidth / l.PatchSize[2]}}
}

// Tiling returns the tile geometry of v's sequence.
func (v *VSA) Tiling() (*attention.Tiling, error) {
	return attention.NewTiling(v.Prefix[:], v.Grid, v.TileSize)
}

// vsaKey identifies one VSA joint-block executable: the geometry and routing are graph constants.
type vsaKey struct {
	prefix, grid [3]int
	tile, topK   int
	mode         attention.Mode
	gate         bool
	kernel       attention.SparseKernel
}

// vsaPlan is one forward's VSA: its tiling, the top-k of sparse and of dense layers, and the layers
// forced dense.
type vsaPlan struct {
	v     *VSA
	tl    *attention.Tiling
	topK  int
	dense map[int]bool
}

func planVSA(v *VSA, tokenTags []int32, numLayers int) (*vsaPlan, error) {
	if v == nil {
		return nil, nil
	}
	if !(v.Sparsity >= 0 && v.Sparsity < 1) { // written so NaN fails too
		return nil, fmt.Errorf("h3: VSA sparsity %g is outside [0, 1)", v.Sparsity)
	}
	tl, err := v.Tiling()
	if err != nil {
		return nil, fmt.Errorf("h3: %w", err)
	}
	if tl.Rows() != len(tokenTags) {
		return nil, fmt.Errorf("h3: VSA segments %v + video grid %v cover %d rows, the sequence has %d; VSA needs the "+
			"[text | condition | audio | video] packing", v.Prefix, v.Grid, tl.Rows(), len(tokenTags))
	}
	for r := len(tokenTags) - v.Grid[0]*v.Grid[1]*v.Grid[2]; r < len(tokenTags); r++ {
		if tokenTags[r] != 0 {
			return nil, fmt.Errorf("h3: VSA expects the generated video rows last, but packed row %d has tag %d", r, tokenTags[r])
		}
	}
	p := &vsaPlan{v: v, tl: tl, topK: attention.TopKTiles(v.Sparsity, tl.NumVideo), dense: map[int]bool{}}
	for _, b := range v.DenseLayers {
		if b < 0 || b >= numLayers {
			return nil, fmt.Errorf("h3: VSA dense layer %d is outside 0..%d", b, numLayers-1)
		}
		p.dense[b] = true
	}
	return p, nil
}

// key is joint block b's VSA executable key under the plan (gate: the block has a to_gate_compress);
// a layer forced dense keeps the sparse path with every video tile selected.
func (p *vsaPlan) key(b int, gate bool) vsaKey {
	k := vsaKey{prefix: p.v.Prefix, grid: p.v.Grid, tile: p.v.TileSize, topK: p.topK, mode: p.v.Mode, gate: gate, kernel: p.v.Kernel}
	if p.dense[b] {
		k.topK = p.tl.NumVideo
	}
	return k
}

// sparse is the attention's Sparse option of an executable with key k.
func (p *vsaPlan) sparse(k vsaKey) *attention.Sparse {
	return &attention.Sparse{Tiling: p.tl, TopK: k.topK, Mode: k.mode, Kernel: k.kernel}
}
