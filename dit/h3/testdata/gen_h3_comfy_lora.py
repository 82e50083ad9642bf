# Reference merge of a ComfyUI-named MiniMax H3 LoRA adapter (kind "h3_comfy_lora"): which rows of the fused
# native projections (attn.qkv_proj, mlp.fc1) land in which diffusers weight, from upstream's own converters.
#
#   DIFFUSERS_SRC=/path/to/diffusers [FASTVIDEO_PR_SRC=/path/to/FastVideo@86507749e] \
#       /usr/bin/python3 dit/h3/testdata/gen_h3_comfy_lora.py OUT_DIR
#
# Writes OUT_DIR/h3_comfy_lora_tiny.{safetensors,json} (about 2 MB); copy both into dit/h3/testdata/, where
# dit/h3's TestComfyLoRAReferenceMerge reads them. Needs torch (1.13 works) and nothing else: safetensors is
# written by hand below when the package is absent.
#
# Upstream files (read unchanged; checkouts made with `git archive`):
#   huggingface/diffusers 58eb52c0803ea9af3abec60841c2a093bdf1f951 (file added by f53d552036, "Add MiniMax-H3
#   (#14355)"):
#     scripts/convert_minimax_h3_to_diffusers.py   convert_transformer_key: the base checkpoint converter from
#         the reference model's state-dict layout (the layout a LoRA trained on the reference model has) to
#         the diffusers names our DiT loads. qkv_proj -> to_q/to_k/to_v by contiguous thirds (split_fused_qkv);
#         mlp.fc1 -> ff.net.0.proj with its halves swapped ([gate; value] -> [value; gate]); renames.
#         reorder_interleaved_qkv is the raw-shard per-head de-interleave that convert_transformer applies to
#         checkpoint shards *before* convert_transformer_key ("mirroring the reference's load-time
#         transform"): it is not part of the state-dict layout a LoRA delta has, and is used here only to
#         show that the fixture tells the two readings apart.
#     src/diffusers/loaders/lora_conversion_utils.py   _convert_non_diffusers_minimax_h3_lora_to_diffusers
#         (a0b3a073d6 "Support DiffSynth-Studio MiniMax-H3 LoRAs (#14484)", 8c3dcd6da1 "Add LoRA loading
#         support for MiniMax-H3 (#14408)"): diffusers' own loader for these adapters. Cross-check: its
#         converted pairs must give the same deltas. It de-interleaves QKV per head only for DiffSynth-Studio
#         files (native names under PEFT's ".default." infix); every other producer (ComfyUI, the reference
#         generate.py, ai-toolkit, musubi) trains on the reference model after its load-time reorder.
#   hao-ai-lab/FastVideo 86507749e1a9aeb072c328ea5f4f4fbc2352bf21 ("add MiniMax H3", PR #1674; the file was
#   removed again by 85c910af0 in the same PR):
#     scripts/checkpoint_conversion/convert_minimax_h3_to_diffusers.py   convert_transformer_key, FastVideo's copy
#         of the same contract (its tests pin diffusers' script by SHA-256 86f61f62..., which the diffusers
#         file above has). Optional second cross-check (FASTVIDEO_PR_SRC).
# Stubs (plumbing only): diffusers.models.autoencoders.autoencoder_kl_minimax_h3_audio (used only by the audio-VAE
# converter), diffusers.utils.constants.SAFE_WEIGHTS_INDEX_NAME, and safetensors when not installed (only the
# scripts' file I/O uses it). lora_conversion_utils' one function is executed verbatim from its file (its module
# imports the diffusers package).
#
# The adapter: ComfyUI names under the diffusion_model. prefix, lora_A/lora_B, rank 4, seeded randn * 0.2,
# float32, `.alpha` on some modules (scale alpha/rank; none: alpha = rank, scale 1). Shapes of the tiny H3 DiT
# (h3_dit_tiny.json: hidden 128, 2 heads of 64, ffn 256, time_embed_dim 32). Reference: for every module,
# dW = (alpha/rank) * B @ A in float64, converted by convert_transformer_key as a weight of that module, stored
# as delta.<diffusers name> in float32 (strength 1).
import ast
import importlib.util
import json
import os
import re
import struct
import sys
import types

import numpy as np
import torch

OUT = sys.argv[1] if len(sys.argv) > 1 else sys.exit("usage: gen_h3_comfy_lora.py OUT_DIR")
DIFFUSERS = os.environ.get("DIFFUSERS_SRC") or sys.exit("set DIFFUSERS_SRC to a diffusers checkout")
FV_PR = os.environ.get("FASTVIDEO_PR_SRC", "")
DIFFUSERS_COMMIT = "58eb52c0803ea9af3abec60841c2a093bdf1f951"
FASTVIDEO_PR_COMMIT = "86507749e1a9aeb072c328ea5f4f4fbc2352bf21"

# The tiny H3 DiT (dit/h3/testdata/h3_dit_tiny.json arch_config), in the converter's config keys.
CONFIG = {
    "num_attention_heads": 2, "attention_head_dim": 64, "hidden_size": 128, "num_layers": 2, "num_refiner_layers": 1,
    "ffn_dim": 256, "in_channels": 24, "audio_in_channels": 32, "patch_size": [1, 2, 2], "text_dim": 64,
    "freq_dim": 256, "time_embed_hidden_dim": 64, "time_embed_dim": 32, "rope_freq_dim": 8, "rope_theta": 10000.0,
    "norm_eps": 1e-5, "qk_norm_eps": 1e-5, "final_norm_eps": 1e-5,
}
RANK = 4
# module (native/ComfyUI name) -> alpha (None: no .alpha key)
MODULES = {
    "blocks.0.attn.qkv_proj": 2.0,
    "blocks.0.attn.out_proj": None,
    "blocks.0.mlp.fc1": 8.0,
    "blocks.0.mlp.fc2": None,
    "blocks.0.adaln_proj.linear": 1.0,
    "blocks.1.attn.qkv_proj": None,
    "token_refiner.blocks.0.attn.qkv_proj": None,
    "token_refiner.blocks.0.attn.out_proj": 4.0,
    "token_refiner.blocks.0.mlp.fc1": None,
    "token_refiner.blocks.0.mlp.fc2": None,
    "final_layer.adaln_proj.linear": None,
}


def stub(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def defs(path, names, ns):
    """Executes the named top-level functions of path verbatim in namespace ns."""
    tree = ast.parse(open(path).read())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), ns)
    missing = [n for n in names if n not in ns]
    if missing:
        sys.exit(f"{path}: no top-level {missing}")
    return ns


try:
    import safetensors  # noqa: F401
except ImportError:
    stub("safetensors", safe_open=None)
    stub("safetensors.torch", save_file=None)
for pkg in ("diffusers", "diffusers.models", "diffusers.models.autoencoders", "diffusers.utils"):
    if pkg not in sys.modules:
        stub(pkg, __path__=[])
stub("diffusers.models.autoencoders.autoencoder_kl_minimax_h3_audio", AutoencoderKLMiniMaxH3Audio=object)
stub("diffusers.utils.constants", SAFE_WEIGHTS_INDEX_NAME="diffusion_pytorch_model.safetensors.index.json")

conv = load(os.path.join(DIFFUSERS, "scripts/convert_minimax_h3_to_diffusers.py"), "convert_minimax_h3_to_diffusers")
lcu = defs(os.path.join(DIFFUSERS, "src/diffusers/loaders/lora_conversion_utils.py"),
           ["_convert_non_diffusers_minimax_h3_lora_to_diffusers"], {"re": re, "torch": torch})
fv = load(os.path.join(FV_PR, "scripts/checkpoint_conversion/convert_minimax_h3_to_diffusers.py"),
          "fv_convert_minimax_h3_to_diffusers") if FV_PR else None

plan = conv.get_transformer_key_plan(CONFIG)
g = torch.Generator().manual_seed(20261204)
adapter, expected, native = {}, {}, {}
for module, alpha in MODULES.items():
    (target0, shape0), *_ = plan[module + ".weight"]
    out = sum(s[0] for _, s in plan[module + ".weight"])
    a = (torch.randn(RANK, shape0[1], generator=g) * 0.2).float()
    b = (torch.randn(out, RANK, generator=g) * 0.2).float()
    adapter[f"diffusion_model.{module}.lora_A.weight"] = a
    adapter[f"diffusion_model.{module}.lora_B.weight"] = b
    if alpha is not None:
        adapter[f"diffusion_model.{module}.alpha"] = torch.tensor(alpha, dtype=torch.float32)
    scale = (alpha if alpha is not None else RANK) / RANK
    dw = scale * (b.double() @ a.double())
    native[module] = dw
    converted = conv.convert_transformer_key(module + ".weight", dw, CONFIG)
    want = plan[module + ".weight"]
    if [k for k, _ in converted] != [k for k, _ in want]:
        sys.exit(f"{module}: converter produced {[k for k, _ in converted]}, plan says {want}")
    for (name, t), (_, shape) in zip(converted, want):
        if list(t.shape) != list(shape):
            sys.exit(f"{module} -> {name}: shape {list(t.shape)}, plan says {shape}")
        expected[name] = t

# Cross-check 1: diffusers' own LoRA loader conversion (folds alpha into the factors).
checks = {}
lora_sd = lcu["_convert_non_diffusers_minimax_h3_lora_to_diffusers"]({k: v.clone() for k, v in adapter.items()})
worst = 0.0
for name, t in expected.items():
    base = "transformer." + name.removesuffix(".weight")
    a, b = lora_sd.pop(base + ".lora_A.weight"), lora_sd.pop(base + ".lora_B.weight")
    worst = max(worst, (b.double() @ a.double() - t).abs().max().item())
if lora_sd:
    sys.exit(f"diffusers' LoRA converter produced targets the base converter did not: {sorted(lora_sd)}")
if worst > 1e-6:
    sys.exit(f"diffusers' LoRA converter disagrees with convert_transformer_key by {worst}")
checks["diffusers_lora_converter_max_abs_diff"] = worst

# Cross-check 2: FastVideo PR #1674's copy of the converter.
if fv is not None:
    worst = 0.0
    for module, dw in native.items():
        for name, t in fv.convert_transformer_key(module + ".weight", dw, CONFIG):
            worst = max(worst, (t - expected[name]).abs().max().item())
    if worst != 0.0:
        sys.exit(f"FastVideo PR #1674's convert_transformer_key disagrees by {worst}")
    checks["fastvideo_pr1674_converter_max_abs_diff"] = worst

# The fixture must tell the disputed readings apart: each alternative misplaces rows by this much.
alt = {"qkv_per_head_interleaved (raw-shard de-interleave applied to B rows)": 0.0,
       "fc1_rows_kept (no gate/value swap)": 0.0}
for module, dw in native.items():
    if module.endswith("attn.qkv_proj"):
        re_dw = conv.reorder_interleaved_qkv(dw, CONFIG["num_attention_heads"], CONFIG["attention_head_dim"])
        for name, t in conv.convert_transformer_key(module + ".weight", re_dw, CONFIG):
            k = "qkv_per_head_interleaved (raw-shard de-interleave applied to B rows)"
            alt[k] = max(alt[k], (t - expected[name]).abs().max().item())
    if module.endswith("mlp.fc1"):
        (name, _), = plan[module + ".weight"]
        k = "fc1_rows_kept (no gate/value swap)"
        alt[k] = max(alt[k], (dw - expected[name]).abs().max().item())
for k, v in alt.items():
    if v < 1e-2:
        sys.exit(f"the fixture does not separate the reading {k}: max diff {v}")

tensors = {"lora." + k: v for k, v in adapter.items()}
tensors.update({"delta." + k: v.float() for k, v in expected.items()})
meta = {
    "kind": "h3_comfy_lora",
    "strength": 1.0,
    "rank": RANK,
    "config": CONFIG,
    "modules": {m: {"alpha": a, "targets": [n for n, _ in plan[m + ".weight"]]} for m, a in MODULES.items()},
    "reference": {
        "repo": "huggingface/diffusers",
        "commit": DIFFUSERS_COMMIT,
        "path": "scripts/convert_minimax_h3_to_diffusers.py",
        "function": "convert_transformer_key (split_fused_qkv for attn.qkv_proj; [gate; value] -> [value; gate] for mlp.fc1)",
        "input_layout": "the reference model's state-dict layout, after its load-time QKV reorder (_reorder_grouped_qkv_to_qkv): "
                        "qkv_proj rows [q_all; k_all; v_all], fc1 rows [gate; value]",
        "raw_shards": "raw checkpoint shards hold qkv_proj per-head interleaved [h0: q k v, h1: q k v, ...]; convert_transformer "
                      "applies reorder_interleaved_qkv to them before convert_transformer_key. A LoRA trained on the reference "
                      "model (ComfyUI, generate.py, ai-toolkit, musubi) has the state-dict layout, so no de-interleave.",
        "lora_loader": {
            "repo": "huggingface/diffusers", "commit": DIFFUSERS_COMMIT,
            "path": "src/diffusers/loaders/lora_conversion_utils.py",
            "function": "_convert_non_diffusers_minimax_h3_lora_to_diffusers",
            "note": "same row order (contiguous QKV thirds; fc1 halves swapped; lora_A shared/untouched); de-interleaves "
                    "QKV per head (head_dim 128) only for DiffSynth-Studio files, i.e. native names with PEFT's "
                    "'.default.' infix",
        },
        "fastvideo_copy": {
            "repo": "hao-ai-lab/FastVideo", "commit": FASTVIDEO_PR_COMMIT, "pr": 1674,
            "path": "scripts/checkpoint_conversion/convert_minimax_h3_to_diffusers.py", "function": "convert_transformer_key",
            "checked": fv is not None,
        },
    },
    "answer": {
        "qkv_proj": "B rows [0,inner) -> to_q, [inner,2inner) -> to_k, [2inner,3inner) -> to_v; A shared",
        "mlp.fc1": "B rows [ffn,2ffn) (value) -> ff.net.0.proj rows [0,ffn); B rows [0,ffn) (gate) -> rows [ffn,2ffn)",
        "renames": "blocks.i -> transformer_blocks.i, token_refiner.blocks.j -> token_refiner.refiner_blocks.j, "
                   "attn.out_proj -> attn.to_out.0, mlp.fc2 -> ff.net.2, adaln_proj.linear unchanged, "
                   "final_layer.adaln_proj.linear -> norm_out.linear",
    },
    "checks": checks,
    "alternative_readings_max_abs_diff": alt,
    "env": {"torch": torch.__version__, "python": sys.version.split()[0]},
}


def save(path, tensors, metadata):
    """safetensors by hand: u64 header length, JSON header (sorted names), raw little-endian data."""
    codes = {torch.float32: "F32"}
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        raw = t.numpy().astype(np.dtype(t.numpy().dtype).newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


meta["tensors"] = {k: [list(v.shape), "float32"] for k, v in sorted(tensors.items())}
js = json.dumps(meta, indent=1)
os.makedirs(OUT, exist_ok=True)
save(os.path.join(OUT, "h3_comfy_lora_tiny.safetensors"), tensors, {"refgen": js})
with open(os.path.join(OUT, "h3_comfy_lora_tiny.json"), "w") as f:
    f.write(js + "\n")
print(json.dumps({"checks": checks, "alternatives": alt}, indent=1))
