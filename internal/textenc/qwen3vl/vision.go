package qwen3vl

import (
	"context"
	"fmt"
	"math"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/nn"
	"fastvideo/internal/randweights"
	"fastvideo/internal/weights"
)

// Vision is the Qwen3-VL vision tower (fastvideo/models/encoders/minimax_h3_qwen3_vl.py's
// MiniMaxH3Qwen3VLVisionModel, transformers' Qwen3VLVisionModel): a patch embedding, learned
// position embeddings interpolated to the image grid, ViT blocks with 2-D rotary positions, a
// merger of 2x2 patches into one token of the language width, and DeepStack mergers whose outputs
// are added to the first text layers' hidden states at the vision tokens. It runs in float32 with
// every weight resident: it is used once per request, for one or two keyframes.
type Vision struct {
	cfg   VisionConfig
	set   *weights.Set
	index map[*weights.Param]int
	exec  *Exec
	guard modelkit.Guard

	patch, posEmbed [2]*weights.Param // posEmbed[1] unset
	blocks          []visionBlock
	merger          visionMerger
	deepstack       []visionMerger
}

type visionBlock struct{ norm1, norm2, qkv, proj, fc1, fc2 [2]*weights.Param }

type visionMerger struct{ norm, fc1, fc2 [2]*weights.Param }

// VisionFeatures are the tower's outputs for one image: Embeds [tokens, out_hidden] replace the
// image placeholder tokens' embeddings, Deepstack[i] [tokens, out_hidden] is added after text
// decoder layer i.
type VisionFeatures struct {
	Tokens    int
	Embeds    []float32
	Deepstack [][]float32
}

// NewVision binds the vision tower from src (released names under VisionPrefix; the text decoder's
// tensors are ignored).
func NewVision(backend compute.Backend, cfg VisionConfig, src weights.Source) (*Vision, error) {
	return modelkit.Populate(func() (*Vision, error) { return newVision(backend, cfg) }, func(v *Vision) error {
		return modelkit.BindSource("qwen3vl vision", src, v.set, dtypes.Float32, backend, func() error { return v.build(backend) })
	})
}

// NewRandomVision is NewVision with weights drawn on the backend from seed (random-weight runs:
// the released tower has about 0.5B parameters, too many to draw on the host).
func NewRandomVision(backend compute.Backend, cfg VisionConfig, seed int64) (*Vision, error) {
	return modelkit.Populate(func() (*Vision, error) { return newVision(backend, cfg) }, func(v *Vision) error {
		return modelkit.DrawRandom("qwen3vl vision", v.set, dtypes.Float32, backend, seed, randweights.FixtureDraw,
			func() error { return v.build(backend) })
	})
}

func newVision(backend compute.Backend, cfg VisionConfig) (*Vision, error) {
	if _, err := modelkit.Prepare("qwen3vl vision", cfg, backend, dtypes.Float32, []dtypes.DType{dtypes.Float32}); err != nil {
		return nil, err
	}
	v := &Vision{cfg: cfg, index: map[*weights.Param]int{}}
	v.declare()
	return v, nil
}

func (v *Vision) build(backend compute.Backend) error {
	return graphexec.Catch("qwen3vl vision: building the graph", func() error {
		v.exec = graphexec.MustExec(backend, "qwen3vl.vision", v.graph)
		return nil
	})
}

// VisionParams is the checkpoint parameter table of the vision tower for cfg.
func VisionParams(cfg VisionConfig) (weights.Shapes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v := &Vision{cfg: cfg, index: map[*weights.Param]int{}}
	v.declare()
	return weights.ShapesOf(v.set.Params()), nil
}

func (v *Vision) declare() {
	c := v.cfg
	s := weights.NewSet(VisionPrefix)
	v.set = s
	add := func(set *weights.Set, name string, shape ...int) *weights.Param {
		p := set.Add(name, shape...)
		v.index[p] = len(v.index)
		return p
	}
	lin := func(set *weights.Set, name string, out, in int) [2]*weights.Param {
		return [2]*weights.Param{add(set, name+".weight", out, in), add(set, name+".bias", out)}
	}
	norm := func(set *weights.Set, name string, n int) [2]*weights.Param {
		return [2]*weights.Param{add(set, name+".weight", n), add(set, name+".bias", n)}
	}
	d := c.HiddenSize
	pe := s.Sub("patch_embed.proj")
	v.patch = [2]*weights.Param{add(pe, "weight", d, c.InChannels, c.TemporalPatchSize, c.PatchSize, c.PatchSize), add(pe, "bias", d)}
	v.posEmbed[0] = add(s, "pos_embed.weight", c.NumPositionEmbeddings, d)
	for i := 0; i < c.Depth; i++ {
		b := s.Sub(fmt.Sprintf("blocks.%d", i))
		v.blocks = append(v.blocks, visionBlock{
			norm1: norm(b, "norm1", d), norm2: norm(b, "norm2", d),
			qkv: lin(b, "attn.qkv", 3*d, d), proj: lin(b, "attn.proj", d, d),
			fc1: lin(b, "mlp.linear_fc1", c.IntermediateSize, d), fc2: lin(b, "mlp.linear_fc2", d, c.IntermediateSize),
		})
	}
	merged := d * c.MergeArea()
	merger := func(set *weights.Set, normWidth int) visionMerger {
		return visionMerger{norm: norm(set, "norm", normWidth), fc1: lin(set, "linear_fc1", merged, merged),
			fc2: lin(set, "linear_fc2", c.OutHiddenSize, merged)}
	}
	v.merger = merger(s.Sub("merger"), d)
	for j := range c.DeepstackVisualIndexes {
		v.deepstack = append(v.deepstack, merger(s.Sub(fmt.Sprintf("deepstack_merger_list.%d", j)), merged))
	}
}

// visionInputs are the per-image graph inputs before the weights.
type visionInputs struct{ Pixels, PosIndex, PosWeight, Cos, Sin *Node }

func (a *visionInputs) Fields() []**Node {
	return []**Node{&a.Pixels, &a.PosIndex, &a.PosWeight, &a.Cos, &a.Sin}
}

// graph runs one image: pixels [N, PatchDim] in merge order, the 4 bilinear position-embedding
// rows and weights [4, N], the rotary tables [N, head_dim]; it returns the merged tokens and the
// DeepStack features.
func (v *Vision) graph(in []*Node) []*Node {
	var a visionInputs
	ws := graphexec.Unpack(in, &a)
	w := func(p *weights.Param) *Node { return ws[v.index[p]] }
	lin := func(x *Node, p [2]*weights.Param) *Node { return nn.Linear(x, w(p[0]), w(p[1])) }
	ln := func(x *Node, p [2]*weights.Param) *Node {
		return nn.LayerNorm(x, w(p[0]), w(p[1]), visionLayerNormEps)
	}
	c := v.cfg
	n, d := a.Pixels.Shape().Dim(0), c.HiddenSize
	x := nn.Linear(a.Pixels, Reshape(w(v.patch[0]), d, c.PatchDim()), w(v.patch[1]))
	pos := Gather(w(v.posEmbed[0]), ExpandAxes(a.PosIndex, -1)) // [4, N, d]
	pos = Mul(pos, ExpandAxes(a.PosWeight, -1))
	corner := func(k int) *Node { return Reshape(Slice(pos, AxisElem(k)), n, d) }
	x = Add(x, Add(Add(Add(corner(0), corner(1)), corner(2)), corner(3)))

	merge := func(x *Node, m visionMerger, postShuffle bool) *Node {
		wide := d * c.MergeArea()
		if postShuffle {
			x = ln(Reshape(x, n/c.MergeArea(), wide), m.norm)
		} else {
			x = Reshape(ln(x, m.norm), n/c.MergeArea(), wide)
		}
		h := lin(x, m.fc1)
		h = Mul(MulScalar(h, 0.5), OnePlus(Erf(MulScalar(h, 1/math.Sqrt2)))) // exact GELU
		return lin(h, m.fc2)
	}
	var deep []*Node
	for i, b := range v.blocks {
		x = Add(x, lin(v.attention(ln(x, b.norm1), a.Cos, a.Sin, w(b.qkv[0]), w(b.qkv[1])), b.proj))
		x = Add(x, lin(nn.GeluTanh(lin(ln(x, b.norm2), b.fc1)), b.fc2))
		for j, idx := range c.DeepstackVisualIndexes {
			if idx == i {
				deep = append(deep, merge(x, v.deepstack[j], true))
			}
		}
	}
	return append([]*Node{merge(x, v.merger, false)}, deep...)
}

// attention is full (non-causal) attention over one image's patches, with the 2-D rotary
// embedding applied to queries and keys in float32.
func (v *Vision) attention(x, cos, sin, wqkv, bqkv *Node) *Node {
	c := v.cfg
	n, heads, hd := x.Shape().Dim(0), c.NumHeads, c.HeadDim()
	qkv := Reshape(nn.Linear(x, wqkv, bqkv), n, 3, heads, hd)
	q := applyRope(Reshape(Slice(qkv, AxisRange(), AxisElem(0)), n, heads, hd), cos, sin)
	k := applyRope(Reshape(Slice(qkv, AxisRange(), AxisElem(1)), n, heads, hd), cos, sin)
	val := Reshape(Slice(qkv, AxisRange(), AxisElem(2)), n, heads, hd)
	scores := MulScalar(Einsum("shd,thd->hst", q, k), 1/math.Sqrt(float64(hd)))
	o := Einsum("hst,thd->shd", Softmax(scores, -1), val)
	return Reshape(o, n, heads*hd)
}

// Close releases the tower's weights and graph.
func (v *Vision) Close() error {
	return v.guard.Close(func() error {
		v.set.Release()
		graphexec.FinalizeExecs(v.exec)
		return nil
	})
}

// Forward runs the tower on one image's PixelValues rows (grid_thw from the processor).
func (v *Vision) Forward(ctx context.Context, pixels []float32, grid [3]int) (VisionFeatures, error) {
	unlock, err := v.guard.Lock("qwen3vl vision: Forward called after Close")
	if err != nil {
		return VisionFeatures{}, err
	}
	defer unlock()
	if err := ctx.Err(); err != nil {
		return VisionFeatures{}, err
	}
	c := v.cfg
	m := c.SpatialMergeSize
	if grid[0] <= 0 || grid[1] <= 0 || grid[2] <= 0 || grid[1]%m != 0 || grid[2]%m != 0 {
		return VisionFeatures{}, fmt.Errorf("qwen3vl vision: grid_thw %v must be positive with height and width multiples of %d", grid, m)
	}
	n := grid[0] * grid[1] * grid[2]
	if len(pixels) != n*c.PatchDim() {
		return VisionFeatures{}, fmt.Errorf("qwen3vl vision: %d pixel values for grid_thw %v, want %d", len(pixels), grid, n*c.PatchDim())
	}
	idx, wt := positionInterpolation(c, grid)
	cos, sin := visionRotary(c, grid)
	ts := []*tensors.Tensor{
		tensors.FromFlatDataAndDimensions(pixels, n, c.PatchDim()),
		tensors.FromFlatDataAndDimensions(idx, 4, n),
		tensors.FromFlatDataAndDimensions(wt, 4, n),
		tensors.FromFlatDataAndDimensions(cos, n, c.HeadDim()),
		tensors.FromFlatDataAndDimensions(sin, n, c.HeadDim()),
	}
	defer graphexec.Finalize(ts...)
	args := graphexec.ParamArgs(graphexec.Args(nil, ts...), v.set.Params()...)
	outs, err := graphexec.Call(v.exec, args...)
	if err != nil {
		return VisionFeatures{}, fmt.Errorf("qwen3vl vision: %w", err)
	}
	defer graphexec.Finalize(outs...)
	f := VisionFeatures{Tokens: n / c.MergeArea()}
	for i, o := range outs {
		vals, err := graphexec.HostF32(o)
		if err != nil {
			return VisionFeatures{}, err
		}
		if i == 0 {
			f.Embeds = vals
		} else {
			f.Deepstack = append(f.Deepstack, vals)
		}
	}
	return f, nil
}
