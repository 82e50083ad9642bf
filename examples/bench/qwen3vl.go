package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/textenc/qwen3vl"
)

var (
	qwenTokens  = flag.Int("qwen-tokens", 70, "qwen3vl: prompt length in tokens")
	qwenIndex   = flag.Int("qwen-index", qwen3vl.H3HiddenStateIndex, "qwen3vl: hidden-state index (layers run = index)")
	qwenWeights = flag.String("qwen-weights", "device", "qwen3vl: where each layer's random weights come from: device (generated on the device per layer, no host traffic) or host (one layer of bf16 bytes kept on the host and uploaded for every layer, the cost a streamed checkpoint pays)")
	qwenDType   = flag.String("qwen-dtype", "bf16", "qwen3vl: compute dtype, bf16 or f32 (weights are bf16 either way, converted in the graph)")
	qwenConfig  = flag.String("qwen-config", "32b", `qwen3vl: "32b" (the H3 text encoder geometry) or a config.json path (e.g. a tiny one for a CPU smoke run)`)
)

func init() {
	register("qwen3vl", func(b compute.Backend, c common) error {
		cfg := qwen3vl.Q32B()
		if *qwenConfig != "32b" {
			var err error
			if cfg, err = qwen3vl.LoadConfig(*qwenConfig); err != nil {
				return err
			}
		}
		dt, err := parseDType("qwen-dtype", *qwenDType)
		if err != nil {
			return fmt.Errorf("qwen3vl bench: %w", err)
		}
		return benchQwen3VL(b, cfg, *qwenTokens, *qwenIndex, *qwenWeights, dt, c.Warmup, c.Iters, c.Seed)
	})
}

// randomQwenWeights implements qwen3vl.Weights with random bf16 tensors of the
// checkpoint's shapes, one layer at a time: generated on the device by one small
// executable per shape ("device"), or uploaded from one host copy ("host").
// Matrices are N(0, 1/fan_in), norm gains 1+0.1·N(0,1), so activations stay in
// a trained model's range and the attention softmax is not degenerate.
type randomQwenWeights struct {
	cfg     qwen3vl.Config
	backend compute.Backend
	host    bool
	seed    uint64
	gens    map[string]*Exec
	hostRaw [][]byte

	mu       sync.Mutex
	live     int
	maxLive  int
	loadTime time.Duration
	calls    int
}

func newRandomQwenWeights(b compute.Backend, cfg qwen3vl.Config, host bool, seed uint64) (*randomQwenWeights, error) {
	w := &randomQwenWeights{cfg: cfg, backend: b, host: host, seed: seed, gens: map[string]*Exec{}}
	if host {
		r := rand.New(rand.NewPCG(seed, 0x5177656e))
		for _, shape := range qwen3vl.LayerTensorShapes(cfg) {
			n := 1
			for _, d := range shape {
				n *= d
			}
			raw := make([]byte, 2*n)
			for i := 0; i < n; i++ {
				var v float64
				if len(shape) == 1 {
					v = 1 + 0.1*r.NormFloat64()
				} else {
					// Uniform with the normal's variance: several times cheaper for 488M values.
					v = math.Sqrt(3/float64(shape[1])) * (2*r.Float64() - 1)
				}
				binary.LittleEndian.PutUint16(raw[2*i:], bfloat16.FromFloat32(float32(v)).Bits())
			}
			w.hostRaw = append(w.hostRaw, raw)
		}
	}
	return w, nil
}

// gen returns the generator of one shape: bf16 values of N(mean, std²).
func (w *randomQwenWeights) gen(shape []int) (*Exec, error) {
	key := fmt.Sprint(shape)
	if e := w.gens[key]; e != nil {
		return e, nil
	}
	std, mean := 0.1, 1.0
	if len(shape) == 2 {
		std, mean = 1/math.Sqrt(float64(shape[1])), 0
	}
	e, err := NewExec(w.backend, func(state *Node) *Node {
		_, v := RandomNormal(state, shapes.Make(dtypes.Float32, shape...))
		return ConvertDType(AddScalar(MulScalar(v, std), mean), dtypes.BFloat16)
	})
	if err != nil {
		return nil, err
	}
	w.gens[key] = e
	return e, nil
}

func (w *randomQwenWeights) random(shape []int, seed uint64) (*tensors.Tensor, error) {
	e, err := w.gen(shape)
	if err != nil {
		return nil, err
	}
	state, err := RNGStateFromSeed(int64(seed))
	if err != nil {
		return nil, err
	}
	defer state.FinalizeAll()
	return e.Call1(state)
}

// Embed implements qwen3vl.Weights: random rows (the real path gathers rows from
// the mapped table, a few hundred KB per prompt).
func (w *randomQwenWeights) Embed(ids []int) (*tensors.Tensor, error) {
	x, err := w.random([]int{len(ids), w.cfg.HiddenSize}, w.seed*1_000_003)
	if err != nil {
		return nil, err
	}
	return x, nil
}

// Layer implements qwen3vl.Weights.
func (w *randomQwenWeights) Layer(i int) ([]*tensors.Tensor, func(), error) {
	t0 := time.Now()
	shapesOf := qwen3vl.LayerTensorShapes(w.cfg)
	out := make([]*tensors.Tensor, len(shapesOf))
	free := func() {
		for _, t := range out {
			if t != nil {
				t.FinalizeAll()
			}
		}
	}
	for k, shape := range shapesOf {
		var err error
		if w.host {
			out[k], err = tensors.FromRaw(w.backend, 0, shapes.Make(dtypes.BFloat16, shape...), w.hostRaw[k])
		} else {
			out[k], err = w.random(shape, w.seed*1_000_003+uint64(i*len(shapesOf)+k+1))
		}
		if err != nil {
			free()
			return nil, nil, fmt.Errorf("layer %d %s: %w", i, qwen3vl.LayerTensorNames[k], err)
		}
	}
	w.mu.Lock()
	w.live++
	w.maxLive = max(w.maxLive, w.live)
	w.loadTime += time.Since(t0)
	w.calls++
	w.mu.Unlock()
	return out, func() {
		free()
		w.mu.Lock()
		w.live--
		w.mu.Unlock()
	}, nil
}

// FinalNorm implements qwen3vl.Weights (H3 never asks for it).
func (w *randomQwenWeights) FinalNorm() (*tensors.Tensor, func(), error) {
	t, err := w.random([]int{w.cfg.HiddenSize}, w.seed)
	if err != nil {
		return nil, nil, err
	}
	return t, func() { t.FinalizeAll() }, nil
}

// Close implements qwen3vl.Weights.
func (w *randomQwenWeights) Close() error {
	for _, e := range w.gens {
		e.Finalize()
	}
	w.gens = map[string]*Exec{}
	return nil
}

// gpuMemPoller samples the GPU's used memory with nvidia-smi every 10 ms. The XLA
// allocator keeps freed blocks in its pool, so the used figure is the pool's high
// water mark: the peak device memory of the run (plus the CUDA context).
type gpuMemPoller struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	peak int // MiB
	last int
	n    int
	done chan struct{}
}

func startGPUMemPoller() *gpuMemPoller {
	cmd := exec.Command("nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0", "-lms", "10")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil
	}
	if err := cmd.Start(); err != nil {
		return nil
	}
	p := &gpuMemPoller{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			v, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
			if err != nil {
				continue
			}
			p.mu.Lock()
			p.peak, p.last = max(p.peak, v), v
			p.n++
			p.mu.Unlock()
		}
	}()
	return p
}

// read returns (peak, last, samples) so far.
func (p *gpuMemPoller) read() (int, int, int) {
	if p == nil {
		return -1, -1, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak, p.last, p.n
}

// resetPeak starts a new peak window at the current value.
func (p *gpuMemPoller) resetPeak() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.peak = p.last
	p.mu.Unlock()
}

func (p *gpuMemPoller) stop() {
	if p == nil {
		return
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
	<-p.done
}

// benchQwen3VL runs the H3 text conditioner at full size with streamed random
// bf16 weights: tokens prompt tokens through layers 0..index-1 (index 50 =
// hidden_states[50], what H3 conditions on), one layer resident at a time, and
// reports the time and the peak device memory.
func benchQwen3VL(b compute.Backend, cfg qwen3vl.Config, tokens, index int, source string, dt dtypes.DType, warmup, iters int, seed uint64) error {
	if tokens <= 0 || index <= 0 || index > cfg.NumHiddenLayers || iters <= 0 {
		return badFlag("qwen3vl bench: need -qwen-tokens > 0 (got %d), -qwen-index in 1..%d (got %d), -iters > 0 (got %d)", tokens, cfg.NumHiddenLayers, index, iters)
	}
	if source != "device" && source != "host" {
		return badFlag("qwen3vl bench: -qwen-weights %q: use device or host", source)
	}
	mem := startGPUMemPoller()
	defer mem.stop()
	time.Sleep(100 * time.Millisecond) // first nvidia-smi sample = the baseline
	base, _, _ := mem.read()

	layerBytes := qwenLayerBytes(cfg)
	fmt.Printf("qwen3vl: hidden %d, %d heads / %d KV x %d, MLP %d, %d tokens through %d of %d layers, compute %s, weights bf16 from %s\n",
		cfg.HiddenSize, cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim, cfg.IntermediateSize, tokens, index, cfg.NumHiddenLayers, dt, source)
	fmt.Printf("qwen3vl: one layer's weights %.1f MiB bf16 (%.2f GiB for %d layers if resident)\n",
		float64(layerBytes)/(1<<20), float64(layerBytes)*float64(index)/(1<<30), index)

	t0 := time.Now()
	w, err := newRandomQwenWeights(b, cfg, source == "host", seed)
	if err != nil {
		return err
	}
	defer w.Close()
	if source == "host" {
		fmt.Printf("qwen3vl: host layer generated in %.2f s\n", time.Since(t0).Seconds())
	}
	enc, err := qwen3vl.NewEncoder(b, cfg, w, qwen3vl.Options{DType: dt, HiddenStateIndex: index})
	if err != nil {
		return err
	}
	defer enc.Close()

	r := rand.New(rand.NewPCG(seed, 2))
	ids := make([]int, tokens)
	for i := range ids {
		ids[i] = r.IntN(cfg.VocabSize)
	}
	runs, err := timeQwenEncodes(enc, w, mem, ids, base, warmup, iters)
	if err != nil {
		return err
	}
	reportQwenEncodes(cfg, runs, mem, base, layerBytes, tokens, index, source, w.maxLive)
	return nil
}

// qwenLayerBytes is the size of one decoder layer's weights in bf16.
func qwenLayerBytes(cfg qwen3vl.Config) int64 {
	var layerBytes int64
	for _, s := range qwen3vl.LayerTensorShapes(cfg) {
		n := int64(2)
		for _, d := range s {
			n *= int64(d)
		}
		layerBytes += n
	}
	return layerBytes
}

// qwenRuns are the timed encodes: the last output, the durations and the weight load (or generation)
// times, both sorted ascending, in seconds.
type qwenRuns struct {
	h           []float32
	sorted      []float64
	sortedLoads []float64
	median      float64
}

// timeQwenEncodes runs one encode (compilation included, reported with the device memory peak),
// warmup untimed ones, then resets the memory peak and runs iters timed ones.
func timeQwenEncodes(enc *qwen3vl.Encoder, w *randomQwenWeights, mem *gpuMemPoller, ids []int, base, warmup, iters int) (qwenRuns, error) {
	ctx := context.Background()
	run := func() ([]float32, float64, error) {
		w.mu.Lock()
		w.loadTime, w.calls = 0, 0
		w.mu.Unlock()
		t := time.Now()
		h, _, err := enc.Encode(ctx, ids)
		return h, time.Since(t).Seconds(), err
	}
	h, first, err := run()
	if err != nil {
		return qwenRuns{}, err
	}
	p1, _, _ := mem.read()
	fmt.Printf("qwen3vl: first encode (compiles) %.3f s; device memory peak %d MiB (baseline %d MiB)\n", first, p1, base)
	for range warmup {
		if _, _, err := run(); err != nil {
			return qwenRuns{}, err
		}
	}
	mem.resetPeak()
	times := make([]float64, iters)
	var loads []float64
	for i := range times {
		if h, times[i], err = run(); err != nil {
			return qwenRuns{}, err
		}
		w.mu.Lock()
		loads = append(loads, w.loadTime.Seconds())
		w.mu.Unlock()
	}
	sorted := slices.Clone(times)
	sort.Float64s(sorted)
	sort.Float64s(loads)
	return qwenRuns{h: h, sorted: sorted, sortedLoads: loads, median: sorted[len(sorted)/2]}, nil
}

// reportQwenEncodes prints the timings, the throughput, the output's statistics and the memory peaks.
func reportQwenEncodes(cfg qwen3vl.Config, runs qwenRuns, mem *gpuMemPoller, base int, layerBytes int64, tokens, index int, source string, maxLive int) {
	peak, last, samples := mem.read()
	med, iters := runs.median, len(runs.sorted)
	rms, nonFinite := rmsNonFinite(runs.h)
	// FLOPs: projections 2·S·(params per layer) + attention 4·S²·H·D per layer.
	flop := float64(index) * (float64(tokens)*float64(layerBytes) + 4*float64(tokens*tokens)*float64(cfg.NumHeads*cfg.HeadDim))
	fmt.Printf("qwen3vl: encode min %.3f s, median %.3f s over %d runs (%.1f ms/layer); weight %s %.3f s median of that\n",
		runs.sorted[0], med, iters, med/float64(index)*1e3, map[bool]string{true: "upload", false: "generation"}[source == "host"], runs.sortedLoads[len(runs.sortedLoads)/2])
	fmt.Printf("qwen3vl: %.1f GFLOP per encode (%.2f TFLOP/s); layers resident at once: max %d\n", flop/1e9, flop/med/1e12, maxLive)
	fmt.Printf("qwen3vl: output [%d, %d] rms %.4f, non-finite %d\n", tokens, cfg.HiddenSize, rms, nonFinite)
	if samples > 0 {
		fmt.Printf("qwen3vl: device memory (nvidia-smi, GPU 0, %d samples at 10 ms): baseline %d MiB, peak over timed runs %d MiB (+%d MiB), now %d MiB\n",
			samples, base, peak, peak-base, last)
	} else {
		fmt.Printf("qwen3vl: device memory: nvidia-smi unavailable, not measured\n")
	}
	fmt.Printf("qwen3vl: host peak RSS %d MiB\n", hostPeakMiB(false))
}
