package rife

import (
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
)

// net is the IFNet's weights inside one graph build, in convs order.
type net struct {
	layout Layout
	matmul bool      // convolutions as matrix products (layer.apply)
	head   []layer   // cnn0..cnn3
	blocks [][]layer // per block: conv0 (2), residual (8), lastconv
}

// bindNet turns the weight inputs (weight, bias, [beta] per convolution, in declare order) into
// layers.
func bindNet(cfg Config, l Layout, matmul bool, in []*Node) net {
	n := net{layout: l, matmul: matmul}
	cs := convs(cfg, l)
	layers := make([]layer, len(cs))
	k := 0
	for i, c := range cs {
		layers[i] = layer{c: c, w: in[k], b: in[k+1]}
		k += 2
		if c.beta != "" {
			layers[i].beta = in[k]
			k++
		}
	}
	n.head = layers[:4]
	per := 2 + resConvs + 1
	for b := range numBlocks {
		n.blocks = append(n.blocks, layers[4+b*per:4+(b+1)*per])
	}
	return n
}

// numWeightInputs is how many weight tensors the graph takes.
func numWeightInputs(cfg Config) int { return len(declare(cfg, PyTorch).Params()) }

// encode is upstream's Head: three LeakyReLU convolutions (the first with stride 2) and a
// transposed convolution back to full size, 4 feature channels. The input is clamped to [0, 1] as
// vs-rife's Head.forward does (a no-op for frames read from uint8).
func (n net) encode(img *Node) *Node {
	x := ClipScalar(img, 0, 1)
	x = leakyReLU(n.head[0].apply(x, n.layout, 2, n.matmul))
	x = leakyReLU(n.head[1].apply(x, n.layout, 1, n.matmul))
	x = leakyReLU(n.head[2].apply(x, n.layout, 1, n.matmul))
	return n.head[3].apply(x, n.layout, 1, n.matmul)
}

// block is IFBlock.forward at pyramid scale s: it returns the flow (4: x,y towards img0, x,y
// towards img1), the mask logit (1) and the features (8) at full size. flow is nil for block 0.
func (n net) block(b int, x, flow *Node, s int) (outFlow, mask, feat *Node) {
	ls := n.blocks[b]
	x = resize(x, s, true)
	if flow != nil {
		x = Concatenate([]*Node{x, DivScalar(resize(flow, s, true), float64(s))}, 3)
	}
	f := leakyReLU(ls[0].apply(x, n.layout, 2, n.matmul))
	f = leakyReLU(ls[1].apply(f, n.layout, 2, n.matmul))
	for _, r := range ls[2 : 2+resConvs] {
		beta := Reshape(ConvertDType(r.beta, f.DType()), 1, 1, 1, r.c.out)
		f = leakyReLU(Add(Mul(r.apply(f, n.layout, 1, n.matmul), beta), f))
	}
	tmp := pixelShuffle(ls[2+resConvs].apply(f, n.layout, 1, n.matmul), 2)
	tmp = resize(tmp, s, false)
	outFlow = MulScalar(SliceAxis(tmp, 3, AxisRange(0, 4)), float64(s))
	mask = SliceAxis(tmp, 3, AxisRange(4, 5))
	feat = SliceAxis(tmp, 3, AxisRange(5, blockOut))
	return outFlow, mask, feat
}

// forward is IFNet.forward (vsrife/IFNet_HDv3_v4_25.py) on padded frames img0, img1 [N,H,W,3] in
// [0,1] and timestep [N,H,W,1]: five blocks refine the flow coarse to fine, each on the frames
// and features warped by the flow so far; the result blends the two warped frames by the
// sigmoid of the last mask. Upstream warps each frame at the end of a block and its features at
// the start of the next, with the same flow: here one gather warps both (the warp is per channel,
// so the values are the same), and the last block warps only the frames.
func (n net) forward(img0, img1, timestep *Node) *Node {
	img0, img1 = ClipScalar(img0, 0, 1), ClipScalar(img1, 0, 1)
	f0, f1 := n.encode(img0), n.encode(img1)
	both0, both1 := Concatenate([]*Node{img0, f0}, 3), Concatenate([]*Node{img1, f1}, 3)
	var flow, mask, feat, warped0, warped1, wf0, wf1 *Node
	for b := range numBlocks {
		if flow == nil {
			flow, mask, feat = n.block(b, Concatenate([]*Node{img0, img1, f0, f1, timestep}, 3), nil, Scales[b])
		} else {
			in := Concatenate([]*Node{warped0, warped1, wf0, wf1, timestep, mask, feat}, 3)
			var delta *Node
			delta, mask, feat = n.block(b, in, flow, Scales[b])
			flow = Add(flow, delta)
		}
		flow0, flow1 := SliceAxis(flow, 3, AxisRange(0, 2)), SliceAxis(flow, 3, AxisRange(2, 4))
		if b == numBlocks-1 {
			warped0, warped1 = warp(img0, flow0), warp(img1, flow1)
			break
		}
		w0, w1 := warp(both0, flow0), warp(both1, flow1)
		warped0, wf0 = SliceAxis(w0, 3, AxisRange(0, 3)), SliceAxis(w0, 3, AxisRange(3, 3+headOut))
		warped1, wf1 = SliceAxis(w1, 3, AxisRange(0, 3)), SliceAxis(w1, 3, AxisRange(3, 3+headOut))
	}
	m := Sigmoid(mask)
	return Add(Mul(warped0, m), Mul(warped1, OneMinus(m)))
}
