package h3

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
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
	testutil.CheckLoRATargets(t, "H3", LoRATarget, have, modules, nil)
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

// TestLoRARefusals: Wan adapters, H3 names no LoRA can change and DiffSynth-Studio's native names under
// PEFT's adapter infix (per-head interleaved QKV) fail with the reason. ComfyUI names are accepted
// (TestComfyLoRAReferenceMerge).
func TestLoRARefusals(t *testing.T) {
	w := lora.TensorMap{}
	for _, n := range []string{"transformer_blocks.0.attn.to_q.weight", "transformer_blocks.0.attn.to_k.weight", "transformer_blocks.0.attn.to_v.weight"} {
		w[n] = &lora.Tensor{Shape: []int{4, 4}, Data: make([]float32, 16)}
	}
	for _, c := range []struct {
		keys []string
		want []string
	}{
		{[]string{"diffusion_model.blocks.0.self_attn.q"}, []string{"self_attn.q", "look like a Wan adapter", "MiniMax H3"}},
		{[]string{"blocks.0.attn.q_norm"}, []string{`"blocks.0.attn.q_norm.lora_A.default.weight"`, "no counterpart in the H3 DiT"}},
		{[]string{"token_refiner.blocks.0.adaln_proj.linear"}, []string{"no counterpart in the H3 DiT"}},
		{[]string{"blocks.0.attn.qkv_proj"}, []string{`"blocks.0.attn.qkv_proj"`, "DiffSynth-Studio", "interleaved per head", "diffusers names"}},
	} {
		_, err := lora.Merge([]lora.Weighted{{Adapter: adapter(t, c.keys...), Strength: 1}}, LoRANames(), w)
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

// nativeModules are the native (reference / ComfyUI) module names of block i, refiner block j and the top.
func nativeModules(i, j int) []string {
	b, r := fmt.Sprintf("blocks.%d.", i), fmt.Sprintf("token_refiner.blocks.%d.", j)
	var out []string
	for _, m := range []string{"attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2"} {
		out = append(out, b+m, r+m)
	}
	out = append(out, b+"adaln_proj.linear")
	for k := range nativeTop {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestLoRANativeNamesPlanOnRelease: a rank-1 adapter on every native module (and the same under
// musubi-tuner's flattened names) plans against the released DiT's shapes: the fused rows split into
// to_q/to_k/to_v and ff.net.0.proj fit, and every tensor a native module changes is its diffusers twin's.
func TestLoRANativeNamesPlanOnRelease(t *testing.T) {
	cfg := ReleaseConfig()
	shapes, err := Params(cfg)
	if err != nil {
		t.Fatal(err)
	}
	have := lora.Shapes(shapes.Map())
	for _, musubi := range []bool{false, true} {
		var ts []safetensors.Tensor
		want := map[string]bool{}
		for _, m := range nativeModules(cfg.NumLayers-1, cfg.NumRefinerLayers-1) {
			tg, ok := LoRATarget(m, false)
			if !ok {
				t.Fatalf("%s: not mapped", m)
			}
			out, in := 0, 0
			for _, rb := range tg.Rows {
				sh := have[rb.Weight]
				if sh == nil {
					t.Fatalf("%s -> %s: not a tensor of the H3 DiT", m, rb.Weight)
				}
				out, in = out+sh[0]/rb.Into, sh[1]
				want[rb.Weight] = true
			}
			if tg.Rows == nil {
				out, in = have[tg.Weight][0], have[tg.Weight][1]
				want[tg.Weight] = true
				if tg.Bias != "" {
					want[tg.Bias] = true // lora_B.bias below
				}
			}
			name := m
			if musubi {
				name = "lora_unet_" + strings.ReplaceAll(m, ".", "_")
			}
			ts = append(ts,
				safetensors.Tensor{Name: name + ".lora_down.weight", DType: safetensors.BF16, Shape: []int{1, in}, Data: make([]byte, 2*in)},
				safetensors.Tensor{Name: name + ".lora_up.weight", DType: safetensors.BF16, Shape: []int{out, 1}, Data: make([]byte, 2*out)})
			if tg.Bias != "" {
				ts = append(ts, safetensors.Tensor{Name: name + ".lora_B.bias", DType: safetensors.BF16, Shape: []int{out}, Data: make([]byte, 2*out)})
			}
		}
		ad, err := testutil.Adapter(t, "native.safetensors", nil, ts...)
		if err != nil {
			t.Fatal(err)
		}
		touched, err := lora.Plan([]lora.Weighted{{Adapter: ad, Strength: 1}}, LoRANames(), have)
		if err != nil {
			t.Fatalf("musubi %v: %v", musubi, err)
		}
		if got := touched[0].Tensors; !slices.Equal(got, slices.Sorted(maps.Keys(want))) {
			t.Errorf("musubi %v: touched %v, want %v", musubi, got, slices.Sorted(maps.Keys(want)))
		}
	}
}

// TestComfyLoRAReferenceMerge merges the fixture's ComfyUI-named adapter (diffusion_model.blocks.i.attn.qkv_proj,
// mlp.fc1, ..., lora_A/lora_B, some .alpha) into zero weights and compares every changed tensor with the
// reference deltas of gen_h3_comfy_lora.py: upstream's own converter, huggingface/diffusers 58eb52c0
// scripts/convert_minimax_h3_to_diffusers.py convert_transformer_key, applied to each native delta
// (alpha/r)·B·A, and cross-checked there against diffusers' LoRA loader
// (_convert_non_diffusers_minimax_h3_lora_to_diffusers) and FastVideo PR #1674's copy of the converter.
//
// The row-order answer it pins: native adapters are trained on the reference model's state dict, which
// holds attn.qkv_proj as contiguous [q; k; v] (the raw shards' per-head interleave is undone at load) and
// mlp.fc1 as [gate; value]. So qkv_proj's B rows split in contiguous thirds onto to_q, to_k, to_v (A
// shared), and fc1's B halves swap onto ff.net.0.proj, whose value half comes first. The fixture separates
// the other readings (per-head interleaved QKV, fc1 rows kept) by more than 0.6 in absolute value.
func TestComfyLoRAReferenceMerge(t *testing.T) {
	testutil.ForEachFixture(t, "h3_comfy_lora", func(t *testing.T, fx *testutil.Fixture) {
		var meta struct {
			Strength float64        `json:"strength"`
			Modules  map[string]any `json:"modules"`
		}
		if err := fx.DecodeConfig(&meta); err != nil {
			t.Fatal(err)
		}
		ad := testutil.FixtureAdapter(t, fx)
		w := lora.TensorMap{}
		shapes := lora.Shapes{}
		var deltas []string
		for _, name := range fx.Names("delta.") {
			n := strings.TrimPrefix(name, "delta.")
			sh := fx.Info(t, name).Shape
			w[n] = &lora.Tensor{Shape: sh, Data: make([]float32, sh[0]*sh[1])}
			shapes[n] = sh
			deltas = append(deltas, n)
		}
		touched, err := lora.Merge([]lora.Weighted{{Adapter: ad, Strength: meta.Strength}}, LoRANames(), w)
		if err != nil {
			t.Fatal(err)
		}
		if touched[0].Modules != len(meta.Modules) || !slices.Equal(touched[0].Tensors, deltas) {
			t.Fatalf("merged %+v; the fixture has %d modules and deltas %v", touched, len(meta.Modules), deltas)
		}
		// The loader's path: planned against shapes alone, merged tensor by tensor.
		m, err := lora.NewMerger([]lora.Weighted{{Adapter: ad, Strength: meta.Strength}}, LoRANames(), shapes)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range deltas {
			want, sh := fx.F32(t, "delta."+n)
			testutil.AssertClose(t, n, w[n].Data, want, sh, testutil.ParityTol(want))
			got := make([]float32, len(want))
			if err := m.Apply(n, got); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, w[n].Data) {
				t.Errorf("%s: the tensor-by-tensor merge differs from Merge", n)
			}
		}
	})
}
