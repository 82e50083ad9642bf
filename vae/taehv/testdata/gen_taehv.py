# Golden TAEHV decoder fixtures from upstream's own code, for vae/taehv's parity tests.
#
#   python3 gen_taehv.py --upstream DIR --out DIR
#
# --upstream is a checkout of madebyollin/taehv (only taehv.py is read; it is imported unchanged, by
# path). Needs torch and numpy only: no network, no safetensors package (the files are written by the
# small writer below), no tqdm (a stand-in is registered when it is missing; progress bars are off).
# Runs on the CPU in float32 (TF32 off should a GPU be used: it is not).
#
# Weights are not stored (the decoder alone has ~9.8M parameters): every tensor of the state dict is
# computed from its name and shape by the formula in formula_weight, which vae/taehv's
# FormulaSource reproduces bit for bit in float32:
#   u[k] = (k*2654435761 + crc32(name)) mod 2^32 over the row-major flat index k,
#   v[k] = u[k]/2^32 - 0.5                         (exact in float64),
#   w[k] = float32(v[k]*scale + offset)            (float64 arithmetic, one rounding to float32),
#   scale = 0.2 for a ".bias" (offset 0.5 for the last conv's bias, else 0);
#   scale = 2*sqrt(3/fan_in) for a weight (fan_in: the product of every axis but the first).
# The state dict goes through upstream's own loading path: load_state_dict(patch_tgrow_layers(sd)).
#
# Encoder cases (kind "taehv_encoder") store in.frames [1,F,3,H,W] in [0,1] and out.latents
# [1,T,C,h,w] = encode_video(parallel=True).
#
# Each case is one fixture, <case>.safetensors with the JSON (kind "taehv") in its "refgen" metadata
# and beside it as <case>.json. Tensors: in.latents [1,T,C,h,w] (NTCHW, raw DiT latents), out.frames
# [1,F,3,H,W] = decode_video(parallel=True), act.decoder.<i> = the parallel decoder's activation after
# layer i, [N*T', C', H', W'] (decoder.22 is the pre-shuffle, pre-clamp output, before any trim).
# H3 trimming: upstream's TAEHV switches it on from a checkpoint file name containing "taeh3"; with
# checkpoint_path=None the script sets the same attribute (is_h3 = True) after construction.
import argparse
import hashlib
import importlib.util
import json
import math
import os
import struct
import sys
import types
import zlib

import numpy as np
import torch

# name, latent channels, patch, H3 trimming, decoder_time_upscale (None: upstream's default), T, h, w,
# activations to store, also run the sequential mode.
CASES = [
    ("taew2_1_t1_acts", 16, 1, False, None, 1, 2, 2, [5, 7, 13, 19, 22], False),
    ("taew2_1_t1", 16, 1, False, None, 1, 4, 6, [], False),
    ("taew2_1_t2", 16, 1, False, None, 2, 2, 3, [22], False),
    ("taew2_1_t3_seq", 16, 1, False, None, 3, 2, 3, [22], True),
    ("taew2_1_t21", 16, 1, False, None, 21, 1, 2, [], False),
    ("taew2_2_t2_acts", 48, 2, False, None, 2, 1, 1, [5, 7, 13, 19, 22], False),
    ("taew2_2_t3", 48, 2, False, None, 3, 2, 2, [], False),
    ("taeh3_t2", 24, 2, True, None, 2, 2, 2, [22], False),
    ("taeh3_t7", 24, 2, True, None, 7, 1, 2, [], False),
    ("taeh3_t37", 24, 2, True, None, 37, 1, 1, [], False),
    ("taew2_1_notime_t2_acts", 16, 1, False, (False, False), 2, 1, 2, [7, 13, 19, 22], False),
]

# Encoder cases (kind "taehv_encoder"): name, latent channels, patch, H3, frames F, H, W.
# encode_video(parallel=True) pads F to a multiple of 4 by repeating the last frame (Wan) or follows
# H3's 17-frame clips (repeat the last frame up to a multiple of 17, 3 zero frames before each clip,
# drop the last 3 latents).
ENCODER_CASES = [
    ("enc_taew2_1_f7", 16, 1, False, 7, 16, 24),
    ("enc_taew2_2_f5", 48, 2, False, 5, 32, 32),
    ("enc_taeh3_f22", 24, 2, True, 22, 16, 32),
]

ST_DTYPES = {torch.float32: "F32", torch.int64: "I64"}


def load_upstream(folder):
    if "tqdm" not in sys.modules:
        try:
            import tqdm.auto  # noqa: F401
        except ImportError:  # a stand-in: upstream only wraps iterables with tqdm(..., disable=True)
            class _Bar:
                def __init__(self, it=None, **kw): self.it = it
                def __iter__(self): return iter(self.it)
                def update(self, n=1): pass
                def close(self): pass
            pkg, auto = types.ModuleType("tqdm"), types.ModuleType("tqdm.auto")
            auto.tqdm = _Bar
            pkg.auto = auto
            sys.modules["tqdm"], sys.modules["tqdm.auto"] = pkg, auto
    path = os.path.join(folder, "taehv.py")
    spec = importlib.util.spec_from_file_location("taehv", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return mod, digest


def formula_weight(name, shape):
    n = int(np.prod(shape)) if len(shape) else 1
    k = np.arange(n, dtype=np.uint64)
    u = (k * np.uint64(2654435761) + np.uint64(zlib.crc32(name.encode()))) % np.uint64(1 << 32)
    v = u.astype(np.float64) / float(1 << 32) - 0.5
    if name.endswith(".bias"):
        scale, offset = 0.2, (0.5 if name == "decoder.22.bias" else 0.0)
    else:
        fan_in = int(np.prod(shape[1:]))
        scale, offset = 2 * math.sqrt(3.0 / fan_in), 0.0
    w = v * scale + offset
    return torch.from_numpy(w.astype(np.float32).reshape(shape))


def formula_state_dict(model):
    return {k: formula_weight(k, list(v.shape)) for k, v in model.state_dict().items()}


def build(mod, c, p, h3, time_up):
    kw = dict(checkpoint_path=None, patch_size=p, latent_channels=c)
    if time_up is not None:
        kw["decoder_time_upscale"] = time_up
    model = mod.TAEHV(**kw)
    if h3:
        model.is_h3 = True  # what checkpoint_path="...taeh3..." sets
    # The "checkpoint" always has upstream's default layout (TGrow strides 1, 2, 2); a model with
    # time upscaling off takes it through patch_tgrow_layers, as TAEHV.__init__ does for a file.
    ckpt = formula_state_dict(mod.TAEHV(checkpoint_path=None, patch_size=p, latent_channels=c))
    model.load_state_dict(model.patch_tgrow_layers(ckpt))
    return model.float().eval()


def run(model, latents, acts, parallel=True):
    store, hooks = {}, []
    for i in acts:
        def hook(_m, _inp, out, i=i):
            store[f"act.decoder.{i}"] = out.detach().clone()
        hooks.append(model.decoder[i].register_forward_hook(hook))
    with torch.no_grad():
        out = model.decode_video(latents.clone(), parallel=parallel, show_progress_bar=False)
    for h in hooks:
        h.remove()
    return out, store


def write_safetensors(path, tensors, metadata):
    header, body, off = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        raw = t.numpy().astype(t.numpy().dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        body.append(raw)
        off += len(raw)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for raw in body:
            f.write(raw)


def one_case(mod, digest, case, outdir):
    name, c, p, h3, time_up, T, h, w, acts, seq = case
    torch.manual_seed(zlib.crc32(name.encode()))
    latents = torch.randn(1, T, c, h, w, dtype=torch.float32)  # before the modules draw their init
    model = build(mod, c, p, h3, time_up)
    out, store = run(model, latents, acts)
    frames = out.float()
    tensors = {"in.latents": latents, "out.frames": frames}
    tensors.update(store)
    full_up = tuple(time_up) if time_up is not None else (True, True)
    if len(full_up) == 2:
        full_up = (False, *full_up)
    inside = ((frames > 0) & (frames < 1)).float().mean().item()
    assert inside > 0.5, f"{name}: only {inside:.2f} of the pixels lie inside (0, 1); the fixture would test the clamp"
    meta = {
        "kind": "taehv",
        "module": "madebyollin/taehv taehv.py TAEHV(checkpoint_path=None, ...).decode_video(parallel=True), imported unchanged",
        "upstream_sha256": digest,
        "torch": torch.__version__,
        "device": "cpu",
        "dtype": "float32",
        "config": {
            "latent_channels": c, "patch_size": p, "h3_trim": h3,
            "decoder_time_upscale": list(full_up),
            "checkpoint_time_upscale": [False, True, True],
        },
        "latent_shape": [1, T, c, h, w],
        "frames_shape": list(frames.shape),
        "activations": [f"act.decoder.{i}" for i in acts],
        "fraction_inside_0_1": inside,
        "weights": "not stored: gen_taehv.py formula_weight (crc32-salted Weyl sequence, see the script header)",
        "layout": "in.latents [1,T,C,h,w] NTCHW; out.frames [1,F,3,H,W] in [0,1]; act.decoder.<i> [N*T',C',H',W'] parallel-mode activation after decoder layer i (22: before pixel shuffle, clamp and trim)",
    }
    if seq:
        seq_out, _ = run(model, latents, [], parallel=False)
        meta["sequential_max_abs_diff"] = (seq_out.float() - frames).abs().max().item()
    js = json.dumps(meta, indent=1)
    write_safetensors(os.path.join(outdir, name + ".safetensors"), tensors, {"refgen": js})
    with open(os.path.join(outdir, name + ".json"), "w") as f:
        f.write(js + "\n")
    size = os.path.getsize(os.path.join(outdir, name + ".safetensors"))
    print(f"{name}: latents {list(latents.shape)} -> frames {list(frames.shape)}, inside (0,1) {inside:.3f}, "
          f"{size} bytes" + (f", sequential diff {meta['sequential_max_abs_diff']:.3g}" if seq else ""))


def encoder_case(mod, digest, case, outdir):
    name, c, p, h3, f, h, w = case
    torch.manual_seed(zlib.crc32(name.encode()))
    frames = torch.rand(1, f, 3, h, w, dtype=torch.float32)
    model = build(mod, c, p, h3, None)
    with torch.no_grad():
        latents = model.encode_video(frames.clone(), parallel=True, show_progress_bar=False).float()
    meta = {
        "kind": "taehv_encoder",
        "module": "madebyollin/taehv taehv.py TAEHV(checkpoint_path=None, ...).encode_video(parallel=True), imported unchanged",
        "upstream_sha256": digest,
        "torch": torch.__version__,
        "device": "cpu",
        "dtype": "float32",
        "config": {"latent_channels": c, "patch_size": p, "h3_trim": h3,
                   "decoder_time_upscale": [False, True, True], "encoder_time_downscale": [True, True, False]},
        "frames_shape": list(frames.shape),
        "latent_shape": list(latents.shape),
        "weights": "not stored: gen_taehv.py formula_weight (crc32-salted Weyl sequence, see the script header)",
        "layout": "in.frames [1,F,3,H,W] NTCHW in [0,1]; out.latents [1,T,C,h,w] NTCHW",
    }
    js = json.dumps(meta, indent=1)
    write_safetensors(os.path.join(outdir, name + ".safetensors"), {"in.frames": frames, "out.latents": latents}, {"refgen": js})
    with open(os.path.join(outdir, name + ".json"), "w") as fh:
        fh.write(js + "\n")
    print(f"{name}: frames {list(frames.shape)} -> latents {list(latents.shape)}, "
          f"{os.path.getsize(os.path.join(outdir, name + '.safetensors'))} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--upstream", required=True, help="checkout of madebyollin/taehv (taehv.py)")
    ap.add_argument("--out", required=True, help="folder for the fixtures")
    ap.add_argument("--only", default="", help="comma-separated case names (default: all)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    mod, digest = load_upstream(args.upstream)
    only = set(filter(None, args.only.split(",")))
    for case in CASES:
        if not only or case[0] in only:
            one_case(mod, digest, case, args.out)
    for case in ENCODER_CASES:
        if not only or case[0] in only:
            encoder_case(mod, digest, case, args.out)


if __name__ == "__main__":
    main()
