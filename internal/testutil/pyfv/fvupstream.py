"""Binds FastVideo's DiT modules from a checkout (FASTVIDEO_SRC) for the fixture generators, plumbing stubbed.

Imported by the gen_*.py fixture scripts (dit/h3/testdata, dit/wan/testdata, fastvideo/wan/testdata) through
a path relative to the script file. The model math is upstream's, loaded unchanged from the checkout; only
plumbing is replaced (the same recipe as the golden fixtures of /work/shared/fixtures' README):

* Package __init__ files of fastvideo, fastvideo.attention, fastvideo.configs(.models(.dits)), fastvideo.layers,
  fastvideo.models(.dits), fastvideo.platforms are not run (they import the whole pipeline stack, diffusers and a
  GPU platform probe): the packages are bound to their source folders and submodules load unchanged. The few
  names a module imports from such a package are set on it from the real submodule that defines them.
* fastvideo.distributed (+ .communication_op, .parallel_state): one process, identity collectives.
* fastvideo.attention.selector: get_attn_backend returns the real backend chosen by use_backend(): TORCH_SDPA
  (fastvideo/attention/backends/sdpa.py) for dense runs, or the real VSA backend (video_sparse_attn.py /
  video_sparse_attn_h3.py) for the attention layers whose supported backends list it.
* fastvideo.platforms: AttentionBackendEnum from the real platforms/interface.py; current_platform is a CPU/CUDA
  stand-in answering is_mps/is_npu/is_cuda... with False except what the device is.
* fastvideo.utils: get_compute_dtype (float32), the backend env-var name, resolve_obj_by_qualname (the real
  utils.py imports diffusers, huggingface_hub, remote_pdb, ...).
* fastvideo.profiler: nvtx_range / profiler_region as null contexts.

Upstream files read (relative to FASTVIDEO_SRC): fastvideo/{envs,logger,forward_context}.py,
fastvideo/platforms/interface.py, fastvideo/attention/{layer.py,backends/*}, fastvideo/layers/*,
fastvideo/configs/models/{base.py,dits/*}, fastvideo/models/{parameter,utils}.py, fastvideo/models/dits/*,
and for the VSA kernels fastvideo-kernel/python/fastvideo_kernel/ops.py plus
fastvideo/tests/attention/test_vsa_h3_metadata.py (see bind_vsa_kernels).
"""
import ast
import contextlib
import importlib
import importlib.util
import math
import os
import sys
import types

import torch

SRC = ""
_BACKEND = {"dense": "TORCH_SDPA", "vsa": None}


def _module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    parent, _, leaf = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], leaf, mod)
    return mod


def _namespace(name):
    """A package bound to its source folder without running its __init__.py."""
    return _module(name, __path__=[os.path.join(SRC, *name.split("."))])


def use_backend(vsa):
    """Selects the attention backend the stubbed selector returns: None (dense, TORCH_SDPA) or the VSA
    backend's enum name (VIDEO_SPARSE_ATTN_H3 / VIDEO_SPARSE_ATTN), used where the layer supports it."""
    _BACKEND["vsa"] = vsa


class _OneProcessGroup:
    world_size, rank_in_group, rank, local_rank = 1, 0, 0, 0

    def all_gather(self, x, dim=-1):
        return x

    def all_reduce(self, x):
        return x

    def shard(self, x, dim=1, scale_grad=False):
        return x


def _stub_distributed():
    ident = lambda x, *a, **k: x  # noqa: E731
    group = _OneProcessGroup()
    common = dict(
        get_sp_group=lambda: group, get_tp_group=lambda: group, get_sp_world_size=lambda: 1,
        get_sp_parallel_rank=lambda: 0, get_tp_rank=lambda: 0, get_tp_world_size=lambda: 1,
        get_world_size=lambda: 1, get_world_rank=lambda: 0, model_parallel_is_initialized=lambda: False,
        get_local_torch_device=lambda: torch.device("cuda" if torch.cuda.is_available() else "cpu"),
        tensor_model_parallel_all_reduce=ident, tensor_model_parallel_all_gather=ident,
        sequence_model_parallel_all_to_all_4D=ident, sequence_model_parallel_all_gather=ident,
        sequence_model_parallel_all_gather_with_unpad=lambda x, original_seq_len, dim=-1: x,
        sequence_model_parallel_shard=lambda x, dim=1: (x, x.shape[dim]),
        divide=lambda a, b: a // b,
        split_tensor_along_last_dim=lambda x, n, contiguous_split_chunks=False: torch.chunk(x, n, dim=-1),
    )
    _module("fastvideo.distributed", __path__=[], **common)
    _module("fastvideo.distributed.communication_op", **common)
    _module("fastvideo.distributed.parallel_state", **common)


def _stub_selector():
    enum = sys.modules["fastvideo.platforms"].AttentionBackendEnum

    def backend_class(name):
        mod, cls = {
            "TORCH_SDPA": ("fastvideo.attention.backends.sdpa", "SDPABackend"),
            "VIDEO_SPARSE_ATTN": ("fastvideo.attention.backends.video_sparse_attn", "VideoSparseAttentionBackend"),
            "VIDEO_SPARSE_ATTN_H3": ("fastvideo.attention.backends.video_sparse_attn_h3", "MiniMaxH3VSABackend"),
        }[name]
        return getattr(importlib.import_module(mod), cls)

    def get_attn_backend(head_size, dtype, supported_attention_backends=None, *args, **kwargs):
        vsa = _BACKEND["vsa"]
        if vsa and supported_attention_backends and enum[vsa] in supported_attention_backends:
            return backend_class(vsa)
        return backend_class(_BACKEND["dense"])

    _module("fastvideo.attention.selector", get_attn_backend=get_attn_backend,
            backend_name_to_enum=lambda n: enum[n] if n in enum.__members__ else None,
            component_attention_backend=lambda *a, **k: None)


class _Platform:
    def __getattr__(self, name):
        if name.startswith("is_"):
            return lambda *a, **k: name == "is_cuda" and torch.cuda.is_available()
        raise AttributeError(name)


def bind(src=None):
    """Binds the fastvideo package of the checkout at src (default $FASTVIDEO_SRC) with the stubs above."""
    global SRC
    SRC = src or os.environ.get("FASTVIDEO_SRC", "")
    if not SRC or not os.path.isdir(os.path.join(SRC, "fastvideo")):
        sys.exit("set FASTVIDEO_SRC to a FastVideo checkout")
    for pkg in ("fastvideo", "fastvideo.attention", "fastvideo.configs", "fastvideo.configs.models",
                "fastvideo.configs.models.dits", "fastvideo.layers", "fastvideo.models", "fastvideo.models.dits",
                "fastvideo.platforms"):
        _namespace(pkg)
    plat = sys.modules["fastvideo.platforms"]
    interface = importlib.import_module("fastvideo.platforms.interface")
    plat.AttentionBackendEnum = interface.AttentionBackendEnum
    plat.current_platform = _Platform()
    _module("fastvideo.utils", get_compute_dtype=lambda: torch.float32, STR_BACKEND_ENV_VAR="FASTVIDEO_ATTENTION_BACKEND",
            resolve_obj_by_qualname=lambda q: getattr(importlib.import_module(q.rpartition(".")[0]), q.rpartition(".")[2]))
    null = lambda *a, **k: contextlib.nullcontext()  # noqa: E731
    _module("fastvideo.profiler", nvtx_range=null, profiler_region=null)
    _stub_distributed()
    _stub_selector()
    layer = importlib.import_module("fastvideo.attention.layer")
    abstract = importlib.import_module("fastvideo.attention.backends.abstract")
    att = sys.modules["fastvideo.attention"]
    for n in ("DistributedAttention", "DistributedAttention_VSA", "LocalAttention"):
        setattr(att, n, getattr(layer, n))
    for n in ("AttentionBackend", "AttentionMetadata", "AttentionMetadataBuilder"):
        setattr(att, n, getattr(abstract, n))
    att.get_attn_backend = sys.modules["fastvideo.attention.selector"].get_attn_backend
    cfg_models = sys.modules["fastvideo.configs.models"]
    cfg_models.DiTConfig = importlib.import_module("fastvideo.configs.models.dits.base").DiTConfig
    cfg_models.ModelConfig = importlib.import_module("fastvideo.configs.models.base").ModelConfig
    dits = sys.modules["fastvideo.configs.models.dits"]
    dits.WanVideoConfig = importlib.import_module("fastvideo.configs.models.dits.wanvideo").WanVideoConfig
    dits.MiniMaxH3Config = importlib.import_module("fastvideo.configs.models.dits.minimax_h3").MiniMaxH3Config
    return importlib.import_module("fastvideo.forward_context")


def ensure_diffusers_randn():
    """diffusers (third party) when absent: only diffusers.utils.torch_utils.randn_tensor, which the packing
    and pipeline modules import; stood in by torch.randn on the generator's device (what diffusers does for
    one CPU generator). Returns whether the stub was installed."""
    try:
        import diffusers.utils.torch_utils  # noqa: F401
        return False
    except ImportError:
        pass

    def randn_tensor(shape, generator=None, device=None, dtype=None, layout=None):
        gen_device = generator.device if generator is not None else torch.device("cpu")
        return torch.randn(shape, generator=generator, device=gen_device, dtype=dtype).to(device or "cpu")

    _module("diffusers", __path__=[])
    _module("diffusers.utils", __path__=[])
    _module("diffusers.utils.torch_utils", randn_tensor=randn_tensor)
    return True


def load_file(name, relpath, stubs=()):
    """Runs one upstream file as module name (for files outside the bound packages, e.g. tests).
    stubs: third-party test-only imports that may be absent (pytest: the file only decorates with it)."""
    for stub in stubs:
        if stub not in sys.modules:
            try:
                __import__(stub)
            except ImportError:
                m = types.ModuleType(stub)
                m.raises = m.skip = m.mark = m.fixture = None
                sys.modules[stub] = m
    spec = importlib.util.spec_from_file_location(name, os.path.join(SRC, relpath))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the file runs
    spec.loader.exec_module(mod)
    return mod


class _Meta:  # what reference_sparse_attention reads from the metadata
    def __init__(self, sizes, tile_elems):
        self.variable_block_sizes, self.tile_elems = sizes, tile_elems


def bind_vsa_kernels():
    """Replaces the block-sparse CUDA kernels (fastvideo_kernel, not installed) of both VSA backends with
    PyTorch references, as attention/testdata/gen_vsa.py does: the block-sparse attention is upstream's own
    test oracle reference_sparse_attention (fastvideo/tests/attention/test_vsa_h3_metadata.py, token-level
    masked SDPA); Wan's fastvideo_kernel.ops.video_sparse_attn body runs unchanged (taken from ops.py with
    ast) with fused_block_mean = the "original compress" its docstring names and fused_topk_mask =
    torch.topk + scatter."""
    oracle = load_file("vsa_h3_test", "fastvideo/tests/attention/test_vsa_h3_metadata.py", stubs=("pytest", ))
    t = lambda x: x.transpose(1, 2)  # noqa: E731

    def bhsd(q, k, v, mask, sizes):
        out = oracle.reference_sparse_attention(t(q), t(k), t(v), mask, _Meta(sizes, q.shape[2] // sizes.numel()))
        return t(out).contiguous(), None

    def bshd(q, k, v, mask, sizes):
        return oracle.reference_sparse_attention(q, k, v, mask, _Meta(sizes, q.shape[1] // sizes.numel())), None

    h3 = importlib.import_module("fastvideo.attention.backends.video_sparse_attn_h3")
    h3.block_sparse_attn_64_bhsd, h3.block_sparse_attn_256_bshd = bhsd, bshd

    def fused_block_mean(x, sizes, block_elements):
        b, h, s, d = x.shape
        return (x.view(b, h, s // block_elements, block_elements, d).float().sum(dim=3) /
                sizes.view(1, 1, -1, 1)).to(x.dtype)

    def fused_topk_mask(scores, topk):
        mask = torch.zeros_like(scores, dtype=torch.bool)
        mask.scatter_(-1, scores.topk(topk, dim=-1).indices, True)
        return mask

    ops_path = os.path.join(SRC, "fastvideo-kernel/python/fastvideo_kernel/ops.py")
    tree = ast.parse(open(ops_path).read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "video_sparse_attn")
    env = {"torch": torch, "math": math, "fused_block_mean": fused_block_mean, "fused_topk_mask": fused_topk_mask,
           "block_sparse_attn": bhsd}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), ops_path, "exec"), env)
    wan = importlib.import_module("fastvideo.attention.backends.video_sparse_attn")
    wan.video_sparse_attn = env["video_sparse_attn"]


def fill_random(model, seed):
    """The fixtures README's recipe, parameters in sorted-name order: matrices randn/sqrt(fan_in), biases
    0.05 randn, other 1-D weights 1 + 0.1 randn."""
    g = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name in sorted(params):
            p = params[name]
            if name.endswith("bias"):
                v = 0.05 * torch.randn(p.shape, generator=g)
            elif p.dim() >= 2:
                v = torch.randn(p.shape, generator=g) / math.sqrt(p[0].numel())
            else:
                v = 1 + 0.1 * torch.randn(p.shape, generator=g)
            p.copy_(v.to(p.dtype))


def released_names(model, mapping):
    """fastvideo name -> released checkpoint name, by inverting param_names_mapping (released regex ->
    fastvideo template, first match wins, as get_param_names_mapping applies it): a released name maps to
    the fastvideo name, so each fastvideo name is inverted by trying every rule's template as a pattern."""
    import re
    out = {}
    for name in dict(model.named_parameters()):
        rel = name
        for pattern, template in mapping.items():
            if not isinstance(template, str):
                continue
            inv = _invert(pattern, template)
            if inv and re.fullmatch(inv[0], name):
                cand = re.sub(inv[0], inv[1], name)
                if _apply(mapping, cand) != name:
                    sys.exit(f"{name}: the released name {cand} does not map back")
                rel = cand
                break
        out[name] = rel
    return out


def _apply(mapping, released):
    import re
    for pattern, template in mapping.items():
        if isinstance(template, str) and re.match(pattern, released):
            return re.sub(pattern, template, released)
    return released


def _invert(pattern, template):
    """A regex over fastvideo names and a replacement giving the released name, for rules whose released
    pattern is ^literal(group)literal...$ with plain groups such as (.*) or (\\d+)."""
    import re
    pieces = re.split(r"(\([^()]*\))", pattern.lstrip("^").rstrip("$"))
    lits, groups = pieces[0::2], pieces[1::2]
    lits = [re.sub(r"\\(.)", r"\1", p) for p in lits]
    if any(re.search(r"[\[\]()?*+|{}^$]", lit) for lit in lits):
        return None
    tparts = re.split(r"\\(\d)", template)
    rx, order = "", []
    for i, piece in enumerate(tparts):
        if i % 2 == 0:
            rx += re.escape(piece)
        else:
            rx += groups[int(piece) - 1]
            order.append(int(piece))
    repl = ""
    for i, lit in enumerate(lits):
        repl += lit.replace("\\", "\\\\")
        if i < len(groups):
            repl += "\\" + str(order.index(i + 1) + 1)
    return "^" + rx + "$", repl


def env_info():
    import platform
    return {"torch": torch.__version__, "python": platform.python_version(), "cuda_available": torch.cuda.is_available()}


def save(out_dir, name, tensors, meta):
    """Writes out_dir/name.safetensors (the JSON also under the header key refgen) and its JSON sidecar."""
    import json
    from safetensors.torch import save_file
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    meta["tensors"] = {k: [list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in sorted(tensors.items())}
    js = json.dumps(meta, indent=1)
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, name + ".safetensors"), metadata={"refgen": js})
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        f.write(js + "\n")


def released_weights(model):
    """The model's parameters under their released names (prefix w.), checked by mapping every released name
    back through the real param_names_mapping onto the model's own names."""
    mapping = model.param_names_mapping
    names = released_names(model, mapping)
    params = dict(model.named_parameters())
    back = {_apply(mapping, rel): fv for fv, rel in names.items()}
    if sorted(back) != sorted(params):
        sys.exit("released names do not map back onto the model's parameters")
    return {"w." + names[n]: p for n, p in params.items()}, {fv: rel for fv, rel in names.items() if fv != rel}


def arch_json(arch_config):
    """The arch config's public fields that JSON can hold (tuples as lists): what the Go ParseConfig reads."""
    import json
    out = {}
    for k, v in vars(arch_config).items():
        if k.startswith("_"):
            continue
        v = list(v) if isinstance(v, tuple) else v
        try:
            json.dumps(v)
        except TypeError:
            continue
        out[k] = v
    return out


def ensure_diffusers_scheduler():
    """diffusers (third party) when absent: the scheduler base classes scheduling_flow_unipc_multistep.py
    and scheduling_minimax_h3.py import. register_to_config records the __init__ arguments (defaults filled in) as self.config, which is
    all the scheduler reads from it; ConfigMixin/SchedulerMixin are plain bases; SchedulerOutput holds
    prev_sample; deprecate is a no-op. Returns whether the stub was installed."""
    try:
        import diffusers.configuration_utils  # noqa: F401
        import diffusers.schedulers.scheduling_utils  # noqa: F401
        return False
    except ImportError:
        pass
    import enum
    import functools
    import inspect

    def register_to_config(init):
        @functools.wraps(init)
        def wrapped(self, *args, **kwargs):
            bound = inspect.signature(init).bind(self, *args, **kwargs)
            bound.apply_defaults()
            self.config = types.SimpleNamespace(**{k: v for k, v in bound.arguments.items() if k != "self"})
            init(self, *args, **kwargs)
        return wrapped

    class SchedulerOutput:
        def __init__(self, prev_sample):
            self.prev_sample = prev_sample

    ensure_diffusers_randn()
    _module("diffusers.configuration_utils", ConfigMixin=type("ConfigMixin", (), {}),
            register_to_config=register_to_config)
    _module("diffusers.schedulers", __path__=[])
    _module("diffusers.schedulers.scheduling_utils", SchedulerMixin=type("SchedulerMixin", (), {}),
            SchedulerOutput=SchedulerOutput, KarrasDiffusionSchedulers=enum.Enum("KarrasDiffusionSchedulers", "NONE"))
    sys.modules["diffusers.utils"].deprecate = lambda *a, **k: None
    sys.modules["diffusers.utils"].BaseOutput = object  # scheduling_minimax_h3.py's output dataclass base
    return True


def upstream_defs(relpath, names, ns):
    """Executes the named top-level definitions of an upstream file verbatim in namespace ns (for files whose
    module imports drag the whole stack, e.g. fastvideo/utils.py)."""
    path = os.path.join(SRC, relpath)
    tree = ast.parse(open(path).read())
    found = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), ns)
            found.add(node.name)
    if set(names) - found:
        sys.exit(f"{relpath}: no top-level {sorted(set(names) - found)}")
    return ns
