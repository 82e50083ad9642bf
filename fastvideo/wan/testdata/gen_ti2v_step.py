# Golden fixture for one Wan2.2 TI2V denoising step (kind "wan_ti2v_step"): the first-frame latent masking,
# the per-token timesteps, the DiT forward and the UniPC step re-pinned, from FastVideo's own code on the
# tiny Wan2.2-TI2V DiT config of wan22_ti2v_dit_tiny (48 channels), random weights (float32; CPU or GPU, TF32 off):
#
#   FASTVIDEO_SRC=/path/to/FastVideo python3 fastvideo/wan/testdata/gen_ti2v_step.py OUT_DIR
#
# Writes OUT_DIR/wan_ti2v_step_tiny.{safetensors,json} (about 0.9 MB).
#
# Upstream files (read unchanged; the folder fastvideo/ of the checkout):
#   fastvideo/models/dits/wanvideo.py (+ its imports, see internal/testutil/pyfv/fvupstream.py)  the DiT
#   fastvideo/models/schedulers/{base,scheduling_flow_unipc_multistep}.py   FlowUniPCMultistepScheduler
#   fastvideo/utils.py                    masks_like (run verbatim via ast: the module imports the whole stack)
#   fastvideo/pipelines/stages/denoising.py   the TI2V glue, restated below (see "Restated")
# Stubs (plumbing only): fvupstream's (package __init__ files, one-process distributed groups, TORCH_SDPA
# attention, platform, profiler); diffusers' ConfigMixin/register_to_config/SchedulerMixin/SchedulerOutput/
# deprecate when diffusers is absent (register_to_config records the __init__ arguments as self.config).
#
# Restated (DenoisingStage.forward, ti2v_task; the stage needs the whole pipeline framework). Lines of
# fastvideo/pipelines/stages/denoising.py:
#   before the loop:  latent_model_input = latents.to(target_dtype)          # target_dtype = bfloat16
#                     latent_model_input = latent_model_input.squeeze(0)
#                     _, mask2 = masks_like([latent_model_input], zero=True)
#                     latent_model_input = (1. - mask2[0]) * z + mask2[0] * latent_model_input
#                     latents = latent_model_input
#                     seq_len = T * (H / 2) * (W / 2) tokens (its F/height/width formula at patch (1,2,2))
#   in the loop:      timestep = torch.stack([t]); temp_ts = (mask2[0][0][:, ::2, ::2] * timestep).flatten()
#                     temp_ts = torch.cat([temp_ts, temp_ts.new_ones(seq_len - temp_ts.size(0)) * timestep])
#                     t_expand = temp_ts.unsqueeze(0)
#                     noise_pred = transformer(latent_model_input, prompt_embeds, t_expand)
#                     latents = scheduler.step(noise_pred, t, latents, return_dict=False)[0]
#                     latents = latents.squeeze(0); latents = (1. - mask2[0]) * z + mask2[0] * latents
# The DiT runs in float32 on float32 inputs here (as every DiT fixture: the Go side runs f32 on CPU), so the
# loop's `latents.to(target_dtype)` before the forward and its bfloat16 autocast are not applied to the forward;
# the bfloat16 rounding of the blend and of the per-token timesteps (mask2 is bfloat16) is kept exactly.
# z is the image latent as the stage has it after encode: (mean - shift_factor) * scaling_factor, given here as
# a random input (the VAE's encode has its own fixtures).
# DMD: FastVideo's torch DMD denoising stage has no TI2V branch (it ignores the image), so there is no
# upstream DMD TI2V step to pin.
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../internal/testutil/pyfv"))
import fvupstream as fu  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else sys.exit("usage: gen_ti2v_step.py OUT_DIR")
fu.bind()
stubbed = fu.ensure_diffusers_scheduler()
torch.backends.cuda.matmul.allow_tf32 = False
import fastvideo.forward_context as fctx  # noqa: E402
from fastvideo.configs.models.dits.wanvideo import WanVideoArchConfig, WanVideoConfig  # noqa: E402
from fastvideo.models.dits.wanvideo import WanTransformer3DModel  # noqa: E402

unipc = fu.load_file("fastvideo.models.schedulers.scheduling_flow_unipc_multistep",
                     "fastvideo/models/schedulers/scheduling_flow_unipc_multistep.py")
ns = {"torch": torch}
fu.upstream_defs("fastvideo/utils.py", ["masks_like"], ns)
masks_like = ns["masks_like"]

ARCH = dict(num_attention_heads=2, attention_head_dim=32, text_dim=32, freq_dim=256, ffn_dim=128, num_layers=2,
            cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, patch_size=(1, 2, 2), in_channels=48,
            out_channels=48)
C, T, H, W = 48, 3, 4, 6
SHIFT, STEPS = 5.0, 4  # the Wan2.2 TI2V preset's flow_shift; a short ladder
target_dtype = torch.bfloat16
dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")

os.environ["FASTVIDEO_ATTENTION_BACKEND"] = "TORCH_SDPA"
fu.use_backend(None)
model = WanTransformer3DModel(WanVideoConfig(arch_config=WanVideoArchConfig(**ARCH)), {}).eval()
fu.fill_random(model, 5000)
model = model.to(dev)
g = torch.Generator().manual_seed(5001)
noise = torch.randn(1, C, T, H, W, generator=g)
z = torch.randn(C, 1, H, W, generator=g)
text = torch.randn(1, 10, ARCH["text_dim"], generator=g)
text[:, 7:] = 0
sched = unipc.FlowUniPCMultistepScheduler(shift=SHIFT)
sched.set_timesteps(STEPS, device=torch.device("cpu"), shift=SHIFT)
t = sched.timesteps[0]

latent_model_input = noise.to(target_dtype).squeeze(0)
_, mask2 = masks_like([latent_model_input], zero=True)
latents = (1. - mask2[0]) * z + mask2[0] * latent_model_input
seq_len = T * (H // 2) * (W // 2)
timestep = torch.stack([t])
temp_ts = (mask2[0][0][:, ::2, ::2] * timestep).flatten()
temp_ts = torch.cat([temp_ts, temp_ts.new_ones(seq_len - temp_ts.size(0)) * timestep])
t_expand = temp_ts.unsqueeze(0)
with torch.no_grad(), fctx.set_forward_context(current_timestep=0, attn_metadata=None):
    noise_pred = model(latents.float().unsqueeze(0).to(dev), text.to(dev), t_expand.float().to(dev)).cpu()
stepped = sched.step(noise_pred, t, latents.float().unsqueeze(0), return_dict=False)[0]
stepped = stepped.squeeze(0)
next_latents = (1. - mask2[0]) * z + mask2[0] * stepped

weights, renamed = fu.released_weights(model)
tensors = dict(weights)
tensors.update({"in.noise": noise, "in.image_latent": z, "in.encoder_hidden_states": text,
                "out.masked_latent": latents.float(), "out.timesteps": t_expand[0].float(),
                "out.noise_pred": noise_pred, "out.next_latent": next_latents.float(),
                "in.sigmas": sched.sigmas.float(), "in.ladder_timesteps": sched.timesteps})
meta = {
    "kind": "wan_ti2v_step", "module": "fastvideo.models.dits.wanvideo.WanTransformer3DModel, "
    "FlowUniPCMultistepScheduler, fastvideo/utils.py masks_like, denoising.py TI2V lines (restated)",
    "arch_config": fu.arch_json(model.config.arch_config), "renamed(fastvideo->released)": renamed,
    "latent_shape": [C, T, H, W], "flow_shift": SHIFT, "steps": STEPS, "step_index": 0, "timestep": float(t),
    "dtypes": {"masked_latent": str(latents.dtype), "timesteps": str(t_expand.dtype), "next_latent": str(next_latents.dtype)},
    "notes": ["out.masked_latent = (1 - mask2) * z + mask2 * noise.to(bfloat16) (float32 result).",
              "out.timesteps: per token, bfloat16 values (mask2 * t), first latent frame 0.",
              "out.noise_pred: the DiT in float32 on out.masked_latent and out.timesteps.",
              "out.next_latent: FlowUniPCMultistepScheduler.step (first step) then the first frame re-pinned."],
    "stubs": ["fvupstream plumbing"] + (["diffusers scheduler bases"] if stubbed else []),
    "device": str(dev), "env": fu.env_info(), "seed": 5000,
}
fu.save(OUT, "wan_ti2v_step_tiny", tensors, meta)
print("ok", OUT, float(t), (next_latents - latents).abs().max().item())
