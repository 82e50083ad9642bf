package wan

import (
	"fmt"
	"regexp"
	"strings"

	"fastvideo/internal/lora"
)

// LoRANames maps LoRA adapter modules onto this package's checkpoint names (the diffusers
// WanTransformer3DModel names that Params lists), for lora.Merge.
//
// Native Wan names (ComfyUI, kohya, LightX2V, diffusion-pipe) follow diffusers'
// _convert_non_diffusers_wan_lora_to_diffusers (loaders/lora_conversion_utils.py); musubi-tuner's
// underscored names (blocks_0_self_attn_q) are read as the native dotted ones; diffusers names map to
// themselves. Beyond diffusers' converter: norm3 → norm2 (the affine cross-attention norm),
// <block>.modulation → the block's scale_shift_table and head.modulation → the output one (LightX2V's
// .diff_m deltas), which diffusers drops.
func LoRANames() lora.NameMap {
	return lora.NameMap{Model: "the Wan DiT", Map: LoRATarget, Hint: loraHint}
}

// nativeBlock maps the part of a native block module name after "blocks.i." onto diffusers'.
var nativeBlock = map[string]string{
	"self_attn.q": "attn1.to_q", "self_attn.k": "attn1.to_k", "self_attn.v": "attn1.to_v", "self_attn.o": "attn1.to_out.0",
	"cross_attn.q": "attn2.to_q", "cross_attn.k": "attn2.to_k", "cross_attn.v": "attn2.to_v", "cross_attn.o": "attn2.to_out.0",
	"cross_attn.k_img": "attn2.add_k_proj", "cross_attn.v_img": "attn2.add_v_proj",
	"ffn.0": "ffn.net.0.proj", "ffn.2": "ffn.net.2",
	"norm3": "norm2", "modulation": "scale_shift_table",
	// Self- and cross-attention q/k RMSNorms keep their names, as in diffusers.
	"self_attn.norm_q": "attn1.norm_q", "self_attn.norm_k": "attn1.norm_k",
	"cross_attn.norm_q": "attn2.norm_q", "cross_attn.norm_k": "attn2.norm_k",
	"cross_attn.norm_k_img": "attn2.norm_added_k",
}

// nativeTop maps native modules outside the blocks.
var nativeTop = map[string]string{
	"head.head": "proj_out", "head.modulation": "scale_shift_table",
	"text_embedding.0": "condition_embedder.text_embedder.linear_1", "text_embedding.2": "condition_embedder.text_embedder.linear_2",
	"time_embedding.0": "condition_embedder.time_embedder.linear_1", "time_embedding.2": "condition_embedder.time_embedder.linear_2",
	"time_projection.1": "condition_embedder.time_proj",
	"img_emb.proj.1":    "condition_embedder.image_embedder.ff.net.0.proj", "img_emb.proj.3": "condition_embedder.image_embedder.ff.net.2",
	// The image embedder's LayerNorms (LightX2V's I2V files carry their .diff/.diff_b).
	"img_emb.proj.0": "condition_embedder.image_embedder.norm1", "img_emb.proj.4": "condition_embedder.image_embedder.norm2",
	"patch_embedding": "patch_embedding",
}

// diffusersBlock are the diffusers module names inside a block (mapping to themselves).
var diffusersBlock = map[string]bool{
	"attn1.to_q": true, "attn1.to_k": true, "attn1.to_v": true, "attn1.to_out.0": true,
	"attn2.to_q": true, "attn2.to_k": true, "attn2.to_v": true, "attn2.to_out.0": true,
	"attn2.add_k_proj": true, "attn2.add_v_proj": true,
	"ffn.net.0.proj": true, "ffn.net.2": true, "norm2": true, "scale_shift_table": true,
	"attn1.norm_q": true, "attn1.norm_k": true, "attn2.norm_q": true, "attn2.norm_k": true, "attn2.norm_added_k": true,
}

var diffusersTop = map[string]bool{
	"proj_out": true, "scale_shift_table": true, "patch_embedding": true,
	"condition_embedder.text_embedder.linear_1": true, "condition_embedder.text_embedder.linear_2": true,
	"condition_embedder.time_embedder.linear_1": true, "condition_embedder.time_embedder.linear_2": true,
	"condition_embedder.time_proj":                    true,
	"condition_embedder.image_embedder.ff.net.0.proj": true, "condition_embedder.image_embedder.ff.net.2": true,
	"condition_embedder.image_embedder.norm1": true, "condition_embedder.image_embedder.norm2": true,
}

var blockName = regexp.MustCompile(`^blocks\.(\d+)\.(.+)$`)

// LoRATarget maps one normalized adapter module (native, diffusers or, when musubi, musubi's underscored
// form) onto the checkpoint tensors it changes.
func LoRATarget(module string, musubi bool) (lora.Target, bool) {
	if musubi {
		dotted, ok := musubiToNative(module)
		if !ok {
			return lora.Target{}, false
		}
		module = dotted
	}
	var base string
	if m := blockName.FindStringSubmatch(module); m != nil {
		rest := m[2]
		if n, ok := nativeBlock[rest]; ok {
			rest = n
		} else if !diffusersBlock[rest] {
			return lora.Target{}, false
		}
		base = "blocks." + m[1] + "." + rest
	} else if n, ok := nativeTop[module]; ok {
		base = n
	} else if diffusersTop[module] {
		base = module
	} else {
		return lora.Target{}, false
	}
	t := targetOf(base)
	// I2V-only layers: an I2V adapter's image cross-attention and image embedder have nothing to change in
	// a T2V (or Wan2.2-A14B) checkpoint; LightX2V ships such keys in adapters for models that lack them.
	t.Optional = strings.Contains(base, "add_k_proj") || strings.Contains(base, "add_v_proj") ||
		strings.Contains(base, "norm_added_k") || strings.Contains(base, "image_embedder")
	return t, true
}

// targetOf names the tensors of a diffusers module: tables are tensors themselves, norms of q/k have
// no bias, the rest are weight + bias.
func targetOf(base string) lora.Target {
	switch {
	case strings.HasSuffix(base, "scale_shift_table"):
		return lora.Target{Weight: base}
	case strings.HasSuffix(base, "norm_q") || strings.HasSuffix(base, "norm_k") || strings.HasSuffix(base, "norm_added_k"):
		return lora.Target{Weight: base + ".weight"}
	}
	return lora.Target{Weight: base + ".weight", Bias: base + ".bias"}
}

// musubiBlock are the underscored block modules of musubi/kohya names (the '.'→'_' spelling of the native
// and the diffusers names), musubiTop the ones outside the blocks.
var musubiBlock, musubiTop = func() (map[string]string, map[string]string) {
	b, t := map[string]string{}, map[string]string{}
	for k := range nativeBlock {
		b[strings.ReplaceAll(k, ".", "_")] = k
	}
	for k := range diffusersBlock {
		b[strings.ReplaceAll(k, ".", "_")] = k
	}
	for k := range nativeTop {
		t[strings.ReplaceAll(k, ".", "_")] = k
	}
	for k := range diffusersTop {
		t[strings.ReplaceAll(k, ".", "_")] = k
	}
	return b, t
}()

var musubiBlockName = regexp.MustCompile(`^blocks_(\d+)_(.+)$`)

// musubiToNative turns "blocks_0_self_attn_q" into "blocks.0.self_attn.q".
func musubiToNative(module string) (string, bool) {
	if m := musubiBlockName.FindStringSubmatch(module); m != nil {
		n, ok := musubiBlock[m[2]]
		return fmt.Sprintf("blocks.%s.%s", m[1], n), ok
	}
	n, ok := musubiTop[module]
	return n, ok
}

// loraHint names the family whose module names an unmatched adapter carries.
func loraHint(unmatched []string) string {
	if other := foreignLoRA(unmatched); other != "" {
		return "the keys look like " + other + ", not one for the Wan DiT; use an adapter trained for Wan"
	}
	return ""
}

// foreignLoRA recognizes the module names of other families' adapters.
func foreignLoRA(unmatched []string) string {
	for _, k := range unmatched {
		switch {
		case strings.Contains(k, "transformer_blocks.") || strings.Contains(k, "token_refiner") ||
			strings.Contains(k, "attn.qkv_proj") || strings.Contains(k, "mlp.fc1") || strings.Contains(k, "adaln_proj"):
			return "a MiniMax H3 adapter (transformer_blocks / token_refiner / qkv_proj / mlp.fc1 / adaln_proj names)"
		case strings.Contains(k, "double_blocks") || strings.Contains(k, "single_blocks"):
			return "a Flux or HunyuanVideo adapter (double_blocks / single_blocks names)"
		case strings.Contains(k, "lora_te") || strings.Contains(k, "text_encoder") || strings.Contains(k, "down_blocks") || strings.Contains(k, "up_blocks"):
			return "a Stable Diffusion UNet or text-encoder adapter"
		}
	}
	return ""
}
