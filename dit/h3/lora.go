package h3

import (
	"regexp"
	"strings"

	"fastvideo/internal/lora"
)

// LoRANames maps LoRA adapter modules in diffusers names (LightX2V's Minimax-h3-Turbo files:
// transformer_blocks.{i}. and token_refiner.refiner_blocks.{j}. × attn.to_q|to_k|to_v|to_out.0,
// ff.net.0.proj, ff.net.2, with .lora_{A,B}.default.weight) onto the released checkpoint's names, for
// lora.Merge into released (unconverted, unquantized) weights.
//
// ComfyUI-named adapters (blocks.i.attn.qkv_proj, mlp.fc1, ...) are refused: splitting their fused rows
// needs an order that upstream sources disagree on (contiguous [q;k;v] or per-head interleaved QKV;
// gate-first or value-first fc1: FastVideo's ComfyUI-H3 converter against vllm-omni
// vllm_omni/diffusion/models/minimax_h3/lora.py), and no reference merge has settled it yet.
//
// The AdaLN projections (transformer_blocks.i.adaln_proj.linear, norm_out.linear) map as full-rank
// linears: an adapter on them must be merged before the AdaLN step cache is built, and does not fit a
// checkpoint with a rank-reduced AdaLN basis (adaln_rank > 0; its projections are [.., rank]), which
// lora.Merge refuses by shape.
func LoRANames() lora.NameMap {
	return lora.NameMap{Model: "the H3 DiT", Map: LoRATarget, Hint: loraHint}
}

// coreLinears are the bias-free linears of a joint or refiner block (coreLinearNames without ".weight").
var coreLinears = map[string]bool{
	"attn.to_q": true, "attn.to_k": true, "attn.to_v": true, "attn.to_out.0": true,
	"ff.net.0.proj": true, "ff.net.2": true,
}

// biasedTop are the linears outside the blocks (weight and bias).
var biasedTop = map[string]bool{
	"proj_in": true, "audio_proj_in": true, "context_embedder": true, "time_embedder.linear_1": true,
	"time_embedder.linear_2": true, "norm_out.linear": true, "proj_out": true, "audio_proj_out": true,
}

var h3Block = regexp.MustCompile(`^(transformer_blocks\.\d+|token_refiner\.refiner_blocks\.\d+)\.(.+)$`)

// LoRATarget maps one normalized adapter module in released (diffusers) names onto the checkpoint
// tensors it changes; musubi-style names are not published for H3 and are not mapped.
func LoRATarget(module string, musubi bool) (lora.Target, bool) {
	if musubi {
		return lora.Target{}, false
	}
	if m := h3Block.FindStringSubmatch(module); m != nil {
		switch {
		case coreLinears[m[2]]:
			return lora.Target{Weight: module + ".weight"}, true
		case m[2] == "adaln_proj.linear" && strings.HasPrefix(m[1], "transformer_blocks."):
			return lora.Target{Weight: module + ".weight", Bias: module + ".bias"}, true
		}
		return lora.Target{}, false
	}
	if biasedTop[module] {
		return lora.Target{Weight: module + ".weight", Bias: module + ".bias"}, true
	}
	return lora.Target{}, false
}

// loraHint explains unmatched modules: ComfyUI names, or another family's adapter.
func loraHint(unmatched []string) string {
	for _, k := range unmatched {
		if strings.Contains(k, "qkv_proj") || strings.Contains(k, "mlp.fc1") || strings.Contains(k, "mlp.fc2") ||
			strings.Contains(k, "attn.out_proj") || strings.Contains(k, "final_layer.") {
			return "the keys are a ComfyUI-named H3 adapter (attn.qkv_proj / mlp.fc1), whose fused rows have a disputed " +
				"order this loader does not guess; use the diffusers-named release of the adapter (to_q/to_k/to_v, " +
				"ff.net.0.proj; LightX2V's files without _comfyui) or convert it to those names"
		}
	}
	for _, k := range unmatched {
		if strings.Contains(k, "self_attn.") || strings.Contains(k, "cross_attn.") || strings.Contains(k, "attn1.") ||
			strings.Contains(k, "attn2.") || strings.Contains(k, "lora_unet_blocks_") || strings.Contains(k, ".ffn.") {
			return "the keys look like a Wan adapter, not one for the H3 DiT; use an adapter trained for MiniMax H3"
		}
	}
	return ""
}
