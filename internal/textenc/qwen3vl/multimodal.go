package qwen3vl

import (
	"context"
	"fmt"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
)

// ImagePrompt lays out an FL2VA prompt as the H3 conditioning stage does
// (fastvideo/pipelines/basic/minimax_h3/stages/minimax_h3_conditioning.py): for each image k, the
// token ids of its label "<Picture k>: " (labels[k], tokenized without special tokens), then
// <|vision_start|>, tokens[k] image placeholders and <|vision_end|>; then the prompt's ids. vision
// marks the vision tokens (start, placeholders, end), which H3 tags as video rather than text.
func ImagePrompt(c VisionConfig, labels [][]int, tokens []int, prompt []int) (ids []int, vision []bool, err error) {
	if len(labels) != len(tokens) {
		return nil, nil, fmt.Errorf("qwen3vl: %d picture labels for %d images", len(labels), len(tokens))
	}
	emit := func(isVision bool, vs ...int) {
		ids = append(ids, vs...)
		for range vs {
			vision = append(vision, isVision)
		}
	}
	for k, label := range labels {
		if tokens[k] <= 0 {
			return nil, nil, fmt.Errorf("qwen3vl: image %d has %d vision tokens", k+1, tokens[k])
		}
		emit(false, label...)
		emit(true, c.VisionStartTokenID)
		for i := 0; i < tokens[k]; i++ {
			emit(true, c.ImageTokenID)
		}
		emit(true, c.VisionEndTokenID)
	}
	emit(false, prompt...)
	return ids, vision, nil
}

// PictureLabel is the text H3 puts before image k (1-based).
func PictureLabel(k int) string { return fmt.Sprintf("<Picture %d>: ", k) }

// RopeIndex computes the 3-axis M-RoPE positions of a prompt holding images, as Qwen3-VL's
// get_rope_index (the conditioner's _get_rope_index) does for images: text runs count up on all
// three axes from the previous maximum + 1; an image's placeholder block takes (frame, merged row,
// merged column) of its grid_thw (in image order) offset by the same start.
func RopeIndex(c VisionConfig, ids []int, grids [][3]int) ([3][]int, error) {
	var pos [3][]int
	next, img := 0, 0
	text := func(n int) {
		for i := 0; i < n; i++ {
			for a := range pos {
				pos[a] = append(pos[a], next+i)
			}
		}
		next += n
	}
	m := c.SpatialMergeSize
	start := 0
	for i := 0; i < len(ids); i++ {
		if ids[i] != c.ImageTokenID {
			continue
		}
		if img >= len(grids) {
			return pos, fmt.Errorf("qwen3vl: the prompt holds more image blocks than the %d grids given", len(grids))
		}
		text(i - start)
		g := grids[img]
		img++
		gt, gh, gw := g[0], g[1]/m, g[2]/m
		n := gt * gh * gw
		if i+n > len(ids) {
			return pos, fmt.Errorf("qwen3vl: image %d needs %d placeholder tokens, the prompt ends first", img, n)
		}
		base, top := next, 0
		for f := 0; f < gt; f++ {
			for y := 0; y < gh; y++ {
				for x := 0; x < gw; x++ {
					pos[0], pos[1], pos[2] = append(pos[0], base+f), append(pos[1], base+y), append(pos[2], base+x)
					top = max(top, f, y, x)
				}
			}
		}
		next = base + top + 1
		i += n - 1
		start = i + 1
	}
	if img != len(grids) {
		return pos, fmt.Errorf("qwen3vl: %d image grids for %d image blocks in the prompt", len(grids), img)
	}
	text(len(ids) - start)
	return pos, nil
}

// Multimodal is what EncodeMultimodal adds to the token ids: the M-RoPE positions (RopeIndex) and
// the vision features of the images, in prompt order.
type Multimodal struct {
	Positions [3][]int
	Images    []VisionFeatures
}

// multimodalTensors are the device-side splice inputs: keep [S, 1] is 0 at image placeholders and 1
// elsewhere, embeds [S, hidden] the vision embeddings at the placeholders (0 elsewhere), and each
// deepstack [S, hidden] likewise, so that splicing is x·keep + embeds and a DeepStack injection
// x + deepstack, exact on the text rows.
type multimodalTensors struct {
	keep, embeds *tensors.Tensor
	deepstack    []*tensors.Tensor
}

func (m *multimodalTensors) finalize() {
	if m == nil {
		return
	}
	graphexec.Finalize(append([]*tensors.Tensor{m.keep, m.embeds}, m.deepstack...)...)
}

// spread places the images' features on the rows of the image placeholder tokens.
func (e *Encoder) spread(ids []int, mm *Multimodal, imageToken int) (*multimodalTensors, error) {
	s, d := len(ids), e.cfg.HiddenSize
	keep := make([]float32, s)
	embeds := make([]float32, s*d)
	nDeep := -1
	var rows []int
	for i, id := range ids {
		keep[i] = 1
		if id == imageToken {
			keep[i] = 0
			rows = append(rows, i)
		}
	}
	total := 0
	for _, f := range mm.Images {
		total += f.Tokens
		if nDeep >= 0 && len(f.Deepstack) != nDeep {
			return nil, fmt.Errorf("qwen3vl: images carry different numbers of DeepStack features")
		}
		nDeep = len(f.Deepstack)
	}
	if total != len(rows) {
		return nil, fmt.Errorf("qwen3vl: %d image placeholder tokens for %d vision tokens", len(rows), total)
	}
	deep := make([][]float32, max(nDeep, 0))
	for j := range deep {
		deep[j] = make([]float32, s*d)
	}
	r := 0
	for _, f := range mm.Images {
		if len(f.Embeds) != f.Tokens*d {
			return nil, fmt.Errorf("qwen3vl: vision features of width %d, the text stack is %d wide", len(f.Embeds)/max(f.Tokens, 1), d)
		}
		for t := 0; t < f.Tokens; t++ {
			copy(embeds[rows[r]*d:][:d], f.Embeds[t*d:][:d])
			for j := range deep {
				copy(deep[j][rows[r]*d:][:d], f.Deepstack[j][t*d:][:d])
			}
			r++
		}
	}
	out := &multimodalTensors{keep: tensors.FromFlatDataAndDimensions(keep, s, 1),
		embeds: tensors.FromFlatDataAndDimensions(embeds, s, d)}
	for _, v := range deep {
		out.deepstack = append(out.deepstack, tensors.FromFlatDataAndDimensions(v, s, d))
	}
	return out, nil
}

// newSpliceExecs builds the two small graphs of the multimodal path.
func newSpliceExecs(e *Encoder) error {
	return graphexec.Catch("qwen3vl", func() error {
		e.splice = graphexec.MustExec(e.backend, "qwen3vl.splice", func(x, keep, v *Node) *Node {
			return Add(Mul(x, ConvertDType(keep, x.DType())), ConvertDType(v, x.DType()))
		})
		e.inject = graphexec.MustExec(e.backend, "qwen3vl.deepstack", func(x, d *Node) *Node {
			return Add(x, ConvertDType(d, x.DType()))
		})
		return nil
	})
}

// EncodeMultimodal is Encode for a prompt holding images (ImagePrompt): the placeholder tokens'
// embeddings are replaced by the vision embeddings, the rotary positions are mm.Positions, and the
// DeepStack features are added to the image rows after the first decoder layers, as the H3
// conditioner does (fastvideo/models/encoders/minimax_h3_qwen3_vl.py). imageToken is the
// placeholder id (VisionConfig.ImageTokenID).
func (e *Encoder) EncodeMultimodal(ctx context.Context, ids []int, imageToken int, mm *Multimodal) ([]float32, []int, error) {
	var out []float32
	err := e.walk(ctx, ids, imageToken, mm, func(i int, h []float32) error {
		if i == e.index {
			out = h
		}
		return nil
	}, true)
	if err != nil {
		return nil, nil, err
	}
	return out, []int{len(ids), e.cfg.HiddenSize}, nil
}

// WalkMultimodal is Walk for EncodeMultimodal's inputs (parity tests).
func (e *Encoder) WalkMultimodal(ctx context.Context, ids []int, imageToken int, mm *Multimodal, fn func(index int, hidden []float32) error) error {
	return e.walk(ctx, ids, imageToken, mm, fn, false)
}

func (e *Encoder) walk(ctx context.Context, ids []int, imageToken int, mm *Multimodal, fn func(int, []float32) error, lastOnly bool) error {
	in := &forwardInputs{ids: ids, pos: TextPositions(len(ids))}
	if mm != nil {
		if len(mm.Positions[0]) != len(ids) {
			return fmt.Errorf("qwen3vl: %d rotary positions for %d tokens", len(mm.Positions[0]), len(ids))
		}
		t, err := e.spread(ids, mm, imageToken)
		if err != nil {
			return err
		}
		defer t.finalize()
		in.pos, in.mm = mm.Positions, t
	}
	t, err := e.forward(ctx, in, func(i int, h *tensors.Tensor) error {
		if lastOnly && i != e.index {
			return nil
		}
		v, err := graphexec.HostF32(h)
		if err != nil {
			return err
		}
		return fn(i, v)
	})
	if t != nil {
		t.FinalizeAll()
	}
	return err
}
