package h3

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gomlx/compute"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/internal/graphexec"
	"fastvideo/internal/testutil"
)

// emulatedSPMD stands in for xlaSPMD on the CPU backend's one device: the devices' graphs of the program
// are built into one graph, each by its own goroutine, one at a time; the all-reduce waits until every
// device's graph has reached it and returns the sum of the partials in device order (the fallback's
// order). It takes and returns device-major arguments and outputs, as the XLA executable does, so the
// whole SPMD forward (placement aside: every shard is on device 0) runs on the CPU.
func emulatedSPMD(backend compute.Backend, name string, devices []compute.DeviceNum, program spmdProgram) *Exec {
	n := len(devices)
	return graphexec.MustExec(backend, name, func(in []*Node) []*Node {
		per := len(in) / n
		c := &collective{n: n, parts: map[int][]*Node{}, sums: map[int]*Node{}}
		c.cond = sync.NewCond(&c.mu)
		outs := make([][]*Node, n)
		failures := make([]any, n)
		var wg sync.WaitGroup
		for k := range n {
			wg.Go(func() {
				c.mu.Lock()
				defer c.mu.Unlock()
				defer func() {
					if r := recover(); r != nil {
						failures[k], c.failed = r, true
						c.cond.Broadcast()
					}
				}()
				outs[k] = program(c.reduce(k))(in[k*per : (k+1)*per])
			})
		}
		wg.Wait()
		for _, f := range failures {
			if f != nil {
				panic(f)
			}
		}
		return slices.Concat(outs...)
	})
}

// collective is the emulated all-reduce of emulatedSPMD; mu is held by the goroutine building.
type collective struct {
	mu     sync.Mutex
	cond   *sync.Cond
	n      int
	parts  map[int][]*Node // all-reduce r's partials, by device
	sums   map[int]*Node
	failed bool
}

// reduce is device k's all-reduce hook.
func (c *collective) reduce(k int) AllReduce {
	calls := 0
	return func(x *Node) *Node {
		r := calls
		calls++
		if c.parts[r] == nil {
			c.parts[r] = make([]*Node, c.n)
		}
		c.parts[r][k] = x
		if !slices.Contains(c.parts[r], nil) {
			c.sums[r] = sumPartials(c.parts[r])
			c.cond.Broadcast()
		}
		for c.sums[r] == nil && !c.failed {
			c.cond.Wait()
		}
		if c.failed {
			panic("emulated all-reduce: another device's graph failed")
		}
		return Identity(c.sums[r]) // each device's own node, as each device holds its own copy
	}
}

// emulateSPMD switches a freshly loaded sharded model (fallback chosen on the CPU) to the SPMD path with
// every shard on device 0 and the emulated collective (its executables rebuilt, as Load builds them
// after placing the shards).
func emulateSPMD(t *testing.T, m *Model) {
	t.Helper()
	sr, ok := m.blocks.(*shardRunner)
	if !ok {
		t.Fatalf("the model runs its blocks with %T, want the shards in turn", m.blocks)
	}
	sr.closeExecs()
	r, err := newSPMDRunner(m.backend, sr.w, make([]compute.DeviceNum, sr.w.n()), emulatedSPMD)
	if err != nil {
		t.Fatal(err)
	}
	m.blocks = r
}

// On the CPU backend (one device) a sharded model takes the fallback: the shards in turn on device 0.
// Its executables are the three parts jointBlock is made of (attention, FFN, residual, cut at the
// all-reduces); the SPMD program is jointBlock itself over the same shard weights, so the emulated SPMD
// forward (TestSPMDEmulated) checks both paths run the same per-shard math.
func TestShardsFallbackOnOneDevice(t *testing.T) {
	b := testutil.Backend(t)
	if b.NumDevices() != 1 {
		t.Skipf("the CPU backend has %d devices; this test needs one", b.NumDevices())
	}
	m := testutil.Open(t, func() (*Model, error) { return NewRandom(b, spmdTestConfig(), Options{Shards: 2}, 5) })
	sr, ok := m.blocks.(*shardRunner)
	if !ok {
		t.Fatalf("Shards 2 on one device: the model chose %q, want the fallback", m.TensorParallel())
	}
	if got := m.TensorParallel(); !strings.Contains(got, "in turn on device 0") {
		t.Errorf("TensorParallel() = %q, want it to name the one-device path", got)
	}
	if ex := sr.parts(false); ex.attention == nil || ex.feedForward == nil || ex.residual == nil {
		t.Errorf("the fallback built executables %+v, want attention, feedForward and residual", ex)
	}
	whole := testutil.Open(t, func() (*Model, error) { return NewRandom(b, spmdTestConfig(), Options{}, 5) })
	if got := whole.TensorParallel(); got != "" {
		t.Errorf("whole model: TensorParallel() = %q, want empty", got)
	}
}

func spmdTestConfig() Config {
	return Config{NumLayers: 3, NumRefinerLayers: 1, HiddenSize: 32, NumAttentionHeads: 4, AttentionHeadDim: 8,
		FFNDim: 48, InChannels: 4, AudioInChannels: 8, PatchSize: []int{1, 2, 2}, TextDim: 16, FreqDim: 32,
		TimeEmbedHiddenDim: 24, TimeEmbedDim: 12, RopeFreqDim: 1, RopeTheta: 10000, NormEps: 1e-5, QKNormEps: 1e-5, FinalNormEps: 1e-5}
}

// The SPMD forward (the program XLA replicates over the devices, the all-reduce emulated) against the
// fixture and the whole model, traced block outputs included, and on a random model with 2 and 4 shards.
func TestSPMDEmulated(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		whole := fixtureModel(t, fx, Options{})
		want, wantActs := testutil.TracedForward(t, &whole.trace, func() (ForwardOutputs, error) { return whole.Forward(fixtureInputs(t, fx)) })
		for _, n := range shardCounts(fixtureConfig(t, fx)) {
			m := fixtureModel(t, fx, Options{Shards: n})
			emulateSPMD(t, m)
			out, acts := testutil.TracedForward(t, &m.trace, func() (ForwardOutputs, error) { return m.Forward(fixtureInputs(t, fx)) })
			checkOutputs(t, fx, out, acts)
			assertSameForward(t, "SPMD vs whole", out, want, acts, wantActs)
		}
	})
	b := testutil.Backend(t)
	run := func(shards int, spmd bool) ForwardOutputs {
		m := testutil.Open(t, func() (*Model, error) { return NewRandom(b, spmdTestConfig(), Options{Shards: shards}, 11) })
		if spmd {
			emulateSPMD(t, m)
		}
		out := mustForward(t, m, tinyInputs())
		return out
	}
	want := run(1, false)
	for _, n := range []int{2, 4} {
		got, fallback := run(n, true), run(n, false)
		testutil.AssertClose(t, "SPMD video", got.Video, want.Video, []int{4, 16}, testutil.ParityTol(want.Video))
		testutil.AssertClose(t, "SPMD audio", got.Audio, want.Audio, []int{2, 8}, testutil.ParityTol(want.Audio))
		testutil.AssertClose(t, "SPMD vs fallback video", got.Video, fallback.Video, []int{4, 16}, testutil.ParityTol(fallback.Video))
	}
}
