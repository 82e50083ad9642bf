# Qwen3-VL vision fixtures for internal/textenc/qwen3vl: transformers' own Qwen3-VL modules on a tiny
# random config (CPU, float32, eager attention) and its image processor on several aspect ratios.
# Run on the GPU machine (transformers >= 4.57 with Qwen3-VL; no FastVideo checkout needed):
#
#   python3 gen_vision.py OUT_DIR
#
# Output: OUT_DIR/qwen3vl_vision_tiny.{safetensors,json} (kind "qwen3vl_vision").
#   w.*                       every weight under its released name (model.visual.*, model.language_model.*)
#   in.proc<i>.image          source image, HxWx3 uint8
#   out.proc<i>.pixel_values  the image processor's pixel_values; out.proc<i>.grid_thw
#   out.proc<i>.resized       the processor's resized uint8 image, recovered from pixel_values
#   out.proc<i>.pil_bicubic   PIL Image.resize(smart size, BICUBIC) of the source, to compare with it
#   in.mm.*                   one two-image FL2VA prompt: input_ids [1,S], pixel_values, image_grid_thw
#   out.mm.vision.<k>.embeds / .deepstack.<j>   the tower's outputs per image (merger, DeepStack mergers)
#   out.mm.position_ids       the language model's M-RoPE positions [3,S] (captured at its rotary module)
#   out.mm.hidden_states.<k>  hidden_states[k] of the text stack (k = 0 embeddings with the vision
#                             embeddings spliced in; transformers records layer outputs before the
#                             DeepStack addition, so only k >= len(deepstack)+1 include it everywhere)
#   out.mm.last_hidden_state  after the final norm
import inspect
import json
import os
import sys
import tempfile

import numpy as np
import torch
import transformers
from PIL import Image
from safetensors.numpy import save_file
from transformers import AutoImageProcessor, Qwen3VLConfig, Qwen3VLModel

OUT = sys.argv[1]
torch.manual_seed(0)
IMAGE, VIDEO, START, END = 250, 251, 248, 249
text_config = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, hidden_act="silu",
                   max_position_embeddings=4096, attention_bias=False, rope_theta=5e6,
                   rope_scaling={"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True})
vision_config = dict(depth=3, hidden_size=32, hidden_act="gelu_pytorch_tanh", intermediate_size=64, num_heads=2,
                     in_channels=3, patch_size=16, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64,
                     num_position_embeddings=16, deepstack_visual_indexes=[0, 1])
# transformers 5 names the rotary parameters rope_parameters (with rope_theta inside).
if "rope_parameters" in inspect.signature(transformers.Qwen3VLTextConfig.__init__).parameters:
    text_config["rope_parameters"] = dict(text_config.pop("rope_scaling"), rope_theta=text_config.pop("rope_theta"))
config = Qwen3VLConfig(text_config=text_config, vision_config=vision_config, image_token_id=IMAGE,
                       video_token_id=VIDEO, vision_start_token_id=START, vision_end_token_id=END)
config._attn_implementation = "eager"
config.text_config._attn_implementation = "eager"
config.vision_config._attn_implementation = "eager"
model = Qwen3VLModel(config).eval().float()

# Random weights in the fixtures' convention: matrices randn/sqrt(fan_in), norm weights 1+0.1·randn,
# biases 0.05·randn, embeddings randn.
g = torch.Generator().manual_seed(4242)
with torch.no_grad():
    for name, p in sorted(model.named_parameters()):
        if name.endswith("bias"):
            p.copy_(0.05 * torch.randn(p.shape, generator=g))
        elif p.ndim == 1:
            p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
        elif "embed_tokens" in name or "pos_embed" in name:
            p.copy_(torch.randn(p.shape, generator=g))
        else:
            fan_in = int(np.prod(p.shape[1:]))
            p.copy_(torch.randn(p.shape, generator=g) / fan_in**0.5)

tensors = {}
for name, p in model.state_dict().items():
    tensors["w.model." + name] = p.detach().float().numpy()

proc_cfg = {"image_processor_type": "Qwen2VLImageProcessor", "do_resize": True, "do_rescale": True,
            "do_normalize": True, "do_convert_rgb": True, "rescale_factor": 1 / 255,
            "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "patch_size": 16,
            "temporal_patch_size": 2, "merge_size": 2, "resample": 3,
            "size": {"shortest_edge": 64 * 64, "longest_edge": 32 * 32 * 12}}
with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
        json.dump(proc_cfg, f)
    processor = AutoImageProcessor.from_pretrained(d)


def test_image(rng, w, h):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = 128 + 100 * np.sin(x / 6.0)[..., None] * np.cos(y / 9.0)[..., None] * rng.random(3)
    img = img + rng.normal(0, 15, (h, w, 3))
    img[: h // 4, : w // 3] = rng.integers(0, 256, 3)
    img[0, 0], img[-1, -1] = 255, 0
    return np.clip(img, 0, 255).astype(np.uint8)


rng = np.random.default_rng(7)
mean = np.array(proc_cfg["image_mean"], np.float32)
std = np.array(proc_cfg["image_std"], np.float32)
cases = {}
# (width, height): exact multiples, rounding, the max_pixels (floor) and min_pixels (ceil) branches.
for i, (w, h) in enumerate([(96, 64), (64, 160), (200, 120), (50, 50), (300, 200), (40, 36)]):
    img = test_image(rng, w, h)
    out = processor(images=[Image.fromarray(img)], return_tensors="pt")
    pv, grid = out["pixel_values"].float().numpy(), out["image_grid_thw"].numpy()
    t, gh, gw = (int(v) for v in grid[0])
    p, m, tp = 16, 2, 2
    planes = pv.reshape(t, gh // m, gw // m, m, m, 3, tp, p, p).transpose(0, 6, 5, 1, 3, 7, 2, 4, 8)
    planes = planes.reshape(t * tp, 3, gh * p, gw * p)[0]  # first temporal copy, CHW
    resized = np.rint((planes.transpose(1, 2, 0) * std + mean) * 255).clip(0, 255).astype(np.uint8)
    pil = np.asarray(Image.fromarray(img).resize((gw * p, gh * p), Image.Resampling.BICUBIC))
    tensors[f"in.proc{i}.image"] = img
    tensors[f"out.proc{i}.pixel_values"] = pv
    tensors[f"out.proc{i}.grid_thw"] = grid.astype(np.int64)
    tensors[f"out.proc{i}.resized"] = resized
    tensors[f"out.proc{i}.pil_bicubic"] = pil
    cases[f"proc{i}"] = {"width": w, "height": h, "resized_height": gh * p, "resized_width": gw * p,
                         "resized_equals_pil_bicubic": bool(np.array_equal(resized, pil)),
                         "max_abs_resized_minus_pil": int(np.abs(resized.astype(int) - pil.astype(int)).max())}

# One FL2VA-style prompt: "<Picture 1>: " <vision block 1> "<Picture 2>: " <vision block 2> prompt.
images = [test_image(rng, 96, 64), test_image(rng, 64, 96)]
vis = processor(images=[Image.fromarray(x) for x in images], return_tensors="pt")
pixel_values, grid_thw = vis["pixel_values"].float(), vis["image_grid_thw"]
label = [[10, 20, 30, 40 + k] for k in range(2)]  # stand-ins for the tokenized "<Picture k>: "
ids = []
for k in range(2):
    n = int(grid_thw[k].prod()) // 4
    ids += label[k] + [START] + [IMAGE] * n + [END]
ids += [5, 6, 7, 8, 9]
input_ids = torch.tensor([ids])

captured = {}
hooks = [model.visual.merger.register_forward_hook(lambda mod, a, o: captured.setdefault("merger", []).append(o))]
for j, mod in enumerate(model.visual.deepstack_merger_list):
    hooks.append(mod.register_forward_hook(lambda mod, a, o, j=j: captured.setdefault(f"deep{j}", []).append(o)))


def capture_positions(mod, args, kwargs):
    pid = kwargs.get("position_ids", args[1] if len(args) > 1 else None)
    captured.setdefault("position_ids", pid.detach().clone())


hooks.append(model.language_model.rotary_emb.register_forward_pre_hook(capture_positions, with_kwargs=True))
kwargs = dict(input_ids=input_ids, pixel_values=pixel_values, image_grid_thw=grid_thw, output_hidden_states=True,
              use_cache=False)
if "mm_token_type_ids" in inspect.signature(model.forward).parameters:
    kwargs["mm_token_type_ids"] = (input_ids == IMAGE).long()
with torch.no_grad():
    out = model(**kwargs)
for h in hooks:
    h.remove()

tensors["in.mm.input_ids"] = input_ids.numpy().astype(np.int64)
tensors["in.mm.pixel_values"] = pixel_values.numpy()
tensors["in.mm.image_grid_thw"] = grid_thw.numpy().astype(np.int64)
merged = torch.cat([o if torch.is_tensor(o) else o[0] for o in captured["merger"]])
offsets = np.cumsum([0] + [int(g.prod()) // 4 for g in grid_thw])
for k in range(2):
    sl = slice(int(offsets[k]), int(offsets[k + 1]))
    tensors[f"out.mm.vision.{k}.embeds"] = merged[sl].numpy()
    for j in range(len(vision_config["deepstack_visual_indexes"])):
        deep = torch.cat([o if torch.is_tensor(o) else o[0] for o in captured[f"deep{j}"]])
        tensors[f"out.mm.vision.{k}.deepstack.{j}"] = deep[sl].numpy()
pos = captured["position_ids"]
tensors["out.mm.position_ids"] = pos.reshape(pos.shape[0], -1)[:3].numpy().astype(np.int64) if pos.ndim == 3 \
    else pos.numpy().astype(np.int64)
for k, h in enumerate(out.hidden_states):
    tensors[f"out.mm.hidden_states.{k}"] = h[0].numpy()
tensors["out.mm.last_hidden_state"] = out.last_hidden_state[0].numpy()

full_config = config.to_dict()
meta = {"kind": "qwen3vl_vision", "transformers": transformers.__version__, "torch": torch.__version__,
        "module": "transformers Qwen3VLModel (eager) and AutoImageProcessor from preprocessor_config",
        "image_processor_class": type(processor).__name__, "config": full_config, "processor": proc_cfg,
        "processor_cases": cases, "mm": {"picture_labels": label, "num_hidden_states": len(out.hidden_states)},
        "notes": "hidden_states[k] for k in 1..len(deepstack) are recorded before transformers adds the DeepStack "
                 "features of layer k-1; compare those rows only off the image tokens, or compare k > len(deepstack)."}
tensors = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
meta["tensors"] = {k: [list(v.shape), str(v.dtype)] for k, v in tensors.items()}
js = json.dumps(meta, indent=1, default=str)
os.makedirs(OUT, exist_ok=True)
save_file(tensors, os.path.join(OUT, "qwen3vl_vision_tiny.safetensors"), metadata={"refgen": js})
with open(os.path.join(OUT, "qwen3vl_vision_tiny.json"), "w") as f:
    f.write(js + "\n")
print("ok", type(processor).__name__, sum(v.nbytes for v in tensors.values()), "bytes", cases)
