package h3

import (
	"math"
	"strings"
	"testing"

	"fastvideo/internal/lora"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
)

// TestLoRANamesMatchCheckpoint: every module the H3 map accepts names tensors of the released DiT.
func TestLoRANamesMatchCheckpoint(t *testing.T) {
	shapes, err := Params(ReleaseConfig())
	if err != nil {
		t.Fatal(err)
	}
	have := shapes.Map()
	var modules []string
	for _, p := range []string{"transformer_blocks.49.", "token_refiner.refiner_blocks.1."} {
		for k := range coreLinears {
			modules = append(modules, p+k)
		}
	}
	modules = append(modules, "transformer_blocks.0.adaln_proj.linear")
	for k := range biasedTop {
		modules = append(modules, k)
	}
	for _, m := range modules {
		tg, ok := LoRATarget(m, false)
		if !ok {
			t.Errorf("%s: not mapped", m)
			continue
		}
		for _, n := range []string{tg.Weight, tg.Bias} {
			if n != "" && have[n] == nil {
				t.Errorf("%s -> %s: not a tensor of the H3 DiT", m, n)
			}
		}
		if tg.Bias == "" && have[strings.TrimSuffix(tg.Weight, ".weight")+".bias"] != nil {
			t.Errorf("%s: the checkpoint has a bias the map does not name", m)
		}
	}
	if _, ok := LoRATarget("token_refiner.refiner_blocks.0.adaln_proj.linear", false); ok {
		t.Error("refiner blocks have no AdaLN projection")
	}
}

func adapter(t *testing.T, names ...string) *lora.Adapter {
	t.Helper()
	var ts []safetensors.Tensor
	for _, n := range names {
		ts = append(ts,
			safetensors.Tensor{Name: n + ".lora_A.default.weight", DType: safetensors.F32, Shape: []int{2, 4}, Data: safetensors.F32Bytes([]float32{1, 0, 0, 0, 0, 1, 0, 0})},
			safetensors.Tensor{Name: n + ".lora_B.default.weight", DType: safetensors.F32, Shape: []int{4, 2}, Data: safetensors.F32Bytes([]float32{1, 0, 0, 1, 0, 0, 0, 0})})
	}
	a, err := testutil.Adapter(t, "h3_test.safetensors", nil, ts...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestLoRAMergeTurboNames: a LightX2V-Turbo-named adapter merges into the bias-free core linears with the
// caller's default alpha (8 for rank 2: scale 4).
func TestLoRAMergeTurboNames(t *testing.T) {
	a := adapter(t, "transformer_blocks.0.attn.to_q", "token_refiner.refiner_blocks.1.ff.net.2")
	if err := a.SetDefaultAlpha(8); err != nil {
		t.Fatal(err)
	}
	w := lora.TensorMap{
		"transformer_blocks.0.attn.to_q.weight":          {Shape: []int{4, 4}, Data: make([]float32, 16)},
		"token_refiner.refiner_blocks.1.ff.net.2.weight": {Shape: []int{4, 4}, Data: make([]float32, 16)},
	}
	touched, err := lora.Merge([]lora.Weighted{{Adapter: a, Strength: 0.5}}, LoRANames(), w)
	if err != nil {
		t.Fatal(err)
	}
	if len(touched[0].Tensors) != 2 {
		t.Errorf("touched %+v", touched)
	}
	// B·A = diag(1,1,0,0), times 0.5·8/2 = 2.
	for n, tt := range w {
		for i, v := range tt.Data {
			want := float32(0)
			if i == 0 || i == 5 {
				want = 2
			}
			if math.Float32bits(v) != math.Float32bits(want) {
				t.Fatalf("%s[%d] = %g, want %g", n, i, v, want)
			}
		}
	}
}

// TestLoRARefusals: ComfyUI-named H3 adapters (fused qkv_proj/fc1) and Wan adapters fail with the reason.
func TestLoRARefusals(t *testing.T) {
	for _, c := range []struct {
		keys []string
		want []string
	}{
		{[]string{"blocks.0.attn.qkv_proj", "blocks.0.mlp.fc1"}, []string{`"blocks.0.attn.qkv_proj.lora_A.default.weight"`, "ComfyUI-named H3", "disputed", "diffusers-named"}},
		{[]string{"diffusion_model.blocks.0.self_attn.q"}, []string{"self_attn.q", "look like a Wan adapter", "MiniMax H3"}},
	} {
		_, err := lora.Merge([]lora.Weighted{{Adapter: adapter(t, c.keys...), Strength: 1}}, LoRANames(), lora.TensorMap{})
		if err == nil {
			t.Fatalf("%v merged", c.keys)
		}
		for _, s := range c.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q lacks %q", err, s)
			}
		}
	}
}
