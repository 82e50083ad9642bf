package taehv

import (
	"context"
	"fmt"
	"strconv"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/weights"
)

// The encoder (upstream's TAEHV.encoder, encoder_time_downscale (True, True, False) for every variant
// here): 0 conv 3p²→64 + ReLU · 2 TPool(64, 2) · 3 conv stride 2 · 4–6 MemBlock(64) · 7 TPool(64, 2) ·
// 8 conv s2 · 9–11 MemBlock · 12 TPool(64, 1) · 13 conv s2 · 14–16 MemBlock · 17 conv 64→C.
const encWidth = 64

// encTPools are the TPool layers with their strides; encMems the MemBlock layers.
var (
	encTPools = [3]struct{ layer, stride int }{{2, 2}, {7, 2}, {12, 1}}
	encMems   = [9]int{4, 5, 6, 9, 10, 11, 14, 15, 16}
)

// encoderLayout lists every encoder tensor cfg needs, in layer order.
func (c Config) encoderLayout() []tensorSpec {
	var out []tensorSpec
	add := func(name string, shape ...int) { out = append(out, tensorSpec{name, shape}) }
	add("encoder.0.weight", encWidth, 3*c.PatchSize*c.PatchSize, 3, 3)
	add("encoder.0.bias", encWidth)
	for s, tp := range encTPools {
		add("encoder."+strconv.Itoa(tp.layer)+".conv.weight", encWidth, encWidth*tp.stride, 1, 1)
		add("encoder."+strconv.Itoa(tp.layer+1)+".weight", encWidth, encWidth, 3, 3)
		for _, l := range encMems[3*s : 3*s+3] {
			memBlockTensors(add, "encoder."+strconv.Itoa(l)+".conv.", encWidth)
		}
	}
	add("encoder.17.weight", c.LatentChannels, encWidth, 3, 3)
	add("encoder.17.bias", c.LatentChannels)
	return out
}

// declareEncoder declares the encoder parameters (Options.Encoder).
func (d *Decoder) declareEncoder() {
	d.encSet = weights.NewSet("encoder.")
	for _, spec := range d.cfg.encoderLayout() {
		d.encParams = append(d.encParams, d.encSet.Add(spec.name[len("encoder."):], spec.shape...))
	}
}

// encodeGraph is the encoder over clips of frames [n·t, 3p², h, w] (pixel-unshuffled): every clip's
// MemBlocks start from zeros, as upstream's parallel mode treats its batch axis.
type encodeGraph struct {
	p graphexec.Bound
	n int // clips
}

// memBlock is MemBlock(64) at layer l with the past taken within each clip.
func (g *encodeGraph) memBlock(x *Node, l int) *Node {
	d := x.Shape().Dimensions
	t := d[0] / g.n
	past := Zeros(x.Graph(), x.Shape())
	if t > 1 {
		xs := Reshape(x, g.n, t, d[1], d[2], d[3])
		zero := Zeros(x.Graph(), xs.Shape().Clone())
		past = Reshape(Concatenate([]*Node{Slice(zero, AxisRange(), AxisRange(0, 1)), Slice(xs, AxisRange(), AxisRange(0, t-1))}, 1), d...)
	}
	return memBlockApply(x, past, g.p, "encoder."+strconv.Itoa(l)+".conv.")
}

// encode runs the encoder; it returns latents [n·t/4, C, h/8, w/8].
func (g *encodeGraph) encode(x *Node) *Node {
	x = relu(conv(x, g.p.Get("encoder.0.weight"), g.p.Get("encoder.0.bias")))
	for s, tp := range encTPools {
		d := x.Shape().Dimensions
		x = Reshape(x, d[0]/tp.stride, tp.stride*d[1], d[2], d[3]) // TPool: s frames, earliest first
		x = conv(x, g.p.Get("encoder."+strconv.Itoa(tp.layer)+".conv.weight"), nil)
		x = convStride2(x, g.p.Get("encoder."+strconv.Itoa(tp.layer+1)+".weight"))
		for _, l := range encMems[3*s : 3*s+3] {
			x = g.memBlock(x, l)
		}
	}
	return conv(x, g.p.Get("encoder.17.weight"), g.p.Get("encoder.17.bias"))
}

// pixelUnshuffle is F.pixel_unshuffle(p) on [N, 3, H, W]: out[n, c·p²+i·p+j, h, w] = in[n, c, h·p+i, w·p+j].
func pixelUnshuffle(x *Node, p int) *Node {
	if p == 1 {
		return x
	}
	d := x.Shape().Dimensions
	n, c, h, w := d[0], d[1], d[2]/p, d[3]/p
	y := TransposeAllAxes(Reshape(x, n, c, h, p, w, p), 0, 1, 3, 5, 2, 4)
	return Reshape(y, n, c*p*p, h, w)
}

// Encode maps frames [1, 3, F, H, W] (or [3, F, H, W]) with values in [0, 1] (H, W multiples of 8p)
// to latents [1, C, T, H/8p, W/8p], upstream's encode_video(parallel=True): Wan pads F to a multiple
// of 4 by repeating the last frame (T = ⌈F/4⌉); H3 repeats the last frame up to a multiple of 17,
// puts 3 zero frames before each 17-frame clip and drops the last 3 latents (T = 5⌈F/17⌉ − 3). It needs
// a decoder built with Options.Encoder.
func (d *Decoder) Encode(ctx context.Context, frames []float32, shape []int) (latents []float32, latentShape []int, err error) {
	if d.encSet == nil {
		return nil, nil, fmt.Errorf("taehv: Encode needs a decoder built with Options.Encoder")
	}
	f, h, w, err := d.frameDims(frames, shape)
	if err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	unlock, err := d.guard.Lock("taehv: Encode called after Close")
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	clips, order := d.encodeOrder(f)
	x := gatherFrames(frames, f, h*w, order)
	out, err := d.runEncoder(x, clips, len(order)/clips, h, w)
	if err != nil {
		return nil, nil, err
	}
	t := len(order) / 4
	if d.cfg.H3Trim {
		t -= 3
	}
	r := d.cfg.SpatialRatio()
	lh, lw := h/r, w/r
	plane := lh * lw
	c := d.cfg.LatentChannels
	latents = make([]float32, c*t*plane) // [n·t', C, h, w] → [C, T, h, w]
	for k := range t {
		for ch := range c {
			copy(latents[(ch*t+k)*plane:(ch*t+k+1)*plane], out[(k*c+ch)*plane:(k*c+ch+1)*plane])
		}
	}
	return latents, []int{1, c, t, lh, lw}, nil
}

// frameDims checks a frame shape [1, 3, F, H, W] or [3, F, H, W].
func (d *Decoder) frameDims(frames []float32, shape []int) (f, h, w int, err error) {
	s := shape
	if len(s) == 5 && s[0] == 1 {
		s = s[1:]
	}
	r := d.cfg.SpatialRatio()
	if len(s) != 4 || s[0] != 3 || s[1] <= 0 || s[2] <= 0 || s[3] <= 0 || s[2]%r != 0 || s[3]%r != 0 {
		return 0, 0, 0, fmt.Errorf("taehv: frames %v: want [1, 3, F, H, W] with H and W multiples of %d", shape, r)
	}
	if len(frames) != 3*s[1]*s[2]*s[3] {
		return 0, 0, 0, fmt.Errorf("taehv: %d frame values for shape %v", len(frames), shape)
	}
	return s[1], s[2], s[3], nil
}

// encodeOrder is the encoder's input frame sequence as source frame indices (−1: a zero frame) and
// the number of clips it is cut into.
func (d *Decoder) encodeOrder(f int) (clips int, order []int) {
	if !d.cfg.H3Trim {
		for i := range (f + 3) / 4 * 4 {
			order = append(order, min(i, f-1))
		}
		return 1, order
	}
	clips = (f + 16) / 17
	for k := range clips {
		order = append(order, -1, -1, -1)
		for i := range 17 {
			order = append(order, min(17*k+i, f-1))
		}
	}
	return clips, order
}

// gatherFrames copies frames [3, F, plane] into [len(order), 3, plane] in order (zeros for −1).
func gatherFrames(frames []float32, f, plane int, order []int) []float32 {
	out := make([]float32, len(order)*3*plane)
	for k, i := range order {
		if i < 0 {
			continue
		}
		for c := range 3 {
			copy(out[(k*3+c)*plane:(k*3+c+1)*plane], frames[(c*f+i)*plane:(c*f+i+1)*plane])
		}
	}
	return out
}

// runEncoder runs the encoder graph on x [clips·t, 3, h, w] and returns [clips·t/4, C, h/8p, w/8p].
func (d *Decoder) runEncoder(x []float32, clips, t, h, w int) ([]float32, error) {
	key := execKey{t: t, h: h, w: w, enc: clips}
	exec, err := d.execs.Get(key, func() (*Exec, error) {
		e, err := NewExec(d.backend, func(in []*Node) *Node {
			g := &encodeGraph{p: graphexec.Bind(d.encParams, in[1:]), n: clips}
			z := pixelUnshuffle(ConvertDType(in[0], d.opts.DType), d.cfg.PatchSize)
			return ConvertDType(g.encode(z), dtypes.Float32)
		})
		if err != nil {
			return nil, fmt.Errorf("taehv: building the encoder graph: %w", err)
		}
		return e.WithName(fmt.Sprintf("taehv.encode[%d×%d frames,%dx%d]", clips, t, h, w)), nil
	})
	if err != nil {
		return nil, err
	}
	xt := tensors.FromFlatDataAndDimensions(x, clips*t, 3, h, w)
	out, err := graphexec.Call1(exec, graphexec.ParamArgs([]any{xt}, d.encParams...)...)
	xt.FinalizeAll()
	if err != nil {
		return nil, fmt.Errorf("taehv: encoding: %w", err)
	}
	defer out.FinalizeAll()
	return tensors.CopyFlatData[float32](out)
}
