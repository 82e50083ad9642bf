# FL2VA (first/last keyframe) fixtures for dit/h3/packing, from FastVideo's own code on tiny inputs
# (CPU, float32). Run on the GPU machine:
#
#   FASTVIDEO_SRC=/path/to/FastVideo python3 gen_fl2va.py OUT_DIR
#
# Upstream files it executes, unchanged (loaded by path, so fastvideo/__init__.py and its optional
# dependencies are not imported):
#   fastvideo/pipelines/basic/minimax_h3/packing.py        build_packed_sequence, build_row_timesteps,
#                                                          prepare_keyframe_image, keyframe_condition_noise,
#                                                          patchify_video_latents
#   fastvideo/models/schedulers/scheduling_minimax_h3.py   MiniMaxH3Scheduler.scale_noise / set_timesteps
#   fastvideo/models/vaes/minimax_h3_video.py              DiagonalGaussianDistribution,
#                                                          AutoencoderKLMiniMaxH3.normalize_latents
# Stubs, only where a module is missing on the machine (reported in the JSON's "stubs"):
#   diffusers (third party): ConfigMixin/register_to_config/SchedulerMixin/BaseOutput as plain
#     classes, randn_tensor as torch.randn on the generator's device (what diffusers does for one CPU
#     generator);
#   the VAE module's FastVideo plumbing imports (attention backend lookup, config class, platform
#     enum, NVTX profiler range) when the checkout cannot import them; none of them is used by the
#     two pieces of the VAE module this script runs.
# Output: OUT_DIR/h3_fl2va.safetensors and OUT_DIR/h3_fl2va.json (kind "h3_fl2va").
import contextlib
import importlib.util
import json
import os
import sys
import types

import numpy as np
import torch
from PIL import Image
from safetensors.numpy import save_file

SRC = os.environ.get("FASTVIDEO_SRC") or (sys.argv[2] if len(sys.argv) > 2 else "")
if not SRC or not os.path.isdir(os.path.join(SRC, "fastvideo")):
    sys.exit("set FASTVIDEO_SRC to a FastVideo checkout (the folder holding fastvideo/)")
OUT = sys.argv[1]
STUBS = []


def stub_module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def ensure_diffusers():
    try:
        import diffusers.utils.torch_utils  # noqa: F401
        import diffusers.configuration_utils  # noqa: F401
        import diffusers.schedulers.scheduling_utils  # noqa: F401
        return
    except Exception:
        pass
    STUBS.append("diffusers")

    def randn_tensor(shape, generator=None, device=None, dtype=None, layout=None):
        gen_device = generator.device if generator is not None else torch.device("cpu")
        return torch.randn(shape, generator=generator, device=gen_device, dtype=dtype).to(device or "cpu")

    class ConfigMixin:
        pass

    def register_to_config(fn):
        return fn

    class SchedulerMixin:
        pass

    class BaseOutput:
        pass

    stub_module("diffusers")
    stub_module("diffusers.utils", BaseOutput=BaseOutput)
    stub_module("diffusers.utils.torch_utils", randn_tensor=randn_tensor)
    stub_module("diffusers.configuration_utils", ConfigMixin=ConfigMixin, register_to_config=register_to_config)
    stub_module("diffusers.schedulers")
    stub_module("diffusers.schedulers.scheduling_utils", SchedulerMixin=SchedulerMixin)


def load(relpath, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(SRC, relpath))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_vae_module():
    sys.path.insert(0, SRC)
    try:
        return load("fastvideo/models/vaes/minimax_h3_video.py", "h3_video_vae")
    except Exception as err:  # the checkout's plumbing cannot be imported here
        STUBS.append(f"fastvideo plumbing for minimax_h3_video.py ({type(err).__name__}: {err})")

    class _Enum:
        def __getattr__(self, name):
            return name

    stub_module("fastvideo.attention", get_attn_backend=lambda *a, **k: None)
    stub_module("fastvideo.configs.models.vaes.minimax_h3_video", MiniMaxH3VideoVAEConfig=object)
    stub_module("fastvideo.platforms", AttentionBackendEnum=_Enum())
    stub_module("fastvideo.profiler", nvtx_range=lambda *a, **k: contextlib.nullcontext())
    return load("fastvideo/models/vaes/minimax_h3_video.py", "h3_video_vae")


ensure_diffusers()
packing = load("fastvideo/pipelines/basic/minimax_h3/packing.py", "h3_packing")
sched_mod = load("fastvideo/models/schedulers/scheduling_minimax_h3.py", "h3_scheduler")
vae_mod = load_vae_module()

tensors = {}
meta = {"kind": "h3_fl2va", "upstream": SRC, "torch": torch.__version__, "stubs": STUBS,
        "notes": ("Tiny FL2VA pieces from FastVideo's own functions. keyframes: prepare_keyframe_image geometry "
                  "(recorded through a duck-typed image that logs resize/crop) and its LANCZOS pixels; "
                  "layouts: build_packed_sequence with keyframe anchors and build_row_timesteps with "
                  "condition_video_timestep = max(tv, 0.999) and condition_audio_timestep = 1.0 as the "
                  "denoising stage passes them; condition: the latent preparation stage's keyframe path "
                  "(posterior.sample with a generator seeded 42 for every keyframe, float16 round trip, "
                  "normalize_latents, patchify, keyframe_condition_noise, scale_noise at 0.999)."),
        "keyframes": {}, "layouts": {}, "condition": {}}


# --- keyframe preparation -------------------------------------------------------------------
class LoggedImage:
    """Stands in for a PIL image: logs what prepare_keyframe_image asks of it."""

    def __init__(self, size, log):
        self.size, self.log = size, log

    def resize(self, size, resample):
        self.log["resize"] = list(size)
        self.log["filter"] = int(resample)
        return LoggedImage(size, self.log)

    def crop(self, box):
        self.log["crop"] = list(box)
        return LoggedImage((box[2] - box[0], box[3] - box[1]), self.log)


def test_image(rng, w, h):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = 128 + 100 * np.sin(x / 5.0)[..., None] * np.cos(y / 7.0)[..., None] * rng.random(3)
    img = img + rng.normal(0, 20, (h, w, 3))
    img[: h // 3, : w // 4] = rng.integers(0, 256, 3)
    img[0, 0], img[-1, -1] = 255, 0
    return np.clip(img, 0, 255).astype(np.uint8)


rng = np.random.default_rng(16)
CANVAS_H, CANVAS_W = 64, 96
sources = [(96, 64), (120, 80), (80, 120), (97, 61), (300, 100), (50, 170)]  # (width, height)
for i, (w, h) in enumerate(sources):
    src = test_image(rng, w, h)
    tensors[f"in.kf_src_{i}"] = src
    for stretch in (True, False):
        log = {}
        packing.prepare_keyframe_image(LoggedImage((w, h), log), CANVAS_H, CANVAS_W, stretch)
        out = packing.prepare_keyframe_image(Image.fromarray(src), CANVAS_H, CANVAS_W, stretch)
        out = np.ascontiguousarray(np.asarray(out.convert("RGB")))
        name = f"kf_{i}_{'stretch' if stretch else 'cover'}"
        tensors[f"out.{name}"] = out
        meta["keyframes"][name] = {"source": f"in.kf_src_{i}", "src_width": w, "src_height": h,
                                   "width": CANVAS_W, "height": CANVAS_H, "stretch": stretch,
                                   "resize": log.get("resize"), "crop": log.get("crop"),
                                   "identity": "resize" not in log, "output": f"out.{name}"}

# --- packed layouts with keyframe rows ------------------------------------------------------
video_sched = sched_mod.MiniMaxH3Scheduler(shift=12.0)
video_sched.set_timesteps(5)
video_ts = [float(v) for v in video_sched.timesteps.tolist()] + [0.9995, 0.999, 1.0]
TEXT_TAGS = torch.tensor([1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1], dtype=torch.long)
PATCH = (1, 2, 2)
for anchors in [(), ("first",), ("last",), ("first", "last")]:
    name = "t2va" if not anchors else "_".join(anchors)
    lay = packing.build_packed_sequence(TEXT_TAGS, 7, 4, 6, 37, PATCH, anchors)
    tensors[f"out.{name}.position_ids"] = lay.position_ids.numpy().astype(np.float64)
    tensors[f"out.{name}.token_tags"] = lay.token_tags.numpy().astype(np.uint8)
    tensors[f"out.{name}.video_indices"] = lay.video_indices.numpy().astype(np.int32)
    tensors[f"out.{name}.audio_indices"] = lay.audio_indices.numpy().astype(np.int32)
    tensors[f"out.{name}.text_indices"] = lay.text_indices.numpy().astype(np.int32)
    steps = []
    for k, tv in enumerate(video_ts):
        ta = min(1.0, tv + 0.01)
        uniq, inv = packing.build_row_timesteps(lay, tv, ta, max(tv, packing.MINIMAX_H3_KEYFRAME_NOISE_AUG), 1.0)
        tensors[f"out.{name}.step{k}.unique_timesteps"] = uniq.numpy().astype(np.float32)
        tensors[f"out.{name}.step{k}.timestep_indices"] = inv.numpy().astype(np.uint8)
        steps.append({"video_timestep": tv, "audio_timestep": ta})
    meta["layouts"][name] = {"anchors": list(anchors), "text_token_tags": TEXT_TAGS.tolist(), "latent_frames": 7,
                             "latent_height": 4, "latent_width": 6, "audio_latents": 37, "patch_size": list(PATCH),
                             "sequence_length": lay.sequence_length,
                             "num_condition_video_rows": lay.num_condition_video_rows, "steps": steps}

# --- keyframe condition rows ----------------------------------------------------------------
C, LH, LW, REQUEST_SEED = 8, 4, 6, 7
g = torch.Generator().manual_seed(3)
latents_mean = torch.randn(1, C, 1, 1, 1, generator=g)
latents_std = 0.5 + torch.rand(1, C, 1, 1, 1, generator=g)
vae_stats = types.SimpleNamespace(latents_mean=latents_mean, latents_std=latents_std)
tensors["in.latents_mean"] = latents_mean.flatten().numpy()
tensors["in.latents_std"] = latents_std.flatten().numpy()
clean_rows, SAMPLE_CHECKS = [], []
for k in range(2):
    moments = torch.randn(1, 2 * C, 1, LH, LW, generator=g)
    moments[:, C:] = moments[:, C:] * 3 - 2  # log-variances around e^-2, some far out
    posterior = vae_mod.DiagonalGaussianDistribution(moments)
    gen42 = torch.Generator("cpu").manual_seed(packing.MINIMAX_H3_KEYFRAME_ENCODE_SEED)  # _sample_visual_posterior
    sample = posterior.sample(generator=gen42)
    noise42 = torch.randn(posterior.mean.shape, generator=torch.Generator("cpu").manual_seed(42))
    SAMPLE_CHECKS.append(bool(torch.equal(sample, posterior.mean + posterior.std * noise42)))
    half = sample.to(torch.float16).float()
    normalized = vae_mod.AutoencoderKLMiniMaxH3.normalize_latents(vae_stats, half)
    clean_rows.append(packing.patchify_video_latents(normalized, PATCH))
    tensors[f"in.kf{k}.mean"] = posterior.mean.numpy()
    tensors[f"in.kf{k}.logvar"] = posterior.logvar.numpy()
    tensors[f"in.kf{k}.posterior_noise"] = noise42.numpy()
    tensors[f"out.kf{k}.sample"] = sample.numpy()
    tensors[f"out.kf{k}.sample_f16"] = half.numpy()
    tensors[f"out.kf{k}.normalized"] = normalized.numpy()
shapes = ((1, LH, LW),) * 2
noise_rows = packing.keyframe_condition_noise(shapes, PATCH, C, generator=torch.Generator("cpu").manual_seed(REQUEST_SEED))
replay = torch.Generator("cpu").manual_seed(REQUEST_SEED)
noise_latents = [torch.randn(1, C, 1, LH, LW, generator=replay) for _ in range(2)]
assert torch.equal(noise_rows, torch.cat([packing.patchify_video_latents(n, PATCH) for n in noise_latents]))
for k, n in enumerate(noise_latents):
    tensors[f"in.kf{k}.condition_noise"] = n.numpy()
rows = sched_mod.MiniMaxH3Scheduler(shift=12.0).scale_noise(torch.cat(clean_rows), packing.MINIMAX_H3_KEYFRAME_NOISE_AUG,
                                                            noise_rows)
tensors["out.condition_rows"] = rows.numpy()
meta["condition"] = {"latent_channels": C, "latent_height": LH, "latent_width": LW, "keyframes": 2,
                     "patch_size": list(PATCH), "request_seed": REQUEST_SEED,
                     "posterior_seed": packing.MINIMAX_H3_KEYFRAME_ENCODE_SEED,
                     "posterior_sample_is_mean_plus_std_times_seed42_noise": all(SAMPLE_CHECKS)}

tensors = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
meta["tensors"] = {k: [list(v.shape), str(v.dtype)] for k, v in tensors.items()}
js = json.dumps(meta, indent=1)
os.makedirs(OUT, exist_ok=True)
save_file(tensors, os.path.join(OUT, "h3_fl2va.safetensors"), metadata={"refgen": js})
with open(os.path.join(OUT, "h3_fl2va.json"), "w") as f:
    f.write(js + "\n")
print("ok", os.path.join(OUT, "h3_fl2va.safetensors"), sum(v.nbytes for v in tensors.values()), "bytes; stubs:", STUBS)
