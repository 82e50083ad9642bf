package h3

import (
	"fmt"
	"regexp"
	"strings"

	"fastvideo/internal/lora"
)

// LoRANames maps LoRA adapter modules onto the released checkpoint's (diffusers) names, for lora.Merge
// into released (unconverted, unquantized) weights. Two namings are published:
//
//   - diffusers names (LightX2V's Minimax-h3-Turbo files: transformer_blocks.{i}. and
//     token_refiner.refiner_blocks.{j}. × attn.to_q|to_k|to_v|to_out.0, ff.net.0.proj, ff.net.2, with
//     .lora_{A,B}.default.weight), mapped name for name;
//   - the native (reference / ComfyUI) names of larryvrh's, drbaph's and LightX2V's _comfyui files, also
//     under musubi-tuner's lora_unet_ flattening: blocks.{i}. and token_refiner.blocks.{j}. ×
//     attn.qkv_proj, attn.out_proj, mlp.fc1, mlp.fc2, blocks.{i}.adaln_proj.linear, and the top-level
//     projections (final_layer.adaln_proj.linear -> norm_out.linear, video_patch_proj -> proj_in, ...).
//
// Native row order (settled by a reference merge, dit/h3/testdata/gen_h3_comfy_lora.py): these adapters
// are trained on the reference model, whose state dict holds qkv_proj as [q_all; k_all; v_all] (it
// de-interleaves the raw shards' per-head [h0: q k v, h1: q k v, ...] rows at load time) and fc1 as
// [gate; value]. diffusers' base converter (scripts/convert_minimax_h3_to_diffusers.py
// convert_transformer_key, huggingface/diffusers 58eb52c0) and its LoRA loader
// (_convert_non_diffusers_minimax_h3_lora_to_diffusers) therefore split qkv_proj's B rows in contiguous
// thirds onto to_q, to_k, to_v (A shared) and swap fc1's B halves onto ff.net.0.proj's [value; gate].
// DiffSynth-Studio files (native names under PEFT's .default. infix) keep the raw per-head interleave;
// their qkv_proj is refused (LoRACheck) rather than de-interleaved.
//
// The AdaLN projections (transformer_blocks.i.adaln_proj.linear, norm_out.linear) map as full-rank
// linears: an adapter on them must be merged before the AdaLN step cache is built, and does not fit a
// checkpoint with a rank-reduced AdaLN basis (adaln_rank > 0; its projections are [.., rank]), which
// lora.Merge refuses by shape.
func LoRANames() lora.NameMap {
	return lora.NameMap{Model: "the H3 DiT", Map: LoRATarget, Hint: loraHint, Check: LoRACheck}
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

// LoRATarget maps one normalized adapter module, in released (diffusers) or native names (musubi:
// native names with '_' for '.'), onto the checkpoint tensors it changes.
func LoRATarget(module string, musubi bool) (lora.Target, bool) {
	if musubi {
		for _, m := range musubiNative {
			if m.re.MatchString(module) {
				return nativeTarget(m.re.ReplaceAllString(module, m.repl))
			}
		}
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
	return nativeTarget(module)
}

// nativeTop renames the native projections outside the blocks (diffusers' standalone_renames).
var nativeTop = map[string]string{
	"video_patch_proj": "proj_in", "audio_patch_proj": "audio_proj_in", "condition_proj": "context_embedder",
	"time_embedder.proj_in": "time_embedder.linear_1", "time_embedder.proj_out": "time_embedder.linear_2",
	"final_layer.adaln_proj.linear": "norm_out.linear", "final_layer.video_out": "proj_out",
	"final_layer.audio_out": "audio_proj_out",
}

var nativeBlock = regexp.MustCompile(`^(blocks|token_refiner\.blocks)\.(\d+)\.(.+)$`)

// musubiNative recovers native dot paths from musubi-tuner's flattened names (H3's own names hold
// underscores), as diffusers' _convert_non_diffusers_minimax_h3_lora_to_diffusers does.
var musubiNative = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`^blocks_(\d+)_attn_(qkv|out)_proj$`), "blocks.$1.attn.${2}_proj"},
	{regexp.MustCompile(`^blocks_(\d+)_mlp_fc([12])$`), "blocks.$1.mlp.fc$2"},
	{regexp.MustCompile(`^blocks_(\d+)_adaln_proj_linear$`), "blocks.$1.adaln_proj.linear"},
	{regexp.MustCompile(`^token_refiner_blocks_(\d+)_attn_(qkv|out)_proj$`), "token_refiner.blocks.$1.attn.${2}_proj"},
	{regexp.MustCompile(`^token_refiner_blocks_(\d+)_mlp_fc([12])$`), "token_refiner.blocks.$1.mlp.fc$2"},
	{regexp.MustCompile(`^(video|audio)_patch_proj$`), "${1}_patch_proj"},
	{regexp.MustCompile(`^condition_proj$`), "condition_proj"},
	{regexp.MustCompile(`^time_embedder_proj_(in|out)$`), "time_embedder.proj_$1"},
	{regexp.MustCompile(`^final_layer_adaln_proj_linear$`), "final_layer.adaln_proj.linear"},
	{regexp.MustCompile(`^final_layer_(video|audio)_out$`), "final_layer.${1}_out"},
}

// nativeTarget maps a native (reference / ComfyUI) module name: qkv_proj's output rows in contiguous
// thirds onto to_q, to_k, to_v; fc1's gate-first halves swapped onto ff.net.0.proj (value first); the
// rest renamed.
func nativeTarget(module string) (lora.Target, bool) {
	if t, ok := nativeTop[module]; ok {
		return lora.Target{Weight: t + ".weight", Bias: t + ".bias"}, true
	}
	m := nativeBlock.FindStringSubmatch(module)
	if m == nil {
		return lora.Target{}, false
	}
	p := "transformer_blocks." + m[2] + "."
	if m[1] == "token_refiner.blocks" {
		p = "token_refiner.refiner_blocks." + m[2] + "."
	}
	switch m[3] {
	case "attn.qkv_proj":
		return lora.Target{Rows: []lora.RowBlock{
			{Weight: p + "attn.to_q.weight", From: 0, Of: 3, To: 0, Into: 1},
			{Weight: p + "attn.to_k.weight", From: 1, Of: 3, To: 0, Into: 1},
			{Weight: p + "attn.to_v.weight", From: 2, Of: 3, To: 0, Into: 1},
		}}, true
	case "mlp.fc1":
		return lora.Target{Rows: []lora.RowBlock{
			{Weight: p + "ff.net.0.proj.weight", From: 1, Of: 2, To: 0, Into: 2}, // value
			{Weight: p + "ff.net.0.proj.weight", From: 0, Of: 2, To: 1, Into: 2}, // gate
		}}, true
	case "attn.out_proj":
		return lora.Target{Weight: p + "attn.to_out.0.weight"}, true
	case "mlp.fc2":
		return lora.Target{Weight: p + "ff.net.2.weight"}, true
	case "adaln_proj.linear":
		if m[1] == "blocks" {
			return lora.Target{Weight: p + "adaln_proj.linear.weight", Bias: p + "adaln_proj.linear.bias"}, true
		}
	}
	return lora.Target{}, false
}

// LoRACheck refuses a native qkv_proj whose keys carry PEFT's adapter infix: DiffSynth-Studio's files,
// trained on the raw checkpoint's per-head interleaved rows (diffusers de-interleaves them with a
// 128-wide head), which the contiguous split of nativeTarget would scramble.
func LoRACheck(u *lora.Update, t lora.Target) error {
	if u.PEFTAdapter != "" && len(t.Rows) == 3 && strings.HasSuffix(t.Rows[0].Weight, "attn.to_q.weight") {
		return fmt.Errorf("module %q (key %q): native H3 names under PEFT's adapter infix %q are DiffSynth-Studio's layout, "+
			"whose fused qkv_proj rows are interleaved per head ([head0: q k v, head1: q k v, ...]); this loader splits them "+
			"only in the reference layout ([q; k; v]): convert the adapter to diffusers names first (diffusers' "+
			"MiniMaxH3LoraLoaderMixin does)", u.Module, u.Keys[0], u.PEFTAdapter)
	}
	return nil
}

// loraHint explains unmatched modules: another family's adapter.
func loraHint(unmatched []string) string {
	for _, k := range unmatched {
		if strings.Contains(k, "self_attn.") || strings.Contains(k, "cross_attn.") || strings.Contains(k, "attn1.") ||
			strings.Contains(k, "attn2.") || strings.Contains(k, "lora_unet_blocks_") || strings.Contains(k, ".ffn.") {
			return "the keys look like a Wan adapter, not one for the H3 DiT; use an adapter trained for MiniMax H3"
		}
	}
	return ""
}
