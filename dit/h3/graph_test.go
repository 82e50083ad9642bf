package h3

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/attention"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/quant"
)

func randT(r *rand.Rand, scale float64, dims ...int) *tensors.Tensor {
	n := 1
	for _, d := range dims {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	return tensors.FromFlatDataAndDimensions(v, dims...)
}

// rampRope is the RoPE tables [l, 6] (one frequency per axis, θ = 10000) of l rows whose 3l coordinates
// are i·step: distinct angles on every row and axis.
func rampRope(l int, step float64) (cos, sin *tensors.Tensor) {
	p := make([]float64, 3*l)
	for i := range p {
		p[i] = float64(i) * step
	}
	c, s := RopeTables(p, 1, 10000)
	return tensors.FromFlatDataAndDimensions(c, l, 6), tensors.FromFlatDataAndDimensions(s, l, 6)
}

// The block is written for local heads and a local FFN width with an all-reduce hook: splitting Q/K/V by
// heads (rows), to_out by columns, and FFN-in as [2, F, D] on F, the per-shard partial outputs must sum to
// the unsplit output. This is the contract a tensor-parallel loader relies on.
func TestShardedBlockPartialsSum(t *testing.T) {
	backend := testutil.Backend(t)
	const l, d, heads, dh, f, shards = 11, 32, 4, 8, 24, 2
	r := rand.New(rand.NewPCG(3, 4))
	h := randT(r, 1, l, d)
	wq, wk, wv := randT(r, 0.2, heads*dh, d), randT(r, 0.2, heads*dh, d), randT(r, 0.2, heads*dh, d)
	nq, nk := randT(r, 0.1, dh), randT(r, 0.1, dh)
	wo := randT(r, 0.2, d, heads*dh)
	wIn, wOut := randT(r, 0.2, 2*f, d), randT(r, 0.2, d, f)
	cosT, sinT := rampRope(l, 0.7)

	reduces := 0
	spec := func(hs, fs int) blockSpec {
		return blockSpec{Heads: hs, HeadDim: dh, RotaryDim: 6, FFN: fs, NormEps: 1e-5, QKNormEps: 1e-5,
			Attention: attention.Options{Path: attention.PathExact},
			AllReduce: func(x *Node) *Node { reduces++; return x }}
	}
	run := func(s blockSpec, args ...any) (attn, ff []float32) {
		e := MustNewExec(backend, func(in []*Node) []*Node {
			dw := quant.DenseWeight
			a := s.attentionOut(in[0], attnWeights{Q: dw(in[1]), K: dw(in[2]), V: dw(in[3]), NormQ: in[4], NormK: in[5], Out: dw(in[6])}, in[7], in[8])
			return []*Node{a, s.feedForward(in[0], dw(in[9]), dw(in[10]))}
		})
		out, err := e.Call(args...)
		if err != nil {
			t.Fatal(err)
		}
		return tensors.MustCopyFlatData[float32](out[0]), tensors.MustCopyFlatData[float32](out[1])
	}
	fullA, fullF := run(spec(heads, f), h, wq, wk, wv, nq, nk, wo, cosT, sinT, wIn, wOut)
	if reduces != 2 {
		t.Errorf("the all-reduce hook ran %d times for one block's attention and FFN, want 2", reduces)
	}

	rows := func(x *tensors.Tensor, from, to int) *tensors.Tensor {
		v := tensors.MustCopyFlatData[float32](x)
		c := x.Shape().Dim(1)
		return tensors.FromFlatDataAndDimensions(append([]float32(nil), v[from*c:to*c]...), to-from, c)
	}
	cols := func(x *tensors.Tensor, from, to int) *tensors.Tensor {
		v := tensors.MustCopyFlatData[float32](x)
		n, c := x.Shape().Dim(0), x.Shape().Dim(1)
		out := make([]float32, 0, n*(to-from))
		for i := 0; i < n; i++ {
			out = append(out, v[i*c+from:i*c+to]...)
		}
		return tensors.FromFlatDataAndDimensions(out, n, to-from)
	}
	hl, fl := heads/shards, f/shards
	assertShardsSum(t, "", shards, fullA, fullF, []int{l, d}, func(k int) ([]float32, []float32) {
		q0, q1 := k*hl*dh, (k+1)*hl*dh
		// FFN-in is [value F | gate F]: shard k keeps value rows and gate rows of its F slice together.
		vIn := tensors.MustCopyFlatData[float32](rows(wIn, k*fl, (k+1)*fl))
		gIn := tensors.MustCopyFlatData[float32](rows(wIn, f+k*fl, f+(k+1)*fl))
		localIn := tensors.FromFlatDataAndDimensions(append(vIn, gIn...), 2*fl, d)
		return run(spec(hl, fl), h, rows(wq, q0, q1), rows(wk, q0, q1), rows(wv, q0, q1), nq, nk, cols(wo, q0, q1),
			cosT, sinT, localIn, cols(wOut, k*fl, (k+1)*fl))
	})
}

// assertShardsSum checks that the attention and FFN outputs of every tensor-parallel shard (shard(k),
// k < shards) sum to the whole block's.
func assertShardsSum(t *testing.T, label string, shards int, fullA, fullF []float32, shape []int, shard func(k int) (attn, ff []float32)) {
	t.Helper()
	sumA, sumF := make([]float32, len(fullA)), make([]float32, len(fullF))
	for k := 0; k < shards; k++ {
		a, ff := shard(k)
		for i := range a {
			sumA[i] += a[i]
			sumF[i] += ff[i]
		}
	}
	testutil.AssertClose(t, label+"attention partial sum", sumA, fullA, shape, 1e-5)
	testutil.AssertClose(t, label+"FFN partial sum", sumF, fullF, shape, 1e-5)
}

func TestHostTables(t *testing.T) {
	// inv_freq = 10^(−k/4) for the release (F = 16).
	inv := RopeInvFreq(16, 10000)
	for k, want := range []float32{1, 0.562341325, 0.316227766, 0.177827941, 0.1} {
		if d := inv[k] - want; d > 1e-7 || d < -1e-7 {
			t.Errorf("inv_freq[%d] = %.9g, want %.9g", k, inv[k], want)
		}
	}
}

// tinyInputs is one forward of a tiny model (hidden 32, patch features 16, audio 8, text 16): 3 text,
// 2 audio and 4 video rows at one timestep, the video rows non-zero.
func tinyInputs() ForwardInputs {
	in := ForwardInputs{
		VideoRows: make([]float32, 4*16), AudioRows: make([]float32, 2*8), Text: make([]float32, 3*16),
		Timesteps: []float32{0.25}, TimestepIndices: make([]int32, 9),
		TokenTags:   []int32{1, 1, 1, 2, 2, 0, 0, 0, 0},
		PositionIDs: make([]float64, 27),
		TextIndices: []int32{0, 1, 2}, AudioIndices: []int32{3, 4}, VideoIndices: []int32{5, 6, 7, 8},
	}
	for i := range in.VideoRows {
		in.VideoRows[i] = float32(i%7) - 3
	}
	return in
}

func TestNewRandomRuns(t *testing.T) {
	cfg := Config{NumLayers: 2, NumRefinerLayers: 1, HiddenSize: 32, NumAttentionHeads: 2, AttentionHeadDim: 16,
		FFNDim: 48, InChannels: 4, AudioInChannels: 8, PatchSize: []int{1, 2, 2}, TextDim: 16, FreqDim: 32,
		TimeEmbedHiddenDim: 24, TimeEmbedDim: 12, RopeFreqDim: 2, RopeTheta: 10000, NormEps: 1e-5, QKNormEps: 1e-5, FinalNormEps: 1e-5}
	// Windowed attention is the Wan family's: asking it of H3 is an error, not a silent window over
	// the joint sequence.
	if _, err := NewRandom(testutil.Backend(t), cfg, Options{Attention: attention.Options{Window: &attention.Window{Tokens: 8}}}, 7); err == nil ||
		!strings.Contains(err.Error(), "Options.Attention.Window") || !strings.Contains(err.Error(), "Wan family") {
		t.Errorf("H3 with a window: %v, want an error naming the field and the Wan family", err)
	}
	m, err := NewRandom(testutil.Backend(t), cfg, Options{}, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	in := tinyInputs()
	out := mustForward(t, m, in)
	if len(out.Video) != 64 || len(out.Audio) != 16 || testutil.MaxAbs(out.Video) == 0 {
		t.Errorf("random model output: %d video, %d audio values, max|video| %v", len(out.Video), len(out.Audio), testutil.MaxAbs(out.Video))
	}
}

// sliceAffine cuts rows [r0, r1) and columns [c0, c1) out of a quantized matrix the way a tensor-parallel
// loader would (blockSpec): the same rows of words, scales and biases; columns only on group boundaries,
// words [c0·bits/32, c1·bits/32) and scales/biases [c0/group, c1/group).
func sliceAffine(t *testing.T, a *quant.Affine, r0, r1, c0, c1 int) *quant.Affine {
	t.Helper()
	if c0%a.GroupSize != 0 || c1%a.GroupSize != 0 {
		t.Fatalf("column split [%d, %d) is not on %d-value group boundaries", c0, c1, a.GroupSize)
	}
	wpr, gpr := a.WordsPerRow(a.Cols), a.GroupsPerRow(a.Cols)
	out := &quant.Affine{Scheme: a.Scheme, Rows: r1 - r0, Cols: c1 - c0, StoreDType: a.StoreDType}
	for r := r0; r < r1; r++ {
		out.Words = append(out.Words, a.Words[r*wpr+a.WordsPerRow(c0):r*wpr+a.WordsPerRow(c1)]...)
		out.Scales = append(out.Scales, a.Scales[r*gpr+c0/a.GroupSize:r*gpr+c1/a.GroupSize]...)
		out.Biases = append(out.Biases, a.Biases[r*gpr+c0/a.GroupSize:r*gpr+c1/a.GroupSize]...)
	}
	return out
}

func catRows(a, b *quant.Affine) *quant.Affine {
	return &quant.Affine{Scheme: a.Scheme, Rows: a.Rows + b.Rows, Cols: a.Cols, StoreDType: a.StoreDType,
		Words:  append(append([]uint32(nil), a.Words...), b.Words...),
		Scales: append(append([]float32(nil), a.Scales...), b.Scales...),
		Biases: append(append([]float32(nil), a.Biases...), b.Biases...)}
}

func affineArgs(a *quant.Affine) []any {
	return []any{
		tensors.FromFlatDataAndDimensions(append([]uint32(nil), a.Words...), a.Rows, a.WordsPerRow(a.Cols)),
		tensors.FromFlatDataAndDimensions(append([]float32(nil), a.Scales...), a.Rows, a.GroupsPerRow(a.Cols)),
		tensors.FromFlatDataAndDimensions(append([]float32(nil), a.Biases...), a.Rows, a.GroupsPerRow(a.Cols)),
	}
}

// TestShardedQuantizedBlockPartialsSum is TestShardedBlockPartialsSum with 6-bit weights (the layout
// whose words hold values across word boundaries) split by the quantized contract of blockSpec: the
// per-shard partial outputs, each through quant.Linear on its slice of words/scales/biases, sum to the
// unsplit quantized output.
func TestShardedQuantizedBlockPartialsSum(t *testing.T) {
	backend := testutil.Backend(t)
	const l, d, heads, dh, f, shards, bits = 9, 64, 4, 32, 128, 2, 6
	r := rand.New(rand.NewPCG(5, 6))
	q := func(rows, cols int) *quant.Affine {
		v := make([]float32, rows*cols)
		for i := range v {
			v[i] = float32(r.NormFloat64() / math.Sqrt(float64(cols)))
		}
		a, err := quant.Quantize(v, rows, cols, bits, quant.DefaultGroupSize, safetensors.F32)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	h := randT(r, 1, l, d)
	wq, wk, wv, wo := q(heads*dh, d), q(heads*dh, d), q(heads*dh, d), q(d, heads*dh)
	wIn, wOut := q(2*f, d), q(d, f)
	nq, nk := randT(r, 0.1, dh), randT(r, 0.1, dh)
	cosT, sinT := rampRope(l, 0.3)
	scheme := wq.Scheme

	run := func(hs, fs int, ws [6]*quant.Affine) (attn, ff []float32) {
		s := blockSpec{Heads: hs, HeadDim: dh, RotaryDim: 6, FFN: fs, NormEps: 1e-5, QKNormEps: 1e-5,
			Attention: attention.Options{Path: attention.PathExact}}
		args := []any{h, nq, nk, cosT, sinT}
		for _, w := range ws {
			args = append(args, affineArgs(w)...)
		}
		e := MustNewExec(backend, func(in []*Node) []*Node {
			gw := func(k int) quant.GraphWeight { return quant.QuantizedWeight(in[5+3*k], in[6+3*k], in[7+3*k], scheme) }
			a := s.attentionOut(in[0], attnWeights{Q: gw(0), K: gw(1), V: gw(2), Out: gw(3), NormQ: in[1], NormK: in[2]}, in[3], in[4])
			return []*Node{a, s.feedForward(in[0], gw(4), gw(5))}
		})
		defer e.Finalize()
		out, err := e.Call(args...)
		if err != nil {
			t.Fatal(err)
		}
		return tensors.MustCopyFlatData[float32](out[0]), tensors.MustCopyFlatData[float32](out[1])
	}
	fullA, fullF := run(heads, f, [6]*quant.Affine{wq, wk, wv, wo, wIn, wOut})
	hl, fl := heads/shards, f/shards
	assertShardsSum(t, "quantized ", shards, fullA, fullF, []int{l, d}, func(k int) ([]float32, []float32) {
		q0, q1 := k*hl*dh, (k+1)*hl*dh
		in := catRows(sliceAffine(t, wIn, k*fl, (k+1)*fl, 0, d), sliceAffine(t, wIn, f+k*fl, f+(k+1)*fl, 0, d))
		return run(hl, fl, [6]*quant.Affine{
			sliceAffine(t, wq, q0, q1, 0, d), sliceAffine(t, wk, q0, q1, 0, d), sliceAffine(t, wv, q0, q1, 0, d),
			sliceAffine(t, wo, 0, d, q0, q1), in, sliceAffine(t, wOut, 0, d, k*fl, (k+1)*fl)})
	})
}

// TestNewRandomQuantizedRuns draws a small quantized random model: the core linears are packed on the
// device with the requested scheme, their codes are uniform and the dequantized matrices have NewRandom's
// statistics (mean 0, standard deviation 1/√fan_in), and the forward is finite.
func TestNewRandomQuantizedRuns(t *testing.T) {
	cfg := Config{NumLayers: 2, NumRefinerLayers: 1, HiddenSize: 64, NumAttentionHeads: 2, AttentionHeadDim: 32,
		FFNDim: 128, InChannels: 4, AudioInChannels: 8, PatchSize: []int{1, 2, 2}, TextDim: 16, FreqDim: 32,
		TimeEmbedHiddenDim: 24, TimeEmbedDim: 12, RopeFreqDim: 2, RopeTheta: 10000, NormEps: 1e-5, QKNormEps: 1e-5, FinalNormEps: 1e-5}
	scheme := quant.Scheme{Bits: 6, GroupSize: 64}
	m, err := NewRandomQuantized(testutil.Backend(t), cfg, Options{}, scheme, 9)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want := linearLayout{scheme, scheme, scheme, scheme, scheme, scheme}
	if m.p.BlockLayout != want || m.p.RefinerLayout != want {
		t.Fatalf("layouts %v / %v, want every core linear %v", m.p.BlockLayout, m.p.RefinerLayout, scheme)
	}
	w := m.p.Blocks[1].FFOut // [64, 128]
	a := &quant.Affine{Scheme: scheme, Rows: w.Out, Cols: w.In, StoreDType: safetensors.F32,
		Words:  tensors.MustCopyFlatData[uint32](w.W.T),
		Scales: tensors.MustCopyFlatData[float32](w.Scales.T), Biases: tensors.MustCopyFlatData[float32](w.Biases.T)}
	codes, err := a.Unpack()
	if err != nil {
		t.Fatal(err)
	}
	var cs float64
	for _, c := range codes {
		cs += float64(c)
	}
	if mean := cs / float64(len(codes)); math.Abs(mean-31.5) > 1.5 {
		t.Errorf("mean 6-bit code %.2f, want ≈ 31.5 (uniform)", mean)
	}
	v, err := a.Dequantize()
	if err != nil {
		t.Fatal(err)
	}
	var s, ss float64
	for _, x := range v {
		s += float64(x)
		ss += float64(x) * float64(x)
	}
	mean, std := s/float64(len(v)), math.Sqrt(ss/float64(len(v)))
	t.Logf("int6 random ff.net.2 [64, 128]: mean code %.2f; dequantized mean %.3g, rms %.4f (1/√128 = %.4f)",
		cs/float64(len(codes)), mean, std, 1/math.Sqrt(128))
	if sigma := 1 / math.Sqrt(float64(w.In)); math.Abs(mean) > 0.1*sigma || math.Abs(std/sigma-1) > 0.1 {
		t.Errorf("dequantized ff.net.2: mean %.4g, rms %.4g; want ≈ 0 and ≈ 1/√%d = %.4g", mean, std, w.In, sigma)
	}

	in := tinyInputs()
	for i := range in.Text {
		in.Text[i] = float32(i%5) - 2
	}
	out := mustForward(t, m, in)
	for _, v := range append(append([]float32(nil), out.Video...), out.Audio...) {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatal("random quantized model output is not finite")
		}
	}
	if testutil.MaxAbs(out.Video) == 0 || testutil.MaxAbs(out.Audio) == 0 {
		t.Error("random quantized model output is all zero")
	}
	// Words (4 bytes each) plus f32 scales and biases per 64 columns, over 3 blocks' six linears.
	var qBytes int64
	for _, sh := range [][2]int{{64, 64}, {64, 64}, {64, 64}, {64, 64}, {256, 64}, {64, 128}} {
		qBytes += 3 * int64(4*sh[0]*(sh[1]*6/32)+2*4*sh[0]*(sh[1]/64))
	}
	if wm := m.WeightMemory(); wm.QuantizedLinears != qBytes || wm.DenseCoreLinears != 0 || wm.AdaLN == 0 || wm.Total <= qBytes+wm.AdaLN {
		t.Errorf("WeightMemory() = %+v, want %d bytes of quantized linears and no dense core linears", wm, qBytes)
	}
}
