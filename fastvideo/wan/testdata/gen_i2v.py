# Golden fixture for Wan2.2 TI2V image conditioning, from FastVideo's own code (kind "wan_i2v").
#
#   FASTVIDEO_SRC=/path/to/FastVideo python3 gen_i2v.py OUTDIR
#
# Needs python3 with torch, numpy, PIL and safetensors (torchvision optional, see to_tensor below)
# and a FastVideo checkout (only these files are read: fastvideo/utils.py,
# fastvideo/models/vision_utils.py, fastvideo/pipelines/stages/input_validation.py).
#
# Importing those modules drags in FastVideo's whole package (diffusers, distributed set-up, ...),
# so the few upstream definitions used are taken from the source files verbatim (ast.get_source_segment)
# and executed in a namespace holding their real third-party dependencies (torch, PIL). Nothing of
# upstream's code is rewritten; the only things provided are the names those definitions reference
# that play no part in the computation (the stage base class, a logger, validator types).
#
# Writes OUTDIR/wan_i2v.safetensors and OUTDIR/wan_i2v.json (about 100 KB).
import ast, hashlib, io, json, logging, os, sys, tempfile, types

import numpy as np
import PIL.Image
import PIL.ImageOps
import torch
from safetensors.numpy import save_file

SRC = os.environ.get("FASTVIDEO_SRC") or sys.exit("set FASTVIDEO_SRC to a FastVideo checkout")
OUT = sys.argv[1] if len(sys.argv) > 1 else sys.exit("usage: gen_i2v.py OUTDIR")


def upstream(relpath, names, ns):
    """Executes the named top-level definitions of an upstream file, verbatim, in ns."""
    path = os.path.join(SRC, relpath)
    text = open(path).read()
    tree = ast.parse(text)
    found = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), ns)
            found.add(node.name)
    missing = set(names) - found
    if missing:
        sys.exit(f"{relpath}: no top-level {sorted(missing)}")
    return ns


try:
    import torchvision.transforms.functional as TF
except ImportError:  # torchvision's to_tensor for a PIL RGB image: HWC uint8 -> CHW float32 / 255
    def _to_tensor(pic):
        a = torch.from_numpy(np.array(pic, dtype=np.uint8, copy=True)).permute(2, 0, 1).contiguous()
        return a.to(dtype=torch.get_default_dtype()).div(255)
    TF = types.SimpleNamespace(to_tensor=_to_tensor)

log = logging.getLogger("gen_i2v")
ns = {"torch": torch, "np": np, "math": __import__("math"), "os": os, "io": io, "PIL": PIL, "Image": PIL.Image,
      "TF": TF, "logger": log, "Callable": __import__("collections.abc").abc.Callable}
upstream("fastvideo/utils.py", ["best_output_size", "masks_like"], ns)
upstream("fastvideo/models/vision_utils.py", ["load_image"], ns)
ns.update({"PipelineStage": object, "ForwardBatch": object, "FastVideoArgs": object, "VerificationResult": object,
           "StageValidators": object, "V": object, "load_video": None, "pil_to_numpy": None, "numpy_to_pt": None,
           "normalize": None, "resize": None})
upstream("fastvideo/pipelines/stages/input_validation.py", ["InputValidationStage"], ns)
best_output_size, masks_like, load_image = ns["best_output_size"], ns["masks_like"], ns["load_image"]

rng = np.random.default_rng(16)
tensors, meta = {}, {"kind": "wan_i2v", "module": "FastVideo fastvideo/utils.py best_output_size, masks_like; "
                     "fastvideo/models/vision_utils.py load_image; fastvideo/pipelines/stages/input_validation.py "
                     "InputValidationStage.forward (ti2v_task); fastvideo/pipelines/stages/denoising.py (mask lines)",
                     "torch": torch.__version__, "pillow": PIL.__version__}


def picture(h, w, c=3):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = 128 + 100 * np.sin(x / 7.0)[..., None] * np.cos(y / 5.0)[..., None] * rng.random(c)
    img = base + rng.normal(0, 20, (h, w, c))
    img[: h // 3, : w // 4] = rng.integers(0, 256, c)  # a hard edge
    return np.clip(img, 0, 255).astype(np.uint8)


# 1. best_output_size over aspect ratios at the released area (480*832) and tiny-wan2.2's (64*96).
table = []
for area in (480 * 832, 64 * 96):
    for w, h in [(1280, 720), (720, 1280), (1024, 1024), (640, 480), (480, 640), (1920, 800), (257, 255),
                 (160, 120), (40, 30), (3000, 200), (200, 3000), (10000, 10), (10, 10000), (833, 481), (31, 47)]:
        try:
            ow, oh = best_output_size(w, h, 32, 32, area)
        except (ZeroDivisionError, AssertionError):
            ow = oh = None  # upstream fails: the Go side refuses the image
        table.append([w, h, 32, 32, area, ow, oh])
meta["best_output_size"] = table


# 2. The whole TI2V preprocessing of InputValidationStage.forward at the released area, from PNG files.
class Args:  # fastvideo_args with the fields the stage reads for Wan2.2 TI2V
    class Wan2_2_TI2V_5B_Config:
        ti2v_task, is_causal = True, False
        dit_config = types.SimpleNamespace(arch_config=types.SimpleNamespace(patch_size=(1, 2, 2)))
        vae_config = types.SimpleNamespace(arch_config=types.SimpleNamespace(scale_factor_spatial=16))
    pipeline_config = Wan2_2_TI2V_5B_Config()


def run_stage(path):
    b = types.SimpleNamespace(seed=1024, num_videos_per_prompt=1, prompt="x", prompt_embeds=None,
                              do_classifier_free_guidance=False, negative_prompt=None, negative_prompt_embeds=None,
                              height=704, width=1280, num_inference_steps=50, guidance_scale=5.0, image_path=path,
                              pil_image=None, video_path=None, mouse_cond=None, keyboard_cond=None, grid_sizes=None)
    stage = ns["InputValidationStage"].__new__(ns["InputValidationStage"])
    stage.device = torch.device("cpu")
    ns["InputValidationStage"].forward(stage, b, Args())
    return b


tmp = tempfile.mkdtemp()
meta["preprocess"] = {}
for name, (h, w) in {"landscape_160x120": (120, 160), "portrait_90x160": (160, 90), "odd_257x255": (255, 257),
                     "wide_300x64": (64, 300), "small_31x47": (47, 31)}.items():
    img = picture(h, w)
    path = os.path.join(tmp, name + ".png")
    PIL.Image.fromarray(img).save(path)
    b = run_stage(path)
    x = b.pil_image  # [1, 3, 1, oh, ow] float32 in [-1, 1]
    assert tuple(x.shape) == (1, 3, 1, b.height, b.width), x.shape
    arr = np.ascontiguousarray(x[0, :, 0].numpy().astype(np.float32))
    y0, x0 = b.height // 2 - 8, b.width // 2 - 8
    tensors[f"in.img_{name}"] = img
    tensors[f"out.{name}.window"] = np.ascontiguousarray(arr[:, y0:y0 + 16, x0:x0 + 16])
    tensors[f"out.{name}.row0"] = np.ascontiguousarray(arr[:, 0, :])
    meta["preprocess"][name] = {"input": f"in.img_{name}", "width": int(b.width), "height": int(b.height),
                                "sha256_f32": hashlib.sha256(arr.astype("<f4").tobytes()).hexdigest(),
                                "window": f"out.{name}.window", "window_origin": [y0, x0], "row0": f"out.{name}.row0"}


# 3. load_image (exif_transpose, convert("RGB")) on the PNG modes and EXIF orientations.
def save(name, im, **kw):
    path = os.path.join(tmp, name)
    im.save(path, **kw)
    return path


base = picture(6, 10)
gray16 = (rng.random((6, 10)) * 600).astype(np.uint16)  # mode I;16: PIL saturates at 255
rgba = np.concatenate([base, (rng.random((6, 10, 1)) * 255).astype(np.uint8)], axis=2)
rgba[0, 0, 3] = 0
la = PIL.Image.fromarray(np.ascontiguousarray(np.stack([base[..., 0], rgba[..., 3]], axis=2)))  # mode LA
pal = PIL.Image.fromarray(base).convert("P", palette=PIL.Image.ADAPTIVE, colors=7)
pal.info["transparency"] = 2
exif = PIL.Image.Exif()
exif[0x0112] = 6  # rotate 90° clockwise
exif8 = PIL.Image.Exif()
exif8[0x0112] = 8
files = {
    "rgb.png": (save("rgb.png", PIL.Image.fromarray(base)), True),
    "gray16.png": (save("gray16.png", PIL.Image.fromarray(gray16)), True),
    "rgba.png": (save("rgba.png", PIL.Image.fromarray(rgba)), True),
    "la.png": (save("la.png", la), True),
    "palette_trns.png": (save("palette_trns.png", pal, transparency=2), True),
    "exif6.png": (save("exif6.png", PIL.Image.fromarray(base), exif=exif.tobytes()), True),
    "exif8.jpg": (save("exif8.jpg", PIL.Image.fromarray(picture(16, 24)), quality=95, exif=exif8.tobytes()), False),
}
meta["load_image"] = {}
for name, (path, exact) in files.items():
    key = name.replace(".", "_")
    tensors[f"in.file.{key}"] = np.frombuffer(open(path, "rb").read(), dtype=np.uint8).copy()
    tensors[f"out.load.{key}"] = np.ascontiguousarray(np.array(load_image(path), dtype=np.uint8))
    meta["load_image"][name] = {"file": f"in.file.{key}", "output": f"out.load.{key}", "exact": exact,
                                "mode": PIL.Image.open(path).mode}

# 4. The latent masking of DenoisingStage (fastvideo/pipelines/stages/denoising.py, ti2v_task): the
# latents cast to its target_dtype (bfloat16) before masks_like, the blend, and the per-token
# timesteps; the lines below are copied from that file.
C, T, H, W = 48, 3, 4, 6
g = torch.Generator().manual_seed(7)
latents = torch.randn(1, C, T, H, W, generator=g, dtype=torch.float32)
z = torch.randn(1, C, 1, H, W, generator=g, dtype=torch.float32)
target_dtype = torch.bfloat16
latent_model_input = latents.to(target_dtype)
latent_model_input = latent_model_input.squeeze(0)
_, mask2 = masks_like([latent_model_input], zero=True)
latent_model_input = (1. - mask2[0]) * z + mask2[0] * latent_model_input
seq_len = T * H * W // 4
tensors["in.mask.latents"] = latents[0].numpy()
tensors["in.mask.z"] = z[0].numpy()
tensors["out.mask.blended"] = latent_model_input.float().reshape(C, T, H, W).numpy()
meta["mask"] = {"latent_shape": [C, T, H, W], "timesteps": [999, 757, 57]}
for t in [torch.tensor(999), torch.tensor(757), torch.tensor(57)]:  # FlowUniPC timesteps are int64
    timestep = torch.stack([t])
    temp_ts = (mask2[0][0][:, ::2, ::2] * timestep).flatten()
    temp_ts = torch.cat([temp_ts, temp_ts.new_ones(seq_len - temp_ts.size(0)) * timestep])
    timestep = temp_ts.unsqueeze(0)
    tensors[f"out.mask.timesteps_{int(t)}"] = timestep[0].float().numpy()
    meta["mask"][f"timesteps_{int(t)}_dtype"] = str(timestep.dtype)

for k, v in list(tensors.items()):
    tensors[k] = np.ascontiguousarray(v)
meta["tensors"] = {k: [list(v.shape), str(v.dtype)] for k, v in tensors.items()}
js = json.dumps(meta, indent=1)
save_file(tensors, os.path.join(OUT, "wan_i2v.safetensors"), metadata={"refgen": js})
open(os.path.join(OUT, "wan_i2v.json"), "w").write(js + "\n")
print("wrote", os.path.join(OUT, "wan_i2v.safetensors"))
