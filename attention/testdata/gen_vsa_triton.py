# The block-sparse attention forward as a Triton kernel that a Go graph calls (XLA's `__gpu$xla.gpu.triton`
# custom call, internal/xlaext.TritonCall), and its parity fixture against upstream's kernel.
#
# The kernel is ours, written in JAX's Pallas (backend="triton") after upstream's Triton forward,
# fastvideo-kernel/python/fastvideo_kernel/triton_kernels/block_sparse_attn_triton.py (_attn_fwd_sparse):
# one program per (64-row query tile, head); it walks that tile's list of key tiles, reads each K and V
# tile in place, masks the rows past the tile's valid count and keeps the online softmax in float32 with
# exp2 (bf16 probabilities into the second product, as upstream). It differs from upstream in what the
# graph needs: the geometry (rows per head, prefix tiles, query tiles, list stride, heads) is read from a
# small int32 operand instead of being compiled in, so one IR serves every sequence length and head count
# of head width 128; only the query tiles from `prefix` on are computed (the video tiles: the prefix
# queries attend densely elsewhere), and their rows are written straight into the attention's own layout
# ([L, H, D], row r of head h at r·H + h) through the tiles' slot map, so the graph copies nothing out of
# tiles (a write of each row once; the K/V reads, tens per tile, stay on the contiguous tile copies: session
# 13 measured reading those in place 12-16 % slower). The scattered write costs the kernel 3-8 % against
# writing one head-major block (BENCHMARKS.md, session 15), about what XLA's transpose and gather of that
# block took after it.
#
# Ragged tiles: a tile's valid rows come first, so a key tile of at most 32 (16) valid rows needs only the
# first 32 (16) rows of its 64 slots. Each row's list arrives grouped by KEY_BLOCKS class (tiles of more
# than 32 valid rows, then 17-32, then 1-16; ascending within a class) with the end of each group, and
# the kernel walks each group with K/V blocks of that many rows: the edge tiles of a 4x4x4 tiling (one
# frame, or two rows of latents) stop costing a whole 64-row block. Upstream walks every tile at 64 rows;
# the order of the online softmax's steps is all that differs.
#
# Operands (row-major), as attention/vsa_triton.go passes them:
#   params  int32[6]          rows per head S (tiles·64), first query tile P, query tiles V, list stride K, heads H,
#                             gated (1: add the compression branch, gate·oc, to each row; 0: gate and oc unread)
#   ends    int32[H·V·C]      for each (head, query tile), where each of the C = len(KEY_BLOCKS) groups of
#                             its list ends (the last is the number of key tiles)
#   idx     int32[H·V·K]      the key tiles, grouped by class
#   sizes   int32[S/64]       valid rows of each key tile (1..64)
#   slots   int32[S]          the sequence row of each tile slot, a tile's valid slots first, -1 for a pad
#   q, k, v bf16[H·S, 128]    tile-padded rows, head-major (the pack kernel's copies)
#   gate    bf16[L·H, 128]    the compression gate of each sequence row (gated; else any one row)
#   oc      f32[nT·H, 128]    the compression branch of each tile, softmax(scores)·Vp (gated; else any one row)
# Result: bf16[L·H, 128], the rows of the query tiles P.. written (the prefix rows are the caller's): their
# attention plus, gated, gate·oc of their tile, rounded once. The separate XLA pass over the output that
# added the branch took 0.17-0.23 ms a FastH3 block on an H100 (BENCHMARKS.md, session 23).
# Grid: (V, H, 1).
#
# The pack kernel makes those copies and the routing's tile means in one pass over q, k or v: each
# (tile, head) program reads the tile's rows through the slot map, writes them as one contiguous
# zero-padded 64-row block and their float32 mean (upstream's _pool_tiles: the sum over the valid rows
# divided by their count). XLA made the copy and the mean in two fusions, the mean's reduction reading at
# about 1 TB/s (0.67 ms a FastH3 block for q, k and v).
#   params  int32[2]          heads H, tiles nT
#   slots   int32[nT·64]      as above
#   x       bf16[L·H, 128]    the sequence's rows
# Results: bf16[H·nT·64, 128] (head-major tile copies) and float32[nT·H, 128] (each tile's mean per head).
# Grid: (nT, H, 1).
#
# Run it on the GPU machine, whose JAX has the CUDA plugin the Go binaries load (the IR is bytecode for
# the Triton inside that plugin's XLA), with upstream's kernel file beside torch and Triton:
#
#   python3 attention/testdata/gen_vsa_triton.py --upstream DIR [--bench] [--out DIR]
#
# DIR holds block_sparse_attn_triton.py from FastVideo (fastvideo-kernel, above), imported unchanged.
# Writes attention/vsa_triton.json and attention/vsa_pack_triton.json (the kernels) and
# attention/testdata/vsa_triton.{json,safetensors} (inputs with ragged tiles in a shuffled slot map, a row
# that selects every key tile and one that selects one, several heads; upstream's output and ours) and
# vsa_triton_whole.* (the same with every tile of 33-64 valid rows whole), and
# with --bench times both fine kernels at the H3 and Wan 1.3B geometries and the pack kernel.
import argparse, base64, importlib.util, json, math, os, sys
from types import SimpleNamespace

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "internal", "xlaext", "testdata"))

import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from gen_triton import lowered_triton_call, pallas_triton, plugin_version, timed  # noqa: E402

D, T = 128, 64
LOG2E = math.log2(math.e)
SCALE = LOG2E / math.sqrt(D)  # scores to base 2 for exp2
MASKED = -0.7 * float(np.finfo(np.float32).max)


# The fine kernel's operands (params ... oc, above): the kernel file records the count and
# attention/vsa_triton.go refuses a file of another.
FINE_OPERANDS = 10

# The K/V block rows of each class of key tile, largest first: a tile is in the last class whose block
# holds its valid rows (attention/vsa_triton.go reads this list from the kernel file).
KEY_BLOCKS = (64, 32, 16)


def key_class(size):
    return max(c for c, n in enumerate(KEY_BLOCKS) if size <= n)


def class_groups(keys, classes):
    # A list of key tiles as the fine kernel walks it: grouped by class (classes[tile]), ascending within a
    # group, with the end of each of the len(KEY_BLOCKS) groups.
    keys = sorted(keys, key=lambda kv: (classes[kv], kv))
    return keys, [sum(classes[kv] <= c for kv in keys) for c in range(len(KEY_BLOCKS))]


def rows_of(slots, heads, head):
    # The rows of a tile's slots for one head in the [L·H, D] layout; a pad slot points at row 0 (masked).
    return jnp.maximum(slots, 0) * heads + head


class Walk:
    # What the steps of one program read: its query tile, its list of key tiles and the K/V tile copies.
    def __init__(self, q, idx_ref, sizes_ref, k_ref, v_ref, base, head, rows):
        self.q, self.idx_ref, self.sizes_ref, self.k_ref, self.v_ref = q, idx_ref, sizes_ref, k_ref, v_ref
        self.base, self.head, self.rows = base, head, rows

    def key(self, i):
        # The list's i-th key tile: its valid rows and where its rows start in k and v.
        kv = self.idx_ref[self.base + i]
        return self.sizes_ref[kv], self.head * self.rows + kv * T

    def k(self, at, n):
        return self.k_ref[pl.ds(at, n), :]

    def v(self, at, n):
        return self.v_ref[pl.ds(at, n), :]


def step(w, n, mask=True):
    # One step over a key tile with K/V blocks of n rows (the tile's valid rows are among them). The max is
    # taken on the raw scores and the scale folded into the exponent, exp2(s*c - m*c): one fused
    # multiply-add an element where scaling the scores first takes a multiply and a subtract (4-7 % of the
    # kernel on an H100, bench/vsa_fine_variants.py, BENCHMARKS.md). mask=False drops the pad columns' mask
    # (exact only where every tile of the class is full; the variants bench times what the mask costs); a
    # function mask(s, valid, n) masks them in another form (the variants bench's mask_* walks).
    cols = lax.broadcasted_iota(jnp.int32, (w.q.shape[0], n), 1)

    def body(i, carry):
        acc, m, l = carry
        valid, at = w.key(i)
        k = w.k(at, n)
        s = jnp.dot(w.q, k.T, preferred_element_type=jnp.float32)
        if callable(mask):
            s = mask(s, valid, n)
        elif mask:
            s = jnp.where(cols < valid, s, MASKED)
        m2 = jnp.maximum(m, jnp.max(s, axis=1))
        ms = m2 * SCALE
        p = jnp.exp2(s * SCALE - ms[:, None])
        alpha = jnp.exp2(m * SCALE - ms)
        v = w.v(at, n)
        acc = acc * alpha[:, None] + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        return acc, m2, l * alpha + jnp.sum(p, axis=1)
    return body


def walk_class(w, c, n, start, end, carry):
    # The key tiles of class c (list entries start..end), one a step.
    return lax.fori_loop(start, end, step(w, n), carry)


def walk_list(walk, w, ends_ref, row):
    # The online softmax over list row's key tiles, each class's group by walk; its accumulator and row
    # sums (a query block of w.q's rows: a tile's 64 here, a pair's 128 in the variants bench).
    r = w.q.shape[0]
    carry = (jnp.zeros((r, D), jnp.float32), jnp.full((r,), -jnp.inf, jnp.float32), jnp.zeros((r,), jnp.float32))
    start = 0
    for c, n in enumerate(KEY_BLOCKS):
        end = ends_ref[row * len(KEY_BLOCKS) + c]
        carry = walk(w, c, n, start, end, carry)
        start = end
    acc, _, l = carry
    return acc, l


def fine_kernel(walk, q_rows=False):
    # The fine kernel around a walk of each class's key tiles (bench/vsa_fine_variants.py times other
    # walks in the same kernel). q_rows: q is the sequence's rows [L·H, D], the query tile's read through
    # the slot map as the epilogue reads the gate, instead of the pack kernel's copy (the variants bench's
    # qrows: a block's q would then need only the pack's means).
    def vsa_kernel(params_ref, ends_ref, idx_ref, sizes_ref, slots_ref, q_ref, k_ref, v_ref, gate_ref, oc_ref, o_ref):
        tile, head = pl.program_id(0), pl.program_id(1)
        rows, first, tiles, stride, heads = params_ref[0], params_ref[1], params_ref[2], params_ref[3], params_ref[4]
        row = head * tiles + tile
        if q_rows:
            at = slots_ref[pl.ds((first + tile) * T, T)]
            q = plgpu.load(q_ref.at[rows_of(at, heads, head), :], mask=jnp.broadcast_to((at >= 0)[:, None], (T, D)), other=0.0)
        else:
            q = q_ref[pl.ds(head * rows + (first + tile) * T, T), :]
        acc, l = walk_list(walk, Walk(q, idx_ref, sizes_ref, k_ref, v_ref, row * stride, head, rows), ends_ref, row)
        qslots = slots_ref[pl.ds((first + tile) * T, T)]
        rows_out = rows_of(qslots, heads, head)
        valid = jnp.broadcast_to((qslots >= 0)[:, None], (T, D))
        out = acc / l[:, None]

        def store(x):
            plgpu.store(o_ref.at[rows_out, :], x.astype(o_ref.dtype), mask=valid)

        # The compression branch's gate (upstream: o_fine + o_coarse * gate_compress), added in float32
        # before the one rounding to bf16, in a branch only a call with a gate takes (params[5] != 0; without
        # one, gate and oc are one-row placeholders), so one IR serves both. Masked loads in
        # straight-line code, as this epilogue had it before, cost an ungated call 3-4 % of the kernel at the
        # issue's H3 on an H100 (bench/vsa_fine_variants.py's epilogue_base, BENCHMARKS.md session 30).
        @pl.when(params_ref[5] != 0)
        def _():
            gate = plgpu.load(gate_ref.at[rows_out, :], mask=valid, other=0.0)
            store(out + gate.astype(jnp.float32) * oc_ref[pl.ds((first + tile) * heads + head, 1), :])

        @pl.when(params_ref[5] == 0)
        def _():
            store(out)
    return vsa_kernel


def vsa_call(heads, tiles, seq, warps, stages, walk=walk_class, q_rows=False):
    # Grid and output size are the call's; nothing else in the kernel depends on the geometry.
    return pallas_triton(fine_kernel(walk, q_rows), warps, stages, grid=(tiles, heads),
                         out_shape=jax.ShapeDtypeStruct((seq * heads, D), jnp.bfloat16), name="vsa_fwd")


def tile_rows(slots_ref, x_ref, tile, heads, head):
    # A tile's rows of one head read through the slot map (zero at its pads), and its slots.
    slots = slots_ref[pl.ds(tile * T, T)]
    valid = jnp.broadcast_to((slots >= 0)[:, None], (T, D))
    return jnp.where(valid, x_ref[rows_of(slots, heads, head), :], jnp.zeros((T, D), x_ref.dtype)), slots


def tile_mean(x, slots):
    # The float32 mean of a tile's rows x over its valid slots (upstream's _pool_tiles), as a [1, D] row.
    count = jnp.sum((slots >= 0).astype(jnp.float32))
    return (jnp.sum(x.astype(jnp.float32), axis=0) / count)[None, :]


def pack_kernel(params_ref, slots_ref, x_ref, packed_ref, pooled_ref):
    tile, head = pl.program_id(0), pl.program_id(1)
    heads, tiles = params_ref[0], params_ref[1]
    x, slots = tile_rows(slots_ref, x_ref, tile, heads, head)
    packed_ref[pl.ds((head * tiles + tile) * T, T), :] = x
    pooled_ref[pl.ds(tile * heads + head, 1), :] = tile_mean(x, slots)


def pack_call(heads, tiles, warps, stages):
    return pallas_triton(pack_kernel, warps, stages, grid=(tiles, heads),
                         out_shape=(jax.ShapeDtypeStruct((heads * tiles * T, D), jnp.bfloat16),
                                    jax.ShapeDtypeStruct((tiles * heads, D), jnp.float32)), name="vsa_pack")


def operands(q, k, v, idx, num, sizes, slots, first, gate=None, oc=None):
    # Upstream's layout ([1, H, S, D] and [1, H, Qb, K] lists) to the kernel's: each row's list grouped by
    # class (ascending within one, as attention/vsa_triton.go's keyOrder sorts it) and the groups' ends.
    # gate [L·H, D] bf16 and oc [nT·H, D] float32 add the compression branch; without them, placeholders.
    _, h, s, _ = q.shape
    tiles, stride = num.shape[-1] - first, idx.shape[-1]
    params = np.array([s, first, tiles, stride, h, int(gate is not None)], np.int32)
    if gate is None:
        gate, oc = np.zeros((1, D), q.dtype), np.zeros((1, D), np.float32)
    num = num.reshape(h, -1)[:, first:].reshape(-1)
    idx = idx.reshape(h, -1, stride)[:, first:].reshape(-1, stride)
    grouped, ends, classes = np.zeros_like(idx), [], [key_class(n) for n in sizes]
    for r, (row, n) in enumerate(zip(idx, num)):
        grouped[r, :n], row_ends = class_groups(row[:n], classes)
        ends += row_ends
    return [params, np.array(ends, np.int32), grouped.reshape(-1).astype(np.int32), sizes.astype(np.int32),
            slots.astype(np.int32), q.reshape(h * s, D), k.reshape(h * s, D), v.reshape(h * s, D), gate, oc]


def slot_map(rng, sizes, first, shuffle=True):
    # Tile slots to sequence rows as attention.Tiling lays them out: the prefix tiles hold the first rows in
    # order, the video tiles the rest (shuffled: the kernels follow any map); -1 for a pad slot.
    rows, p = int(sizes.sum()), int(sizes[:first].sum())
    rest = rng.permutation(rows - p) if shuffle else np.arange(rows - p)
    order = np.concatenate([np.arange(p), p + rest])
    slots = np.full(len(sizes) * T, -1, np.int32)
    at = 0
    for t, n in enumerate(sizes):
        slots[t * T:t * T + n] = order[at:at + n]
        at += n
    return slots, rows


def tiles_of(o, slots, heads, first):
    # The fine kernel's [L·H, D] output at the slots of the query tiles from first on, as upstream lays its
    # output out: [H, V·64, D], zero at the pads (compare the valid slots only).
    o = np.asarray(o, np.float32).reshape(-1, heads, D)
    s = slots[first * T:]
    out = np.zeros((heads, len(s), D), np.float32)
    out[:, s >= 0] = o[s[s >= 0]].transpose(1, 0, 2)
    return out


def pack_reference(x, slots, heads):
    # The pack kernel's results from the sequence's rows x [L, H, D]: the head-major tile copies [H·nT·64, D]
    # (zero pads) and each tile's float32 mean over its valid rows [nT·H, D].
    x = np.asarray(x, np.float32)
    valid = slots >= 0
    g = np.zeros((len(slots), heads, D), np.float32)
    g[valid] = x[slots[valid]]
    tiles = len(slots) // T
    packed = g.reshape(tiles, T, heads, D).transpose(2, 0, 1, 3).reshape(-1, D)
    count = valid.reshape(tiles, T).sum(1).astype(np.float32)
    pooled = (g.reshape(tiles, T, heads, D).sum(1) / count[:, None, None]).reshape(-1, D)
    return packed, pooled


def xla_pack(x, slots, heads):
    # The same copies and means as XLA ops (what the graph did before the pack kernel), for the bench.
    xs = x.reshape(-1, heads, D)
    valid = (slots >= 0)[:, None, None]
    g = jnp.where(valid, xs[jnp.maximum(slots, 0)], jnp.zeros((), x.dtype))
    tiles = slots.shape[0] // T
    packed = g.reshape(tiles, T, heads, D).transpose(2, 0, 1, 3).reshape(-1, D)
    count = valid.reshape(tiles, T).sum(1).astype(jnp.float32)
    pooled = g.astype(jnp.float32).reshape(tiles, T, heads, D).sum(1) / count[:, None, None]
    return packed, pooled.reshape(-1, D)


def reference(q, k, v, idx, num, sizes, first):
    # float32 masked attention of the query tiles from first on: [H, V·64, D].
    _, h, s, _ = q.shape
    q, k, v = (np.asarray(x, np.float32)[0] for x in (q, k, v))
    nt = s // T
    out = np.zeros((h, (nt - first) * T, D), np.float32)
    for hh in range(h):
        for t in range(first, nt):
            keys = idx[0, hh, t, :num[0, hh, t]]
            rows = np.concatenate([np.arange(kv * T, kv * T + sizes[kv]) for kv in keys])
            sc = q[hh, t * T:(t + 1) * T] @ k[hh, rows].T / math.sqrt(D)
            p = np.exp(sc - sc.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
            out[hh, (t - first) * T:(t - first + 1) * T] = p @ v[hh, rows]
    return out


def random_lists(rng, h, nt, stride, counts):
    # Ascending, distinct key tiles per (head, query tile), -1 past the count (upstream's q2k_index).
    idx = np.full((1, h, nt, stride), -1, np.int32)
    for hh in range(h):
        for t in range(nt):
            c = counts[hh, t]
            idx[0, hh, t, :c] = np.sort(rng.choice(nt, c, replace=False))
    return idx, counts.reshape(1, h, nt).astype(np.int32)


def packed_sizes(rows):
    # Valid rows of consecutive 64-row tiles over rows.
    return np.array([min(T, rows - s) for s in range(0, rows, T)], np.int32)


def tile_sizes(prefix, grid):
    # Valid rows of attention/tiles.go's tiling: each prefix segment cut into 64-row tiles, then the video
    # grid (t, h, w) in 4x4x4 tiles, partial at its far edges.
    sizes = [n for seg in prefix for n in packed_sizes(seg)]
    gt, gh, gw = grid
    sizes += [min(4, gt - t) * min(4, gh - h) * min(4, gw - w) for t in range(0, gt, 4) for h in range(0, gh, 4) for w in range(0, gw, 4)]
    return np.array(sizes, np.int32)


# The geometries --bench times, label: (heads, valid rows of each tile, key tiles a query tile lists): the
# issue's figures (upstream's packing: 64-row tiles, the last one short) and our tilings (4x4x4 tiles of the
# latent grid, ragged at its edges, after the prefix segments' tiles). bench/vsa_inputs.py gives the kernel
# experiments the same inputs.
BENCH_GEOMETRIES = {
    "h3": (56, packed_sizes(14937), 23),
    "wan0.8": (12, packed_sizes(32768), 103),
    "wan0.9": (12, packed_sizes(32768), 52),
    "h3_tiling": (56, tile_sizes([93, 414], (37, 15, 26)), 37),
    "wan_tiling": (12, tile_sizes([], (21, 30, 52)), 125),
}


def load_upstream(folder):
    spec = importlib.util.spec_from_file_location("block_sparse_attn_triton", os.path.join(folder, "block_sparse_attn_triton.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.triton_block_sparse_attn_forward


def bf16(rng, shape):
    return jnp.asarray(rng.standard_normal(shape, dtype=np.float32)).astype(jnp.bfloat16)


# Launch settings tried: Triton pipelines the K/V tile loads num_stages deep (6 is the deepest whose
# buffers fit the H200's shared memory at 4 warps).
CONFIGS = [(4, 2), (4, 3), (4, 4), (4, 5), (4, 6), (8, 2), (8, 3), (8, 4)]


def check_parity(label, c):
    # The fine kernel at every launch setting against float32 attention and upstream's output on case c
    # (main's parity_case).
    video = c.slots[c.first * T:] >= 0
    for warps, stages in CONFIGS:
        try:
            f = jax.jit(vsa_call(c.heads, c.tiles - c.first, c.seq, warps, stages))
            ours = tiles_of(f(*operands(c.q, c.k, c.v, c.idx, c.num, c.sizes, c.slots, c.first)), c.slots, c.heads, c.first)
        except Exception as e:  # a configuration the compiler refuses (shared memory); the bench skips it too
            print(f"parity{label} warps={warps} stages={stages}: {type(e).__name__}: {str(e)[:200]}")
            continue
        e_ref = float(np.abs(ours - c.want)[:, video].max())
        e_up = float(np.abs(ours - c.up)[:, video].max())
        print(f"parity{label} warps={warps} stages={stages}: vs float32 reference {e_ref:.3g}, vs upstream {e_up:.3g}, "
              f"upstream vs reference {float(np.abs(c.up - c.want)[:, video].max()):.3g}")
        assert e_ref < 3e-2 and e_up < 3e-2, "the kernel disagrees"


def check_gated(c):
    # The compression branch in the epilogue (its own draws, so the fixture's stay as they were): each
    # valid row's attention plus its gate times its tile's oc, against the float32 reference plus the same.
    grng = np.random.default_rng(2)
    h, nt = c.heads, c.tiles
    gate = bf16(grng, (c.seq * h, D))
    oc = grng.standard_normal((nt * h, D)).astype(np.float32)
    video = c.slots[c.first * T:]
    g, tile_oc = np.asarray(gate, np.float32).reshape(c.seq, h, D), oc.reshape(nt, h, D)
    expected = c.want.copy()
    for i in np.flatnonzero(video >= 0):
        expected[:, i] += g[video[i]] * tile_oc[c.first + i // T]
    warps, stages = kept_launch_settings("vsa_triton")
    f = jax.jit(vsa_call(h, nt - c.first, c.seq, warps, stages))
    ours = tiles_of(f(*operands(c.q, c.k, c.v, c.idx, c.num, c.sizes, c.slots, c.first, gate, oc)), c.slots, h, c.first)
    e = float(np.abs(ours - expected)[:, video >= 0].max())
    print(f"gated parity: vs float32 reference plus gate*oc {e:.3g} (|expected| <= {float(np.abs(expected).max()):.3g})")
    assert e < 3e-2, "the gated epilogue disagrees"


def case_tensors(c):
    # The fixture's tensors of case c: inputs, lists, tiling, upstream's output and float32 attention.
    import torch
    bf = lambda x: torch.from_numpy(np.asarray(x, np.float32)).to(torch.bfloat16)  # exact: the values are bfloat16
    return {"q": bf(c.q), "k": bf(c.k), "v": bf(c.v), "q2k_index": torch.from_numpy(c.idx), "q2k_num": torch.from_numpy(c.num),
            "variable_block_sizes": torch.from_numpy(c.sizes), "slots": torch.from_numpy(c.slots),
            "out_upstream": bf(c.up), "out_reference": torch.from_numpy(c.want)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True, help="folder with upstream's block_sparse_attn_triton.py")
    ap.add_argument("--out", default=os.path.join(HERE, ".."), help="attention/ (the kernels) with testdata/ below it")
    ap.add_argument("--bench", action="store_true", help="time both fine kernels at the H3 and Wan 1.3B geometries, and the pack kernel")
    args = ap.parse_args()
    import torch
    upstream = load_upstream(args.upstream)

    def run_upstream(q, k, v, idx, num, sizes):
        tq = [torch.from_numpy(np.array(x).view(np.int16)).cuda().view(torch.bfloat16) for x in (q, k, v)]
        o, _ = upstream(*tq, torch.from_numpy(idx).cuda(), torch.from_numpy(num).cuda(), torch.from_numpy(sizes).cuda())
        return o

    def as_np(o):
        return o.float().cpu().numpy()

    # The parity case: 2 heads, 7 key tiles with ragged ones of every class (a 40-row prefix tile, a 12-row
    # tile, a 17-row last tile), 2 prefix tiles, 5 query tiles, the video rows shuffled over the slots; head
    # 0's first query tile selects every key tile, its second one.
    h, nt, first = 2, 7, 2

    def parity_case(rng, sizes):
        # The case at these tile sizes: lists, q, k, v and the slot map drawn from rng in that order, then
        # float32 attention and upstream's output.
        counts = rng.integers(1, nt + 1, size=(h, nt)).astype(np.int32)
        counts[0, first], counts[0, first + 1] = nt, 1
        idx, num = random_lists(rng, h, nt, nt, counts)
        q, k, v = (bf16(rng, (1, h, nt * T, D)) for _ in range(3))
        slots, seq = slot_map(rng, sizes, first)
        want = reference(q, k, v, idx, num, sizes, first)
        up = as_np(run_upstream(q, k, v, idx, num, sizes))[0][:, first * T:]
        return SimpleNamespace(heads=h, tiles=nt, first=first, sizes=sizes, q=q, k=k, v=v, idx=idx, num=num,
                               slots=slots, seq=seq, want=want, up=up)

    rng = np.random.default_rng(0)
    case = parity_case(rng, np.array([64, 40, 64, 12, 64, 64, 17], np.int32))
    check_parity("", case)
    check_gated(case)
    slots, seq = case.slots, case.seq

    # The pack kernel on the same tiling: the copies bit for bit, the means to float32 rounding.
    x = bf16(rng, (seq, h, D))
    packed_want, pooled_want = pack_reference(x, slots, h)
    params = np.array([h, nt], np.int32)
    packed, pooled = jax.jit(pack_call(h, nt, 4, 1))(params, slots, x.reshape(seq * h, D))
    e_packed = float(np.abs(np.asarray(packed, np.float32) - packed_want).max())
    e_pooled = float(np.abs(np.asarray(pooled) - pooled_want).max())
    print(f"pack parity: copies max diff {e_packed:.3g}, means max diff {e_pooled:.3g}")
    assert e_packed == 0 and e_pooled < 1e-5, "the pack kernel disagrees"

    # A second case (its own draws, so the first case's stay as they were): the same shape with the
    # 40-row tile whole, so every tile of 33-64 valid rows is whole, as in upstream's packing and Wan's
    # tiling (bench/vsa_fine_variants.py's nomask64 times that class unmasked).
    whole = parity_case(np.random.default_rng(1), np.array([64, 64, 64, 12, 64, 64, 17], np.int32))
    check_parity(" (whole tiles)", whole)
    check_gated(whole)

    # One IR for every geometry: lower each kernel at two geometries and compare the bytecode.
    irs, pack_irs = [], []
    for hh, tt, ss, ll in [(h, nt - first, nt * T, seq), (56, 234, 14976, 14937)]:
        shapes = [jax.ShapeDtypeStruct(s, d) for s, d in [((6,), jnp.int32), ((hh * tt * len(KEY_BLOCKS),), jnp.int32), ((hh * tt * 23,), jnp.int32),
                                                          ((ss // T,), jnp.int32), ((ss,), jnp.int32)] + [((hh * ss, D), jnp.bfloat16)] * 3 +
                  [((ll * hh, D), jnp.bfloat16), ((ss // T * hh, D), jnp.float32)]]
        cfg, api, other = lowered_triton_call(jax.jit(vsa_call(hh, tt, ll, 4, 3)).lower(*shapes).as_text(), FINE_OPERANDS, "vsa")
        irs.append(cfg["ir"])
        print("lowered", hh, tt, ss, "grid", cfg["grid_x"], cfg["grid_y"], "ir bytes", len(cfg["ir"]), "api", api, "other", other)
        pshapes = [jax.ShapeDtypeStruct(s, d) for s, d in [((2,), jnp.int32), ((ss,), jnp.int32), ((ll * hh, D), jnp.bfloat16)]]
        cfg, api, other = lowered_triton_call(jax.jit(pack_call(hh, ss // T, 4, 1)).lower(*pshapes).as_text(), 3, "vsa_pack")
        pack_irs.append(cfg["ir"])
        print("lowered pack", hh, ss // T, "grid", cfg["grid_x"], cfg["grid_y"], "ir bytes", len(cfg["ir"]), "api", api, "other", other)
    print("IR the same at both geometries:", irs[0] == irs[1], "(pack:", pack_irs[0] == pack_irs[1], ")")

    timings, pack_timings = {}, {}
    if args.bench:
        for label, (hh, bs, stride) in BENCH_GEOMETRIES.items():
            ntt = len(bs)
            ss = ntt * T
            bslots, bseq = slot_map(rng, bs, 0, shuffle=False)
            bidx, bnum = random_lists(rng, hh, ntt, stride, np.full((hh, ntt), stride, np.int32))
            bq, bk, bv = (bf16(rng, (1, hh, ss, D)) for _ in range(3))
            tu = [torch.from_numpy(np.array(x).view(np.int16)).cuda().view(torch.bfloat16) for x in (bq, bk, bv)]
            ti, tn, tb = torch.from_numpy(bidx).cuda(), torch.from_numpy(bnum).cuda(), torch.from_numpy(bs).cuda()
            t_up = timed(lambda: upstream(*tu, ti, tn, tb)[0], 20)
            t_dense = timed(lambda: torch.nn.functional.scaled_dot_product_attention(*tu), 10)
            ref_out = as_np(upstream(*tu, ti, tn, tb)[0])[0]
            ops = [jnp.asarray(x) for x in operands(bq, bk, bv, bidx, bnum, bs, bslots, 0)]
            row = {"upstream_ms": t_up * 1e3, "torch_sdpa_dense_ms": t_dense * 1e3}
            flops = 4 * hh * ntt * stride * T * T * D
            bvalid = bslots >= 0
            for warps, stages in CONFIGS:
                try:
                    f = jax.jit(vsa_call(hh, ntt, bseq, warps, stages))
                    t = timed(lambda: f(*ops), 20)
                except Exception as e:
                    print(f"{label}: ours warps={warps} stages={stages}: {type(e).__name__}: {str(e)[:200]}")
                    continue
                err = float(np.abs(tiles_of(f(*ops), bslots, hh, 0) - ref_out)[:, bvalid].max())
                row[f"ours_w{warps}_s{stages}_ms"] = t * 1e3
                print(f"{label}: ours warps={warps} stages={stages} {t*1e3:.3f} ms ({flops/t/1e12:.0f} TFLOP/s), max diff vs upstream {err:.3g}")
            print(f"{label}: upstream {t_up*1e3:.3f} ms ({flops/t_up/1e12:.0f} TFLOP/s), torch dense SDPA {t_dense*1e3:.3f} ms")
            timings[label] = row
        # The pack kernel against the same copies and means as XLA ops, at our tilings.
        for label in ("h3_tiling", "wan_tiling"):
            hh, bs, _ = BENCH_GEOMETRIES[label]
            bslots, bseq = slot_map(rng, bs, 0)
            x = bf16(rng, (bseq * hh, D))
            params, js = jnp.asarray(np.array([hh, len(bs)], np.int32)), jnp.asarray(bslots)
            xf = jax.jit(lambda x, s: xla_pack(x, s, hh))
            t_xla = timed(lambda: xf(x, js), 20)
            moved = bseq * hh * D * 2 + len(bs) * T * hh * D * 2 + len(bs) * hh * D * 4
            row = {"xla_ms": t_xla * 1e3}
            want_p, want_m = xf(x, js)
            for warps in (1, 2, 4, 8):
                f = jax.jit(pack_call(hh, len(bs), warps, 1))
                t = timed(lambda: f(params, js, x), 20)
                got = f(params, js, x)
                e = (float(jnp.abs(got[0].astype(jnp.float32) - want_p.astype(jnp.float32)).max()), float(jnp.abs(got[1] - want_m).max()))
                row[f"ours_w{warps}_s1_ms"] = t * 1e3
                print(f"pack {label}: ours warps={warps} {t*1e3:.3f} ms ({moved/t/1e12:.2f} TB/s), max diff vs XLA {e[0]:.3g} / {e[1]:.3g}")
            print(f"pack {label}: XLA ops {t_xla*1e3:.3f} ms ({moved/t_xla/1e12:.2f} TB/s)")
            pack_timings[label] = row

    # The kernels, at the compile parameters with the least time summed over the geometries (without --bench,
    # those of the committed kernel files).
    warps, stages = kept_launch_settings("vsa_triton")
    pack_warps, _ = kept_launch_settings("vsa_pack_triton")
    if timings:
        warps, stages = fastest(timings)
        pack_warps, _ = fastest(pack_timings)
        print(f"launch settings: {warps} warps, {stages} stages; pack {pack_warps} warps")
    kernel = kernel_record("attention/testdata/gen_vsa_triton.py", "vsa_fwd", warps, stages, irs, timings,
                           key_blocks=list(KEY_BLOCKS), operands=FINE_OPERANDS)
    pack = kernel_record("attention/testdata/gen_vsa_triton.py", "vsa_pack", pack_warps, 1, pack_irs, pack_timings)
    with open(os.path.join(args.out, "vsa_pack_triton.json"), "w") as fh:
        json.dump(pack, fh, indent=1)
    meta = {"kind": "vsa_triton", "generator": "attention/testdata/gen_vsa_triton.py", "heads": h, "tiles": nt, "prefix_tiles": first, "head_dim": D,
            "upstream": "fastvideo-kernel/python/fastvideo_kernel/triton_kernels/block_sparse_attn_triton.py "
                        "(triton_block_sparse_attn_forward), FastVideo 2f3d407", "torch": torch.__version__,
            "triton": __import__("triton").__version__, "jax": jax.__version__, "plugin": plugin_version(),
            "note": "q, k, v are [1, H, S, D] tile-padded; slots maps each tile slot to its sequence row (-1: a pad); "
                    "out_* are [H, (tiles - prefix) * 64, D], upstream's rows from the prefix on (only the valid slots "
                    "count); out_reference is float32 attention of the bfloat16 inputs"}
    write_outputs(args.out, "vsa_triton", kernel, case_tensors(case), meta)
    meta["note"] += "; every tile of 33-64 valid rows is whole"
    write_fixture(args.out, "vsa_triton_whole", case_tensors(whole), meta)


def fastest(timings):
    # The (warps, stages) of the ours_w*_s*_ms key with the least time summed over the geometries.
    keys = set.intersection(*({k for k in row if k.startswith("ours_")} for row in timings.values()))
    key = min(keys, key=lambda k: sum(row[k] for row in timings.values()))
    return int(key.split("_w")[1].split("_")[0]), int(key.split("_s")[1].split("_")[0])


def kept_launch_settings(name):
    # The launch settings of the committed kernel file attention/NAME.json (a --bench run chose them), so a
    # run without --bench does not silently put others in; 4 warps, 3 stages when there is none.
    try:
        with open(os.path.join(HERE, "..", name + ".json")) as fh:
            k = json.load(fh)
        return int(k["num_warps"]), int(k["num_stages"])
    except (OSError, KeyError, ValueError):
        return 4, 3


def kernel_record(generator, name, warps, stages, irs, timings, **extra):
    # The kernel file attention/*_triton.json: the IR lowered at the larger of two geometries (irs), what it
    # was made with, and whether the two geometries gave the same bytes.
    return {"generator": generator, "jax": jax.__version__, "plugin": plugin_version(),
            "device": str(jax.devices()[0].device_kind), "name": name, "head_dim": D, "tile": T, **extra,
            "num_warps": warps, "num_stages": stages, "ir": base64.b64encode(irs[1]).decode(),
            "same_ir_at_two_geometries": irs[0] == irs[1], "timings_ms": timings}


def write_outputs(out, name, kernel, tensors, meta):
    # OUT/NAME.json (the kernel) and OUT/testdata/NAME.{safetensors,json} (the fixture, meta as its refgen).
    with open(os.path.join(out, name + ".json"), "w") as fh:
        json.dump(kernel, fh, indent=1)
    write_fixture(out, name, tensors, meta)


def write_fixture(out, name, tensors, meta):
    # OUT/testdata/NAME.{safetensors,json}.
    from safetensors.torch import save_file
    save_file(tensors, os.path.join(out, "testdata", name + ".safetensors"), metadata={"refgen": json.dumps(meta)})
    with open(os.path.join(out, "testdata", name + ".json"), "w") as fh:
        json.dump(meta, fh, indent=1)
    print("wrote", os.path.join(out, "testdata", name + ".*"))


if __name__ == "__main__":
    main()
