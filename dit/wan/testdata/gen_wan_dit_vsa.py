# Golden fixtures for the Wan DiT forward with Video Sparse Attention on (kind "wan_dit_vsa"), from
# FastVideo's own modules on tiny random configs (float32; CPU or GPU, TF32 off):
#
#   FASTVIDEO_SRC=/path/to/FastVideo python3 dit/wan/testdata/gen_wan_dit_vsa.py OUT_DIR
#
# Writes OUT_DIR/wan_dit_vsa_tiny.{safetensors,json} (Wan2.1-style, 16 channels, one timestep; about 0.9 MB).
# No TI2V variant: upstream's WanTransformerBlock_VSA takes one timestep per sample only (its
# `scale_shift_table + temb` then chunk(6, dim=1) does not accept the per-token [1, L, 6, D] modulation of
# Wan2.2-TI2V; running it fails with a shape error).
#
# Upstream files (read unchanged; the folders fastvideo/ and fastvideo-kernel/python/ of the checkout):
#   fastvideo/models/dits/wanvideo.py (+ base.py)          WanTransformer3DModel, WanTransformerBlock_VSA
#   fastvideo/configs/models/dits/{base,wanvideo}.py, fastvideo/configs/models/base.py
#   fastvideo/attention/layer.py                           DistributedAttention_VSA, LocalAttention
#   fastvideo/attention/backends/{abstract,sdpa,video_sparse_attn}.py
#                                                          VideoSparseAttentionMetadataBuilder / Impl
#   fastvideo-kernel/python/fastvideo_kernel/ops.py        video_sparse_attn (body run unchanged, see below)
#   fastvideo/tests/attention/test_vsa_h3_metadata.py      reference_sparse_attention (the kernel oracle)
#   fastvideo/layers/*, fastvideo/models/{parameter,utils}.py, fastvideo/{envs,logger,forward_context}.py,
#   fastvideo/platforms/interface.py
# Stubs (plumbing only, internal/testutil/pyfv/fvupstream.py): package __init__ files not run, one-process
# distributed groups, the attention selector returning the real VIDEO_SPARSE_ATTN backend for the self-attention
# and TORCH_SDPA for the cross-attention, platform, profiler ranges, get_compute_dtype = float32. The VSA
# kernels (fastvideo_kernel, not installed) are bound as attention/testdata/gen_vsa.py does: ops.py's
# video_sparse_attn body unchanged with fused_block_mean = its docstring's "original compress",
# fused_topk_mask = torch.topk + scatter, block_sparse_attn = upstream's test oracle.
#
# How VSA reaches the forward, as DenoisingStage.forward does it (fastvideo/pipelines/stages/denoising.py):
# FASTVIDEO_ATTENTION_BACKEND=VIDEO_SPARSE_ATTN makes WanTransformer3DModel build WanTransformerBlock_VSA
# (with to_gate_compress), and each step runs the transformer inside set_forward_context(current_timestep,
# attn_metadata=VideoSparseAttentionMetadataBuilder().build(current_timestep, raw_latent_shape=(T, H, W),
# patch_size, VSA_sparsity, device)). Those two glue lines are restated here (the stage needs the pipeline
# framework).
#
# Weights: random, the fixtures README's recipe (sorted names; matrices randn/sqrt(fan_in), biases 0.05 randn,
# 1-D weights 1 + 0.1 randn; scale_shift_table [1,6,D] counts as a matrix), INCLUDING every block's
# to_gate_compress weight and bias, saved under the released (diffusers) names.
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../internal/testutil/pyfv"))
import fvupstream as fu  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else sys.exit("usage: gen_wan_dit_vsa.py OUT_DIR")
fu.bind()
fu.bind_vsa_kernels()
torch.backends.cuda.matmul.allow_tf32 = False
import fastvideo.forward_context as fctx  # noqa: E402
from fastvideo.attention.backends import video_sparse_attn as wan_vsa  # noqa: E402
from fastvideo.configs.models.dits.wanvideo import WanVideoArchConfig, WanVideoConfig  # noqa: E402

ARCH = dict(num_attention_heads=2, attention_head_dim=32, text_dim=32, freq_dim=256, ffn_dim=128, num_layers=2,
            cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, patch_size=(1, 2, 2))
# Latent 5x10x12 -> token grid 5x5x6 = 150 rows: (4,4,4) tiles 2x2x2 = 8, ragged on every axis.
LATENT = (5, 10, 12)
TEXT_TOKENS, TEXT_PAD = 10, 3
SPARSITIES = {"s60": 0.6, "s85": 0.85}
dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def model(channels, vsa):
    os.environ["FASTVIDEO_ATTENTION_BACKEND"] = "VIDEO_SPARSE_ATTN" if vsa else "TORCH_SDPA"
    fu.use_backend("VIDEO_SPARSE_ATTN" if vsa else None)
    cfg = WanVideoConfig(arch_config=WanVideoArchConfig(in_channels=channels, out_channels=channels, **ARCH))
    from fastvideo.models.dits.wanvideo import WanTransformer3DModel
    return WanTransformer3DModel(cfg, {}).eval()


def fixture(name, channels, seed):
    m = model(channels, True)
    fu.fill_random(m, seed)
    dense = model(channels, False)
    missing, unexpected = dense.load_state_dict(m.state_dict(), strict=False)
    assert not missing and unexpected and all("to_gate_compress" in n for n in unexpected), (missing, unexpected)
    m, dense = m.to(dev), dense.to(dev)
    g = torch.Generator().manual_seed(seed + 1)
    latent = torch.randn(1, channels, *LATENT, generator=g)
    text = torch.randn(1, TEXT_TOKENS, ARCH["text_dim"], generator=g)
    text[:, TEXT_TOKENS - TEXT_PAD:] = 0  # the Wan text stage's zero padding
    grid = (LATENT[0], LATENT[1] // 2, LATENT[2] // 2)
    timestep = torch.tensor([757], dtype=torch.long)
    args = dict(hidden_states=latent.to(dev), encoder_hidden_states=text.to(dev), timestep=timestep.to(dev))
    tensors = {"in.hidden_states": latent, "in.encoder_hidden_states": text, "in.timestep": timestep}
    with torch.no_grad(), fctx.set_forward_context(current_timestep=0, attn_metadata=None):
        ref = dense(**args)
    tensors["out.dense.sample"] = ref
    cases = {}
    for case, sparsity in SPARSITIES.items():
        md = wan_vsa.VideoSparseAttentionMetadataBuilder().build(current_timestep=0, raw_latent_shape=LATENT,
                                                                 patch_size=ARCH["patch_size"], VSA_sparsity=sparsity,
                                                                 device=dev)
        with torch.no_grad(), fctx.set_forward_context(current_timestep=0, attn_metadata=md):
            out = m(**args)
        n_tiles = int(md.variable_block_sizes.numel())
        topk = wan_vsa.compute_topk(sparsity, n_tiles)
        diff = (out - ref).abs().max().item()
        assert topk < n_tiles and diff > 100 * 1e-4 * max(1.0, out.abs().max().item()), (case, topk, diff)
        tensors[f"out.{case}.sample"] = out
        cases[case] = {"sparsity": sparsity, "num_video_tiles": n_tiles, "topk": topk, "max_abs_diff_from_dense": diff}
    weights, renamed = fu.released_weights(m)
    tensors.update(weights)
    meta = {
        "kind": "wan_dit_vsa", "module": "fastvideo.models.dits.wanvideo.WanTransformer3DModel with "
        "WanTransformerBlock_VSA (DistributedAttention_VSA -> fastvideo.attention.backends.video_sparse_attn)",
        "arch_config": fu.arch_json(m.config.arch_config), "renamed(fastvideo->released)": renamed,
        "vsa": {"raw_latent_shape": list(LATENT), "patch_size": list(ARCH["patch_size"]), "grid": list(grid),
                "tile_size": 64},
        "cases": cases,
        "notes": ["out.<case>.sample: the forward with VSA on at the case's sparsity (set_forward_context with "
                  "VideoSparseAttentionMetadataBuilder.build); out.dense.sample: the same weights without the "
                  "gates, dense WanTransformerBlock through TORCH_SDPA.",
                  "in.timestep: [757] int64.",
                  "Text: 10 tokens, the last 3 zero."],
        "device": str(dev), "env": fu.env_info(), "seed": seed,
    }
    fu.save(OUT, name, tensors, meta)
    return {k: round(c["max_abs_diff_from_dense"], 4) for k, c in cases.items()}


print("ok", OUT, fixture("wan_dit_vsa_tiny", 16, 4000))
