package h3

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

func TestBindingListsEveryProblem(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		src := fx.Weights()

		// Every w.* tensor binds, and every declared parameter is in the file.
		p, err := declareParams(cfg, dtypes.Float32, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := weights.Bind(src, p.set, weights.Options{}); err != nil {
			t.Fatal(err)
		}
		declared := map[string]bool{}
		for _, par := range p.set.Params() {
			declared[par.Name] = true
			if !par.Bound() {
				t.Errorf("%s not bound", par.Name)
			}
		}
		for _, n := range src.Names() {
			if !declared[n] {
				t.Errorf("fixture tensor %s is not declared", n)
			}
		}
		p.set.Release()

		// One name removed and one shape changed: a single error names both.
		const gone = "transformer_blocks.1.attn.norm_k.weight"
		const reshaped = "audio_proj_out.weight"
		info, _ := src.Tensor(reshaped)
		info.Shape = []int{info.Shape[0] / 2, info.Shape[1] * 2}
		bad := &editSource{base: src, hide: func(n string) bool { return n == gone },
			replace: map[string]safetensors.Info{reshaped: info}}
		_, err = FromSource(testutil.Backend(t), cfg, bad, Options{})
		if err == nil {
			t.Fatal("binding an incomplete checkpoint must fail")
		}
		for _, s := range []string{"missing: " + gone, "mismatched: " + reshaped, "1 missing", "1 mismatched"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error does not list %q:\n%v", s, err)
			}
		}

		// An unexpected tensor is reported too; VSA gate matrices of FastH3 students are ignored.
		extra := &editSource{base: src, replace: map[string]safetensors.Info{
			"transformer_blocks.0.attn.to_gate_compress.weight": info,
			"transformer_blocks.0.attn.bogus":                   info,
		}}
		_, err = FromSource(testutil.Backend(t), cfg, extra, Options{})
		if err == nil || !strings.Contains(err.Error(), "unexpected: transformer_blocks.0.attn.bogus") ||
			strings.Contains(err.Error(), "to_gate_compress") {
			t.Errorf("want exactly the bogus name reported as unexpected, got %v", err)
		}
	})
}

func TestReleaseParameterCount(t *testing.T) {
	count := func(cfg Config) int {
		n := 0
		for _, shape := range ParamNames(cfg) {
			k := 1
			for _, d := range shape {
				k *= d
			}
			n += k
		}
		return n
	}
	cfg := ReleaseConfig()
	if got := count(cfg); got != 33_122_992_896 { // h3.md §1.3
		t.Errorf("released H3 has %d parameters, want 33,122,992,896", got)
	}
	cfg.AdaLNRank = 16
	if got := count(cfg); got < 20_160_000_000 || got > 20_180_000_000 {
		t.Errorf("rank-16 H3 has %d parameters, want ≈20.17B", got)
	}
}

func TestConfigJSON(t *testing.T) {
	c, err := ParseConfig([]byte(`{"num_layers": 2, "hidden_size": 128, "adaln_rank": null, "patch_size": [1, 2, 2]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.NumLayers != 2 || c.HiddenSize != 128 || c.AdaLNRank != 0 || c.FFNDim != 14336 {
		t.Errorf("decoded %+v: want overrides over release defaults", c)
	}
	c.AdaLNRank = 8
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back Config
	if err := json.Unmarshal(b, &back); err != nil || back.AdaLNRank != 8 || back.NumLayers != 2 {
		t.Errorf("round trip: %s -> %+v, %v", b, back, err)
	}
	if !strings.Contains(string(b), `"adaln_rank":8`) {
		t.Errorf("marshalled config lacks adaln_rank: %s", b)
	}
	for _, tc := range []struct{ json, want string }{
		{`{"rope_freq_dim": 32}`, "rotary width 192"},
		{`{"patch_size": [2, 2]}`, "patch_size"},
		{`{"adaln_rank": 4000}`, "adaln_rank = 4000"},
	} {
		if _, err := ParseConfig([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%s): want an error about %q, got %v", tc.json, tc.want, err)
		}
	}
}

func TestForwardInputErrors(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		m := fixtureModel(t, fx, Options{})
		for _, tc := range []struct {
			name string
			edit func(in *ForwardInputs)
			want string
		}{
			{"duplicate row", func(in *ForwardInputs) { in.AudioIndices[0] = in.VideoIndices[0] }, "listed twice"},
			{"short video", func(in *ForwardInputs) { in.VideoRows = in.VideoRows[1:] }, "VideoRows"},
			{"bad tag", func(in *ForwardInputs) { in.TokenTags[3] = 7 }, "TokenTags[3] = 7"},
			{"bad timestep index", func(in *ForwardInputs) { in.TimestepIndices[0] = 9 }, "TimestepIndices[0] = 9"},
			{"positions", func(in *ForwardInputs) { in.PositionIDs = in.PositionIDs[3:] }, "PositionIDs"},
		} {
			in := fixtureInputs(t, fx)
			tc.edit(&in)
			if _, err := m.Forward(in); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: want an error mentioning %q, got %v", tc.name, tc.want, err)
			}
		}
	})
}

// writeTransformerFolder writes a fixture's weights as a released-style transformer/ folder: config.json
// and two shards with a diffusers index.
func writeTransformerFolder(t *testing.T, fx *testutil.Fixture, cfg Config) string {
	t.Helper()
	dir := t.TempDir()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := safetensors.WriteAtomic(dir+"/config.json", b); err != nil {
		t.Fatal(err)
	}
	src := fx.Weights()
	shards := [2][]safetensors.Tensor{}
	weightMap := map[string]string{}
	for i, n := range src.Names() {
		info, _ := src.Tensor(n)
		k := i % 2
		shards[k] = append(shards[k], safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: info.Data})
		weightMap[n] = []string{"diffusion_pytorch_model-00001-of-00002.safetensors", "diffusion_pytorch_model-00002-of-00002.safetensors"}[k]
	}
	for k, ts := range shards {
		name := []string{"diffusion_pytorch_model-00001-of-00002.safetensors", "diffusion_pytorch_model-00002-of-00002.safetensors"}[k]
		if err := safetensors.WriteFile(dir+"/"+name, ts, nil); err != nil {
			t.Fatal(err)
		}
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	if err := safetensors.WriteAtomic(dir+"/diffusion_pytorch_model.safetensors.index.json", idx); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoadShardedFolder(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		dir := writeTransformerFolder(t, fx, fixtureConfig(t, fx))
		m, err := Load(testutil.Backend(t), dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		out, err := m.Forward(fixtureInputs(t, fx))
		if err != nil {
			t.Fatal(err)
		}
		want, sh := fx.F32(t, "out.video")
		testutil.AssertClose(t, "out.video via Load", out.Video, want, sh, testutil.ParityTol(want))

		if _, err := Load(testutil.Backend(t), t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("Load of an empty folder: want an error naming config.json, got %v", err)
		}
	})
}

// bf16 compute (the GPU configuration) runs on the Go backend too; it is checked loosely against f32.
func TestBFloat16Forward(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		m := fixtureModel(t, fx, Options{DType: dtypes.BFloat16})
		out, err := m.Forward(fixtureInputs(t, fx))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			got  []float32
		}{{"out.video", out.Video}, {"out.audio", out.Audio}} {
			want, _ := fx.F32(t, c.name)
			rel := maxAbsDiff(c.got, want) / float64(maxAbs(want))
			t.Logf("%s bf16: max abs error / max|ref| = %.3g", c.name, rel)
			if rel > 2e-2 {
				t.Errorf("%s bf16: relative error %.3g > 2e-2", c.name, rel)
			}
		}
	})
}
