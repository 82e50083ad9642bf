# Golden fixture for the two-stage refine of the Wan DMD students (kind "wan_refine"): the latent upsampling,
# the hand-off re-noise, the stage-2 grid and hand-off sigma, and plan_refine_resolutions' checks, computed by
# FastVideo's own MLX-runtime refine code on the host (its NumPy path; no MLX needed):
#
#   FASTVIDEO_SRC=/path/to/FastVideo /usr/bin/python3 fastvideo/wan/testdata/gen_refine.py OUT_DIR
#
# Writes OUT_DIR/wan_refine.json (a few KB). Made from hao-ai-lab/FastVideo at 2f3d407 (a checkout made with
# `git archive 2f3d407 fastvideo | tar -x`).
#
# Upstream files (read unchanged, relative to FASTVIDEO_SRC):
#   fastvideo/mlx_runtime/refine.py      plan_refine_resolutions, upsample_latents_spatial (_upsample_latents_numpy),
#                                        prepare_refine_latents, default_refine_timesteps, refine_sigma_from_schedule
#   fastvideo/mlx_runtime/sampling.py    MLXDMDSchedule (from_torch_scheduler, sigma_for), add_noise
#   fastvideo/models/schedulers/scheduling_flow_match_euler_discrete.py   FlowMatchEulerDiscreteScheduler(shift=8),
#                                        the full 1000-entry training schedule the MLX Wan2.1 CLI
#                                        (examples/inference/basic/mlx_wan_prompt_to_video.py) hands to MLXDMDSchedule
# Stubs (plumbing only): the package __init__ files are not run (fastvideo/mlx_runtime/__init__.py imports MLX);
# fastvideo.logger.init_logger is logging.getLogger (the real logger module reads fastvideo.envs); diffusers'
# scheduler bases through internal/testutil/pyfv/fvupstream.py when diffusers is absent; scipy.stats (only the
# beta-sigma option, unused here) when scipy is absent.
#
# The reference also runs torch.nn.functional.interpolate(mode="bilinear", align_corners=False) and
# mode="nearest" on the same inputs: upstream's bilinear is documented as torch's align_corners=False; the
# fixture records both so the Go test checks upstream's NumPy values exactly and torch's within float32 rounding.
import json
import logging
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../internal/testutil/pyfv"))
import fvupstream as fu  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else sys.exit("usage: gen_refine.py OUT_DIR")
fu.SRC = os.environ.get("FASTVIDEO_SRC", "")
if not os.path.isfile(os.path.join(fu.SRC, "fastvideo/mlx_runtime/refine.py")):
    sys.exit("set FASTVIDEO_SRC to a FastVideo checkout with fastvideo/mlx_runtime/refine.py")

for pkg in ("fastvideo", "fastvideo.mlx_runtime", "fastvideo.models", "fastvideo.models.schedulers"):
    fu._module(pkg, __path__=[os.path.join(fu.SRC, *pkg.split("."))])
fu._module("fastvideo.logger", init_logger=logging.getLogger)
stubbed = fu.ensure_diffusers_scheduler()
if "scipy" not in sys.modules:
    try:
        import scipy.stats  # noqa: F401
    except ImportError:
        fu._module("scipy", __path__=[])
        fu._module("scipy.stats")
        stubbed = True
sampling = fu.load_file("fastvideo.mlx_runtime.sampling", "fastvideo/mlx_runtime/sampling.py")
refine = fu.load_file("fastvideo.mlx_runtime.refine", "fastvideo/mlx_runtime/refine.py")
fmed = fu.load_file("fastvideo.models.schedulers.scheduling_flow_match_euler_discrete",
                    "fastvideo/models/schedulers/scheduling_flow_match_euler_discrete.py")

rng = np.random.default_rng(34)


def flat(a):
    return [float(v) for v in np.asarray(a, dtype=np.float32).reshape(-1)]


# 1. Latent upsampling over H and W (B, C, T untouched).
upsample = []
cases = [
    ("test_vector", np.array([[0, 1], [2, 3]], dtype=np.float32).reshape(1, 1, 1, 2, 2), 2),
    ("odd_3x5_x2", rng.standard_normal((1, 2, 2, 3, 5)).astype(np.float32), 2),
    ("odd_3x5_x3", rng.standard_normal((1, 1, 2, 3, 5)).astype(np.float32), 3),
    ("odd_5x7_x2", rng.standard_normal((1, 1, 1, 5, 7)).astype(np.float32), 2),
    ("row_1x4_x3", rng.standard_normal((1, 1, 2, 1, 4)).astype(np.float32), 3),
    ("tiny_4x4_x2", rng.standard_normal((1, 2, 3, 4, 4)).astype(np.float32), 2),
]
for name, x, scale in cases:
    for mode in ("bilinear", "nearest"):
        up = refine.upsample_latents_spatial(x, scale=scale, mode=mode)
        b, c, t, h, w = x.shape
        frames = torch.from_numpy(x).permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w)
        if mode == "bilinear":
            ref = F.interpolate(frames, scale_factor=scale, mode="bilinear", align_corners=False)
        else:
            ref = F.interpolate(frames, scale_factor=scale, mode="nearest")
        ref = ref.reshape(b, t, c, h * scale, w * scale).permute(0, 2, 1, 3, 4).numpy()
        upsample.append({"name": name, "mode": mode, "scale": scale, "shape": list(x.shape), "in": flat(x),
                         "out": flat(up), "torch": flat(ref),
                         "max_abs_torch_vs_upstream": float(np.abs(ref - up).max())})

# 2. The DMD schedule (full 1000-entry FlowMatchEulerDiscrete table at the Wan2.1 CLI's --flow-shift 8), the
#    stage-2 grid and the hand-off sigma.
sched = sampling.MLXDMDSchedule.from_torch_scheduler(fmed.FlowMatchEulerDiscreteScheduler(shift=8.0))
sigma_for = {str(t): sched.sigma_for(t) for t in (1000, 757, 522, 999, 1, 500)}
grids = []
for steps in ([1000, 757, 522], [757, 522], [1000, 522], [522]):
    stage2 = refine.default_refine_timesteps(sched, steps)
    grids.append({"stage1": steps, "stage2": [int(s) for s in stage2],
                  "sigma": refine.refine_sigma_from_schedule(sched, stage2)})
try:
    refine.default_refine_timesteps(sched, [1000])
    none_left = None
except ValueError as e:
    none_left = str(e)

# 3. The hand-off: upsample + re-noise at sigma with a given noise (prepare_refine_latents with noise=).
handoff = []
clean = rng.standard_normal((1, 1, 2, 3, 4)).astype(np.float32)
for sigma, add, mode, scale in ((grids[0]["sigma"], True, "bilinear", 2), (0.478, True, "nearest", 2),
                                (0.3, True, "bilinear", 3), (0.5, False, "bilinear", 2), (0.0, True, "bilinear", 2)):
    b, c, t, h, w = clean.shape
    eps = rng.standard_normal((b, c, t, h * scale, w * scale)).astype(np.float32)
    out = refine.prepare_refine_latents(clean, scale=scale, sigma=sigma, noise=eps, add_noise_flag=add,
                                        upsample_mode=mode)
    handoff.append({"sigma": sigma, "add_noise": add, "mode": mode, "scale": scale, "shape": list(clean.shape),
                    "clean": flat(clean), "noise": flat(eps), "out": flat(out), "dtype": str(np.asarray(out).dtype)})
sigma_errors = []
for sigma in (-0.1, 1.5):
    try:
        refine.prepare_refine_latents(clean, sigma=sigma)
    except ValueError as e:
        sigma_errors.append({"sigma": sigma, "error": str(e)})

# 4. plan_refine_resolutions: geometry and every check's message.
plans = []
for kw in (
    dict(height=480, width=832, num_frames=81),
    dict(height=448, width=832, num_frames=61),
    dict(height=64, width=64, num_frames=9),
    dict(height=704, width=1280, num_frames=121, vae_spatial_compression=16),
    dict(height=480, width=832, num_frames=81, spatial_scale=1),
    dict(height=480, width=832, num_frames=81, enabled=False),
    dict(height=0, width=832, num_frames=81),
    dict(height=480, width=832, num_frames=81, spatial_scale=0),
    dict(height=480, width=832, num_frames=0),
    dict(height=481, width=832, num_frames=81),
    dict(height=480, width=832, num_frames=82),
    dict(height=480, width=832, num_frames=81, spatial_scale=3),
    dict(height=488, width=832, num_frames=81),
    dict(height=496, width=832, num_frames=81),
    dict(height=48, width=64, num_frames=9),
    dict(height=480, width=832, num_frames=81, spatial_scale=2, mode_label="fast-spatial"),
    dict(height=96, width=96, num_frames=9, spatial_scale=3),
    dict(height=480, width=832, num_frames=81, patch_size=(2, 2, 2)),
):
    row = {"args": {k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()}}
    try:
        p = refine.plan_refine_resolutions(**kw)
        row["plan"] = {"stage1": [p.stage1_height, p.stage1_width], "target": [p.target_height, p.target_width],
                       "scale": p.spatial_scale, "latent_frames": p.latent_frames,
                       "stage1_latent": [p.stage1_latent_height, p.stage1_latent_width],
                       "stage2_latent": [p.stage2_latent_height, p.stage2_latent_width]}
    except ValueError as e:
        row["error"] = str(e)
    plans.append(row)

meta = {
    "kind": "wan_refine",
    "module": "fastvideo/mlx_runtime/refine.py, sampling.py (NumPy paths); FlowMatchEulerDiscreteScheduler(shift=8)",
    "upsample": upsample, "sigma_for": sigma_for, "grids": grids, "no_refine_steps_error": none_left,
    "handoff": handoff, "sigma_errors": sigma_errors, "plans": plans,
    "stubs": ["package __init__ files", "fastvideo.logger"] + (["diffusers scheduler bases / scipy.stats"] if stubbed else []),
    "env": {"numpy": np.__version__, "torch": torch.__version__, "python": sys.version.split()[0]},
}
os.makedirs(OUT, exist_ok=True)
with open(os.path.join(OUT, "wan_refine.json"), "w") as f:
    json.dump(meta, f, indent=None, separators=(",", ":"))
    f.write("\n")
print("ok", grids[0], max(u["max_abs_torch_vs_upstream"] for u in upsample))
