package h3_test

// Quantized H3 forwards: converted checkpoints bound directly (packed words, scales and biases on the
// device) and run through quant.Linear.

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/dit/h3"
	"fastvideo/internal/hostmath"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
	"fastvideo/quant"
)

// qMemSource is an in-memory checkpoint under the released names; schemes marks its quantized keys
// (a quant.SchemeSource, like *quant.Checkpoint).
type qMemSource struct {
	t       map[string]safetensors.Info
	schemes map[string]quant.Scheme
}

func (m *qMemSource) Names() []string {
	return slices.Sorted(maps.Keys(m.t))
}

func (m *qMemSource) Tensor(name string) (safetensors.Info, bool) { i, ok := m.t[name]; return i, ok }

func (m *qMemSource) Scheme(key string) (quant.Scheme, bool) { s, ok := m.schemes[key]; return s, ok }

// quantizeInMemory quantizes the six core linears of every block of src on the host (group 64, BF16
// scales and biases, as MLX checkpoints store them), keeping the released names; like MLX it keeps
// dense a linear whose input width is not a multiple of the group size.
func quantizeInMemory(t *testing.T, src weights.Source, bits int) *qMemSource {
	t.Helper()
	mem := &qMemSource{t: map[string]safetensors.Info{}, schemes: map[string]quant.Scheme{}}
	for _, name := range src.Names() {
		info, _ := src.Tensor(name)
		if !qIsQuantized(name) || info.Shape[1]%quant.DefaultGroupSize != 0 {
			mem.t[name] = info
			continue
		}
		w, err := info.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		a, err := quant.Quantize(w, info.Shape[0], info.Shape[1], bits, quant.DefaultGroupSize, safetensors.BF16)
		if err != nil {
			t.Fatal(err)
		}
		ts, err := a.Tensors(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ts {
			mem.t[x.Name] = safetensors.Info{Name: x.Name, DType: x.DType, Shape: x.Shape, Data: x.Data}
		}
		mem.schemes[name] = a.Scheme
	}
	return mem
}

func run(t *testing.T, m *h3.Model, in h3.ForwardInputs) h3.ForwardOutputs {
	t.Helper()
	defer m.Close()
	out, err := m.Forward(in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func fromSource(t *testing.T, cfg h3.Config, src weights.Source) *h3.Model {
	t.Helper()
	m, err := h3.FromSource(testutil.Backend(t), cfg, src, h3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func load(t *testing.T, dir string) *h3.Model {
	t.Helper()
	m, err := h3.Load(testutil.Backend(t), dir, h3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// requireSNR fails unless the forward got reaches floor dB against the dense f32 forward ref, in
// video and in audio.
func requireSNR(t *testing.T, label string, got, ref h3.ForwardOutputs, floor float64) {
	t.Helper()
	sv, sa := hostmath.SNRdB(got.Video, ref.Video), hostmath.SNRdB(got.Audio, ref.Audio)
	t.Logf("%s: SNR vs dense f32: video %.1f dB, audio %.1f dB", label, sv, sa)
	if min(sv, sa) < floor {
		t.Fatalf("%s: SNR %.1f dB below %.0f dB", label, min(sv, sa), floor)
	}
}

// requireSNRFloor checks a converted folder dir, whose f32 forward on in gave loaded, against the
// dense f32 forward ref: that forward and the folder's bf16 one (the GPU dtype: scales and biases
// stay as stored, activations bf16) must both reach floor dB.
func requireSNRFloor(t *testing.T, label, dir string, loaded, ref h3.ForwardOutputs, in h3.ForwardInputs, floor float64) {
	t.Helper()
	requireSNR(t, label+" f32", loaded, ref, floor)
	m, err := h3.Load(testutil.Backend(t), dir, h3.Options{DType: dtypes.BFloat16})
	if err != nil {
		t.Fatal(err)
	}
	requireSNR(t, label+" bf16", run(t, m, in), ref, floor)
}

// sameOutputs fails unless both forwards agree bit for bit.
func sameOutputs(t *testing.T, label string, got, want h3.ForwardOutputs) {
	t.Helper()
	for _, c := range []struct {
		name      string
		got, want []float32
	}{{"video", got.Video, want.Video}, {"audio", got.Audio, want.Audio}} {
		if len(c.got) != len(c.want) {
			t.Fatalf("%s: %s has %d values, want %d", label, c.name, len(c.got), len(c.want))
		}
		for i := range c.got {
			if math.Float32bits(c.got[i]) != math.Float32bits(c.want[i]) {
				t.Fatalf("%s: %s[%d] = %v, want %v bit for bit", label, c.name, i, c.got[i], c.want[i])
			}
		}
	}
}

// TestQuantizedForward: for 8, 6 and 4 bits (group 64, BF16 scales and biases as in MLX checkpoints),
// convert the tiny DiT, save it, h3.Load the folder, and run the forward with the packed weights on the
// device (quant.Linear); it must equal the forward of the in-memory quantized model (quantized on the
// host, bound through h3.FromSource) bit for bit, and its SNR against the dense f32 forward must reach
// 40/30/18 dB, in f32 and in bf16.
func TestQuantizedForward(t *testing.T) {
	minSNR := map[int]float64{8: 40, 6: 30, 4: 18}
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		cfg := h3.FixtureConfig(t, fx)
		in := h3.FixtureInputs(t, fx)
		ref := run(t, fromSource(t, cfg, fx.Weights()), in)
		for _, bits := range []int{8, 6, 4} {
			t.Run(fmt.Sprintf("int%d", bits), func(t *testing.T) {
				mem := quantizeInMemory(t, fx.Weights(), bits)
				if n, want := len(mem.schemes), 6*(cfg.NumLayers+cfg.NumRefinerLayers); n != want {
					t.Fatalf("%d quantized linears, want %d", n, want)
				}
				// FastH3 VSA gates, quantized: the dense-attention forward ignores them and their
				// scales/biases.
				const gate, q = "transformer_blocks.0.attn.to_gate_compress.weight", "transformer_blocks.0.attn.to_q.weight"
				for _, suffix := range []string{"", quant.ScalesSuffix, quant.BiasesSuffix} {
					mem.t[gate+suffix] = mem.t[q+suffix]
				}
				mem.schemes[gate] = mem.schemes[q]
				inMemory := run(t, fromSource(t, cfg, mem), in)

				dir := h3.ConvertFixture(t, fx, bits, h3.ConvertOptions{})
				if got, err := h3.ReadConfig(dir); err != nil || !reflect.DeepEqual(got, cfg) {
					t.Fatalf("ReadConfig on the converted folder: %+v, %v; want the manifest's config %+v", got, err, cfg)
				}
				loaded := run(t, load(t, dir), in)
				sameOutputs(t, "save -> h3.Load -> forward vs the in-memory quantized forward", loaded, inMemory)
				requireSNRFloor(t, fmt.Sprintf("int%d", bits), dir, loaded, ref, in, minSNR[bits])
			})
		}
	})
}

// TestQuantizedNarrowWidths: on a DiT whose hidden and text widths (96) are not multiples of the group
// size 64, the INT4 conversion keeps dense the linears that read the hidden width (Q, K, V, FFN-in) and
// records each in dense_keys with the reason, and quantizes to_out and FFN-out (input widths 128 and
// 256). h3.Load of the folder then binds those dense and runs a forward equal bit for bit to the
// in-memory model given the same treatment, and close to the dense model (the INT4 SNR floor).
func TestQuantizedNarrowWidths(t *testing.T) {
	cfg := h3.Config{
		NumLayers: 2, NumRefinerLayers: 1, HiddenSize: 96, NumAttentionHeads: 2, AttentionHeadDim: 64, FFNDim: 256,
		InChannels: 24, OutChannels: 24, AudioInChannels: 32, PatchSize: []int{1, 2, 2}, TextDim: 96, FreqDim: 256,
		TimeEmbedHiddenDim: 64, TimeEmbedDim: 32, RopeFreqDim: 8, RopeTheta: 10000, NormEps: 1e-5, QKNormEps: 1e-5,
		FinalNormEps: 1e-5,
	}
	src := h3.SyntheticSource(t, cfg, 7)
	config, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts, man, err := h3.Convert(src, config, h3.ConvertOptions{Scheme: quant.Scheme{Bits: 4, GroupSize: 64}, ScaleDType: safetensors.BF16})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := h3.WriteConverted(dir, ts, man); err != nil {
		t.Fatal(err)
	}
	back, err := h3.ReadConvertedManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	blocks := cfg.NumLayers + cfg.NumRefinerLayers
	dense, quantized := back.Quant.DenseKeys, back.Quant.QuantizedKeys
	if len(dense) != 4*blocks || len(quantized) != 2*blocks {
		t.Fatalf("%d dense and %d quantized keys, want %d and %d: dense %v", len(dense), len(quantized), 4*blocks, 2*blocks, dense)
	}
	if r := dense["refiner.0.ff.net.0.proj.weight"]; !strings.Contains(r, "96") || !strings.Contains(r, "64") {
		t.Fatalf("dense_keys[refiner.0.ff.net.0.proj.weight] = %q, want the width and the group size", r)
	}
	if _, ok := quantized["blocks.1.attn.to_out.0.weight"]; !ok {
		t.Fatalf("blocks.1.attn.to_out.0.weight (input width 128) is not quantized: %v", quantized)
	}

	mem := quantizeInMemory(t, src, 4)
	if len(mem.schemes) != 2*blocks {
		t.Fatalf("the in-memory model quantizes %d linears, want %d", len(mem.schemes), 2*blocks)
	}
	in := bigDocument(cfg, 64)
	loaded := run(t, load(t, dir), in)
	sameOutputs(t, "narrow widths: save -> h3.Load -> forward vs the in-memory model", loaded, run(t, fromSource(t, cfg, mem), in))
	ref := run(t, fromSource(t, cfg, src), in)
	requireSNR(t, "narrow widths int4", loaded, ref, 18)
}

// TestQuantizedAdaLNCacheCheckpoint: an INT8 conversion that embeds an AdaLN cache (and so drops the
// AdaLN projections) loads with h3.Load, which reads the cache entry of mlx_h3_dit.json, and its forward
// equals the forward of the conversion that keeps the projections bit for bit.
func TestQuantizedAdaLNCacheCheckpoint(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		cfg := h3.FixtureConfig(t, fx)
		in := h3.FixtureInputs(t, fx)
		dense := fromSource(t, cfg, fx.Weights())
		defer dense.Close()
		cache, err := dense.PrepareAdaLN(in.Timesteps)
		if err != nil {
			t.Fatal(err)
		}
		defer cache.Close()
		tables, man, err := dense.ExportAdaLNCache(cache, 1)
		if err != nil {
			t.Fatal(err)
		}
		dir := h3.ConvertFixture(t, fx, 8, h3.ConvertOptions{AdaLNTensors: tables, AdaLN: &man})
		ck, _, err := h3.OpenConverted(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ck.Names() {
			if strings.Contains(n, ".adaln_proj.") || strings.HasPrefix(n, "norm_out.linear.") {
				t.Fatalf("the cached conversion still holds %s", n)
			}
		}
		ck.Close()
		sameOutputs(t, "quantized checkpoint with an AdaLN cache vs with the AdaLN projections",
			run(t, load(t, dir), in), run(t, load(t, h3.ConvertFixture(t, fx, 8, h3.ConvertOptions{})), in))
	})
}

// TestQuantizedLoadErrors: a checkpoint that quantizes one block differently from the others is
// refused with an error naming the block and linear (one block executable serves every block), and so
// is a converted folder whose manifest config disagrees with its block count.
func TestQuantizedLoadErrors(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		cfg := h3.FixtureConfig(t, fx)
		dir := h3.ConvertFixture(t, fx, 4, h3.ConvertOptions{})
		man, err := h3.ReadConvertedManifest(dir)
		if err != nil {
			t.Fatal(err)
		}
		var arch map[string]any
		if err := json.Unmarshal(man.Config, &arch); err != nil {
			t.Fatal(err)
		}
		arch["num_layers"] = cfg.NumLayers + 1
		if man.Config, err = json.Marshal(arch); err != nil {
			t.Fatal(err)
		}
		if err := h3.WriteConvertedManifest(dir, man); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("num_blocks = %d but its config has num_layers = %d", cfg.NumLayers, cfg.NumLayers+1)
		if _, err := h3.Load(testutil.Backend(t), dir, h3.Options{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("manifest config with the wrong num_layers: want an error containing %q, got %v", want, err)
		}

		mem := quantizeInMemory(t, fx.Weights(), 4)
		const key = "transformer_blocks.1.attn.to_k.weight"
		delete(mem.schemes, key)
		delete(mem.t, key+quant.ScalesSuffix)
		delete(mem.t, key+quant.BiasesSuffix)
		dense, _ := fx.Weights().Tensor(key)
		mem.t[key] = dense
		_, err = h3.FromSource(testutil.Backend(t), cfg, mem, h3.Options{})
		if err == nil || !strings.Contains(err.Error(), "transformer_blocks.1.attn.to_k.weight is dense") ||
			!strings.Contains(err.Error(), "int4 (group 64)") {
			t.Fatalf("mixed quantization across blocks: want an error naming %s, got %v", key, err)
		}
	})
}

// pathCounts counts the paths of the quant.Linear records captured since the last call, e.g.
// "dequant-gemm:6 quantized:6".
func pathCounts(log *testutil.SlogCapture) string {
	n := map[string]int{}
	for _, p := range log.Take() {
		n[p]++
	}
	var parts []string
	for k, c := range n {
		parts = append(parts, fmt.Sprintf("%s:%d", k, c))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// bigDocument is a packed document for the fixture's config: 8 text, 40 audio and `video` video rows,
// two timesteps, random latents.
func bigDocument(cfg h3.Config, video int) h3.ForwardInputs {
	r := rand.New(rand.NewPCG(21, 22))
	randn := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	const text, audio = 8, 40
	l := text + audio + video
	in := h3.ForwardInputs{
		VideoRows: randn(video * cfg.VideoPatchDim()), AudioRows: randn(audio * cfg.AudioInChannels),
		Text: randn(text * cfg.TextDim), Timesteps: []float32{0.35, 0.8},
		TimestepIndices: make([]int32, l), TokenTags: make([]int32, l), PositionIDs: make([]float64, 3*l),
	}
	// Rows interleaved as [video | text | audio | video] to exercise the index lists.
	half := video / 2
	for i := 0; i < l; i++ {
		switch {
		case i < half || i >= half+text+audio:
			j := i
			if i >= half {
				j = i - text - audio
			}
			in.VideoIndices = append(in.VideoIndices, int32(i))
			in.TokenTags[i] = h3.TagVideo
			in.PositionIDs[3*i], in.PositionIDs[3*i+1], in.PositionIDs[3*i+2] = float64(j/64), float64(j/8%8), float64(j%8)
		case i < half+text:
			in.TextIndices = append(in.TextIndices, int32(i))
			in.TokenTags[i] = h3.TagText
		default:
			in.AudioIndices = append(in.AudioIndices, int32(i))
			in.TokenTags[i], in.TimestepIndices[i] = h3.TagAudio, 1
			in.PositionIDs[3*i] = float64(i - half - text)
		}
	}
	return in
}

// TestQuantizedDispatch mirrors quant's TestDisabledDispatch at the model level, on an INT4 checkpoint
// loaded with h3.Load with Options.Dispatch parsed from FASTVIDEO_DQ_GEMM values. Attention mixes rows,
// so a forward cannot be compared row by row with a shorter one; instead every route is compared whole,
// on the same document, with a fresh model. On the first fixture (the checks exercise only the linears):
//
//   - FASTVIDEO_DQ_GEMM=0 on a 768-row document (at the default floor: by default its joint-block
//     linears take dequant-GEMM) is evaluated, every quantized linear logs the quantized path, and the
//     forward equals bit for bit the one whose floor is above the row count (the quantized kernel chosen
//     by row count): disabling the dispatch is exactly the small-M kernel;
//   - by default the joint blocks' linears (768 rows) take dequant-GEMM and the refiner's (8 text rows)
//     the quantized path; that forward agrees with the disabled one to float32 rounding (parity
//     tolerance);
//   - FASTVIDEO_DQ_GEMM=1 sends every linear through dequant-GEMM; that forward equals bit for bit the
//     dense model bound to the host-dequantized checkpoint (quant.Checkpoint.Dequantized);
//
// and on every fixture's own document (130 rows, below the floor) the default forward takes the
// quantized path everywhere and equals the disabled forward bit for bit.
func TestQuantizedDispatch(t *testing.T) {
	log := testutil.CaptureSlog(t, "quant.Linear", "path")

	bigDone := false
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		cfg := h3.FixtureConfig(t, fx)
		dir := h3.ConvertFixture(t, fx, 4, h3.ConvertOptions{})
		// paths is what the joint-block and refiner executables log: each is built once and logs its six
		// core linears (one joint block per program here; a config without refiner layers builds no
		// refiner graph).
		paths := func(block, refiner string) string {
			n := map[string]int{block: 6}
			if cfg.NumRefinerLayers > 0 {
				n[refiner] += 6
			}
			var parts []string
			for k, v := range n {
				parts = append(parts, fmt.Sprintf("%s:%d", k, v))
			}
			sort.Strings(parts)
			return strings.Join(parts, " ")
		}
		forward := func(env string, in h3.ForwardInputs, wantPaths string) h3.ForwardOutputs {
			t.Helper()
			d, err := quant.ParseDispatch(env)
			if err != nil {
				t.Fatal(err)
			}
			pathCounts(log)
			m, err := h3.Load(testutil.Backend(t), dir, h3.Options{Dispatch: d, BlockGroup: 1})
			if err != nil {
				t.Fatal(err)
			}
			out := run(t, m, in)
			if got := pathCounts(log); got != wantPaths {
				t.Fatalf("%s=%q: logged paths %q, want %q", quant.DQGEMMEnv, env, got, wantPaths)
			}
			return out
		}

		// A floor between the two documents' row counts (the default floor is set
		// from GPU measurements and may move): below it the dispatch takes the
		// quantized path, above it dequant-GEMM.
		const floor = 768
		floorEnv := strconv.Itoa(floor)
		small := h3.FixtureInputs(t, fx)
		if n := len(small.TokenTags); n >= floor {
			t.Fatalf("the fixture document has %d rows; this test expects fewer than the floor %d", n, floor)
		}
		sameOutputs(t, "fixture document: floor above its rows vs FASTVIDEO_DQ_GEMM=0",
			forward(floorEnv, small, paths("quantized", "quantized")), forward("0", small, paths("quantized", "quantized")))

		// The 768-row document costs ~3 s of CPU per fixture and exercises only the linears, which every
		// fixture builds alike: run it once.
		if bigDone {
			return
		}
		bigDone = true
		big := bigDocument(cfg, floor-48)
		if n := len(big.TokenTags); n < floor {
			t.Fatalf("document has %d rows, below the floor %d", n, floor)
		}
		disabled := forward("0", big, paths("quantized", "quantized"))
		sameOutputs(t, "FASTVIDEO_DQ_GEMM=0 vs floor above the row count",
			forward("100000", big, paths("quantized", "quantized")), disabled)

		dflt := forward(floorEnv, big, paths("dequant-gemm", "quantized"))
		for _, c := range []struct {
			name      string
			got, want []float32
		}{{"video", dflt.Video, disabled.Video}, {"audio", dflt.Audio, disabled.Audio}} {
			testutil.AssertClose(t, "floor dispatch vs FASTVIDEO_DQ_GEMM=0: "+c.name, c.got, c.want, []int{len(c.want)}, testutil.ParityTol(c.want))
		}

		allDQ := forward("1", big, paths("dequant-gemm", "dequant-gemm"))
		ck, _, err := h3.OpenConverted(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Close()
		pathCounts(log)
		dense, err := h3.FromSource(testutil.Backend(t), cfg, ck.Dequantized(), h3.Options{BlockGroup: 1})
		if err != nil {
			t.Fatal(err)
		}
		sameOutputs(t, "FASTVIDEO_DQ_GEMM=1 vs the dense model on the host-dequantized checkpoint", allDQ, run(t, dense, big))
		if got, want := pathCounts(log), paths("dense", "dense"); got != want {
			t.Fatalf("dense model logged %q, want %q", got, want)
		}
	})
}

// quantizedSuffixes are the H3 linears MLX quantizes, in the main and the refiner blocks (names relative
// to a block).
var quantizedSuffixes = []string{
	"attn.to_q.weight", "attn.to_k.weight", "attn.to_v.weight", "attn.to_out.0.weight",
	"ff.net.0.proj.weight", "ff.net.2.weight",
}

func qIsQuantized(name string) bool {
	for _, s := range quantizedSuffixes {
		if strings.HasSuffix(name, "."+s) {
			return true
		}
	}
	return false
}
