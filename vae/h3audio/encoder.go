package h3audio

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/nn"
	"fastvideo/internal/weights"
)

// encoderDilations are the residual-unit dilations of every DAC encoder block.
var encoderDilations = [3]int{1, 3, 9}

// declareEncoder declares the encoder tensors (shapes from cfg) in graph-input order.
func declareEncoder(cfg Config, set *weights.Set, src weights.Source) []*weights.Param {
	var ps []*weights.Param
	add := func(p ...*weights.Param) { ps = append(ps, p...) }
	add(declareWN(set, src, "encoder.block.0", cfg.EncoderDim, 1, 7)...)
	add(set.AddF32("encoder.block.0.bias", cfg.EncoderDim))
	d := cfg.EncoderDim
	for i, s := range cfg.EncoderRates {
		d *= 2
		half := d / 2
		blk := fmt.Sprintf("encoder.block.%d.block", i+1)
		for u := range encoderDilations {
			ru := fmt.Sprintf("%s.%d.block", blk, u)
			add(set.AddF32(ru+".0.alpha", 1, half, 1))
			add(declareWN(set, src, ru+".1", half, half, 7)...)
			add(set.AddF32(ru+".1.bias", half))
			add(set.AddF32(ru+".2.alpha", 1, half, 1))
			add(declareWN(set, src, ru+".3", half, half, 1)...)
			add(set.AddF32(ru+".3.bias", half))
		}
		add(set.AddF32(blk+".3.alpha", 1, half, 1))
		add(declareWN(set, src, blk+".4", d, half, 2*s)...)
		add(set.AddF32(blk+".4.bias", d))
	}
	n := len(cfg.EncoderRates)
	add(set.AddF32(fmt.Sprintf("encoder.block.%d.alpha", n+1), 1, d, 1))
	last := fmt.Sprintf("encoder.block.%d", n+2)
	add(declareWN(set, src, last, cfg.LatentDim, d, 3)...)
	add(set.AddF32(last+".bias", cfg.LatentDim))

	ld, lc := cfg.LatentDim, cfg.LatentChannels
	for _, ln := range []struct {
		name string
		dim  int
	}{{"pre_block.norm1", ld}, {"pre_block.norm3", ld}, {"pre_block.norm2", lc}, {"pre_block.mlp.norm", lc}} {
		add(set.AddF32(ln.name+".weight", ln.dim), set.AddF32(ln.name+".bias", ln.dim))
	}
	add(set.AddF32("pre_block.attn.qkv.weight", 3*ld, ld),
		set.AddF32("pre_block.attn.q_bias", ld),
		set.AddF32("pre_block.attn.v_bias", ld),
		set.AddF32("pre_block.attn.proj.weight", lc, lc),
		set.AddF32("pre_block.attn.proj.bias", lc),
		set.AddF32("pre_block.proj.weight", lc, ld),
		set.AddF32("pre_block.proj.bias", lc),
		set.AddF32("pre_block.mlp.w0.weight", 2*lc, lc),
		set.AddF32("pre_block.mlp.w0.bias", 2*lc),
		set.AddF32("pre_block.mlp.w1.weight", 2*lc, lc),
		set.AddF32("pre_block.mlp.w1.bias", 2*lc),
		set.AddF32("pre_block.mlp.w2.weight", lc, 2*lc),
		set.AddF32("pre_block.mlp.w2.bias", lc))
	// The key bias is a zero buffer by construction; nothing to load.
	set.Ignore("pre_block.attn.zero_k_bias")
	for _, proj := range []string{"mean_proj", "logs_proj"} {
		add(set.AddF32(proj+".weight", lc, lc, 1), set.AddF32(proj+".bias", lc))
	}
	return ps
}

// adaptiveAvgPoolMatrix is torch's adaptive_avg_pool1d from n to m bins as an
// [n, m] averaging matrix: bin i averages [floor(i·n/m), ceil((i+1)·n/m)).
func adaptiveAvgPoolMatrix(n, m int) []float32 {
	w := make([]float32, n*m)
	for i := range m {
		start := (i * n) / m
		end := ((i+1)*n + m - 1) / m
		for j := start; j < end; j++ {
			w[j*m+i] = 1 / float32(end-start)
		}
	}
	return w
}

// causalAttention is the pre_block attention: causal multi-head attention with
// q/v biases, averaged over heads, pooled to latent_channels, projected.
func causalAttention(cfg Config, p params, x *Node) *Node {
	g := x.Graph()
	b, t, d := x.Shape().Dim(0), x.Shape().Dim(1), x.Shape().Dim(2)
	h := cfg.NumAttentionHeads
	dh := d / h
	bias := Concatenate([]*Node{p.Get("pre_block.attn.q_bias"), ZerosLike(p.Get("pre_block.attn.q_bias")), p.Get("pre_block.attn.v_bias")}, 0)
	qkv := Reshape(nn.Linear(x, p.Get("pre_block.attn.qkv.weight"), bias), b, t, 3, h, dh)
	q := Squeeze(Slice(qkv, AxisRange(), AxisRange(), AxisElem(0)), 2)
	k := Squeeze(Slice(qkv, AxisRange(), AxisRange(), AxisElem(1)), 2)
	v := Squeeze(Slice(qkv, AxisRange(), AxisRange(), AxisElem(2)), 2)
	scores := MulScalar(Einsum("bqhd,bkhd->bhqk", q, k), 1/math.Sqrt(float64(dh)))
	causal := LowerTriangular(g, t) // [t, t], true on and below the diagonal
	mask := BroadcastToDims(Reshape(causal, 1, 1, t, t), b, h, t, t)
	negInf := BroadcastToDims(Reshape(Infinity(g, scores.DType(), -1), 1, 1, 1, 1), b, h, t, t)
	scores = Where(mask, scores, negInf)
	out := Einsum("bhqk,bkhd->bqhd", Softmax(scores, -1), v)
	out = ReduceMean(out, 2) // [b, t, dh]
	pool := Const(g, adaptiveAvgPoolMatrix(dh, cfg.LatentChannels))
	out = Einsum("btd,dc->btc", out, Reshape(pool, dh, cfg.LatentChannels))
	return nn.Linear(out, p.Get("pre_block.attn.proj.weight"), p.Get("pre_block.attn.proj.bias"))
}

// encodeGraph maps waveforms [B, 1, T] (T a multiple of the hop) to the
// posterior mean and log-std [B, C, T/hop].
func encodeGraph(cfg Config, p params, x *Node, t taps) (mean, logs *Node) {
	x = conv1d(x, p.wnWeight("encoder.block.0"), p.Get("encoder.block.0.bias"), 1, 3, 1)
	for i, s := range cfg.EncoderRates {
		blk := fmt.Sprintf("encoder.block.%d.block", i+1)
		for u, dil := range encoderDilations {
			ru := fmt.Sprintf("%s.%d.block", blk, u)
			r := snake(x, p.Get(ru+".0.alpha"))
			r = conv1d(r, p.wnWeight(ru+".1"), p.Get(ru+".1.bias"), 1, 3*dil, dil)
			r = snake(r, p.Get(ru+".2.alpha"))
			r = conv1d(r, p.wnWeight(ru+".3"), p.Get(ru+".3.bias"), 1, 0, 1)
			x = Add(x, r) // same length: the residual convs pad (7-1)·dil/2
		}
		x = snake(x, p.Get(blk+".3.alpha"))
		x = conv1d(x, p.wnWeight(blk+".4"), p.Get(blk+".4.bias"), s, (s+1)/2, 1)
	}
	n := len(cfg.EncoderRates)
	x = snake(x, p.Get(fmt.Sprintf("encoder.block.%d.alpha", n+1)))
	last := fmt.Sprintf("encoder.block.%d", n+2)
	x = conv1d(x, p.wnWeight(last), p.Get(last+".bias"), 1, 1, 1)
	t.put("encoder_out", x)

	h := Transpose(x, 1, 2) // [B, T', latent_dim]
	// torch's LayerNorm: eps 1e-5, affine.
	ln := func(name string, y *Node) *Node {
		return nn.LayerNorm(y, p.Get(name+".weight"), p.Get(name+".bias"), 1e-5)
	}
	h = Add(nn.Linear(ln("pre_block.norm3", h), p.Get("pre_block.proj.weight"), p.Get("pre_block.proj.bias")),
		causalAttention(cfg, p, ln("pre_block.norm1", h)))
	m := ln("pre_block.mlp.norm", ln("pre_block.norm2", h))
	m = Mul(nn.GeluTanh(nn.Linear(m, p.Get("pre_block.mlp.w0.weight"), p.Get("pre_block.mlp.w0.bias"))),
		nn.Linear(m, p.Get("pre_block.mlp.w1.weight"), p.Get("pre_block.mlp.w1.bias")))
	h = Add(h, nn.Linear(m, p.Get("pre_block.mlp.w2.weight"), p.Get("pre_block.mlp.w2.bias")))
	t.put("pre_block_out", h)
	h = Transpose(h, 1, 2)
	mean = conv1d(h, p.Get("mean_proj.weight"), p.Get("mean_proj.bias"), 1, 0, 1)
	logs = conv1d(h, p.Get("logs_proj.weight"), p.Get("logs_proj.bias"), 1, 0, 1)
	return mean, logs
}

// Posterior is the encoder's diagonal Gaussian over latents [B, C, N].
type Posterior struct {
	Mean, Logs []float32
	Shape      []int
}

// Normalized returns the posterior mode in the DiT's normalized latent space,
// (mean − latents_mean) / latents_std, computed in f32 like upstream.
func (p *Posterior) Normalized(cfg Config) []float32 {
	c, n := p.Shape[1], p.Shape[2]
	mean, std := cfg.Mean(), cfg.Std()
	out := make([]float32, len(p.Mean))
	for i, v := range p.Mean {
		ch := (i / n) % c
		out[i] = (v - float32(mean[ch])) / float32(std[ch])
	}
	return out
}

// Encode maps mono waveforms (one per batch item, all the same length) to the
// latent posterior. Each item is right-padded with zeros to a multiple of the
// hop, as upstream does. Needs Options.Encoder.
func (d *Decoder) Encode(ctx context.Context, waves [][]float32) (*Posterior, error) {
	if ctx != nil {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	if d.enc == nil {
		return nil, errors.New("h3audio: Encode needs the encoder weights; load with Options{Encoder: true}")
	}
	if len(waves) == 0 || len(waves[0]) == 0 {
		return nil, errors.New("h3audio: Encode got no samples")
	}
	length := len(waves[0])
	for i, w := range waves {
		if len(w) != length {
			return nil, fmt.Errorf("h3audio: Encode item %d has %d samples, item 0 has %d; pad them to one length", i, len(w), length)
		}
	}
	hop := d.cfg.HopLength()
	padded := (length + hop - 1) / hop * hop
	flat := make([]float32, len(waves)*padded)
	for i, w := range waves {
		copy(flat[i*padded:], w)
	}
	outs, err := d.runEncode(tensors.FromFlatDataAndDimensions(flat, len(waves), 1, padded), nil)
	if err != nil {
		return nil, err
	}
	post := &Posterior{Shape: []int{len(waves), d.cfg.LatentChannels, padded / hop}}
	for i, dst := range []*[]float32{&post.Mean, &post.Logs} {
		v, err := tensors.CopyFlatData[float32](outs[i])
		outs[i].FinalizeAll()
		if err != nil {
			return nil, fmt.Errorf("h3audio: reading the posterior: %w", err)
		}
		*dst = v
	}
	return post, nil
}

// runEncode runs the encode graph; with tapNames it returns those
// intermediates ("mean", "logs" or encodeGraph's taps) instead.
func (d *Decoder) runEncode(x *tensors.Tensor, tapNames []string) (outs []*tensors.Tensor, err error) {
	unlock, err := d.guard.RLock("h3audio: Encode on a closed Decoder")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if x.DType() != dtypes.Float32 {
		return nil, fmt.Errorf("h3audio: Encode input is %s, want float32", x.DType())
	}
	defer graphexec.Recover(&err, "h3audio: encoding audio")
	cached := tapNames == nil
	if cached {
		tapNames = []string{"mean", "logs"}
	}
	build := func() (*Exec, error) {
		return NewExec(d.backend, func(in []*Node) []*Node {
			t := taps{}
			t["mean"], t["logs"] = encodeGraph(d.cfg, bindNodes(d.enc, in[1:]), in[0], t)
			return t.outputs(tapNames, "encoder")
		})
	}
	var exec *Exec
	if cached {
		d.execMu.Lock()
		if d.encExec == nil {
			d.encExec, err = build()
		}
		exec = d.encExec
		d.execMu.Unlock()
	} else {
		exec, err = build()
		if exec != nil {
			defer exec.Finalize()
		}
	}
	if err != nil {
		return nil, err
	}
	return graphexec.Call(exec, graphexec.ParamArgs([]any{x}, d.enc...)...)
}
