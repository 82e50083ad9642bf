package h3audio

import (
	"fmt"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads like math
	"github.com/gomlx/gomlx/core/tensors/images"

	"fastvideo/internal/graphexec"
)

// params resolves checkpoint names to graph nodes inside one graph build.
// A weight-normed conv is either folded (`<name>.weight`) or the pair
// (`<name>.weight_g`, `<name>.weight_v`), whichever the checkpoint holds.
type params struct{ graphexec.Bound }

func (p params) opt(name string) *Node { return p.Bound[name] }

// wnWeight returns the effective weight of a (possibly weight-normed) conv:
// g·v/‖v‖ with the norm over every axis but 0, computed like torch's
// _weight_norm (v · (g / ‖v‖)).
func (p params) wnWeight(prefix string) *Node {
	if w := p.opt(prefix + ".weight"); w != nil {
		return w
	}
	g, v := p.Get(prefix+".weight_g"), p.Get(prefix+".weight_v")
	axes := make([]int, v.Rank()-1)
	for i := range axes {
		axes[i] = i + 1
	}
	norm := Sqrt(ReduceAndKeep(Square(v), ReduceSum, axes...))
	return Mul(v, Div(g, norm))
}

// channelVec reshapes a per-channel [C] vector to broadcast over [B, C, L].
func channelVec(v *Node) *Node { return Reshape(v, 1, v.Shape().Size(), 1) }

// conv1d is torch's Conv1d on [B, Cin, L] with a [Cout, Cin, k] weight.
func conv1d(x, w, bias *Node, stride, padding, dilation int) *Node {
	c := Convolve(x, w).ChannelsAxis(images.ChannelsFirst).PaddingPerDim([][2]int{{padding, padding}})
	if stride > 1 {
		c = c.StridePerAxis(stride)
	}
	if dilation > 1 {
		c = c.DilationPerAxis(dilation)
	}
	y := c.Done()
	if bias != nil {
		y = Add(y, channelVec(bias))
	}
	return y
}

// convTranspose1d is torch's ConvTranspose1d (weight [Cin, Cout, k]) written as
// the equivalent forward convolution: zeros inserted between input samples
// (input dilation = stride), the kernel flipped and its channel axes swapped,
// and k-1-padding samples of zero padding on each side.
func convTranspose1d(x, w, bias *Node, stride, padding int) *Node {
	k := w.Shape().Dim(2)
	kernel := Reverse(TransposeAllAxes(w, 1, 0, 2), 2)
	p := k - 1 - padding
	y := Convolve(x, kernel).ChannelsAxis(images.ChannelsFirst).
		PaddingPerDim([][2]int{{p, p}}).InputDilationPerAxis(stride).Done()
	if bias != nil {
		y = Add(y, channelVec(bias))
	}
	return y
}

// replicatePad repeats the first / last sample of the last axis.
func replicatePad(x *Node, left, right int) *Node {
	dims := x.Shape().Clone().Dimensions
	parts := make([]*Node, 0, 3)
	if left > 0 {
		d := append([]int(nil), dims...)
		d[len(d)-1] = left
		parts = append(parts, BroadcastToDims(Slice(x, AxisRange().Spacer(), AxisRange(0, 1)), d...))
	}
	parts = append(parts, x)
	if right > 0 {
		d := append([]int(nil), dims...)
		d[len(d)-1] = right
		parts = append(parts, BroadcastToDims(Slice(x, AxisRange().Spacer(), AxisElem(-1)), d...))
	}
	if len(parts) == 1 {
		return x
	}
	return Concatenate(parts, -1)
}

// tap returns filter[j] of a [1,1,K] filter as a [1,1,1] node.
func tap(filter *Node, j int) *Node {
	return Slice(filter, AxisRange(), AxisRange(), AxisElem(j))
}

// upsample is BigVGAN's UpSample1d (replicate pad, depthwise transposed conv
// with the shipped kaiser-sinc filter, ×ratio, crop), written polyphase: output
// phase q of sample s is ratio·Σ_i f[j0+ratio·i]·xp[s+c_q-i]. The transposed
// conv's zero-stuffed input is never built and every op is elementwise or a
// static slice, so XLA fuses the whole anti-aliased activation.
func upsample(x, filter *Node, ratio int) *Node {
	k := filter.Shape().Dim(-1)
	length := x.Shape().Dim(-1)
	pad := k/ratio - 1
	padLeft := pad*ratio + (k-ratio)/2
	xp := replicatePad(x, pad, pad)
	phases := make([]*Node, ratio)
	for q := range ratio {
		j0 := (q + padLeft) % ratio
		c := (q + padLeft - j0) / ratio
		var acc *Node
		for i := 0; j0+ratio*i < k; i++ {
			start := c - i
			if start < 0 || start+length > length+2*pad {
				panic(fmt.Errorf("h3audio: upsample filter of %d taps at ratio %d reaches outside its padding", k, ratio))
			}
			term := Mul(tap(filter, j0+ratio*i), Slice(xp, AxisRange().Spacer(), AxisRange(start, start+length)))
			if acc == nil {
				acc = term
			} else {
				acc = Add(acc, term)
			}
		}
		phases[q] = MulScalar(acc, float64(ratio))
	}
	dims := x.Shape().Clone().Dimensions
	dims[len(dims)-1] = ratio * length
	return Reshape(Stack(phases, -1), dims...)
}

// downsample is BigVGAN's LowPassFilter1d with stride ratio: replicate pad
// (K/2-1 left, K/2 right for an even filter), then a depthwise strided conv
// written as K strided slices.
func downsample(x, filter *Node, ratio int) *Node {
	k := filter.Shape().Dim(-1)
	padLeft, padRight := k/2, k/2
	if k%2 == 0 {
		padLeft--
	}
	xp := replicatePad(x, padLeft, padRight)
	n := (x.Shape().Dim(-1)+padLeft+padRight-k)/ratio + 1
	var acc *Node
	for j := range k {
		term := Mul(tap(filter, j), Slice(xp, AxisRange().Spacer(), AxisRange(j, j+ratio*(n-1)+1).Stride(ratio)))
		if acc == nil {
			acc = term
		} else {
			acc = Add(acc, term)
		}
	}
	return acc
}

// snakeBeta is x + sin(e^α·x)² / (e^β + 1e-9), α and β stored in log scale [C].
func snakeBeta(x, logAlpha, logBeta *Node) *Node {
	alpha := channelVec(Exp(logAlpha))
	beta := channelVec(Exp(logBeta))
	return Add(x, Mul(Reciprocal(AddScalar(beta, 1e-9)), Square(Sin(Mul(alpha, x)))))
}

// snake is the encoder's Snake1d: x + sin(α·x)² / (α + 1e-9), α [1, C, 1].
func snake(x, alpha *Node) *Node {
	return Add(x, Mul(Reciprocal(AddScalar(alpha, 1e-9)), Square(Sin(Mul(alpha, x)))))
}

// activation1d is the alias-free SnakeBeta: upsample ×2, SnakeBeta, downsample ×2.
func (p params) activation1d(prefix string, x *Node) *Node {
	const ratio = 2 // fixed by BigVGAN's Activation1d as H3 builds it
	y := upsample(x, p.Get(prefix+".upsample.filter"), ratio)
	y = snakeBeta(y, p.Get(prefix+".act.alpha"), p.Get(prefix+".act.beta"))
	return downsample(y, p.Get(prefix+".downsample.lowpass.filter"), ratio)
}

// ampBlock is one AMPBlock1: for each dilation, x += conv2(act(conv1(act(x)))).
func (p params) ampBlock(prefix string, x *Node, kernel int, dilations []int) *Node {
	for j, d := range dilations {
		r := p.activation1d(fmt.Sprintf("%s.activations.%d", prefix, 2*j), x)
		c1 := fmt.Sprintf("%s.convs1.%d", prefix, j)
		r = conv1d(r, p.wnWeight(c1), p.Get(c1+".bias"), 1, (kernel*d-d)/2, d)
		r = p.activation1d(fmt.Sprintf("%s.activations.%d", prefix, 2*j+1), r)
		c2 := fmt.Sprintf("%s.convs2.%d", prefix, j)
		r = conv1d(r, p.wnWeight(c2), p.Get(c2+".bias"), 1, (kernel-1)/2, 1)
		x = Add(x, r)
	}
	return x
}

// taps collects named intermediates for the parity tests; nil in production.
type taps map[string]*Node

// outputs lists the tapped nodes of names, in order, for a graph's outputs. A missing tap is a
// programming error; panics are recovered at the API boundary.
func (t taps) outputs(names []string, what string) []*Node {
	out := make([]*Node, len(names))
	for i, name := range names {
		if t[name] == nil {
			panic(fmt.Errorf("h3audio: no %s tap %q", what, name))
		}
		out[i] = t[name]
	}
	return out
}

func (t taps) put(name string, n *Node) {
	if t != nil {
		t[name] = n
	}
}

// denormalize is z·std + mean per latent channel, in f32 like upstream.
func denormalize(cfg Config, z *Node) *Node {
	g := z.Graph()
	mean := make([]float32, cfg.LatentChannels)
	std := make([]float32, cfg.LatentChannels)
	for i, v := range cfg.Mean() {
		mean[i] = float32(v)
	}
	for i, v := range cfg.Std() {
		std[i] = float32(v)
	}
	return Add(Mul(z, channelVec(Const(g, std))), channelVec(Const(g, mean)))
}

// decodeGraph maps normalized latents [B, C, N] to waveforms [B, 1, hop·N].
func decodeGraph(cfg Config, p params, z *Node, t taps) *Node {
	z = denormalize(cfg, z)
	t.put("latents_denormalized", z)
	x := conv1d(z, p.Get("dec_in_proj.weight"), p.Get("dec_in_proj.bias"), 1, 0, 1)
	t.put("dec_in_proj", x)
	x = conv1d(x, p.wnWeight("decoder.conv_pre"), p.Get("decoder.conv_pre.bias"), 1, 3, 1)
	t.put("decoder_conv_pre", x)
	numKernels := len(cfg.ResblockKernelSizes)
	for i, rate := range cfg.DecoderRates {
		name := fmt.Sprintf("decoder.ups.%d.0", i)
		kernel := cfg.DecoderKernelSizes[i]
		x = convTranspose1d(x, p.wnWeight(name), p.Get(name+".bias"), rate, (kernel-rate)/2)
		t.put(fmt.Sprintf("decoder_up%d", i), x)
		var sum *Node
		for j, k := range cfg.ResblockKernelSizes {
			b := p.ampBlock(fmt.Sprintf("decoder.resblocks.%d", i*numKernels+j), x, k, cfg.ResblockDilationSizes[j])
			t.put(fmt.Sprintf("decoder_resblock%d", i*numKernels+j), b)
			if sum == nil {
				sum = b
			} else {
				sum = Add(sum, b)
			}
		}
		x = DivScalar(sum, float64(numKernels))
	}
	x = p.activation1d("decoder.activation_post", x)
	x = conv1d(x, p.wnWeight("decoder.conv_post"), nil, 1, 3, 1)
	return ClipScalar(x, -1, 1)
}
