package qwen3vl

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

// writeReleasedLayout writes the fixture's weights as a released Qwen3-VL
// snapshot would hold them: BF16, split over two shards with an index JSON, the
// text config nested in a full-model config.json, and tensors the text path never
// reads (vision tower, lm_head) beside it.
func writeReleasedLayout(t *testing.T, fx *testutil.Fixture) string {
	t.Helper()
	dir := t.TempDir()
	src := fx.Weights()
	var shards [2][]safetensors.Tensor
	weightMap := map[string]string{}
	shardName := [2]string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
	for _, name := range src.Names() {
		info, _ := src.Tensor(name)
		vals, err := info.Float64s()
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		if strings.Contains(name, "layers.2.") || strings.Contains(name, "layers.3.") || strings.HasSuffix(name, "language_model.norm.weight") {
			k = 1
		}
		shards[k] = append(shards[k], safetensors.Tensor{Name: name, DType: safetensors.BF16, Shape: info.Shape, Data: weights.EncodeFloats(vals, dtypes.BFloat16)})
		weightMap[name] = shardName[k]
	}
	for _, extra := range []string{"model.visual.patch_embed.proj.weight", "lm_head.weight"} {
		shards[1] = append(shards[1], safetensors.Tensor{Name: extra, DType: safetensors.BF16, Shape: []int{2, 2}, Data: make([]byte, 8)})
		weightMap[extra] = shardName[1]
	}
	for k := range shards {
		if err := safetensors.WriteFile(filepath.Join(dir, shardName[k]), shards[k], nil); err != nil {
			t.Fatal(err)
		}
	}
	index, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), index, 0o644); err != nil {
		t.Fatal(err)
	}
	config, _ := json.Marshal(map[string]any{
		"architectures": []string{"Qwen3VLForConditionalGeneration"},
		"text_config":   fx.Config["config"],
		"vision_config": map[string]any{"depth": 1},
	})
	if err := os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestShardedBF16Checkpoint(t *testing.T) {
	testutil.ForEachFixture(t, "qwen3vl_text", func(t *testing.T, fx *testutil.Fixture) {
		dir := writeReleasedLayout(t, fx)
		ids := fixtureIDs(t, fx)
		idx := fixtureConfig(t, fx).NumHiddenLayers - 1
		ref, _ := fx.F32(t, "out.fastvideo_h3_conditioner_hidden")
		for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
			var outs [2][]float32
			for k, resident := range []bool{false, true} {
				enc, err := Open(testutil.Backend(t), dir, Options{DType: dt, Resident: resident, HiddenStateIndex: idx})
				if err != nil {
					t.Fatal(err)
				}
				outs[k], _, err = enc.Encode(context.Background(), ids)
				if err != nil {
					t.Fatal(err)
				}
				if err := enc.Close(); err != nil {
					t.Fatal(err)
				}
			}
			testutil.AssertBitExact(t, dt.String()+" streamed vs resident", outs[0], outs[1])
			// BF16 weights move the result by about their rounding whatever the compute dtype.
			testutil.AssertAtDType(t, "BF16 weights, "+dt.String()+" compute", dtypes.BFloat16, outs[0], ref, nil)
		}
	})
}
