package h3

import (
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/testutil"
	"fastvideo/quant"
)

// The tensor-parallel model (the joint blocks cut into shards at load, partial outputs summed between
// the parts of each block) against the fixture, like the whole model: every block's outputs are traced
// (the tiny fixtures have two joint blocks: block0_* and block_last_out), and the outputs must match
// the whole model's too.
func TestShardedForwardParity(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		whole := fixtureModel(t, fx, Options{})
		want, wantActs := testutil.TracedForward(t, &whole.trace, func() (ForwardOutputs, error) { return whole.Forward(fixtureInputs(t, fx)) })
		for _, n := range shardCounts(cfg) {
			m := fixtureModel(t, fx, Options{Shards: n})
			if sw := shardsOf(m); sw == nil || sw.n() != n {
				t.Fatalf("Shards %d: the model did not cut its blocks into %d shards", n, n)
			}
			out, acts := testutil.TracedForward(t, &m.trace, func() (ForwardOutputs, error) { return m.Forward(fixtureInputs(t, fx)) })
			checkOutputs(t, fx, out, acts)
			assertSameForward(t, "sharded vs whole", out, want, acts, wantActs)
			checkShardMemory(t, whole, m, n)
		}
	})
}

// assertSameForward compares a sharded forward (outputs and traced block outputs) with the whole model's.
func assertSameForward(t *testing.T, label string, out, want ForwardOutputs, acts, wantActs testutil.Trace) {
	t.Helper()
	testutil.AssertClose(t, label+" video", out.Video, want.Video, []int{len(want.Video)}, testutil.ParityTol(want.Video))
	testutil.AssertClose(t, label+" audio", out.Audio, want.Audio, []int{len(want.Audio)}, testutil.ParityTol(want.Audio))
	for _, name := range []string{"block0_attn_out", "block0_ff_out", "block0_out", "block_last_out"} {
		testutil.AssertClose(t, label+" "+name, acts[name].Values, wantActs[name].Values, acts[name].Shape, testutil.ParityTol(wantActs[name].Values))
	}
}

// shardCounts are the shard counts above one that split cfg's heads and FFN.
func shardCounts(cfg Config) []int {
	var out []int
	for n := 2; n <= cfg.NumAttentionHeads; n++ {
		if checkShards(cfg, n) == nil {
			out = append(out, n)
		}
	}
	return out
}

// shardsOf are a tensor-parallel model's shard weights (nil: a whole model).
func shardsOf(m *Model) *shardedWeights {
	switch r := m.blocks.(type) {
	case *shardRunner:
		return r.w
	case *spmdRunner:
		return r.w
	}
	return nil
}

// checkShardMemory: each shard holds 1/n of the joint blocks' core linears and the model frees the
// whole ones, so the weights in memory are unchanged in total.
func checkShardMemory(t *testing.T, whole, sharded *Model, n int) {
	t.Helper()
	for b, shards := range shardsOf(sharded).blocks {
		for k, w := range shards {
			for i, l := range w.linears() {
				sl := l.W
				full := whole.p.Blocks[b].linears()[i].W.T.Shape()
				if got, want := sl.Shape().Size()*n, full.Size(); got != want {
					t.Errorf("block %d shard %d %s: %v holds %d×%d values, want the whole %v", b, k, coreLinearNames[i], sl.Shape(), n, sl.Shape().Size(), full)
				}
			}
		}
		for _, w := range sharded.p.Blocks[b].linears() {
			if w.W.T != nil {
				t.Errorf("block %d: the whole %s is still held beside its shards", b, w.Name)
			}
		}
	}
	if got, want := sharded.WeightMemory().Total, whole.WeightMemory().Total; got != want {
		t.Errorf("sharded model holds %d weight bytes, the whole one %d", got, want)
	}
}

// Every shard count that divides the heads and the FFN width gives the whole model's output, on a
// random model with four heads and three joint blocks.
func TestShardedRandomModel(t *testing.T) {
	cfg := Config{NumLayers: 3, NumRefinerLayers: 1, HiddenSize: 32, NumAttentionHeads: 4, AttentionHeadDim: 8,
		FFNDim: 48, InChannels: 4, AudioInChannels: 8, PatchSize: []int{1, 2, 2}, TextDim: 16, FreqDim: 32,
		TimeEmbedHiddenDim: 24, TimeEmbedDim: 12, RopeFreqDim: 1, RopeTheta: 10000, NormEps: 1e-5, QKNormEps: 1e-5, FinalNormEps: 1e-5}
	run := func(shards int) ForwardOutputs {
		m := testutil.Open(t, func() (*Model, error) { return NewRandom(testutil.Backend(t), cfg, Options{Shards: shards}, 11) })
		out := mustForward(t, m, tinyInputs())
		return out
	}
	want := run(1)
	if testutil.MaxAbs(want.Video) == 0 {
		t.Fatal("the whole model's video output is zero: the comparison would prove nothing")
	}
	for _, n := range []int{2, 4} {
		got := run(n)
		testutil.AssertClose(t, "video", got.Video, want.Video, []int{4, 16}, testutil.ParityTol(want.Video))
		testutil.AssertClose(t, "audio", got.Audio, want.Audio, []int{2, 8}, testutil.ParityTol(want.Audio))
	}
}

func TestShardsRefused(t *testing.T) {
	cfg := Config{NumLayers: 1, NumRefinerLayers: 1, HiddenSize: 64, NumAttentionHeads: 2, AttentionHeadDim: 32,
		FFNDim: 128, InChannels: 4, AudioInChannels: 8, PatchSize: []int{1, 2, 2}, TextDim: 16, FreqDim: 32,
		TimeEmbedHiddenDim: 24, TimeEmbedDim: 12, RopeFreqDim: 2, RopeTheta: 10000, NormEps: 1e-5, QKNormEps: 1e-5, FinalNormEps: 1e-5}
	b := testutil.Backend(t)
	for _, c := range []struct {
		shards int
		want   string
	}{{3, "2 attention heads do not split over 3"}, {-1, "want 1 or more"}} {
		if m, err := NewRandom(b, cfg, Options{Shards: c.shards}, 1); err == nil || !strings.Contains(err.Error(), c.want) {
			m.Close()
			t.Errorf("Shards %d: err = %v, want it to say %q", c.shards, err, c.want)
		}
	}
	m, err := NewRandomQuantized(b, cfg, Options{Shards: 2}, quant.Scheme{Bits: 8, GroupSize: 64}, 1)
	if err == nil || !strings.Contains(err.Error(), "quantized joint blocks") {
		m.Close()
		t.Errorf("quantized blocks with Shards 2: err = %v, want a refusal", err)
	}
}

// The release at bf16 over two devices: each holds half of the 50 joint blocks' Q/K/V/out/FFN and all
// the rest.
func TestPlanShardsRelease(t *testing.T) {
	cfg := ReleaseConfig()
	plan, err := PlanShards(cfg, dtypes.BFloat16, 2)
	if err != nil {
		t.Fatal(err)
	}
	d, inner, f := int64(cfg.HiddenSize), int64(cfg.InnerDim()), int64(cfg.FFNDim)
	split := int64(cfg.NumLayers) * (4*inner*d + 3*f*d) * 2 // bytes of bf16
	shapes, err := Params(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, s := range shapes {
		n := int64(2)
		if strings.HasPrefix(s.Name, "proj_in.") || strings.HasPrefix(s.Name, "audio_proj_") ||
			strings.HasPrefix(s.Name, "time_embedder.") || strings.HasPrefix(s.Name, "proj_out.") {
			n = 4
		}
		for _, x := range s.Shape {
			n *= int64(x)
		}
		total += n
	}
	if plan.ShardedBytes != split/2 || plan.ReplicatedBytes != total-split {
		t.Errorf("plan holds %d sharded + %d replicated bytes per device, want %d + %d", plan.ShardedBytes, plan.ReplicatedBytes, split/2, total-split)
	}
	if plan.LocalHeads != 28 || plan.LocalFFN != 7168 || len(plan.Rules) != numCoreLinears {
		t.Errorf("plan: %d local heads, FFN %d, %d rules", plan.LocalHeads, plan.LocalFFN, len(plan.Rules))
	}
	if _, err := PlanShards(cfg, dtypes.BFloat16, 3); err == nil {
		t.Error("56 heads over 3 devices was accepted")
	}
}

// A checkpoint's joint-block linears are cut on the host at load (never bound whole: deferred in the
// bind) into exactly the slices the device-side slicer cuts from the bound weights, bit for bit.
func TestShardsCutAtLoad(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		whole := fixtureModel(t, fx, Options{})
		for _, n := range shardCounts(fixtureConfig(t, fx)) {
			m := fixtureModel(t, fx, Options{Shards: n})
			sl := newSlicer(whole.backend, n)
			for b := range m.p.Blocks {
				for i, w := range m.p.Blocks[b].linears() {
					if !w.W.Deferred || w.W.T != nil {
						t.Fatalf("Shards %d: %s was bound whole (deferred %v)", n, w.Name, w.W.Deferred)
					}
					want, err := graphexec.Call(sl.execs[shardRules[i].Split], whole.p.Blocks[b].linears()[i].W.T)
					if err != nil {
						t.Fatal(err)
					}
					for k := range n {
						got := shardsOf(m).blocks[b][k].linears()[i].W
						if !got.Shape().Equal(want[k].Shape()) || !testutil.SameBits(hostF32(t, got), hostF32(t, want[k])) {
							t.Errorf("Shards %d, block %d, %s, shard %d: the host cut differs from the device cut", n, b, w.Name, k)
						}
					}
					graphexec.Finalize(want...)
				}
			}
			graphexec.FinalizeExecs(sl.execs[:]...)
		}
	})
}

func hostF32(t *testing.T, x *tensors.Tensor) []float32 {
	t.Helper()
	v, err := graphexec.HostF32(x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
