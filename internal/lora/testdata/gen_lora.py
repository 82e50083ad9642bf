"""Builds tiny Wan LoRA adapters in every layout internal/lora reads, and the merged weights upstream gets.

Run offline:  python3 gen_lora.py --diffusers DIR --peft DIR --accelerate DIR --out DIR
  --diffusers:  a huggingface/diffusers checkout, read at 58eb52c0803ea9af3abec60841c2a093bdf1f951; its files
                src/diffusers/loaders/lora_conversion_utils.py, src/diffusers/utils/state_dict_utils.py,
                src/diffusers/utils/peft_utils.py, src/diffusers/loaders/lora_base.py and
                src/diffusers/training_utils.py are read (no package import).
  --peft:       a huggingface/peft checkout (DIR/src/peft), imported unchanged; read at
                5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40 (version 0.20.1.dev0, which the script checks).
  --accelerate: a huggingface/accelerate checkout (DIR/src/accelerate), which peft imports; read at
                16cb6eb80dd9aa8b4df1a63ef57863e455d53b83.
  --out:        where to write (normally this testdata folder).
Needs torch, numpy and what peft imports (transformers, huggingface_hub, safetensors, psutil, pyyaml, packaging, tqdm);
the script refuses, naming the missing module, when peft does not import. Everything runs on the CPU, in float32.

Writes:
  wan_lora_base.safetensors   a tiny Wan DiT's weights (diffusers WanTransformer3DModel names, f32):
                              2 blocks, dim 8, ffn 16, text 6, freq 4, image 8, proj_out 4, I2V layers.
  lora_<case>.safetensors     one adapter per layout (below).
  lora_expected.safetensors   "<case>:<tensor>" = the merged value of every tensor the case changes (f32).
  lora_cases.json             per case: adapters (file, strength) applied in order, changed tensors, the
                              reference used, and what the case exercises.

Reference (upstream code, unchanged): native, LightX2V-style and musubi files are converted with diffusers'
_convert_non_diffusers_wan_lora_to_diffusers / _convert_musubi_wan_lora_to_diffusers
(loaders/lora_conversion_utils.py; loaded from the checkout with only its package imports stubbed: the
`logging` helper and `state_dict_all_zero`, the latter bound from utils/state_dict_utils.py's own source).
They fold alpha/r into lora_A/lora_B and turn diff_b into lora_B.bias (and head.head.diff into lora_A with an
identity lora_B). The converted dict is then loaded and fused as diffusers' load_lora_adapter does, by PEFT: the
LoraConfig comes from diffusers' own _create_lora_config / get_peft_kwargs (utils/peft_utils.py, bound from its
source; rank = {"^<lora_B key>": its shape[1]}, network_alphas=None as for Wan, so r = the most common rank,
rank_pattern/alpha_pattern = the other ranks, lora_alpha = r per module, lora_bias when any lora_B.bias exists), the
converted factors go into the injected layers' lora_A/lora_B (lora_B.bias; a module without one keeps PEFT's zero
init and its bias is not listed as changed: PEFT's bias += 0 only turns the base's -0.0 into +0.0, which the
fixture does not take), and set_scale + merge_and_unload() fuse them (the same merge_peft as the PEFT cases).
diffusers' _maybe_expand_t2v_lora_for_i2v (zero add_k_proj/add_v_proj LoRAs for a T2V file on an I2V model) is left
out: its delta is zero.
PEFT-layout cases (PEFT's in-memory names, diffusers' saved names with a lora_adapter_metadata header, FastVideo's
extractor) are made and merged by PEFT itself: a torch module tree with the tiny Wan's module names (nn.Linear
leaves holding the base weights) gets a LoraConfig adapter (peft.get_peft_model: r, lora_alpha, alpha_pattern,
lora_bias), the case's random factors are copied into its lora_A/lora_B (and lora_B bias), the strength is set
per layer with LoraLayer.set_scale (as diffusers' set_adapters does: scaling = s*alpha/r), and
merge_and_unload() gives the merged weights. The PEFT files are PEFT's own state dicts: PeftModel.state_dict()'s
adapter entries (peft_default), or get_peft_model_state_dict of the injected model with diffusers' "transformer."
prefix and a lora_adapter_metadata header of LoraConfig.to_dict(), packed as diffusers' _collate_lora_metadata,
_pack_dict_with_prefix and write_lora_layers do (peft_metadata).
Dense payloads (.diff, .diff_b, .diff_m, .set_weight), which diffusers drops (norm diffs, leftover .diff,
diff_m), follow ComfyUI's comfy/lora.py semantics by formula: W + s*diff, bias + s*diff_b, W = set_weight.
Factors stored as bf16 are handed to the converter as float32 (ComfyUI merges in fp32).
"""
import argparse
import ast
import collections
import importlib.util
import json
import logging
import os
import struct
import sys
import types
import typing

import numpy as np
import torch

DIFFUSERS_COMMIT = "58eb52c0803ea9af3abec60841c2a093bdf1f951"
PEFT_COMMIT = "5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40"
PEFT_VERSION = "0.20.1.dev0"
ACCELERATE_COMMIT = "16cb6eb80dd9aa8b4df1a63ef57863e455d53b83"
D, FFN, TEXT, FREQ, IMG, OUT, BLOCKS = 8, 16, 6, 4, 8, 4, 2


# ---------------------------------------------------------------- upstream binding (plumbing stubs only)

def _module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def _bind_function(path, name, **names):
    """Binds one top-level function from an upstream file by compiling its own source (no module import);
    `names` adds globals its signature or body needs besides torch."""
    src = open(path).read()
    tree = ast.parse(src)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    code = compile(ast.Module(body=[fn], type_ignores=[]), path, "exec")
    ns = {"torch": torch, **names}
    exec(code, ns)
    return ns[name]


def load_conversion(diffusers_dir):
    src = os.path.join(diffusers_dir, "src", "diffusers")
    path = os.path.join(src, "loaders", "lora_conversion_utils.py")
    if not os.path.isfile(path):
        sys.exit(f"no {path}: pass --diffusers a huggingface/diffusers checkout")
    logging_stub = types.SimpleNamespace(get_logger=logging.getLogger)
    all_zero = _bind_function(os.path.join(src, "utils", "state_dict_utils.py"), "state_dict_all_zero")
    _module("diffusers", __path__=[src])
    _module("diffusers.utils", logging=logging_stub, state_dict_all_zero=all_zero)
    _module("diffusers.loaders", __path__=[os.path.join(src, "loaders")])
    spec = importlib.util.spec_from_file_location("diffusers.loaders.lora_conversion_utils", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_saving(diffusers_dir):
    """diffusers' own helpers that build a saved LoRA file: _collate_lora_metadata (training_utils.py: each
    component's peft_config["default"].to_dict()) and _pack_dict_with_prefix (loaders/lora_base.py)."""
    src = os.path.join(diffusers_dir, "src", "diffusers")
    files = {"collate": (os.path.join(src, "training_utils.py"), "_collate_lora_metadata"),
             "pack": (os.path.join(src, "loaders", "lora_base.py"), "_pack_dict_with_prefix")}
    for path, _ in files.values():
        if not os.path.isfile(path):
            sys.exit(f"no {path}: pass --diffusers a huggingface/diffusers checkout")
    return types.SimpleNamespace(**{k: _bind_function(path, name, Any=typing.Any) for k, (path, name) in files.items()})


def load_lora_config(diffusers_dir):
    """diffusers' own LoraConfig building for a state dict without metadata (utils/peft_utils.py): _create_lora_config,
    which calls get_peft_kwargs (r = the most common rank, rank_pattern and alpha_pattern = the other ranks, lora_alpha
    = r when network_alphas is None, target_modules, lora_bias when any lora_B bias exists) and builds peft's
    LoraConfig (imported inside the function, so from --peft)."""
    path = os.path.join(diffusers_dir, "src", "diffusers", "utils", "peft_utils.py")
    if not os.path.isfile(path):
        sys.exit(f"no {path}: pass --diffusers a huggingface/diffusers checkout")
    kwargs = _bind_function(path, "get_peft_kwargs", collections=collections)
    return _bind_function(path, "_create_lora_config", get_peft_kwargs=kwargs)


def load_peft(peft_dir, accelerate_dir):
    """Imports huggingface/peft, unchanged, from its checkout (and accelerate, which peft imports, from its own)."""
    srcs = {}
    for name, d in (("accelerate", accelerate_dir), ("peft", peft_dir)):
        srcs[name] = os.path.realpath(os.path.join(d, "src"))
        if not os.path.isfile(os.path.join(srcs[name], name, "__init__.py")):
            sys.exit(f"no {srcs[name]}/{name}/__init__.py: pass --{name} a huggingface/{name} checkout (its src/ tree)")
        sys.path.insert(0, srcs[name])
    try:
        import accelerate
        import peft
        from peft.tuners.lora import LoraLayer
    except ModuleNotFoundError as e:
        sys.exit(f"cannot import peft from {srcs['peft']}: the module {e.name!r} is missing ({e}); install it (peft "
                 "needs torch, transformers, huggingface_hub, safetensors, psutil, pyyaml, packaging, tqdm, numpy; "
                 "accelerate comes from --accelerate) and run again")
    except Exception as e:
        sys.exit(f"cannot import peft from {srcs['peft']}: {type(e).__name__}: {e} (an installed package, transformers "
                 f"or torch say, may not fit peft {PEFT_VERSION})")
    for name, mod in (("accelerate", accelerate), ("peft", peft)):
        if not os.path.realpath(mod.__file__).startswith(srcs[name] + os.sep):
            sys.exit(f"{name} was imported from {mod.__file__}, not from {srcs[name]}: run without the installed copy")
    if peft.__version__ != PEFT_VERSION:
        sys.exit(f"peft at {srcs['peft']} is {peft.__version__}; this script pins {PEFT_VERSION} ({PEFT_COMMIT})")
    return types.SimpleNamespace(peft=peft, LoraLayer=LoraLayer)


# ---------------------------------------------------------------- safetensors writer

_DT = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int32: "I32"}


def _bytes(t):
    t = t.contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    np_dt = {torch.float32: "<f4", torch.float16: "<f2", torch.int32: "<i4"}[t.dtype]
    return t.numpy().astype(np_dt).tobytes()


def write_safetensors(path, tensors, metadata=None):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        b = _bytes(t)
        header[name] = {"dtype": _DT[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---------------------------------------------------------------- tiny Wan model

def base_weights(g):
    shapes = {}

    def lin(name, out, inp):
        shapes[name + ".weight"] = (out, inp)
        shapes[name + ".bias"] = (out,)

    for i in range(BLOCKS):
        b = f"blocks.{i}."
        for a in ("attn1", "attn2"):
            for p in ("to_q", "to_k", "to_v", "to_out.0"):
                lin(b + a + "." + p, D, D)
            shapes[b + a + ".norm_q.weight"] = (D,)
            shapes[b + a + ".norm_k.weight"] = (D,)
        lin(b + "attn2.add_k_proj", D, D)
        lin(b + "attn2.add_v_proj", D, D)
        lin(b + "ffn.net.0.proj", FFN, D)
        lin(b + "ffn.net.2", D, FFN)
        shapes[b + "norm2.weight"] = (D,)
        shapes[b + "norm2.bias"] = (D,)
        shapes[b + "scale_shift_table"] = (1, 6, D)
    ce = "condition_embedder."
    lin(ce + "time_embedder.linear_1", D, FREQ)
    lin(ce + "time_embedder.linear_2", D, D)
    lin(ce + "time_proj", 6 * D, D)
    lin(ce + "text_embedder.linear_1", D, TEXT)
    lin(ce + "text_embedder.linear_2", D, D)
    lin(ce + "image_embedder.ff.net.0.proj", IMG, IMG)
    lin(ce + "image_embedder.ff.net.2", D, IMG)
    lin("proj_out", OUT, D)
    shapes["scale_shift_table"] = (1, 2, D)
    # -0.0 entries: an untouched or zero-delta weight must keep them bit for bit.
    out = {}
    for k, s in shapes.items():
        t = torch.randn(s, generator=g) * 0.5
        t.view(-1)[0] = -0.0
        out[k] = t
    return out


# native (file) module -> (diffusers module, in, out)
def native_modules(i2v):
    mods = {}
    for i in range(BLOCKS):
        for o, c in zip("qkvo", ("to_q", "to_k", "to_v", "to_out.0")):
            mods[f"blocks.{i}.self_attn.{o}"] = (f"blocks.{i}.attn1.{c}", D, D)
            mods[f"blocks.{i}.cross_attn.{o}"] = (f"blocks.{i}.attn2.{c}", D, D)
        if i2v:
            mods[f"blocks.{i}.cross_attn.k_img"] = (f"blocks.{i}.attn2.add_k_proj", D, D)
            mods[f"blocks.{i}.cross_attn.v_img"] = (f"blocks.{i}.attn2.add_v_proj", D, D)
        mods[f"blocks.{i}.ffn.0"] = (f"blocks.{i}.ffn.net.0.proj", D, FFN)
        mods[f"blocks.{i}.ffn.2"] = (f"blocks.{i}.ffn.net.2", FFN, D)
    return mods


def pair(g, r, inp, out, dtype=torch.float32):
    a = (torch.randn(r, inp, generator=g) * 0.3).to(dtype)
    b = (torch.randn(out, r, generator=g) * 0.3).to(dtype)
    return a, b


# ---------------------------------------------------------------- reference merges

def merge_converted(weights, converted, s):
    """Loads a converted (diffusers-named, alpha folded) state dict as diffusers' WanLoraLoaderMixin does and fuses it
    by PEFT: load_lora_adapter's steps (the "transformer." prefix removed, rank = {"^<lora_B key>": lora_B.shape[1]},
    _create_lora_config(state_dict, network_alphas=None, metadata=None, rank), whose get_peft_kwargs gives alpha = rank
    per module and lora_bias when any lora_B.bias exists), the factors loaded into the injected layers, strength s set
    and merge_and_unload() (merge_peft). A module without a converted bias keeps PEFT's zero lora_B.bias under
    lora_bias: its bias is not listed as touched."""
    outside = sorted(k for k in converted if not k.startswith("transformer."))
    if outside:
        sys.exit(f"the converter gave keys outside transformer.: {outside}")
    sd = {k[len("transformer."):]: v for k, v in converted.items()}
    rank = {f"^{k}": v.shape[1] for k, v in sd.items() if "lora_B" in k and v.ndim > 1}
    config = UP.create_lora_config(sd, None, None, rank, model_state_dict=weights, adapter_name="default")
    mods = {}
    for k, a in sd.items():
        if k.endswith(".lora_A.weight"):
            m = k[:-len(".lora_A.weight")]
            mods[m] = (a, sd[m + ".lora_B.weight"], float(a.shape[0]), sd.get(m + ".lora_B.bias"))
    used = {m + suffix for m in mods for suffix in (".lora_A.weight", ".lora_B.weight", ".lora_B.bias")}
    if set(sd) - used:
        sys.exit(f"converted keys no LoRA layer takes: {sorted(set(sd) - used)}")
    w, touched, _, _, _ = merge_peft(weights, config, mods, s)
    return w, touched


def wan_modules(weights):
    """A torch module tree with the tiny Wan's module names: an nn.Linear (float32, the base's weight and bias) for each
    2-D "<m>.weight", inside plain nn.Module containers named by the dotted path (blocks -> 0 -> attn1 -> to_q), so
    PEFT's target_modules and alpha_pattern see the names diffusers' WanTransformer3DModel has."""
    root = torch.nn.Module()
    for k, w in weights.items():
        if not k.endswith(".weight") or w.dim() != 2:
            continue
        path = k[:-len(".weight")].split(".")
        node = root
        for part in path[:-1]:
            if getattr(node, part, None) is None:
                node.add_module(part, torch.nn.Module())
            node = getattr(node, part)
        lin = torch.nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_(weights[k[:-len(".weight")] + ".bias"])
        node.add_module(path[-1], lin)
    return root


def peft_config(mods, lora_alpha, lora_bias):
    """PEFT's LoraConfig for mods = {module: (A, B, alpha, bias or None)}: rank 4, lora_alpha, an alpha_pattern entry
    for each module whose alpha differs; peft_version as PEFT records a dev install of the pinned commit."""
    return UP.peft.LoraConfig(r=4, lora_alpha=lora_alpha, target_modules=sorted(mods), lora_bias=lora_bias,
                              alpha_pattern={m: v[2] for m, v in mods.items() if v[2] != lora_alpha},
                              peft_version=f"{PEFT_VERSION}@{PEFT_COMMIT}")


def merge_peft(weights, config, mods, s):
    """PEFT's own merge of one adapter: `config` injected by peft.get_peft_model into wan_modules(weights), the factors
    of mods = {module: (A, B, alpha, bias or None)} copied into each layer's lora_A/lora_B (lora_B.bias), strength s
    set by LoraLayer.set_scale (diffusers' set_adapters), then merge_and_unload(). Returns the merged weights, the
    tensors PEFT's merge writes, PeftModel.state_dict()'s adapter entries (PEFT's in-memory names), the injected
    model's get_peft_model_state_dict (the names diffusers saves) and diffusers' _collate_lora_metadata of it."""
    peft_model = UP.peft.get_peft_model(wan_modules(weights), config)
    model = peft_model.get_base_model()
    layers = {n: m for n, m in model.named_modules() if isinstance(m, UP.LoraLayer)}
    if sorted(layers) != sorted(mods):
        sys.exit(f"PEFT adapted {sorted(layers)}, the case targets {sorted(mods)}")
    touched = set()
    with torch.no_grad():
        for m, (a, b, alpha, bias) in mods.items():
            layer = layers[m]
            if layer.r["default"] != a.shape[0] or layer.lora_alpha["default"] != alpha:
                sys.exit(f"{m}: PEFT gave rank {layer.r['default']}, alpha {layer.lora_alpha['default']}; "
                         f"the case has {a.shape[0]}, {alpha}")
            for dst, src in ((layer.lora_A["default"].weight, a), (layer.lora_B["default"].weight, b),
                             (layer.lora_B["default"].bias, bias)):
                if src is None and dst is not None and config.lora_bias and not torch.count_nonzero(dst):
                    continue  # no bias of its own under lora_bias: PEFT's zero init (diffusers loads none)
                if (dst is None) != (src is None) or (src is not None and dst.shape != src.shape):
                    sys.exit(f"{m}: PEFT's layer does not fit the case's factors")
                if src is not None:
                    dst.copy_(src.float())
            layer.set_scale("default", s)
            touched.add(m + ".weight")
            if bias is not None:
                touched.add(m + ".bias")
    in_memory = {k: v.detach().clone() for k, v in peft_model.state_dict().items() if ".lora_" in k}
    saved = {k: v.detach().clone() for k, v in UP.peft.get_peft_model_state_dict(model).items()}
    assert sorted(k.replace(".default.", ".") for k in in_memory) == sorted("base_model.model." + k for k in saved)
    metadata = UP.saving.collate({"transformer": model})["transformer_lora_adapter_metadata"]
    merged = peft_model.merge_and_unload().state_dict()
    w = dict(weights)
    for k, v in merged.items():
        v = v.detach().clone()
        if k not in touched and not torch.equal(v.view(torch.int32), weights[k].view(torch.int32)):
            # Under lora_bias, PEFT adds a module's zero lora_B.bias (bias += 0 * scaling), which turns the base's -0.0
            # into +0.0 and changes nothing else; that bias is no tensor the adapter changes: keep the base's bits.
            m = k[:-len(".bias")] if k.endswith(".bias") else None
            if m in mods and mods[m][3] is None and config.lora_bias and torch.equal(v, weights[k]):
                v = weights[k].clone()
            else:
                sys.exit(f"PEFT's merge changed {k}, which no LoRA layer owns")
        w[k] = v
    return w, touched, in_memory, saved, metadata


def diffusers_header(metadata):
    """The safetensors header diffusers' save_lora_weights writes for the transformer's metadata: the fields prefixed
    (_pack_dict_with_prefix), sets turned into lists, json.dumps(indent=2, sort_keys=True) (write_lora_layers). The
    lists are sorted here (diffusers writes list(set), in hash order) so the file is reproducible."""
    meta = UP.saving.pack(metadata, "transformer")
    meta = {k: sorted(v) if isinstance(v, set) else v for k, v in meta.items()}
    return {"format": "pt", "lora_adapter_metadata": json.dumps(meta, indent=2, sort_keys=True)}


def with_prefix(sd, prefix):
    return {prefix + k: v for k, v in sd.items()}


def f32(sd):
    """Float32 copies (the converters scale cross-attention and FFN factors in place: `*=`)."""
    return {k: (v.float().clone() if v.is_floating_point() else v.clone()) for k, v in sd.items()}


# ---------------------------------------------------------------- cases

def case_native_kohya(g, conv, base):
    """ComfyUI/kohya native names, diffusion_model. prefix, lora_down/lora_up, per-module .alpha:
    alpha != r, fractional, < 1, absent; diff_b; non-block modules (time_projection, head, embeddings)."""
    alphas = {"self_attn.q": 8.0, "self_attn.k": 3.5, "self_attn.v": 0.5, "cross_attn.q": 2.0,
              "cross_attn.k": 2.0, "cross_attn.v": 6.25, "cross_attn.o": 1.0, "ffn.0": 6.0, "ffn.2": 0.75}
    sd = {}
    for nat, (_, inp, out) in native_modules(False).items():
        a, b = pair(g, 4, inp, out)
        sd[nat + ".lora_down.weight"], sd[nat + ".lora_up.weight"] = a, b
        alpha = alphas.get(nat.split(".", 2)[2])
        if alpha is not None:
            sd[nat + ".alpha"] = torch.tensor(alpha)
    sd["blocks.0.self_attn.q.diff_b"] = torch.randn(D, generator=g) * 0.1
    sd["blocks.1.ffn.2.diff_b"] = torch.randn(D, generator=g) * 0.1
    # diffusers reads no alpha outside the blocks (a leftover .alpha would make its converter raise).
    for nat, inp, out in (("time_projection.1", D, 6 * D), ("head.head", D, OUT), ("text_embedding.0", TEXT, D),
                          ("text_embedding.2", D, D), ("time_embedding.0", FREQ, D), ("time_embedding.2", D, D)):
        a, b = pair(g, 2, inp, out)
        sd[nat + ".lora_down.weight"], sd[nat + ".lora_up.weight"] = a, b
    sd["time_projection.1.diff_b"] = torch.randn(6 * D, generator=g) * 0.1
    sd["head.head.diff_b"] = torch.randn(OUT, generator=g) * 0.1
    file_sd = with_prefix(sd, "diffusion_model.")
    s = 0.8
    w, touched = merge_converted(base, conv._convert_non_diffusers_wan_lora_to_diffusers(f32(file_sd)), s)
    return file_sd, None, s, w, touched, ("diffusers _convert_non_diffusers_wan_lora_to_diffusers + "
                                          "_create_lora_config + PEFT merge_and_unload")


def case_native_ab_i2v(g, conv, base):
    """diffusion-pipe style: native names without prefix, lora_A/lora_B, I2V k_img/v_img and img_emb,
    alpha < 1 on self-attention."""
    sd = {}
    for nat, (_, inp, out) in native_modules(True).items():
        a, b = pair(g, 4, inp, out)
        sd[nat + ".lora_A.weight"], sd[nat + ".lora_B.weight"] = a, b
        if ".self_attn." in nat:
            sd[nat + ".alpha"] = torch.tensor(0.25)
        elif ".cross_attn." in nat:
            sd[nat + ".alpha"] = torch.tensor(5.0)
    for nat, inp, out in (("img_emb.proj.1", IMG, IMG), ("img_emb.proj.3", IMG, D)):
        a, b = pair(g, 2, inp, out)
        sd[nat + ".lora_A.weight"], sd[nat + ".lora_B.weight"] = a, b
    sd["img_emb.proj.3.diff_b"] = torch.randn(D, generator=g) * 0.1
    s = 1.0
    # diffusers detects the native layout by its prefix; this file has none (ComfyUI reads both).
    conv_sd = conv._convert_non_diffusers_wan_lora_to_diffusers(f32(with_prefix(sd, "diffusion_model.")))
    w, touched = merge_converted(base, conv_sd, s)
    return sd, None, s, w, touched, ("diffusers _convert_non_diffusers_wan_lora_to_diffusers (prefix added) + "
                                     "_create_lora_config + PEFT merge_and_unload")


def case_native_lightx2v(g, conv, base):
    """LightX2V distill style: bf16 lora_down/lora_up with .alpha, diff_b on linears, zero norm3 .diff/.diff_b
    (diffusers drops them; zeros must leave the norm bit-identical), head.head.diff (+ diff_b)."""
    sd = {}
    for nat, (_, inp, out) in native_modules(False).items():
        a, b = pair(g, 4, inp, out, torch.bfloat16)
        sd[nat + ".lora_down.weight"], sd[nat + ".lora_up.weight"] = a, b
        sd[nat + ".alpha"] = torch.tensor(4.0)
        sd[nat + ".diff_b"] = (torch.randn(out, generator=g) * 0.1).to(torch.bfloat16)
    for i in range(BLOCKS):
        sd[f"blocks.{i}.norm3.diff"] = torch.zeros(D, dtype=torch.bfloat16)
        sd[f"blocks.{i}.norm3.diff_b"] = torch.zeros(D, dtype=torch.bfloat16)
    sd["head.head.diff"] = (torch.randn(OUT, D, generator=g) * 0.1).to(torch.bfloat16)
    sd["head.head.diff_b"] = (torch.randn(OUT, generator=g) * 0.1).to(torch.bfloat16)
    file_sd = with_prefix(sd, "diffusion_model.")
    s = 1.0
    w, touched = merge_converted(base, conv._convert_non_diffusers_wan_lora_to_diffusers(f32(file_sd)), s)
    return file_sd, None, s, w, touched, ("diffusers _convert_non_diffusers_wan_lora_to_diffusers (bf16 read as f32) + "
                                          "_create_lora_config + PEFT merge_and_unload")


def case_musubi(g, conv, base):
    """musubi-tuner: lora_unet_blocks_{i}_self_attn_q names, fp16, fractional alphas."""
    sd = {}
    alphas = [1.5, 0.5, 4.0, 6.25]
    for k, (nat, (_, inp, out)) in enumerate(native_modules(False).items()):
        name = "lora_unet_" + nat.replace(".", "_")
        a, b = pair(g, 4, inp, out, torch.float16)
        sd[name + ".lora_down.weight"], sd[name + ".lora_up.weight"] = a, b
        sd[name + ".alpha"] = torch.tensor(alphas[k % len(alphas)], dtype=torch.float16)
    s = 0.7
    w, touched = merge_converted(base, conv._convert_musubi_wan_lora_to_diffusers(f32(sd)), s)
    return sd, None, s, w, touched, ("diffusers _convert_musubi_wan_lora_to_diffusers (fp16 read as f32) + "
                                     "_create_lora_config + PEFT merge_and_unload")


def _peft_mods(g, names, r):
    shapes = {k[:-len(".weight")]: v.shape for k, v in BASE_SHAPES.items() if k.endswith(".weight")}
    mods = {}
    for m in names:
        out, inp = shapes[m]
        a, b = pair(g, r, inp, out)
        mods[m] = [a, b, float(r), None]
    return mods


def _lora_biases(mods, seed):
    """lora_bias=True gives every targeted module a lora_B bias: those the case draws no bias for get one from their
    own generator, so the shared one (and every later case's draws) stays as it was."""
    gb = torch.Generator().manual_seed(seed)
    for m, v in mods.items():
        if v[3] is None:
            v[3] = torch.randn(v[1].shape[0], generator=gb) * 0.1


PEFT_TARGETS = ["blocks.0.attn1.to_q", "blocks.1.attn1.to_q", "blocks.0.attn2.to_v", "blocks.1.ffn.net.0.proj",
                "blocks.0.ffn.net.2", "proj_out", "condition_embedder.time_proj"]


def case_peft_default(g, conv, base):
    """PEFT in-memory names (PeftModel.state_dict()): base_model.model. prefix, .lora_A.default.weight, lora_B
    biases (lora_bias=True); no metadata: alpha = r."""
    mods = _peft_mods(g, PEFT_TARGETS, 4)
    mods["blocks.0.attn1.to_q"][3] = torch.randn(D, generator=g) * 0.1
    _lora_biases(mods, 3401)
    s = 1.2
    w, touched, sd, _, _ = merge_peft(base, peft_config(mods, 4, True), mods, s)
    return sd, None, s, w, touched, "PEFT get_peft_model + set_scale + merge_and_unload (lora_alpha = r)"


def case_peft_metadata(g, conv, base):
    """diffusers save_lora_weights: transformer. prefix, lora_adapter_metadata (LoraConfig.to_dict(),
    component-prefixed fields) with lora_alpha and an alpha_pattern, lora_B biases scaled by alpha/r."""
    mods = _peft_mods(g, PEFT_TARGETS, 4)
    for m in mods:
        mods[m][2] = 6.0
    mods["blocks.1.attn1.to_q"][2] = 2.5
    mods["proj_out"][3] = torch.randn(OUT, generator=g) * 0.1
    _lora_biases(mods, 3402)
    s = 1.0
    w, touched, _, saved, metadata = merge_peft(base, peft_config(mods, 6, True), mods, s)
    sd = UP.saving.pack(saved, "transformer")
    return sd, diffusers_header(metadata), s, w, touched, ("PEFT get_peft_model + set_scale + merge_and_unload "
                                                           "(lora_alpha, alpha_pattern); file: get_peft_model_state_dict")


def case_fastvideo(g, conv, base):
    """FastVideo's extractor: diffusers names, .lora_rank int32[1], .lora_alpha f32[1] (one alpha != rank)."""
    mods = _peft_mods(g, PEFT_TARGETS[:4], 4)
    mods["blocks.0.attn2.to_v"][2] = 3.0
    sd = {}
    for m, (a, b, alpha, _) in mods.items():
        sd[m + ".lora_A.weight"], sd[m + ".lora_B.weight"] = a, b
        sd[m + ".lora_rank"] = torch.tensor([a.shape[0]], dtype=torch.int32)
        sd[m + ".lora_alpha"] = torch.tensor([alpha], dtype=torch.float32)
    s = 1.0
    w, touched, _, _, _ = merge_peft(base, peft_config(mods, 4, False), mods, s)
    return sd, None, s, w, touched, "PEFT merge_and_unload with the file's alphas (W + s*(alpha/r)*B@A, exact alpha)"


def case_dense(g, conv, base):
    """Dense payloads: .diff, .diff_b, .diff_m (block modulation), norm3 .diff/.diff_b, .set_weight."""
    sd = {
        "blocks.0.self_attn.q.diff": torch.randn(D, D, generator=g) * 0.1,
        "blocks.0.self_attn.q.diff_b": torch.randn(D, generator=g) * 0.1,
        "blocks.1.diff_m": torch.randn(1, 6, D, generator=g) * 0.1,
        "blocks.1.norm3.diff": torch.randn(D, generator=g) * 0.1,
        "blocks.1.norm3.diff_b": torch.randn(D, generator=g) * 0.1,
        "blocks.1.ffn.0.set_weight": torch.randn(FFN, D, generator=g),
    }
    s = 0.6
    w = dict(base)
    w["blocks.0.attn1.to_q.weight"] = base["blocks.0.attn1.to_q.weight"] + s * sd["blocks.0.self_attn.q.diff"]
    w["blocks.0.attn1.to_q.bias"] = base["blocks.0.attn1.to_q.bias"] + s * sd["blocks.0.self_attn.q.diff_b"]
    w["blocks.1.scale_shift_table"] = base["blocks.1.scale_shift_table"] + s * sd["blocks.1.diff_m"]
    w["blocks.1.norm2.weight"] = base["blocks.1.norm2.weight"] + s * sd["blocks.1.norm3.diff"]
    w["blocks.1.norm2.bias"] = base["blocks.1.norm2.bias"] + s * sd["blocks.1.norm3.diff_b"]
    w["blocks.1.ffn.net.0.proj.weight"] = sd["blocks.1.ffn.0.set_weight"].clone()
    touched = {k for k in w if w[k] is not base[k]}
    return with_prefix(sd, "diffusion_model."), None, s, w, touched, "formula (ComfyUI comfy/lora.py semantics)"


CASES = [case_native_kohya, case_native_ab_i2v, case_native_lightx2v, case_musubi, case_peft_default,
         case_peft_metadata, case_fastvideo, case_dense]
BASE_SHAPES = {}
UP = types.SimpleNamespace()  # peft (peft, LoraLayer), diffusers' saving helpers (saving.collate, saving.pack) and
#                               diffusers' _create_lora_config (create_lora_config)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--diffusers", required=True)
    ap.add_argument("--peft", required=True)
    ap.add_argument("--accelerate", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    conv = load_conversion(args.diffusers)
    UP.saving = load_saving(args.diffusers)
    UP.__dict__.update(vars(load_peft(args.peft, args.accelerate)))
    UP.create_lora_config = load_lora_config(args.diffusers)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(34)
    base = base_weights(g)
    BASE_SHAPES.update({k: v for k, v in base.items()})
    os.makedirs(args.out, exist_ok=True)
    write_safetensors(os.path.join(args.out, "wan_lora_base.safetensors"), base)
    expected, cases, results = {}, [], {}
    for fn in CASES:
        name = fn.__name__[len("case_"):]
        sd, header, s, w, touched, ref = fn(g, conv, base)
        file = f"lora_{name}.safetensors"
        write_safetensors(os.path.join(args.out, file), sd, header)
        results[name] = (file, s, w)
        cases.append({"name": name, "adapters": [{"file": file, "strength": s}], "touched": sorted(touched),
                      "reference": ref, "what": fn.__doc__.strip()})
    # Two adapters in order: the first's result is the second's base (PEFT's merge into the first's merged weights).
    (f1, s1, w1), (f2, _, _) = results["native_kohya"], results["peft_metadata"]
    mods = {}
    sd2 = _read_back(os.path.join(args.out, f2))
    for m in PEFT_TARGETS:
        a, b = sd2[f"transformer.{m}.lora_A.weight"], sd2[f"transformer.{m}.lora_B.weight"]
        alpha = 2.5 if m == "blocks.1.attn1.to_q" else 6.0
        mods[m] = (a, b, alpha, sd2.get(f"transformer.{m}.lora_B.bias"))
    s2 = -0.5
    w2, t2, _, _, _ = merge_peft(w1, peft_config(mods, 6, True), mods, s2)
    touched = sorted(set(next(c for c in cases if c["name"] == "native_kohya")["touched"]) | t2)
    cases.append({"name": "chain", "adapters": [{"file": f1, "strength": s1}, {"file": f2, "strength": s2}],
                  "touched": touched, "reference": "the two cases' references in order",
                  "what": "two adapters applied in order (native then PEFT with metadata, negative strength)"})
    results["chain"] = (None, None, w2)
    for c in cases:
        w = results[c["name"]][2]
        for k in c["touched"]:
            expected[f"{c['name']}:{k}"] = w[k].float().contiguous()
    write_safetensors(os.path.join(args.out, "lora_expected.safetensors"), expected)
    info = {"diffusers_commit": DIFFUSERS_COMMIT, "peft_commit": PEFT_COMMIT, "accelerate_commit": ACCELERATE_COMMIT,
            "generator": "internal/lora/testdata/gen_lora.py",
            "base": "wan_lora_base.safetensors", "expected": "lora_expected.safetensors", "cases": cases}
    with open(os.path.join(args.out, "lora_cases.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")


def _read_back(path):
    """Reads the F32 tensors of a file this script wrote."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for k, v in header.items():
        if k == "__metadata__" or v["dtype"] != "F32":
            continue
        s, e = v["data_offsets"]
        out[k] = torch.from_numpy(np.frombuffer(body[s:e], dtype="<f4").copy()).reshape(v["shape"])
    return out


if __name__ == "__main__":
    main()
