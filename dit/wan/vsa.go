package wan

import (
	"fmt"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/attention"
	"fastvideo/internal/graphexec"
)

// VSATileSize is the rows of a Wan VSA tile: (4,4,4) blocks of the token grid
// (VSA_TILE_SIZE in fastvideo/attention/backends/video_sparse_attn.py).
const VSATileSize = 64

// VSA turns Video Sparse Attention on for one forward, as FastVideo runs the FastWan students
// (WanTransformerBlock_VSA in fastvideo/models/dits/wanvideo.py over
// fastvideo/attention/backends/video_sparse_attn.py): the token grid is cut into (4,4,4) tiles, each
// query tile attends its top-k key tiles by pooled score, and the compression branch adds
// softmax(scores)·pooled V scaled by the to_gate_compress gate. It needs the gate weights.
type VSA struct {
	// Sparsity is the fraction of key tiles each query tile drops (0: every tile, plus the gated branch).
	Sparsity float64
	// DenseLayers run with every tile selected (the compression branch still runs).
	DenseLayers []int
}

// vsaKey identifies one VSA block executable: the grid and routing are graph constants.
type vsaKey struct {
	grid  [3]int
	topK  int
	multi bool // per-token timesteps (the executable takes TIdx)
}

// vsaPlan is one forward's VSA: the tiling, the sparse top-k and the layers forced dense.
type vsaPlan struct {
	tl    *attention.Tiling
	topK  int
	dense map[int]bool
}

// HasVSAGates reports whether every block carries to_gate_compress (a VSA-trained checkpoint).
func (m *Model) HasVSAGates() bool {
	if m.p == nil {
		return false
	}
	for _, b := range m.p.Blocks {
		if !b.Gate.W.Bound() {
			return false
		}
	}
	return len(m.p.Blocks) > 0
}

// planVSA checks v against the model and the token grid.
func (m *Model) planVSA(v *VSA, grid [3]int) (*vsaPlan, error) {
	if v == nil {
		return nil, nil
	}
	if !(v.Sparsity >= 0 && v.Sparsity < 1) { // written so NaN fails too
		return nil, fmt.Errorf("wan: VSA sparsity %g is outside [0, 1)", v.Sparsity)
	}
	if !m.HasVSAGates() {
		return nil, fmt.Errorf("wan: VSA needs the to_gate_compress weights of a VSA-trained checkpoint (FastWan); this one has none")
	}
	tl, err := attention.NewTiling(nil, grid, VSATileSize)
	if err != nil {
		return nil, fmt.Errorf("wan: %w", err)
	}
	p := &vsaPlan{tl: tl, topK: attention.TopKTiles(v.Sparsity, tl.NumVideo), dense: map[int]bool{}}
	for _, b := range v.DenseLayers {
		if b < 0 || b >= m.cfg.NumLayers {
			return nil, fmt.Errorf("wan: VSA dense layer %d is outside 0..%d", b, m.cfg.NumLayers-1)
		}
		p.dense[b] = true
	}
	return p, nil
}

// blockExec returns the executable of block b (which takes its gate under VSA), the dense block when p
// is nil.
func (m *Model) blockExec(p *vsaPlan, b int, multi bool) *Exec {
	if p == nil {
		if multi {
			return m.execs().blockMulti
		}
		return m.execs().block
	}
	key := vsaKey{grid: p.tl.Grid, topK: p.topK, multi: multi}
	if p.dense[b] {
		key.topK = p.tl.NumVideo
	}
	spec := m.spec
	spec.VSA = &attention.Sparse{Tiling: p.tl, TopK: key.topK}
	e, _ := m.vsaExecs.Get(key, func() (*Exec, error) {
		return graphexec.MustExec(m.backend, "wan.block_vsa", blockFn(spec, multi, true)), nil
	})
	return e
}
