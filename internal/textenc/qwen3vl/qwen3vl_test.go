package qwen3vl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

// fixtureConfig parses the fixture's HF text config as a checkpoint's config.json.
var fixtureConfig = testutil.ConfigReader(ParseConfig, "config")

// openEncoder builds an encoder on the test backend, closed when the test ends.
func openEncoder(t testing.TB, cfg Config, src weights.Source, opts Options) *Encoder {
	return testutil.Open(t, func() (*Encoder, error) { return New(testutil.Backend(t), cfg, src, opts) })
}

func fixtureIDs(t *testing.T, fx *testutil.Fixture) []int {
	return fx.TokenIDs(t, "in.input_ids")
}

// conditionerIndex is the hidden-state index behind out.fastvideo_h3_conditioner_hidden:
// an explicit output_hidden_state_index in the fixture JSON when present, else
// the tiny analogue of H3's "all but the last layers, no final norm" documented in
// the fixture notes (num_hidden_layers - 1).
func conditionerIndex(t *testing.T, fx *testutil.Fixture, cfg Config) int {
	for _, path := range [][]string{{"output_hidden_state_index"}, {"config", "output_hidden_state_index"}, {"fastvideo_h3_conditioner_crosscheck", "output_hidden_state_index"}} {
		var idx int
		if err := fx.DecodeConfig(&idx, path...); err == nil && idx > 0 {
			return idx
		}
	}
	t.Logf("no output_hidden_state_index in %s's JSON: using num_hidden_layers-1 = %d, as its notes describe", fx.Name, cfg.NumHiddenLayers-1)
	return cfg.NumHiddenLayers - 1
}

// walkAll returns every HF hidden state 0..N (N after the final norm).
func walkAll(t *testing.T, fx *testutil.Fixture, cfg Config, resident bool) [][]float32 {
	t.Helper()
	enc := openEncoder(t, cfg, fx.Weights(), Options{Resident: resident, HiddenStateIndex: cfg.NumHiddenLayers, FinalNorm: true})
	states := make([][]float32, cfg.NumHiddenLayers+1)
	err := enc.Walk(context.Background(), fixtureIDs(t, fx), func(i int, h []float32) error {
		states[i] = h
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return states
}

func TestParity(t *testing.T) {
	testutil.ForEachFixture(t, "qwen3vl_text", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		ids := fixtureIDs(t, fx)
		resident := walkAll(t, fx, cfg, true)
		streamed := walkAll(t, fx, cfg, false)

		names := fx.Names("act.hidden_states.")
		if len(names) != cfg.NumHiddenLayers+1 {
			t.Fatalf("fixture holds %d act.hidden_states.*, config has %d layers (want %d states)", len(names), cfg.NumHiddenLayers, cfg.NumHiddenLayers+1)
		}
		for i := 0; i <= cfg.NumHiddenLayers; i++ {
			name := fmt.Sprintf("act.hidden_states.%d", i)
			want, shape := fx.F32(t, name)
			testutil.AssertClose(t, name, resident[i], want, shape, testutil.ParityTol(want))
			testutil.AssertBitExact(t, name+" streamed vs resident", streamed[i], resident[i])
		}
		want, shape := fx.F32(t, "out.last_hidden_state")
		testutil.AssertClose(t, "out.last_hidden_state", resident[cfg.NumHiddenLayers], want, shape, testutil.ParityTol(want))

		// The H3 conditioner path: streamed, stops early, no final norm.
		idx := conditionerIndex(t, fx, cfg)
		enc := openEncoder(t, cfg, fx.Weights(), Options{HiddenStateIndex: idx})
		got, gotShape, err := enc.Encode(context.Background(), ids)
		if err != nil {
			t.Fatal(err)
		}
		want, shape = fx.F32(t, "out.fastvideo_h3_conditioner_hidden")
		if n := len(shape); n < 2 || gotShape[0] != shape[n-2] || gotShape[1] != shape[n-1] {
			t.Fatalf("Encode shape %v, reference %v", gotShape, shape)
		}
		testutil.AssertClose(t, "out.fastvideo_h3_conditioner_hidden", got, want, shape, testutil.ParityTol(want))
		testutil.AssertBitExact(t, "Encode vs Walk state", got, resident[idx])
	})
}

// liveWeights wraps Weights and records how many layers are resident at once and
// whether released tensors were really freed.
type liveWeights struct {
	Weights
	live, maxLive int
	order         []int
	leaked        []string
}

func (l *liveWeights) Layer(i int) ([]*tensors.Tensor, func(), error) {
	ws, release, err := l.Weights.Layer(i)
	if err != nil {
		return nil, nil, err
	}
	l.live++
	l.maxLive = max(l.maxLive, l.live)
	l.order = append(l.order, i)
	return ws, func() {
		release()
		l.live--
		for k, w := range ws {
			if w.Ok() {
				l.leaked = append(l.leaked, fmt.Sprintf("layer %d tensor %s", i, LayerTensorNames[k]))
			}
		}
	}, nil
}

// spySource records every tensor name read.
type spySource struct {
	weights.Source
	read map[string]int
}

func (s *spySource) Tensor(name string) (safetensors.Info, bool) {
	s.read[name]++
	return s.Source.Tensor(name)
}

func TestStreamingKeepsOneLayer(t *testing.T) {
	testutil.ForEachFixture(t, "qwen3vl_text", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		idx := cfg.NumHiddenLayers - 1
		spy := &spySource{Source: fx.Weights(), read: map[string]int{}}
		w, err := LoadWeights(testutil.Backend(t), cfg, spy, Options{HiddenStateIndex: idx})
		if err != nil {
			t.Fatal(err)
		}
		lw := &liveWeights{Weights: w}
		enc, err := NewEncoder(testutil.Backend(t), cfg, lw, Options{HiddenStateIndex: idx})
		if err != nil {
			t.Fatal(err)
		}
		defer enc.Close()
		if _, _, err := enc.Encode(context.Background(), fixtureIDs(t, fx)); err != nil {
			t.Fatal(err)
		}
		if lw.maxLive != 1 || len(lw.leaked) > 0 {
			t.Errorf("streaming held %d layers at once (want 1); not freed after release: %v", lw.maxLive, lw.leaked)
		}
		if fmt.Sprint(lw.order) != fmt.Sprint(seq(idx)) {
			t.Errorf("layers ran in order %v, want %v", lw.order, seq(idx))
		}
		// Layers past the requested state and the final norm are never read.
		for name := range spy.read {
			if strings.Contains(name, fmt.Sprintf("layers.%d.", idx)) || strings.HasSuffix(name, ".norm.weight") && !strings.Contains(name, "layers.") {
				t.Errorf("streaming read %q, which hidden state %d does not need", name, idx)
			}
		}
	})
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// poisonedTable replaces every embedding row the prompt does not use with NaN, so
// a streamed forward that read any other row would return NaN.
type poisonedTable struct {
	weights.Source
	name string
	data []byte
}

func (p *poisonedTable) Tensor(name string) (safetensors.Info, bool) {
	info, ok := p.Source.Tensor(name)
	if ok && name == p.name {
		info.Data = p.data
	}
	return info, ok
}

func TestStreamedEmbeddingReadsOnlyPromptRows(t *testing.T) {
	testutil.ForEachFixture(t, "qwen3vl_text", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		ids := fixtureIDs(t, fx)
		src := fx.Weights()
		table, ok := src.Tensor(DefaultPrefix + "embed_tokens.weight")
		if !ok || table.DType != safetensors.F32 {
			t.Skipf("fixture table is not F32")
		}
		used := map[int]bool{}
		for _, id := range ids {
			used[id] = true
		}
		data := append([]byte(nil), table.Data...)
		nan := safetensors.F32Bytes([]float32{float32(math.NaN())})
		rowBytes := 4 * cfg.HiddenSize
		for r := 0; r < cfg.VocabSize; r++ {
			if !used[r] {
				for off := r * rowBytes; off < (r+1)*rowBytes; off += 4 {
					copy(data[off:], nan)
				}
			}
		}
		w, err := LoadWeights(testutil.Backend(t), cfg, &poisonedTable{src, table.Name, data}, Options{HiddenStateIndex: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		x, err := w.Embed(ids)
		if err != nil {
			t.Fatal(err)
		}
		got := tensors.MustCopyFlatData[float32](x)
		x.FinalizeAll()
		want, shape := fx.F32(t, "act.hidden_states.0")
		testutil.AssertClose(t, "streamed embedding", got, want, shape, 0)
		host, err := EmbeddingRows(table, ids)
		if err != nil {
			t.Fatal(err)
		}
		testutil.AssertClose(t, "EmbeddingRows", host, want, shape, 0)
		if _, err := w.Embed([]int{cfg.VocabSize}); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
			t.Errorf("out-of-vocabulary id: got error %v", err)
		}
	})
}

func TestCheckpointMismatchIsReported(t *testing.T) {
	testutil.ForEachFixture(t, "qwen3vl_text", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		cfg.IntermediateSize *= 2
		_, err := LoadWeights(testutil.Backend(t), cfg, fx.Weights(), Options{})
		if err == nil || !strings.Contains(err.Error(), "mlp.gate_proj.weight: checkpoint shape") {
			t.Fatalf("want a shape mismatch naming mlp.gate_proj.weight, got %v", err)
		}
		_, err = LoadWeights(testutil.Backend(t), fixtureConfig(t, fx), fx.Weights(), Options{Prefix: "model."})
		if err == nil || !strings.Contains(err.Error(), "prefix") {
			t.Fatalf("want a missing-tensor error that hints at the prefix, got %v", err)
		}
	})
}

func TestEncodeErrors(t *testing.T) {
	testutil.ForEachFixture(t, "qwen3vl_text", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		enc := openEncoder(t, cfg, fx.Weights(), Options{HiddenStateIndex: 1})
		if _, _, err := enc.Encode(context.Background(), nil); err == nil {
			t.Error("empty prompt: want an error")
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, _, err := enc.Encode(ctx, []int{1, 2}); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled context: got %v", err)
		}
		if _, err := New(testutil.Backend(t), cfg, fx.Weights(), Options{HiddenStateIndex: cfg.NumHiddenLayers + 1}); err == nil {
			t.Error("index past the last layer: want an error")
		}
	})
}
