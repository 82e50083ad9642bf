# Golden fixture for the MiniMax H3 DiT forward with Video Sparse Attention on (kind "h3_dit_vsa"), from
# FastVideo's own modules on a tiny random config (float32; CPU or GPU, TF32 off):
#
#   FASTVIDEO_SRC=/path/to/FastVideo python3 dit/h3/testdata/gen_h3_dit_vsa.py OUT_DIR [wide]
#
# Writes OUT_DIR/h3_dit_vsa_tiny.{safetensors,json} (about 1 MB). With "wide": another width, head count, text
# length and latent grid (h3_dit_vsa_wide), plus an "h3_dit" fixture of the same weights and document with
# the timesteps of a real ladder and upstream's scheduler step (h3_dit_wide): the second geometry every
# H3 DiT parity, quant and VSA test must also pass, so that none hard-codes the first fixture's.
#
# Upstream files (read unchanged; the folders fastvideo/ and fastvideo-kernel/python/ of the checkout):
#   fastvideo/models/dits/minimax_h3.py (+ minimax_h3_fusions/, base.py)  MiniMaxH3Transformer3DModel
#   fastvideo/configs/models/dits/{base,minimax_h3}.py, fastvideo/configs/models/base.py
#   fastvideo/attention/layer.py                             DistributedAttention_VSA (joint blocks)
#   fastvideo/attention/backends/{abstract,sdpa,video_sparse_attn,video_sparse_attn_h3,
#     video_sparse_attn_h3_probe}.py                         MiniMaxH3VSAMetadataBuilder / MiniMaxH3VSAImpl
#   fastvideo/layers/{linear,mlp,activation,custom_op,visual_embedding,quantization/}.py,
#   fastvideo/models/{parameter,utils}.py, fastvideo/{envs,logger,forward_context}.py,
#   fastvideo/platforms/interface.py
#   fastvideo/pipelines/basic/minimax_h3/packing.py          build_packed_sequence, build_row_timesteps
#   fastvideo/tests/attention/test_vsa_h3_metadata.py        reference_sparse_attention (the kernel oracle)
# Stubs (plumbing only, internal/testutil/pyfv/fvupstream.py): package __init__ files not run, one-process
# distributed groups, the attention selector returning the real VIDEO_SPARSE_ATTN_H3 backend for the joint
# blocks and TORCH_SDPA elsewhere (the token refiner excludes VSA-H3 itself), platform, profiler ranges,
# get_compute_dtype = float32; diffusers.randn_tensor when diffusers is absent (packing.py imports it, unused
# here). The block-sparse CUDA kernel (fastvideo_kernel, not installed) is replaced by upstream's test oracle
# reference_sparse_attention, as in attention/testdata/gen_vsa.py.
#
# How the VSA knobs reach the forward, as MiniMaxH3DenoisingStage.forward does it
# (fastvideo/pipelines/basic/minimax_h3/stages/minimax_h3_denoising.py): the stage builds
# MiniMaxH3VSAMetadataBuilder().build(current_timestep, raw_latent_shape=(T, H, W) latent, patch_size,
# VSA_sparsity, prefix_segments, device, exempt=(vsa_mode == "exempt"), dense_layers, tile_size) and runs the
# transformer inside set_forward_context(current_timestep, attn_metadata, forward_batch). The stage itself
# needs the pipeline framework, so this script restates its two glue lines: prefix_segments =
# (text rows, condition video rows, audio rows) (_h3_vsa_prefix_segments) and the build call above.
#
# Weights: random, the fixtures README's recipe (sorted names; matrices randn/sqrt(fan_in), biases 0.05 randn,
# 1-D weights 1 + 0.1 randn), INCLUDING every block's attn.to_gate_compress, saved under the released names.
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../internal/testutil/pyfv"))
import fvupstream as fu  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else sys.exit("usage: gen_h3_dit_vsa.py OUT_DIR [wide]")
WIDE = sys.argv[2:] == ["wide"]
fu.bind()
stubbed_diffusers = fu.ensure_diffusers_randn()
fu.bind_vsa_kernels()
torch.backends.cuda.matmul.allow_tf32 = False
import fastvideo.forward_context as fctx  # noqa: E402
from fastvideo.attention.backends import video_sparse_attn_h3 as h3_vsa  # noqa: E402
from fastvideo.attention.backends.video_sparse_attn import compute_topk  # noqa: E402
from fastvideo.configs.models.dits.minimax_h3 import MiniMaxH3ArchConfig, MiniMaxH3Config  # noqa: E402

packing = fu.load_file("h3_packing", "fastvideo/pipelines/basic/minimax_h3/packing.py")

ARCH = dict(hidden_size=64, num_attention_heads=2, attention_head_dim=32, num_layers=2, num_refiner_layers=1,
            ffn_dim=128, in_channels=8, audio_in_channels=8, patch_size=(1, 2, 2), text_dim=32, freq_dim=256,
            time_embed_hidden_dim=32, time_embed_dim=16, adaln_rank=None, rope_freq_dim=4, rope_theta=10000.0,
            norm_eps=1e-5, qk_norm_eps=1e-5, final_norm_eps=1e-5)
if WIDE:
    ARCH.update(hidden_size=192, num_attention_heads=3, attention_head_dim=64, ffn_dim=192, in_channels=12,
                audio_in_channels=6, text_dim=40)
PATCH = ARCH["patch_size"]
# One FL2VA-style document: 6 text tokens, a first keyframe, 9 latent frames of 10x12 (token grid 9x5x6 = 270
# generated video rows: 64-token tiles (4,4,4) give 3x2x2 = 12 video tiles, 256-token tiles (4,8,8) 3x1x1, all
# with partial tiles), 5 audio latents (10 stereo rows).
TEXT_TAGS = torch.tensor([1, 1, 0, 0, 1, 1])
LATENT = (9, 10, 12)
AUDIO_LATENTS = 5
T_VIDEO, T_AUDIO = 0.3, 0.45
if WIDE:  # token grid 6x4x5 = 120 video rows: 64-token tiles 2x1x2, 256-token tiles 2x1x1, all partial
    TEXT_TAGS = torch.tensor([1, 1, 1, 0, 0, 1, 1])
    LATENT = (6, 8, 10)
    AUDIO_LATENTS = 7
NAME = "wide" if WIDE else "tiny"
CASES = {  # name: (tile_size, sparsity, mode, dense_layers)
    "e64_exempt": (64, 0.6, "exempt", ()),
    "e64_compete": (64, 0.6, "compete", ()),
    "e64_exempt_dense1": (64, 0.75, "exempt", (1, )),
    "e256_exempt": (256, 0.5, "exempt", ()),
    "e256_compete": (256, 0.5, "compete", ()),
}


def model(vsa):
    fu.use_backend("VIDEO_SPARSE_ATTN_H3" if vsa else None)
    cfg = MiniMaxH3Config(arch_config=MiniMaxH3ArchConfig(**ARCH))
    from fastvideo.models.dits.minimax_h3 import MiniMaxH3Transformer3DModel
    return MiniMaxH3Transformer3DModel(cfg, {}).eval()


dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
m = model(True)
fu.fill_random(m, 3000)
dense = model(False)
missing, unexpected = dense.load_state_dict(m.state_dict(), strict=False)
assert not missing and all("to_gate_compress" in n for n in unexpected), (missing, unexpected)
assert len(unexpected) == ARCH["num_layers"], unexpected
m, dense = m.to(dev), dense.to(dev)

lay = packing.build_packed_sequence(TEXT_TAGS, *LATENT, AUDIO_LATENTS, PATCH, ("first", ))
uniq, inv = packing.build_row_timesteps(lay, T_VIDEO, T_AUDIO, max(T_VIDEO, packing.MINIMAX_H3_KEYFRAME_NOISE_AUG), 1.0)
g = torch.Generator().manual_seed(3001)
patch_dim = ARCH["in_channels"] * PATCH[0] * PATCH[1] * PATCH[2]
ins = {
    "hidden_states": torch.randn(1, lay.video_indices.numel(), patch_dim, generator=g),
    "audio_hidden_states": torch.randn(1, lay.audio_indices.numel(), ARCH["audio_in_channels"], generator=g),
    "encoder_hidden_states": torch.randn(1, lay.text_indices.numel(), ARCH["text_dim"], generator=g),
    "timestep": uniq.float(), "timestep_indices": inv, "token_tags": lay.token_tags.long(),
    "position_ids": lay.position_ids, "video_indices": lay.video_indices.long(),
    "audio_indices": lay.audio_indices.long(), "text_indices": lay.text_indices.long(),
}
args = {k: v.to(dev) for k, v in ins.items()}
# _h3_vsa_prefix_segments (minimax_h3_denoising.py): the segments before the generated video.
prefix = (int(lay.text_indices.numel()), int(lay.num_condition_video_rows), int(lay.audio_indices.numel()))
assert sum(prefix) + LATENT[0] * (LATENT[1] // 2) * (LATENT[2] // 2) == lay.sequence_length

tensors = {"in." + k: v for k, v in ins.items()}
with torch.no_grad(), fctx.set_forward_context(current_timestep=0, attn_metadata=None):
    dv, da = dense(**args)
tensors["out.dense.video"], tensors["out.dense.audio"] = dv, da
cases = {}
for name, (tile, sparsity, mode, dense_layers) in CASES.items():
    md = h3_vsa.MiniMaxH3VSAMetadataBuilder().build(current_timestep=0, raw_latent_shape=LATENT, patch_size=PATCH,
                                                    VSA_sparsity=sparsity, prefix_segments=prefix, device=dev,
                                                    exempt=(mode == "exempt"), dense_layers=dense_layers,
                                                    tile_size=tile)
    with torch.no_grad(), fctx.set_forward_context(current_timestep=0, attn_metadata=md):
        v, a = m(**args)
    diff = max((v - dv).abs().max().item(), (a - da).abs().max().item())
    tol = 1e-4 * max(1.0, v.abs().max().item())
    assert diff > 100 * tol, f"{name}: VSA output is within {diff} of dense"
    assert compute_topk(sparsity, md.num_video_tiles) < md.num_video_tiles
    tensors[f"out.{name}.video"], tensors[f"out.{name}.audio"] = v, a
    cases[name] = {"tile_size": tile, "sparsity": sparsity, "mode": mode, "dense_layers": list(dense_layers),
                   "num_prefix_tiles": md.num_prefix_tiles, "num_video_tiles": md.num_video_tiles,
                   "topk": compute_topk(sparsity, md.num_video_tiles), "max_abs_diff_from_dense": diff}

weights, renamed = fu.released_weights(m)
tensors.update(weights)
meta = {
    "kind": "h3_dit_vsa", "module": "fastvideo.models.dits.minimax_h3.MiniMaxH3Transformer3DModel with "
    "DistributedAttention_VSA -> fastvideo.attention.backends.video_sparse_attn_h3 (MiniMaxH3VSAImpl)",
    "arch_config": fu.arch_json(m.config.arch_config), "renamed(fastvideo->released)": renamed,
    "vsa": {"prefix_segments": list(prefix), "raw_latent_shape": list(LATENT), "patch_size": list(PATCH),
            "grid": [LATENT[0] // PATCH[0], LATENT[1] // PATCH[1], LATENT[2] // PATCH[2]]},
    "cases": cases,
    "request": {"text_token_tags": TEXT_TAGS.tolist(), "keyframe_anchors": ["first"], "latent": list(LATENT),
                "num_audio_latents": AUDIO_LATENTS, "video_timestep": T_VIDEO, "audio_timestep": T_AUDIO,
                "sequence_length": lay.sequence_length, "num_condition_video_rows": lay.num_condition_video_rows},
    "notes": ["out.<case>.video/audio: transformer outputs for every packed video/audio row with VSA on "
              "(forward under set_forward_context with the case's MiniMaxH3VSAMetadata); out.dense.*: the same "
              "weights without the gates through TORCH_SDPA.",
              "The block-sparse kernel is upstream's test oracle reference_sparse_attention (token-level masked "
              "SDPA)."],
    "stubs": ["fvupstream plumbing"] + (["diffusers.randn_tensor"] if stubbed_diffusers else []),
    "device": str(dev), "env": fu.env_info(), "seed": 3000,
}
fu.save(OUT, "h3_dit_vsa_" + NAME, tensors, meta)
print("ok", OUT, {k: round(c["max_abs_diff_from_dense"], 4) for k, c in cases.items()})
if not WIDE:
    sys.exit(0)

# The "h3_dit" fixture: the dense model at step 1 of 5 of upstream's ladders (video shift 12, audio shift 3, as
# the h3_dit fixtures of the shared golden set), upstream's scheduler step on the target rows, unpatchified.
if fu.ensure_diffusers_scheduler():
    meta["stubs"].append("diffusers scheduler base classes")
sched = fu.load_file("h3_scheduler", "fastvideo/models/schedulers/scheduling_minimax_h3.py")
ladders = {}
for name, shift in (("video", 12.0), ("audio", 3.0)):
    sc = sched.MiniMaxH3Scheduler(shift=shift)
    sc.set_timesteps(5)
    ladders[name] = sc
STEP = 1
t_v, t_a = float(ladders["video"].timesteps[STEP]), float(ladders["audio"].timesteps[STEP])
uniq, inv = packing.build_row_timesteps(lay, t_v, t_a, max(t_v, packing.MINIMAX_H3_KEYFRAME_NOISE_AUG), 1.0)
ins.update(timestep=uniq.float(), timestep_indices=inv, video_sigmas=ladders["video"].sigmas.float(),
           audio_sigmas=ladders["audio"].sigmas.float())
args = {k: v.to(dev) for k, v in ins.items() if not k.endswith("_sigmas")}
with torch.no_grad(), fctx.set_forward_context(current_timestep=0, attn_metadata=None):
    dv, da = dense(**args)
dv, da = dv.cpu(), da.cpu()
cond = lay.num_condition_video_rows
def step(name, v, x, t):
    sc = ladders[name]
    sc.set_begin_index(STEP)
    return sc.step(v, torch.tensor(t), x, return_dict=False)[0]
next_v = step("video", dv[:, cond:], ins["hidden_states"][:, cond:], t_v)
next_a = step("audio", da, ins["audio_hidden_states"], t_a)
dense_tensors = {"in." + k: v for k, v in ins.items()}
dense_tensors.update({"out.video": dv, "out.audio": da, "out.next_video_rows": next_v, "out.next_audio_rows": next_a,
                      "out.next_video_latent": packing.unpatchify_video_tokens(next_v, *LATENT, ARCH["in_channels"], PATCH),
                      "out.next_audio_latent": packing.unpack_audio_tokens(next_a, AUDIO_LATENTS)})
dense_weights, renamed = fu.released_weights(dense)
dense_tensors.update(dense_weights)
fu.save(OUT, "h3_dit_" + NAME, dense_tensors, {
    "kind": "h3_dit", "module": "fastvideo.models.dits.minimax_h3.MiniMaxH3Transformer3DModel",
    "arch_config": fu.arch_json(dense.config.arch_config), "renamed(fastvideo->released)": renamed,
    "request": {"latent_frames": LATENT[0], "latent_h": LATENT[1], "latent_w": LATENT[2],
                "num_audio_latents": AUDIO_LATENTS, "text_token_tags": TEXT_TAGS.tolist(), "keyframe_anchors": ["first"],
                "sequence_length": lay.sequence_length, "num_condition_video_rows": cond, "video_timestep": t_v,
                "audio_timestep": t_a, "schedule": "MiniMaxH3Scheduler video shift=12 / audio shift=3, "
                "set_timesteps(5), step index 1"},
    "notes": ["The weights and document of h3_dit_vsa_wide without the VSA gates, through TORCH_SDPA.",
              "out.video/out.audio: transformer outputs for every packed video/audio row (cond rows included); "
              "out.next_*: upstream's scheduler step on the target rows, unpatchified with upstream's packing."],
    "stubs": meta["stubs"], "device": str(dev), "env": fu.env_info(), "seed": 3000,
})
print("ok", OUT, "h3_dit_" + NAME)
