package h3

import (
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/attention"
	"fastvideo/internal/testutil"
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
	cos, sin := RopeTables(func() []float64 {
		p := make([]float64, 3*l)
		for i := range p {
			p[i] = float64(i) * 0.7
		}
		return p
	}(), 1, 10000)
	cosT, sinT := tensors.FromFlatDataAndDimensions(cos, l, 6), tensors.FromFlatDataAndDimensions(sin, l, 6)

	reduces := 0
	spec := func(hs, fs int) blockSpec {
		return blockSpec{Heads: hs, HeadDim: dh, RotaryDim: 6, FFN: fs, NormEps: 1e-5, QKNormEps: 1e-5,
			Attention: attention.Options{Path: attention.PathExact},
			AllReduce: func(x *Node) *Node { reduces++; return x }}
	}
	run := func(s blockSpec, args ...any) (attn, ff []float32) {
		e := MustNewExec(backend, func(in []*Node) []*Node {
			a := s.attentionOut(in[0], attnWeights{Q: in[1], K: in[2], V: in[3], NormQ: in[4], NormK: in[5], Out: in[6]}, in[7], in[8])
			return []*Node{a, s.feedForward(in[0], in[9], in[10])}
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
	sumA, sumF := make([]float32, l*d), make([]float32, l*d)
	hl, fl := heads/shards, f/shards
	for k := 0; k < shards; k++ {
		q0, q1 := k*hl*dh, (k+1)*hl*dh
		// FFN-in is [value F | gate F]: shard k keeps value rows and gate rows of its F slice together.
		vIn := tensors.MustCopyFlatData[float32](rows(wIn, k*fl, (k+1)*fl))
		gIn := tensors.MustCopyFlatData[float32](rows(wIn, f+k*fl, f+(k+1)*fl))
		localIn := tensors.FromFlatDataAndDimensions(append(vIn, gIn...), 2*fl, d)
		a, ff := run(spec(hl, fl), h, rows(wq, q0, q1), rows(wk, q0, q1), rows(wv, q0, q1), nq, nk, cols(wo, q0, q1),
			cosT, sinT, localIn, cols(wOut, k*fl, (k+1)*fl))
		for i := range a {
			sumA[i] += a[i]
			sumF[i] += ff[i]
		}
	}
	testutil.AssertClose(t, "attention partial sum", sumA, fullA, []int{l, d}, 1e-5)
	testutil.AssertClose(t, "FFN partial sum", sumF, fullF, []int{l, d}, 1e-5)
}

func TestHostTables(t *testing.T) {
	// h3.md §13.12-13: inv_freq = 10^(−k/4) for the release (F = 16); t = 0 gives [1×128, 0×128].
	inv := RopeInvFreq(16, 10000)
	for k, want := range []float32{1, 0.562341325, 0.316227766, 0.177827941, 0.1} {
		if d := inv[k] - want; d > 1e-7 || d < -1e-7 {
			t.Errorf("inv_freq[%d] = %.9g, want %.9g", k, inv[k], want)
		}
	}
	e := TimestepProjection([]float32{0}, 256)
	for i, v := range e {
		want := float32(0)
		if i < 128 {
			want = 1
		}
		if v != want {
			t.Fatalf("projection(0)[%d] = %v, want %v", i, v, want)
		}
	}
}

func TestNewRandomRuns(t *testing.T) {
	cfg := Config{NumLayers: 2, NumRefinerLayers: 1, HiddenSize: 32, NumAttentionHeads: 2, AttentionHeadDim: 16,
		FFNDim: 48, InChannels: 4, AudioInChannels: 8, PatchSize: []int{1, 2, 2}, TextDim: 16, FreqDim: 32,
		TimeEmbedHiddenDim: 24, TimeEmbedDim: 12, RopeFreqDim: 2, RopeTheta: 10000, NormEps: 1e-5, QKNormEps: 1e-5, FinalNormEps: 1e-5}
	m, err := NewRandom(testutil.Backend(t), cfg, Options{}, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// 3 text, 2 audio, 4 video rows, one timestep.
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
	out, err := m.Forward(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Video) != 64 || len(out.Audio) != 16 || maxAbs(out.Video) == 0 {
		t.Errorf("random model output: %d video, %d audio values, max|video| %v", len(out.Video), len(out.Audio), maxAbs(out.Video))
	}
}
