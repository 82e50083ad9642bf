package umt5

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

// fixtureConfig parses the fixture's config as a checkpoint's config.json.
var fixtureConfig = testutil.ConfigReader(ParseConfig, "config")

// openEncoder builds an encoder on the test backend, closed when the test ends.
func openEncoder(t *testing.T, cfg Config, src weights.Source, opts Options) *Encoder {
	return testutil.Open(t, func() (*Encoder, error) { return FromSource(testutil.Backend(t), cfg, src, opts) })
}

// fixtureInputs returns the batch-1 ids and attention mask.
func fixtureInputs(t *testing.T, fx *testutil.Fixture) (ids, mask []int) {
	t.Helper()
	return fx.TokenIDs(t, "in.input_ids"), fx.TokenIDs(t, "in.attention_mask")
}

// TestFixtureParity compares every hidden state of transformers'
// UMT5EncoderModel (padded rows included: the reference computes them) and
// FastVideo's own T5 port, in both weight modes.
func TestFixtureParity(t *testing.T) {
	testutil.ForEachFixture(t, "umt5", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		ids, mask := fixtureInputs(t, fx)
		for _, resident := range []bool{false, true} {
			t.Run(fmt.Sprintf("resident=%v", resident), func(t *testing.T) {
				enc := openEncoder(t, cfg, fx.Weights(), Options{Resident: resident})
				states, shape, err := enc.HiddenStates(context.Background(), ids, mask)
				if err != nil {
					t.Fatal(err)
				}
				names := fx.Names("act.hidden_states.")
				if len(names) != len(states) {
					t.Fatalf("fixture has %d act.hidden_states, the encoder returned %d (num_layers+1)", len(names), len(states))
				}
				for i, h := range states {
					want, wshape := fx.F32(t, fmt.Sprintf("act.hidden_states.%d", i))
					testutil.AssertClose(t, fmt.Sprintf("hidden_states.%d", i), h, want, wshape, testutil.ParityTol(want))
				}
				last := states[len(states)-1]
				for _, ref := range []string{"out.last_hidden_state", "out.fastvideo_t5_last_hidden_state"} {
					want, wshape := fx.F32(t, ref)
					testutil.AssertClose(t, ref, last, want, wshape, testutil.ParityTol(want))
				}
				got, gshape, err := enc.Encode(context.Background(), ids, mask)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(gshape, shape) || !slices.Equal(gshape, []int{len(ids), cfg.DModel}) {
					t.Fatalf("Encode shape %v, HiddenStates shape %v; want [%d %d]", gshape, shape, len(ids), cfg.DModel)
				}
				for i := range got {
					if got[i] != last[i] {
						t.Fatalf("Encode and HiddenStates differ at %d: %g vs %g", i, got[i], last[i])
					}
				}
			})
		}
	})
}

// TestWanZeroPadding checks Wan's post-processing: the valid rows of the
// reference output followed by zero rows up to text_len, both from the padded
// run (ZeroPadded over Encode with the mask) and from EncodeWan, which encodes
// only the valid tokens like FastVideo's unpadded torch path.
func TestWanZeroPadding(t *testing.T) {
	testutil.ForEachFixture(t, "umt5", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		ids, mask := fixtureInputs(t, fx)
		want, _ := fx.F32(t, "out.last_hidden_state")
		tol := testutil.ParityTol(want)
		n := 0
		for _, m := range mask {
			n += m
		}
		if n == len(ids) {
			t.Fatalf("fixture %s has no padded position; the test needs one", fx.Name)
		}
		d := cfg.DModel
		textLen := 16 // small so the test stays tiny; DefaultTextLen is tested below
		wantPadded := make([]float32, textLen*d)
		copy(wantPadded, want[:n*d])

		enc := openEncoder(t, cfg, fx.Weights(), Options{TextLen: textLen})
		h, shape, err := enc.Encode(context.Background(), ids, mask)
		if err != nil {
			t.Fatal(err)
		}
		z, zshape, err := ZeroPadded(h, shape, mask, textLen)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(zshape, []int{textLen, d}) {
			t.Fatalf("ZeroPadded shape %v, want [%d %d]", zshape, textLen, d)
		}
		testutil.AssertClose(t, "ZeroPadded(padded run)", z, wantPadded, zshape, tol)
		for i := n * d; i < len(z); i++ {
			if z[i] != 0 {
				t.Fatalf("row %d (beyond the %d valid rows) is not zero: %g", i/d, n, z[i])
			}
		}

		w, wshape, err := enc.EncodeWan(context.Background(), ids[:n])
		if err != nil {
			t.Fatal(err)
		}
		testutil.AssertClose(t, "EncodeWan(valid ids only)", w, wantPadded, wshape, tol)

		full, fshape, err := ZeroPadded(h, shape, mask, DefaultTextLen)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(fshape, []int{DefaultTextLen, d}) || len(full) != DefaultTextLen*d {
			t.Fatalf("ZeroPadded to %d: shape %v, %d values", DefaultTextLen, fshape, len(full))
		}

		padded, pmask, err := PadIDs(ids[:n], textLen, cfg.PadTokenID)
		if err != nil {
			t.Fatal(err)
		}
		hp, pshape, err := enc.Encode(context.Background(), padded, pmask)
		if err != nil {
			t.Fatal(err)
		}
		zp, zpshape, err := ZeroPadded(hp, pshape, pmask, textLen)
		if err != nil {
			t.Fatal(err)
		}
		testutil.AssertClose(t, "PadIDs to text_len + Encode + ZeroPadded (the MLX path)", zp, wantPadded, zpshape, tol)

		if _, _, err := enc.EncodeWan(context.Background(), make([]int, textLen+1)); err == nil || !strings.Contains(err.Error(), "text_len") {
			t.Fatalf("EncodeWan of text_len+1 ids: err = %v, want a text_len error", err)
		}
		if _, _, err := ZeroPadded(h, shape, mask, n-1); err == nil {
			t.Fatal("ZeroPadded to fewer rows than valid tokens must fail")
		}
	})
}

// TestRelativePositionBuckets checks buckets worked out by hand from HF's
// formula: half = num_buckets/2 buckets per direction (rel > 0 adds half),
// exact = half/2, and for |rel| >= exact
// bucket = exact + floor(ln(|rel|/exact) / ln(max_distance/exact) * (half-exact)),
// capped at half-1.
func TestRelativePositionBuckets(t *testing.T) {
	at := func(b []int32, n, i, j int) int32 { return b[i*n+j] }
	// Tiny fixture geometry: 8 buckets, max distance 16 -> half 4, exact 2, ln(8) = 2.0794.
	//   |rel| 0, 1 -> 0, 1 (exact)
	//   |rel| 2: ln(1)=0 -> 2 + 0 = 2
	//   |rel| 5: ln(2.5)=0.9163 / 2.0794 * 2 = 0.881 -> 2
	//   |rel| 6: ln(3)=1.0986 / 2.0794 * 2 = 1.057 -> 3
	//   |rel| 9: ln(4.5)=1.504 / 2.0794 * 2 = 1.447 -> 3 (= half-1 cap anyway)
	// rel = j - i; positive rel adds 4.
	b := RelativePositionBuckets(10, 8, 16)
	for _, c := range []struct {
		i, j int
		want int32
	}{
		{0, 0, 0}, {1, 0, 1}, {0, 1, 5}, {2, 0, 2}, {0, 2, 6}, {5, 0, 2}, {0, 5, 6},
		{6, 0, 3}, {0, 6, 7}, {9, 0, 3}, {0, 9, 7}, {3, 4, 5}, {4, 3, 1},
	} {
		if got := at(b, 10, c.i, c.j); got != c.want {
			t.Errorf("8 buckets / 16: bucket(i=%d, j=%d) = %d, want %d", c.i, c.j, got, c.want)
		}
	}
	// UMT5-XXL geometry: 32 buckets, max distance 128 -> half 16, exact 8, ln(16) = 2.7726.
	//   |rel| 7 -> 7; 8 -> 8 + 0 = 8
	//   |rel| 63: ln(7.875)=2.0637 / 2.7726 * 8 = 5.954 -> 13
	//   |rel| 64: ln(8) / ln(16) * 8 = 6 exactly (3/4 of 8) -> 14; the float32
	//            evaluation must not round this down to 13
	//   |rel| 127: ln(15.875)=2.7647 / 2.7726 * 8 = 7.977 -> 15
	//   |rel| 200: 8 + floor(8*ln(25)/ln(16)) = 8 + 9 -> capped at 15
	n := 201
	b = RelativePositionBuckets(n, 32, 128)
	for _, c := range []struct {
		rel  int
		want int32
	}{{7, 7}, {8, 8}, {63, 13}, {64, 14}, {127, 15}, {200, 15}} {
		if got := at(b, n, c.rel, 0); got != c.want {
			t.Errorf("32/128: bucket(rel=-%d) = %d, want %d", c.rel, got, c.want)
		}
		if got := at(b, n, 0, c.rel); got != c.want+16 {
			t.Errorf("32/128: bucket(rel=+%d) = %d, want %d", c.rel, got, c.want+16)
		}
	}
}

func TestParseConfig(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"model_type":"umt5","vocab_size":256384,"d_model":4096,"d_kv":64,"d_ff":10240,
		"num_layers":24,"num_heads":64,"relative_attention_num_buckets":32,"relative_attention_max_distance":128,
		"feed_forward_proj":"gated-gelu","dense_act_fn":"gelu_new","layer_norm_epsilon":1e-6}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Act != "gelu_new" || !cfg.Gated || !cfg.PerLayerBias() || cfg.InnerDim() != 4096 || cfg.EOSTokenID != 1 || cfg.PadTokenID != 0 {
		t.Fatalf("UMT5-XXL config parsed as %+v", cfg)
	}
	// T5Config's defaults differ: relu FFN, and a single shared bias table.
	cfg, err = ParseConfig([]byte(`{"model_type":"t5","vocab_size":32128,"d_model":512,"d_kv":64,"d_ff":2048,"num_layers":6,"num_heads":8}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Act != "relu" || cfg.Gated || cfg.PerLayerBias() || cfg.NumBuckets != 32 || cfg.MaxDistance != 128 {
		t.Fatalf("T5 config parsed as %+v", cfg)
	}
	for _, bad := range []string{
		`{"vocab_size":0,"d_model":8,"d_kv":2,"d_ff":8,"num_layers":1,"num_heads":4}`,
		`{"vocab_size":8,"d_model":8,"d_kv":2,"d_ff":8,"num_layers":1,"num_heads":4,"feed_forward_proj":"gated-tanh"}`,
		`{"vocab_size":8,"d_model":8,"d_kv":2,"d_ff":8,"num_layers":1,"num_heads":4,"feed_forward_proj":"fancy-gelu"}`,
		`{"vocab_size":8,"d_model":8,"d_kv":2,"d_ff":8,"num_layers":1,"num_heads":4,"relative_attention_num_buckets":7}`,
		`not json`,
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("ParseConfig(%s) accepted an invalid config", bad)
		}
	}
}

// writeTextEncoder writes the fixture's weights as a released text_encoder/
// folder: config.json plus two shards and their index, with an extra tied
// encoder.embed_tokens.weight copy and a decoder tensor, as a full T5 export
// would carry.
func writeTextEncoder(t *testing.T, fx *testutil.Fixture, edit func(name string) (keep bool)) string {
	t.Helper()
	dir := t.TempDir()
	cfgJSON, err := json.Marshal(fx.Config["config"])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfgJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	src := fx.Weights()
	shards := [2][]safetensors.Tensor{}
	weightMap := map[string]string{}
	names := append(src.Names(), "encoder.embed_tokens.weight", "decoder.final_layer_norm.weight")
	for i, n := range names {
		srcName := n
		switch n {
		case "encoder.embed_tokens.weight":
			srcName = "shared.weight"
		case "decoder.final_layer_norm.weight":
			srcName = "encoder.final_layer_norm.weight"
		}
		if edit != nil && !edit(n) {
			continue
		}
		info, ok := src.Tensor(srcName)
		if !ok {
			t.Fatalf("fixture has no w.%s", srcName)
		}
		k := i % 2
		shards[k] = append(shards[k], safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: info.Data})
		weightMap[n] = fmt.Sprintf("model-%05d-of-00002.safetensors", k+1)
	}
	for k, ts := range shards {
		if err := safetensors.WriteFile(filepath.Join(dir, fmt.Sprintf("model-%05d-of-00002.safetensors", k+1)), ts, nil); err != nil {
			t.Fatal(err)
		}
	}
	index, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), index, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoadShardedFolder(t *testing.T) {
	testutil.ForEachFixture(t, "umt5", func(t *testing.T, fx *testutil.Fixture) {
		dir := writeTextEncoder(t, fx, nil)
		enc, err := Load(testutil.Backend(t), dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		ids, mask := fixtureInputs(t, fx)
		got, shape, err := enc.Encode(context.Background(), ids, mask)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := fx.F32(t, "out.last_hidden_state")
		testutil.AssertClose(t, "Load(sharded folder)", got, want, shape, testutil.ParityTol(want))
		if err := enc.Close(); err != nil {
			t.Fatal(err)
		}
		if _, _, err := enc.Encode(context.Background(), ids, mask); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("Encode after Close: err = %v, want a closed-encoder error", err)
		}
	})
}

func TestCheckpointErrors(t *testing.T) {
	testutil.ForEachFixture(t, "umt5", func(t *testing.T, fx *testutil.Fixture) {
		dropped := "encoder.block.1.layer.1.DenseReluDense.wi_1.weight"
		dir := writeTextEncoder(t, fx, func(n string) bool { return n != dropped })
		// An unexpected tensor in a third file next to the index is not part of the
		// index, so add it through the source instead.
		ck, err := safetensors.OpenCheckpoint(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Close()
		const extra = "encoder.block.0.layer.0.SelfAttention.qkv.weight"
		info, _ := ck.Tensor("encoder.block.0.layer.0.SelfAttention.q.weight")
		info.Name = extra
		src := &testutil.EditSource{Base: ck, Replace: map[string]safetensors.Info{extra: info}}
		cfg := fixtureConfig(t, fx)
		_, err = FromSource(testutil.Backend(t), cfg, src, Options{})
		var be *weights.BindError
		if !errors.As(err, &be) {
			t.Fatalf("FromSource on a broken checkpoint: err = %v, want a *weights.BindError", err)
		}
		if len(be.Missing) != 1 || !strings.HasPrefix(be.Missing[0], dropped) || len(be.Unexpected) != 1 || be.Unexpected[0] != extra {
			t.Fatalf("BindError = %v; want exactly %s missing and %s unexpected (decoder.* and the tied embedding copy are not unexpected)", be, dropped, extra)
		}

		enc := openEncoder(t, cfg, fx.Weights(), Options{})
		ctx := context.Background()
		for _, c := range []struct {
			ids, mask []int
			want      string
		}{
			{nil, nil, "no token ids"},
			{[]int{1, cfg.VocabSize}, nil, "outside the vocabulary"},
			{[]int{1, 2}, []int{1}, "entries for 2 token ids"},
			{[]int{1, 2}, []int{0, 0}, "no real token"},
			{[]int{1, 2}, []int{1, 2}, "use 1 for a real token"},
		} {
			if _, _, err := enc.Encode(ctx, c.ids, c.mask); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Encode(%v, %v): err = %v, want %q", c.ids, c.mask, err, c.want)
			}
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if _, _, err := enc.Encode(cancelled, []int{1, 2}, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("Encode with a cancelled context: err = %v", err)
		}
	})
}

// TestSharedBiasT5 checks the original-T5 path (model_type "t5": block 0's
// relative-position table serves every block) against the UMT5 path on a source
// whose every block carries a copy of block 0's table: both must agree exactly.
func TestSharedBiasT5(t *testing.T) {
	testutil.ForEachFixture(t, "umt5", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		if cfg.NumLayers < 2 {
			t.Skipf("fixture %s has one block; sharing cannot be observed", fx.Name)
		}
		ids, mask := fixtureInputs(t, fx)
		t5 := cfg
		t5.ModelType = "t5"
		// Every block serves block 0's relative_attention_bias (shared), or only block 0 has one
		// (only0: the T5 layout).
		table0, _ := fx.Weights().Tensor(RelativeBiasName(0))
		copies := map[string]safetensors.Info{}
		for i := 1; i < cfg.NumLayers; i++ {
			info := table0
			info.Name = RelativeBiasName(i)
			copies[info.Name] = info
		}
		shared := &testutil.EditSource{Base: fx.Weights(), Replace: copies}
		only0 := &testutil.EditSource{Base: fx.Weights(), Hide: func(n string) bool { return copies[n].Name != "" }}
		run := func(c Config, src weights.Source) []float32 {
			enc := openEncoder(t, c, src, Options{})
			h, _, err := enc.Encode(context.Background(), ids, mask)
			if err != nil {
				t.Fatal(err)
			}
			return h
		}
		a, b := run(cfg, shared), run(t5, only0)
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("T5 shared-bias output differs from UMT5 with copied tables at %d: %g vs %g", i, b[i], a[i])
			}
		}
		// A T5-layout checkpoint under a UMT5 config names the likely cause.
		if _, err := FromSource(testutil.Backend(t), cfg, only0, Options{}); err == nil || !strings.Contains(err.Error(), "looks like a T5 checkpoint") {
			t.Fatalf("UMT5 config on a T5-layout checkpoint: err = %v", err)
		}
	})
}

// TestBFloat16Smoke runs the GPU compute dtype on the test backend, at the bound
// bfloat16's precision gives for the output's scale (testutil.DTypeTol).
func TestBFloat16Smoke(t *testing.T) {
	testutil.ForEachFixture(t, "umt5", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		ids, mask := fixtureInputs(t, fx)
		enc := openEncoder(t, cfg, fx.Weights(), Options{DType: dtypes.BFloat16})
		got, shape, err := enc.Encode(context.Background(), ids, mask)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := fx.F32(t, "out.last_hidden_state")
		testutil.AssertAtDType(t, "last_hidden_state", dtypes.BFloat16, got, want, shape)
	})
}
