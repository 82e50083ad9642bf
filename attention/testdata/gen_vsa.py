# Golden fixtures for Video Sparse Attention from FastVideo's own modules, random inputs (float32, CPU or
# GPU: the math is the pure-PyTorch reference path, no Triton/CUDA kernel is needed).
#
#   FASTVIDEO_SRC=/path/to/FastVideo python3 attention/testdata/gen_vsa.py OUT_DIR
#
# Upstream files that must be in the FastVideo checkout (read unchanged; the complete import closure of
# what this script loads, with fastvideo.distributed stubbed as below):
#   fastvideo/attention/backends/__init__.py, abstract.py, video_sparse_attn.py, video_sparse_attn_h3.py,
#     video_sparse_attn_h3_probe.py
#   fastvideo/logger.py, fastvideo/envs.py
#   fastvideo/tests/attention/test_vsa_h3_metadata.py       (the dense masked reference, reference_sparse_attention)
#   fastvideo-kernel/python/fastvideo_kernel/ops.py          (video_sparse_attn, the Wan VSA math; parsed, not imported)
# Third-party: torch, safetensors (pytest is stubbed when absent: the test module only decorates with it).
#
# Stubs (plumbing only, no math): the packages fastvideo and fastvideo.attention are bound to their folders
# without running their __init__ files (they import the whole pipeline stack and a GPU platform), and
# fastvideo.distributed is a one-process stand-in: video_sparse_attn.py imports get_sp_group from it only
# for VideoSparseAttentionImpl.__init__ (sp_size), which this script never calls; the real package pulls
# parallel_state -> device_communicators -> fastvideo.platforms (the failure "No module named
# 'fastvideo.platforms'").
#
# Which function produced what:
#   H3 (vsa_h3.safetensors): tiling from MiniMaxH3VSAMetadataBuilder.build; pooled Q/K from _pool_tiles;
#   scores as MiniMaxH3VSAImpl.forward computes them; masks from _build_block_mask; the attention output
#   from MiniMaxH3VSAImpl.forward (tile -> forward -> postprocess_output) whose block-sparse kernel
#   (fastvideo_kernel, not installed) is replaced by reference_sparse_attention from upstream's test, the
#   token-level masked SDPA oracle the test uses as the kernel parity reference; also that reference
#   alone (out.<c>.<mode>.reference, no gate).
#   Wan (vsa_wan.safetensors): tiling from VideoSparseAttentionMetadataBuilder.build; the output from
#   VideoSparseAttentionImpl.forward -> fastvideo_kernel.ops.video_sparse_attn, whose body is run unchanged
#   (taken from ops.py with ast) with its three kernels bound to PyTorch references: fused_block_mean =
#   the "original compress" its docstring names (view, float, sum, / sizes, to dtype), fused_topk_mask =
#   torch.topk + scatter, block_sparse_attn = the same token-level masked SDPA oracle.
import ast
import importlib.util
import json
import os
import sys
import types

import torch
from safetensors.torch import save_file

SRC = os.environ.get("FASTVIDEO_SRC", "")
if not SRC or not os.path.isdir(os.path.join(SRC, "fastvideo")):
    sys.exit("set FASTVIDEO_SRC to a FastVideo checkout")
OUT = sys.argv[1]


def _namespace(name, path):
    # The fastvideo and fastvideo.attention package __init__ files pull the whole pipeline stack (and
    # attention/layer.py a GPU platform); the backends need neither, so their packages are bound to the
    # source folders without running those __init__ files. Submodules load unchanged.
    mod = types.ModuleType(name)
    mod.__path__ = [path]
    sys.modules[name] = mod


_namespace("fastvideo", os.path.join(SRC, "fastvideo"))
_namespace("fastvideo.attention", os.path.join(SRC, "fastvideo", "attention"))


class _OneProcessGroup:  # what VideoSparseAttentionImpl.__init__ reads from the sequence-parallel group
    world_size, rank_in_group = 1, 0


_dist = types.ModuleType("fastvideo.distributed")
_dist.get_sp_group = lambda: _OneProcessGroup()
sys.modules["fastvideo.distributed"] = _dist
import fastvideo.attention.backends.video_sparse_attn as wan_vsa  # noqa: E402
import fastvideo.attention.backends.video_sparse_attn_h3 as h3_vsa  # noqa: E402


def _load(name, path, stubs=()):
    for stub in stubs:  # third-party test-only imports, when absent
        if stub not in sys.modules:
            try:
                __import__(stub)
            except ImportError:
                m = types.ModuleType(stub)
                m.raises = m.skip = m.mark = None
                sys.modules[stub] = m
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


h3_test = _load("vsa_h3_test", os.path.join(SRC, "fastvideo/tests/attention/test_vsa_h3_metadata.py"), stubs=("pytest", ))
torch.manual_seed(0)
DEV = torch.device("cpu")
H, D = 2, 8
torch.backends.cuda.matmul.allow_tf32 = False


class _Meta:  # what reference_sparse_attention reads from the metadata
    def __init__(self, sizes, tile_elems):
        self.variable_block_sizes, self.tile_elems = sizes, tile_elems


def _oracle_bhsd(q, k, v, mask, sizes):
    """block_sparse_attn's contract ([B,H,S_pad,D] in and out) through upstream's test oracle."""
    tile_elems = q.shape[2] // sizes.numel()
    t = lambda x: x.transpose(1, 2)
    out = h3_test.reference_sparse_attention(t(q), t(k), t(v), mask, _Meta(sizes, tile_elems))
    return t(out).contiguous(), None


def _oracle_bshd(q, k, v, mask, sizes):
    return h3_test.reference_sparse_attention(q, k, v, mask, _Meta(sizes, q.shape[1] // sizes.numel())), None


h3_vsa.block_sparse_attn_64_bhsd = _oracle_bhsd
h3_vsa.block_sparse_attn_256_bshd = _oracle_bshd

tensors, meta = {}, {"kind": "vsa_h3", "heads": H, "head_dim": D, "cases": {}}


def put(name, x):
    tensors[name] = x.detach().contiguous().cpu()


def h3_case(name, prefix, raw, sparsity, tile):
    b = h3_vsa.MiniMaxH3VSAMetadataBuilder()
    md = {m: b.build(current_timestep=0, raw_latent_shape=raw, patch_size=(1, 2, 2), VSA_sparsity=sparsity,
                     prefix_segments=prefix, device=DEV, exempt=(m == "exempt"), tile_size=tile)
          for m in ("exempt", "compete")}
    m0 = md["exempt"]
    L = m0.total_seq_length
    q, k, v, g = (torch.randn(1, L, H, D) for _ in range(4))
    impl = h3_vsa.MiniMaxH3VSAImpl(num_heads=H, head_size=D, causal=False, softmax_scale=D**-0.5)
    tq, tk, tv, tg = (impl.tile(x, m0).clone() for x in (q, k, v, g))
    sizes = m0.variable_block_sizes
    qp = h3_vsa._pool_tiles(tq, sizes, tile)
    kp = h3_vsa._pool_tiles(tk, sizes, tile)
    scores = torch.matmul(qp, kp.transpose(-2, -1)) / (D**0.5)  # as MiniMaxH3VSAImpl.forward
    for x, n in ((q, "q"), (k, "k"), (v, "v"), (g, "gate")):
        put(f"in.{name}.{n}", x)
    put(f"out.{name}.variable_block_sizes", sizes)
    put(f"out.{name}.untile_combined_index", m0.untile_combined_index)
    put(f"out.{name}.q_pooled", qp)
    put(f"out.{name}.k_pooled", kp)
    put(f"out.{name}.scores", scores)
    for mode, m in md.items():
        mask = h3_vsa._build_block_mask(scores, m.num_prefix_tiles, m.num_video_tiles, sparsity, m.exempt)
        put(f"out.{name}.{mode}.mask", mask.to(torch.uint8))
        ref = impl.postprocess_output(h3_test.reference_sparse_attention(tq, tk, tv, mask, m), m)
        put(f"out.{name}.{mode}.reference", ref)
        for gated in (False, True):
            out = impl.forward(impl.tile(q, m).clone(), impl.tile(k, m).clone(), impl.tile(v, m).clone(),
                               impl.tile(g, m).clone() if gated else None, m)
            put(f"out.{name}.{mode}.{'attn_gated' if gated else 'attn'}", impl.postprocess_output(out, m))
    meta["cases"][name] = {
        "prefix_segments": list(prefix), "raw_latent_shape": list(raw), "patch_size": [1, 2, 2],
        "grid": [raw[0], raw[1] // 2, raw[2] // 2], "tile_size": tile, "sparsity": sparsity,
        "topk": wan_vsa.compute_topk(sparsity, m0.num_video_tiles),
        "num_prefix_tiles": m0.num_prefix_tiles, "num_video_tiles": m0.num_video_tiles, "rows": L,
    }


h3_case("e64_ragged_nocond", (70, 0, 5), (5, 10, 12), 0.75, 64)
h3_case("e64_cond", (20, 6, 40), (9, 12, 10), 0.6, 64)
h3_case("e64_dense_gate", (30, 0, 9), (4, 8, 8), 0.0, 64)
h3_case("e256_ragged", (40, 3, 20), (5, 18, 20), 0.5, 256)


def _save(name, tensors, meta):
    js = json.dumps(meta, indent=1)
    save_file(tensors, os.path.join(OUT, name + ".safetensors"), metadata={"refgen": js})
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        f.write(js + "\n")


meta["tensors"] = {k: [list(v.shape), str(v.dtype)] for k, v in tensors.items()}
_save("vsa_h3", tensors, meta)

# ---- Wan: fastvideo_kernel.ops.video_sparse_attn, its body unchanged, kernels bound to references ----
ops_path = os.path.join(SRC, "fastvideo-kernel/python/fastvideo_kernel/ops.py")
tree = ast.parse(open(ops_path).read())
fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "video_sparse_attn")
recorded = {}


def fused_block_mean(x, sizes, block_elements):
    b, h, s, d = x.shape
    return (x.view(b, h, s // block_elements, block_elements, d).float().sum(dim=3) / sizes.view(1, 1, -1, 1)).to(x.dtype)


def fused_topk_mask(scores, topk):
    recorded["scores"] = scores
    mask = torch.zeros_like(scores, dtype=torch.bool)
    mask.scatter_(-1, scores.topk(topk, dim=-1).indices, True)
    recorded["mask"] = mask
    return mask


env = {"torch": torch, "math": __import__("math"), "fused_block_mean": fused_block_mean,
       "fused_topk_mask": fused_topk_mask, "block_sparse_attn": _oracle_bhsd}
exec(compile(ast.Module(body=[fn], type_ignores=[]), ops_path, "exec"), env)
wan_vsa.video_sparse_attn = env["video_sparse_attn"]

tensors, meta = {}, {"kind": "vsa_wan", "heads": H, "head_dim": D, "cases": {}}


def wan_case(name, raw, sparsity):
    m = wan_vsa.VideoSparseAttentionMetadataBuilder().build(current_timestep=0, raw_latent_shape=raw,
                                                            patch_size=(1, 2, 2), VSA_sparsity=sparsity, device=DEV,
                                                            cache_tile_buf=False)
    L = m.total_seq_length
    q, k, v, g = (torch.randn(1, L, H, D) for _ in range(4))
    tile = lambda x: wan_vsa.VideoSparseAttentionImpl.tile(None, x, m)
    out = wan_vsa.VideoSparseAttentionImpl.forward(None, tile(q), tile(k), tile(v), tile(g), m)
    out = wan_vsa.VideoSparseAttentionImpl.untile(None, out, m.untile_combined_index)
    for x, n in ((q, "q"), (k, "k"), (v, "v"), (g, "gate")):
        put(f"in.{name}.{n}", x)
    put(f"out.{name}.variable_block_sizes", m.variable_block_sizes)
    put(f"out.{name}.untile_combined_index", m.untile_combined_index)
    put(f"out.{name}.scores", recorded["scores"])
    put(f"out.{name}.mask", recorded["mask"].to(torch.uint8))
    put(f"out.{name}.attn_gated", out)
    n_tiles = m.variable_block_sizes.numel()
    meta["cases"][name] = {"raw_latent_shape": list(raw), "patch_size": [1, 2, 2],
                           "grid": [raw[0], raw[1] // 2, raw[2] // 2], "tile_size": 64, "sparsity": sparsity,
                           "topk": wan_vsa.compute_topk(sparsity, n_tiles), "num_video_tiles": n_tiles, "rows": L}


wan_case("ragged", (5, 12, 18), 0.7)
wan_case("whole_tiles", (4, 8, 16), 0.5)
wan_case("dense_gate", (3, 10, 10), 0.0)
meta["tensors"] = {k: [list(v.shape), str(v.dtype)] for k, v in tensors.items()}
_save("vsa_wan", tensors, meta)
print("ok", OUT)
