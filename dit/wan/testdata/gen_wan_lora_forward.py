# Golden fixture for the Wan DiT forward with a LoRA adapter merged into its weights (kind "wan_dit_lora"),
# from FastVideo's own modules on the tiny Wan config (float32; CPU or GPU, TF32 off):
#
#   FASTVIDEO_SRC=/path/to/FastVideo python3 dit/wan/testdata/gen_wan_lora_forward.py OUT_DIR
#
# Writes OUT_DIR/wan_dit_lora_tiny.{safetensors,json} (about 0.5 MB); copy both into dit/wan/testdata/, where
# dit/wan's TestLoRAForwardParity reads them. Needs torch >= 2.6 (linear.py sets torch._dynamo.config.recompile_limit).
#
# Upstream files (read unchanged; the folder fastvideo/ of the checkout):
#   fastvideo/models/dits/wanvideo.py (+ base.py), fastvideo/configs/models/dits/{base,wanvideo}.py,
#   fastvideo/configs/models/base.py, fastvideo/attention/{layer.py,backends/{abstract,sdpa}.py},
#   fastvideo/layers/*, fastvideo/models/{parameter,utils}.py, fastvideo/{envs,logger,forward_context}.py,
#   fastvideo/platforms/interface.py                      WanTransformer3DModel, dense (TORCH_SDPA)
#   fastvideo/layers/lora/linear.py                       BaseLayerWithLoRA.set_lora_weights -> merge_lora_weights:
#                                                         W += strength * (int(alpha) / rank) * B @ A, in the
#                                                         weight's dtype (FastVideo's loader merges at load,
#                                                         fastvideo/pipelines/lora_pipeline.py)
# Stubs (plumbing only, internal/testutil/pyfv/fvupstream.py): package __init__ files not run, one-process
# distributed groups, the attention selector returning TORCH_SDPA, platform, profiler ranges,
# get_compute_dtype = float32; here also fastvideo.utils.get_mixed_precision_state (used only for FSDP-sharded
# weights, absent here), TORCH_COMPILE_DISABLE=1 (linear.py's forward is not run: the merged base layers are), and
# fastvideo.layers.vocab_parallel_embedding when the real one does not import.
#
# Glue restated (lora_pipeline.py's key renaming needs the pipeline framework): the adapter is written in the
# native Wan names of ComfyUI/LightX2V files (diffusion_model.blocks.i.self_attn.q, ...), which
# diffusers' _convert_non_diffusers_wan_lora_to_diffusers maps onto the released names by the table NATIVE
# below; each target's FastVideo module is found through the model's own param_names_mapping (fvupstream's
# released_names), wrapped in BaseLayerWithLoRA and merged with set_lora_weights(A, B, lora_alpha, strength).
# Alphas are integers so that upstream's int(lora_alpha) is exact; the script checks every merged weight
# against W + strength * (alpha / rank) * B @ A.
#
# Weights: random, the fixtures README's recipe (fvupstream.fill_random); the adapter: A and B randn * 0.2
# (seeded), so that the merged forward differs clearly from the base one.
import os
import sys
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../internal/testutil/pyfv"))
import fvupstream as fu  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else sys.exit("usage: gen_wan_lora_forward.py OUT_DIR")
os.environ["TORCH_COMPILE_DISABLE"] = "1"
fu.bind()
torch.backends.cuda.matmul.allow_tf32 = False
import fastvideo.forward_context as fctx  # noqa: E402
from fastvideo.configs.models.dits.wanvideo import WanVideoArchConfig, WanVideoConfig  # noqa: E402

ARCH = dict(num_attention_heads=2, attention_head_dim=32, text_dim=32, freq_dim=256, ffn_dim=128, num_layers=2,
            cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, patch_size=(1, 2, 2))
CHANNELS = 16
LATENT = (3, 6, 8)
TEXT_TOKENS, TEXT_PAD = 10, 3
STRENGTH = 0.7
# native module -> (released module, rank, alpha): diffusers' converter's names for these layers.
NATIVE = {
    "blocks.0.self_attn.q": ("blocks.0.attn1.to_q", 4, 8),
    "blocks.0.self_attn.v": ("blocks.0.attn1.to_v", 2, 2),
    "blocks.1.cross_attn.o": ("blocks.1.attn2.to_out.0", 4, 2),
    "blocks.0.ffn.0": ("blocks.0.ffn.net.0.proj", 4, 4),
    "blocks.1.ffn.2": ("blocks.1.ffn.net.2", 8, 4),
    "head.head": ("proj_out", 2, 1),
}
dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_lora_linear():
    """fastvideo/layers/lora/linear.py, unchanged, with the few plumbing names it imports beyond fvupstream's."""
    utils = sys.modules["fastvideo.utils"]
    if not hasattr(utils, "get_mixed_precision_state"):
        utils.get_mixed_precision_state = lambda: sys.exit("FSDP mixed precision is not used by an unsharded merge")
    try:
        __import__("fastvideo.layers.vocab_parallel_embedding")
    except Exception:  # noqa: BLE001 - only the class name is imported; no embedding is wrapped here
        m = types.ModuleType("fastvideo.layers.vocab_parallel_embedding")
        m.VocabParallelEmbedding = type("VocabParallelEmbedding", (torch.nn.Module,), {})
        sys.modules[m.__name__] = m
    return fu.load_file("fastvideo.layers.lora.linear", "fastvideo/layers/lora/linear.py")


def model():
    os.environ["FASTVIDEO_ATTENTION_BACKEND"] = "TORCH_SDPA"
    fu.use_backend(None)
    cfg = WanVideoConfig(arch_config=WanVideoArchConfig(in_channels=CHANNELS, out_channels=CHANNELS, **ARCH))
    from fastvideo.models.dits.wanvideo import WanTransformer3DModel
    return WanTransformer3DModel(cfg, {}).eval()


def fixture(name, seed):
    linear = load_lora_linear()
    m = model()
    fu.fill_random(m, seed)
    m = m.to(dev)
    weights, renamed = fu.released_weights(m)
    base = {k: v.detach().clone().cpu() for k, v in weights.items()}  # before the merge
    fv_of = {rel: fv for fv, rel in fu.released_names(m, m.param_names_mapping).items()}

    g = torch.Generator().manual_seed(seed + 1)
    latent = torch.randn(1, CHANNELS, *LATENT, generator=g)
    text = torch.randn(1, TEXT_TOKENS, ARCH["text_dim"], generator=g)
    text[:, TEXT_TOKENS - TEXT_PAD:] = 0  # the Wan text stage's zero padding
    timestep = torch.tensor([757], dtype=torch.long)
    args = dict(hidden_states=latent.to(dev), encoder_hidden_states=text.to(dev), timestep=timestep.to(dev))
    with torch.no_grad(), fctx.set_forward_context(current_timestep=0, attn_metadata=None):
        out_base = m(**args).cpu()

    adapter, modules = {}, {}
    for native, (released, rank, alpha) in NATIVE.items():
        fv = fv_of[released + ".weight"]
        layer = m.get_submodule(fv[: -len(".weight")])
        out_dim, in_dim = layer.weight.shape
        a = 0.2 * torch.randn(rank, in_dim, generator=g)
        b = 0.2 * torch.randn(out_dim, rank, generator=g)
        w0 = layer.weight.detach().clone()
        wrapped = linear.BaseLayerWithLoRA(layer)
        wrapped.set_lora_weights(a.to(dev), b.to(dev), lora_alpha=float(alpha), strength=STRENGTH)
        assert wrapped.merged and layer.weight.data_ptr() != 0
        want = w0 + STRENGTH * (alpha / rank) * (b.to(dev) @ a.to(dev))
        assert torch.allclose(layer.weight, want, atol=1e-6, rtol=1e-6), native
        key = "diffusion_model." + native
        adapter[key + ".lora_down.weight"] = a
        adapter[key + ".lora_up.weight"] = b
        adapter[key + ".alpha"] = torch.tensor(float(alpha))
        modules[native] = {"released": released, "fastvideo": fv, "rank": rank, "alpha": alpha,
                           "shape": [out_dim, in_dim]}

    with torch.no_grad(), fctx.set_forward_context(current_timestep=0, attn_metadata=None):
        out_lora = m(**args).cpu()
    diff = (out_lora - out_base).abs().max().item()
    assert diff > 100 * 1e-4 * max(1.0, out_lora.abs().max().item()), diff

    tensors = {"in.hidden_states": latent, "in.encoder_hidden_states": text, "in.timestep": timestep,
               "out.base.sample": out_base, "out.lora.sample": out_lora}
    tensors.update(base)
    tensors.update({"lora." + k: v for k, v in adapter.items()})
    meta = {
        "kind": "wan_dit_lora", "module": "fastvideo.models.dits.wanvideo.WanTransformer3DModel (TORCH_SDPA) with "
        "fastvideo.layers.lora.linear.BaseLayerWithLoRA.set_lora_weights merged into its linears",
        "arch_config": fu.arch_json(m.config.arch_config), "renamed(fastvideo->released)": renamed,
        "lora": {"strength": STRENGTH, "modules": modules},
        "notes": ["w.*: the base weights (before the merge), released names.",
                  "lora.*: the adapter file's tensors (native Wan names, lora_down/lora_up/alpha), F32.",
                  "out.base.sample: the forward of the base weights; out.lora.sample: the same inputs after the merge.",
                  "in.timestep: [757] int64. Text: 10 tokens, the last 3 zero."],
        "device": str(dev), "env": fu.env_info(), "seed": seed, "max_abs_diff_from_base": diff,
    }
    fu.save(OUT, name, tensors, meta)
    return diff


print("ok", OUT, fixture("wan_dit_lora_tiny", 4100))
