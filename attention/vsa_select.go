package attention

import (
	"encoding/json"
	"fmt"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive

	"fastvideo/internal/xlaext"
)

// vsaSelectOperands is the number of operands the select kernel takes (testdata/gen_vsa_select.py
// records it in the kernel file).
const vsaSelectOperands = 3

// parseVSASelect reads the select kernel's file: a list of kernel records (parseVSAKernel), one a row
// width, ascending.
func parseVSASelect(file string, data []byte) ([]*tritonKernel, error) {
	var records []json.RawMessage
	if err := json.Unmarshal(data, &records); err != nil {
		return nil, fmt.Errorf("attention: %s: %w", file, err)
	}
	if len(records) == 0 {
		return nil, fmt.Errorf("attention: %s holds no kernel; regenerate it with testdata/gen_vsa_select.py", file)
	}
	kernels := make([]*tritonKernel, len(records))
	for i, record := range records {
		k, err := parseVSAKernel(file, record, vsaSelectOperands, "gen_vsa_select.py")
		if err != nil {
			return nil, err
		}
		if k.Width <= 0 || i > 0 && k.Width <= kernels[i-1].Width {
			return nil, fmt.Errorf("attention: %s: kernel %d holds rows of %d tiles; the widths must be positive and ascending", file, i, k.Width)
		}
		kernels[i] = k
	}
	return kernels, nil
}

// selectKernel is the narrowest select kernel whose rows hold tiles key tiles, or nil.
func (ks *vsaKernels) selectKernel(tiles int) *tritonKernel {
	for _, k := range ks.route {
		if tiles <= k.Width {
			return k
		}
	}
	return nil
}

// routes is each video query tile's key tiles as the fine kernel walks them, from the routing scores
// [H, nT, nT]: the select kernel's lists, entry for entry those of keyOrder(selectTiles(scores, s)),
// [H·V·K] with the groups' ends [H·V·C], in one kernel where XLA ran two sorts (the top-k one, of every
// whole row, cost 0.18 ms of a FastH3 block's 3.63 ms of attention kernels on an H100; BENCHMARKS.md,
// session 23). A tiling of more tiles than the widest kernel holds takes those sorts.
func (ks *vsaKernels) routes(scores *Node, s *Sparse) (idx, ends *Node) {
	t := s.Tiling
	g := scores.Graph()
	h, kept := scores.Shape().Dim(0), t.KeyTiles(s.TopK)
	k := ks.selectKernel(t.NumTiles())
	if k == nil {
		return ks.fine.keyOrder(Reshape(selectTiles(scores, s), h*t.NumVideo, kept), nil, t.Sizes)
	}
	exempt := int32(0)
	if s.Mode != ModeCompete {
		exempt = 1
	}
	params := Const(g, []int32{int32(t.NumTiles()), int32(t.NumPrefix), int32(t.NumVideo), int32(kept), exempt})
	out, err := xlaext.TritonCall(k.Launch(k.Name, [3]int{t.NumVideo, h, 1}), []*Node{params, Const(g, k.keyClasses(t.Sizes)), Reshape(scores, scores.Shape().Size())},
		[]shapes.Shape{shapes.Make(dtypes.Int32, h*t.NumVideo*kept), shapes.Make(dtypes.Int32, h*t.NumVideo*len(k.KeyBlocks))})
	if err != nil {
		panic(fmt.Errorf("attention: VSA select kernel: %w", err))
	}
	return out[0], out[1]
}
