# VSA's fine stage as a Mosaic GPU kernel (JAX's Pallas, backend="mosaic_gpu") that a Go graph calls as the
# `mosaic_gpu_v2` custom call (internal/xlaext.MosaicGPUCall), shipped as a template over the geometry
# (internal/xlaext.MosaicTemplate), with its parity fixture against upstream's Triton forward.
#
# The kernel is bench/vsa_mosaic_draft.py's, which ran first in session 31 at 0.80-0.81x upstream's time at
# the four geometries on an H100 (BENCHMARKS.md), with two changes for the graph: list row r is the
# query tile first + r (first an int32 operand: the video tiles after the prefix ones, whose rows attend
# densely elsewhere), and the result holds only the listed query tiles' rows, [H, V·64, D], as upstream lays
# its output out from first on. Like FlashAttention-3 for Hopper (jax/experimental/pallas/ops/gpu/
# attention_mgpu.py), a memory warpgroup streams K/V tiles by TMA into rings of shared buffers for two
# compute warpgroups; here each takes a query tile of its own (two consecutive list rows of one head a
# program) with its own list, reads each listed key tile in place and masks the columns past its valid rows.
#
# Operands (row-major), as a graph would pass them:
#   q, k, v  bf16[H, S, 128]   the pack kernel's head-major tile copies (S = key tiles·64)
#   idx      int32[H, V, K]    each query tile's key tiles (any order: every tile is walked at 64 rows)
#   num      int32[H, V]       how many of them
#   valid    int32[H, V, K]    the valid rows of each listed key tile (sizes[idx], gathered by the graph)
#   first    int32[1]          the key tile of list row 0's query tile
# Result: bf16[H, V·64, 128]. Grid (H, ceil(V/2)) with three warpgroups a program.
#
# A Mosaic GPU module is compiled for its shapes, so the kernel ships as a template: lowered at several
# geometries (every parameter varied on its own; first a runtime operand so that no constant of it folds
# away), its text's geometry-dependent numbers fitted as formulas of H, T (key tiles), V and K, checked at a
# held-out geometry, then instantiated for a new one and run through JAX against the float32 reference and
# upstream's kernel. Writes attention/vsa_mosaic.json.gz (the template with the geometries it was checked at,
# and what it was made with) and attention/testdata/vsa_mosaic.{safetensors,json} (a geometry none of the
# fits saw: inputs, JAX's output of the instantiated template, which the Go graph must give bit for bit).
#
#   python3 attention/testdata/gen_vsa_mosaic.py --upstream DIR [--bench] [--out DIR]
#
# Run it on the GPU machine (Hopper) with the JAX whose CUDA plugin the Go binaries load (bench/kernel_probes.sh
# step 8 writes the outputs to the device's $OUT; commit them).
import argparse, gzip, json, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "internal", "xlaext", "testdata"))

import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
import jax.experimental.pallas.mosaic_gpu as plgpu

import gen_vsa_triton as G  # noqa: E402
import mosaic_template  # noqa: E402
from gen_triton import plugin_version, timed  # noqa: E402

T, D, SCALE = G.T, G.D, G.SCALE  # the Triton kernel's tile rows, head width and scores to base 2
SEMANTICS = {"warpgroup": plgpu.LoweringSemantics.Warpgroup, "lane": plgpu.LoweringSemantics.Lane}
# Rows of staged_table's per-tile block.
KEYS, ROWS, COUNT = 0, 1, 2


def staged_table(idx, num, valid):
    # idx, num and valid as one int32 table [H, T, 3, Kp] (rows KEYS, ROWS and COUNT, the count in column
    # 0), Kp the list length rounded up to 32: the TMA copy needs every GMEM stride but the last a
    # multiple of 16 bytes (jax/experimental/mosaic/gpu/launch_context.py, _prepare_tma) and, under Lane
    # semantics, a transfer of a multiple of 128 bytes (jax/_src/pallas/mosaic_gpu/primitives.py,
    # _copy_gmem_to_smem_lowering); 3·32·4 bytes meets both. Made once outside the timed call, as the
    # graph would make valid.
    kp = -(-idx.shape[2] // 32) * 32
    pad = lambda a: jnp.pad(a.astype(jnp.int32), ((0, 0), (0, 0), (0, kp - a.shape[2])))
    return jnp.stack([pad(idx), pad(valid), pad(num[:, :, None])], axis=2)


def vsa_mosaic(q, k, v, lists, steps=2, semantics="warpgroup", pingpong=False, paired=False):
    # lists: (idx, num, valid[, first]), read from GMEM in the loops, or staged_table's table, staged in SMEM
    # (first 0). first (int32[1]) is the key tile of list row 0's query tile: the rows list the query tiles
    # first .. first+V-1 (the video tiles after the prefix ones), and the result holds their rows, [H, V·64, D].
    # pingpong: the two compute warpgroups take turns on the tensor cores, one's products while the
    # other's softmax, through a barrier both arrive at (attention_mgpu.py's schedule_barrier).
    # paired: a loop step takes two listed key tiles, one softmax update over their 128 columns (FlashAttention-3's
    # 128-row key blocks ran 17 % faster than 64-row ones at FastH3's dense geometry, BENCHMARKS.md session 31);
    # each tile keeps its own ring buffer, and an odd list's last step takes its last tile again, all of it masked.
    h, s, d = q.shape
    staged = not isinstance(lists, tuple)
    tiles = lists.shape[1] if staged else lists[0].shape[1]
    assert d == D and s % T == 0 and s >= tiles * T, (q.shape, tiles)
    dtype = q.dtype

    def kernel(q_ref, k_ref, v_ref, list_refs, out_ref, scoped):
        head, pair = lax.axis_index("heads"), lax.axis_index("pairs")
        wg = lax.axis_index("wg")
        (q_smem, k_smem, v_smem), (k_ready, v_ready, q_ready), (k_free, v_free), stage, turn = scoped

        def take_turn():
            if pingpong:
                plgpu.barrier_arrive(turn)
                plgpu.barrier_wait(turn)

        def tile_of(w):
            return pair * 2 + w

        def row_of(w):
            return jnp.minimum(tile_of(w), tiles - 1)

        if staged:
            (table_ref,), (table_smem, table_ready) = list_refs, stage

            def fetch_lists(w):
                plgpu.copy_gmem_to_smem(table_ref.at[head, row_of(w)], table_smem.at[w], table_ready.at[w])

            def await_lists(w):
                plgpu.barrier_wait(table_ready.at[w])

            key_tile = lambda w, j: table_smem[w, KEYS, j]
            rows_of = lambda w, j: table_smem[w, ROWS, j]
            listed = lambda w: table_smem[w, COUNT, 0]
        else:
            idx_ref, num_ref, valid_ref = list_refs[:3]
            fetch_lists = await_lists = lambda w: None
            key_tile = lambda w, j: idx_ref[head, row_of(w), j]
            rows_of = lambda w, j: valid_ref[head, row_of(w), j]
            listed = lambda w: num_ref[head, row_of(w)]

        def count_of(w):
            # A partner past the last query tile has no keys (an odd number of tiles).
            return jnp.where(tile_of(w) < tiles, listed(w), 0)

        def walked(w):
            # The entries the rings carry: the count, rounded up to whole pairs when paired.
            n = count_of(w)
            return (n + 1) // 2 * 2 if paired else n

        def ring(w, step):
            # Warpgroup w's buffers hold its steps round-robin; barriers are numbered w·steps + slot.
            return w * steps + lax.rem(step, jnp.int32(steps))

        @pl.when(wg < 2)
        def _compute():
            plgpu.set_max_registers(232, action="increase")
            t = tile_of(wg)
            q_tile = q_smem.at[wg]
            # The query tile's rows: a product by 64 again, so the TMA offset is a multiple of the tiling.
            # Without first (lists of three) the module is the draft's as session 31 ran it.
            q_tile_at = row_of(wg) if staged or len(list_refs) < 4 else list_refs[3][0] + row_of(wg)
            plgpu.copy_gmem_to_smem(q_ref.at[head, pl.ds(q_tile_at * T, T)], q_tile, q_ready.at[wg])
            await_lists(wg)
            n = count_of(wg)
            plgpu.barrier_wait(q_ready.at[wg])
            m_i = plgpu.layout_cast(jnp.full((T,), -jnp.inf, jnp.float32), plgpu.Layout.WGMMA.reduce(1))
            l_i = plgpu.layout_cast(jnp.full((T,), 0, jnp.float32), plgpu.Layout.WGMMA.reduce(1))
            acc = plgpu.layout_cast(jnp.full((T, D), 0, jnp.float32), plgpu.Layout.WGMMA)
            cols = plgpu.broadcasted_iota(jnp.int32, (T, T), 1, layout=plgpu.Layout.WGMMA)
            if pingpong:
                pl.when(wg == 1)(take_turn)  # warpgroup 0 goes first

            def step(j, carry):
                acc, m_i, l_i = carry
                b = ring(wg, j)
                rows = rows_of(wg, j)
                plgpu.barrier_wait(k_ready.at[b])

                def qk_of(acc_ref):
                    plgpu.wgmma(acc_ref, q_tile, plgpu.transpose_ref(k_smem.at[b], (1, 0)))
                    take_turn()
                    return acc_ref[...]
                qk = pl.run_scoped(qk_of, plgpu.ACC((T, T), jnp.float32))
                plgpu.barrier_arrive(k_free.at[b])
                # A finite mask, as the Triton kernel's: with -inf a tile of no valid rows (a pad slot of
                # the graph's lists) makes the row max -inf and exp2(-inf - -inf) a NaN.
                qk = jnp.where(cols < rows, qk, G.MASKED)
                m_ij = jnp.maximum(m_i, qk.max(axis=1) * SCALE)
                alpha = jnp.exp2(m_i - m_ij)
                # The scale folded into the exponent: one multiply-add an element with the running max.
                p = jnp.exp2(qk * SCALE - lax.broadcast_in_dim(m_ij, qk.shape, [0]))
                acc = acc * lax.broadcast_in_dim(alpha, acc.shape, [0])
                l_i = l_i * alpha + p.sum(axis=1)
                if pingpong:  # done with the softmax; wait for V and for the tensor cores
                    plgpu.barrier_arrive(turn)
                    plgpu.barrier_wait(v_ready.at[b])
                    plgpu.barrier_wait(turn)
                else:
                    plgpu.barrier_wait(v_ready.at[b])

                def pv_of(acc_ref):
                    plgpu.wgmma(acc_ref, p.astype(dtype), v_smem.at[b])
                acc = pl.run_state(pv_of)(plgpu.ACC.init(acc))
                plgpu.barrier_arrive(v_free.at[b])
                return acc, m_ij, l_i

            def pair_step(jp, carry):
                # Entries 2jp and 2jp+1 (the latter past the count: its columns all masked).
                acc, m_i, l_i = carry
                qks, bs = [], []
                for half in (0, 1):
                    e = jp * 2 + half
                    b = ring(wg, e)
                    rows = jnp.where(e < n, rows_of(wg, jnp.minimum(e, n - 1)), 0)
                    plgpu.barrier_wait(k_ready.at[b])

                    def qk_of(acc_ref, b=b):
                        plgpu.wgmma(acc_ref, q_tile, plgpu.transpose_ref(k_smem.at[b], (1, 0)))
                        return acc_ref[...]
                    qk = pl.run_scoped(qk_of, plgpu.ACC((T, T), jnp.float32))
                    plgpu.barrier_arrive(k_free.at[b])
                    qks.append(jnp.where(cols < rows, qk, G.MASKED))
                    bs.append(b)
                m_ij = jnp.maximum(m_i, jnp.maximum(qks[0].max(axis=1), qks[1].max(axis=1)) * SCALE)
                alpha = jnp.exp2(m_i - m_ij)
                ps = [jnp.exp2(qk * SCALE - lax.broadcast_in_dim(m_ij, qk.shape, [0])) for qk in qks]
                acc = acc * lax.broadcast_in_dim(alpha, acc.shape, [0])
                l_i = l_i * alpha + ps[0].sum(axis=1) + ps[1].sum(axis=1)
                for p, b in zip(ps, bs):
                    plgpu.barrier_wait(v_ready.at[b])

                    def pv_of(acc_ref, p=p, b=b):
                        plgpu.wgmma(acc_ref, p.astype(dtype), v_smem.at[b])
                    acc = pl.run_state(pv_of)(plgpu.ACC.init(acc))
                    plgpu.barrier_arrive(v_free.at[b])
                return acc, m_ij, l_i

            if paired:
                acc, m_i, l_i = lax.fori_loop(0, walked(wg) // 2, pair_step, (acc, m_i, l_i))
            else:
                acc, m_i, l_i = lax.fori_loop(0, n, step, (acc, m_i, l_i))
            if pingpong:
                # The partner may list more tiles (or this one none: an odd last pair): its every step
                # takes two turns, which this warpgroup must still arrive at, as attention_mgpu.py's
                # causal epilogue does.
                await_lists(1 - wg)
                longest = jnp.maximum(count_of(0), count_of(1))

                def idle(j, _):
                    take_turn()
                    take_turn()
                lax.fori_loop(n, longest, idle, None)
                pl.when(wg == 0)(take_turn)

            @pl.when(t < tiles)
            def _write():
                q_tile[...] = (acc / lax.broadcast_in_dim(l_i, (T, D), [0])).astype(dtype)
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(q_tile, out_ref.at[head, pl.ds(t * T, T)])
                plgpu.wait_smem_to_gmem(0)

        @pl.when(wg == 2)
        def _memory():
            plgpu.set_max_registers(40, action="decrease")
            # The producer stages both warpgroups' lists (a no-op when the loops read GMEM); each compute
            # warpgroup waits on its own barrier, this one on both before it reads the counts.
            for w in (0, 1):
                fetch_lists(w)
            for w in (0, 1):
                await_lists(w)
            counts = [walked(0), walked(1)]

            def load(w, j, wait=False):
                # The row offset stays kv·T: the Warpgroup lowering must prove a TMA offset into a tiled
                # ref a multiple of the tiling, which it does for a product by 64 (not for an offset read
                # from a table). On a refill K goes as soon as the step `steps` before has read its K
                # (the first product), and V after its V, as attention_mgpu.py's producer does.
                # A paired walk's padding entry takes the list's last tile again (only there: the unpaired
                # kernel's module stays the one the committed template was made from).
                at = jnp.minimum(j, count_of(w) - 1) if paired else j
                rows = pl.ds(key_tile(w, at) * T, T)
                b = ring(w, j)
                if wait:
                    plgpu.barrier_wait(k_free.at[b])
                plgpu.copy_gmem_to_smem(k_ref.at[head, rows], k_smem.at[b], k_ready.at[b])
                if wait:
                    plgpu.barrier_wait(v_free.at[b])
                plgpu.copy_gmem_to_smem(v_ref.at[head, rows], v_smem.at[b], v_ready.at[b])

            for j in range(steps):  # fill the rings
                for w in (0, 1):
                    pl.when(j < counts[w])(lambda w=w, j=j: load(w, j))

            @pl.loop(steps, jnp.maximum(counts[0], counts[1]))
            def _refill(j):
                for w in (0, 1):
                    pl.when(j < counts[w])(lambda w=w: load(w, j, wait=True))

    def entry(q_ref, k_ref, v_ref, *refs):
        tiling, swizzle = plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128)
        smem = lambda *shape: plgpu.SMEM(shape, dtype, transforms=(tiling, swizzle))
        # No transforms on the table: the Warpgroup lowering loads scalars only from untransformed refs
        # (jax/experimental/mosaic/gpu/layout_inference.py, memref.LoadOp), and nothing else constrains it.
        # None (the GMEM variant) allocates nothing, as attention_mgpu.py's unused lse buffer. The table
        # takes 3 KiB at most here (Kp 128): with --steps 2 the block holds about 165 KiB of the H200's
        # 227; at --steps 3 the rings alone leave it no room, so that is a GMEM-only setting.
        stage = (plgpu.SMEM((2,) + lists.shape[2:], jnp.int32), plgpu.Barrier(num_barriers=2)) if staged else None
        pl.run_scoped(
            lambda *scoped: kernel(q_ref, k_ref, v_ref, refs[:-1], refs[-1], scoped),
            (smem(2, T, D), smem(2 * steps, T, D), smem(2 * steps, T, D)),
            (plgpu.Barrier(num_barriers=2 * steps), plgpu.Barrier(num_barriers=2 * steps), plgpu.Barrier(num_barriers=2)),
            (plgpu.Barrier(num_arrivals=1, num_barriers=2 * steps),) * 2,
            stage,
            plgpu.Barrier(num_arrivals=2) if pingpong else None,
            collective_axes="wg",
        )

    return plgpu.kernel(
        entry,
        out_type=jax.ShapeDtypeStruct((h, tiles * T, d), dtype),
        grid=(h, (tiles + 1) // 2),
        grid_names=("heads", "pairs"),
        num_threads=3,
        thread_name="wg",
        compiler_params=plgpu.CompilerParams(approx_math=True, lowering_semantics=SEMANTICS[semantics]),
    )(q, k, v, *(lists if not staged else (lists,)))


# The template's geometries, (heads H, key tiles T, query tiles V, list width K, first): each parameter varied
# on its own (V odd and even: a program takes two query tiles), the formulas fitted on all but the last, the
# held-out one (FastH3's tiling: 56 heads, 289 tiles, 9 of them prefix, top-28 and the 9 prefix tiles). The
# small ones lower the least geometry the template serves (xlaext.MosaicTemplate.Covers) and so the size of
# the committed fixture; the first run (session 32) had only the others, with a 12.7 MB fixture at (3, 45,
# 41, 7, 4). Should the small ones lower to another structure, the template is made without them.
SMALL_GEOMETRIES = [(2, 12, 9, 3, 3), (3, 17, 12, 4, 5)]
TEMPLATE_GEOMETRIES = [(3, 40, 33, 5, 4), (5, 61, 47, 9, 7), (7, 37, 30, 13, 2), (4, 52, 41, 6, 11), (56, 289, 280, 37, 9)]
# The fixture's geometry, none of the fits': 2 heads, 15 key tiles of which 5 prefix, lists of up to 4 (3
# heads, 45 tiles, 4 prefix, lists of 7 when the small geometries do not fit).
FIXTURE_GEOMETRY, FIXTURE_GEOMETRY_LARGE = (2, 15, 10, 4, 5), (3, 45, 41, 7, 4)


def call(h, nt, v, k):
    # The kernel as the graph calls it, over operand shapes of this geometry (first is data).
    def f(q, kk, vv, idx, num, valid, first):
        return vsa_mosaic(q, kk, vv, (idx, num, valid, first))
    shapes = [jax.ShapeDtypeStruct((h, nt * T, D), jnp.bfloat16)] * 3 + [
        jax.ShapeDtypeStruct((h, v, k), jnp.int32), jax.ShapeDtypeStruct((h, v), jnp.int32),
        jax.ShapeDtypeStruct((h, v, k), jnp.int32), jax.ShapeDtypeStruct((1,), jnp.int32)]
    return f, shapes


def fixture_case(rng, upstream, geometry):
    # Ragged tiles (every size class, the prefix tiles too), lists of 1..K tiles, head 0's first list of K.
    h, nt, v, k, first = geometry
    assert first + v == nt
    sizes = rng.integers(1, T + 1, nt).astype(np.int32)
    sizes[::3] = T
    counts = rng.integers(1, k + 1, size=(h, nt)).astype(np.int32)
    counts[0, first] = k
    idx, num = G.random_lists(rng, h, nt, k, counts)
    q, kk, vv = (G.bf16(rng, (1, h, nt * T, D)) for _ in range(3))
    lists = idx[0, :, first:], num[0, :, first:]
    valid = np.where(lists[0] >= 0, sizes[np.maximum(lists[0], 0)], 0).astype(np.int32)
    want = G.reference(q, kk, vv, idx, num, sizes, first)
    import torch
    tq = [torch.from_numpy(np.array(x).view(np.int16)).cuda().view(torch.bfloat16) for x in (q, kk, vv)]
    up = upstream(*tq, torch.from_numpy(idx).cuda(), torch.from_numpy(num).cuda(), torch.from_numpy(sizes).cuda())[0]
    up = up.float().cpu().numpy()[0][:, first * T:]
    ops = [q[0], kk[0], vv[0], jnp.asarray(np.maximum(lists[0], 0)), jnp.asarray(lists[1]), jnp.asarray(valid),
           jnp.asarray([first], jnp.int32)]
    return ops, sizes, want, up


# The issue's geometries and FastH3's and FastWan's tilings (gen_vsa_triton.py's BENCH_GEOMETRIES), full lists.
BENCH_LABELS = ("h3", "wan0.8", "h3_tiling", "wan_tiling")


def bench_inputs(rng, label):
    # The kernel's operands at a bench geometry (every tile a query tile, first 0), upstream's on the same
    # inputs, the fine stage's FLOPs, and (H, T, K).
    import torch
    bh, bsizes, stride = G.BENCH_GEOMETRIES[label]
    bnt = len(bsizes)
    idx, num = G.random_lists(rng, bh, bnt, stride, np.full((bh, bnt), stride, np.int32))
    q, kk, vv = (G.bf16(rng, (1, bh, bnt * T, D)) for _ in range(3))
    ops = [q[0], kk[0], vv[0], jnp.asarray(idx[0]), jnp.asarray(num[0]), jnp.asarray(bsizes[idx[0]].astype(np.int32)),
           jnp.asarray([0], jnp.int32)]
    up_args = [torch.from_numpy(np.array(x).view(np.int16)).cuda().view(torch.bfloat16) for x in (q, kk, vv)]
    up_args += [torch.from_numpy(x).cuda() for x in (idx, num, bsizes)]
    return ops, up_args, 4 * bh * bnt * stride * T * T * D, (bh, bnt, stride)


# The kernel's settings compare_variants times, the first the committed one.
VARIANTS = {"base": {}, "steps3": {"steps": 3}, "paired": {"paired": True}, "paired_steps3": {"paired": True, "steps": 3}}


def compare_variants(upstream, rounds=3):
    # Each variant jitted from source (no template): its output on the fixture's inputs against float32, then
    # its time at the four geometries, median of rounds of 20 calls, beside upstream's in the same run.
    rng = np.random.default_rng(0)
    ops, _, want, _ = fixture_case(rng, upstream, FIXTURE_GEOMETRY_LARGE)
    runs = {}
    for name, kw in VARIANTS.items():
        try:
            fn = jax.jit(lambda *o, kw=kw: vsa_mosaic(o[0], o[1], o[2], tuple(o[3:]), **kw))
            err = float(np.abs(np.asarray(fn(*ops), np.float32) - want).max())
            print(f"{name}: max diff from float32 {err:.3g} at {FIXTURE_GEOMETRY_LARGE}", flush=True)
            runs[name] = fn if err < 0.05 else None
        except Exception as e:  # a lowering error names its cause in its first line
            print(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}", flush=True)
    for label in BENCH_LABELS:
        bops, up_args, flops, _ = bench_inputs(rng, label)
        times = {"upstream": [timed(lambda: upstream(*up_args)[0], 20) for _ in range(rounds)]}
        for name, fn in runs.items():
            if fn is not None:
                times[name] = [timed(lambda: fn(*bops), 20) for _ in range(rounds)]
        line = ", ".join(f"{n} {np.median(t) * 1e3:.3f} ms ({flops / np.median(t) / 1e12:.0f} TFLOP/s)" for n, t in times.items())
        print(f"{label}: {line}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True, help="folder with upstream's block_sparse_attn_triton.py")
    ap.add_argument("--out", default=os.path.join(HERE, ".."), help="attention/ (the template) with testdata/ below it")
    ap.add_argument("--bench", action="store_true", help="time the kernel against upstream's at the issue's geometries")
    ap.add_argument("--variants", action="store_true",
                    help="only compare the kernel's variants (VARIANTS) on the fixture's inputs and time them at the issue's geometries; writes nothing")
    args = ap.parse_args()
    upstream = G.load_upstream(args.upstream)
    if args.variants:
        return compare_variants(upstream)

    cases = []
    for h, nt, v, k, first in SMALL_GEOMETRIES + TEMPLATE_GEOMETRIES:
        f, shapes = call(h, nt, v, k)
        cases.append(({"H": h, "T": nt, "V": v, "K": k}, mosaic_template.lowered_text(f, *shapes)))
        print(f"lowered H {h} T {nt} V {v} K {k}: {len(cases[-1][1])} characters", flush=True)
    geometry = FIXTURE_GEOMETRY
    try:
        template = mosaic_template.infer(cases)
    except (ValueError, AssertionError) as e:
        print(f"the small geometries do not fit the others' template ({e}); made without them", flush=True)
        template, geometry = mosaic_template.infer(cases[len(SMALL_GEOMETRIES):]), FIXTURE_GEOMETRY_LARGE
    print(f"template: {len(template['holes'])} holes, {len(template['formulas'])} formulas:", template["formulas"], flush=True)

    # The fixture geometry, which no fit saw: the template's text run through JAX against float32 and upstream.
    rng = np.random.default_rng(0)
    ops, sizes, want, up = fixture_case(rng, upstream, geometry)
    h, nt, v, k, first = geometry
    f, shapes = call(h, nt, v, k)
    text = mosaic_template.instantiate(template, {"H": h, "T": nt, "V": v, "K": k})
    assert text == mosaic_template.lowered_text(f, *shapes), "the template does not give JAX's text at the fixture geometry"
    out = np.asarray(mosaic_template.run_text(f, text, *ops), np.float32)
    err_ref, err_up = float(np.abs(out - want).max()), float(np.abs(out - up).max())
    print(f"fixture {geometry}: max diff from float32 {err_ref:.3g}, from upstream {err_up:.3g}", flush=True)
    assert err_ref < 0.05 and err_up < 0.05, "the kernel does not compute the fine stage"

    timings = {}
    if args.bench:
        for label in BENCH_LABELS:
            bops, up_args, flops, (bh, bnt, stride) = bench_inputs(rng, label)
            bf, _ = call(bh, bnt, bnt, stride)
            btext = mosaic_template.instantiate(template, {"H": bh, "T": bnt, "V": bnt, "K": stride})
            t_up = timed(lambda: upstream(*up_args)[0], 20)
            compiled = mosaic_template.compile_text(bf, btext, *bops)
            t = timed(lambda: compiled(*bops), 20)
            timings[label] = {"mosaic_ms": t * 1e3, "upstream_ms": t_up * 1e3}
            print(f"{label}: mosaic {t * 1e3:.3f} ms ({flops / t / 1e12:.0f} TFLOP/s), upstream Triton {t_up * 1e3:.3f} ms", flush=True)

    record = {"generator": "attention/testdata/gen_vsa_mosaic.py", "jax": jax.__version__, "plugin": plugin_version(),
              "device": str(jax.devices()[0].device_kind), "tile": T, "head_dim": D, "steps": 2, "operands": 7,
              "timings_ms": timings, **template}
    with gzip.open(os.path.join(args.out, "vsa_mosaic.json.gz"), "wt") as fh:
        json.dump(record, fh)
    import torch
    bf = lambda x: torch.from_numpy(np.asarray(x, np.float32)).to(torch.bfloat16)
    tensors = {"q": bf(ops[0]), "k": bf(ops[1]), "v": bf(ops[2]), "idx": torch.from_numpy(np.asarray(ops[3])),
               "num": torch.from_numpy(np.asarray(ops[4])), "valid": torch.from_numpy(np.asarray(ops[5])),
               "first": torch.from_numpy(np.asarray(ops[6])), "out_kernel": bf(out), "out_reference": torch.from_numpy(want)}
    meta = {"kind": "vsa_mosaic", "generator": "attention/testdata/gen_vsa_mosaic.py", "heads": h, "tiles": nt, "query_tiles": v,
            "list_width": k, "first": first, "jax": jax.__version__, "plugin": plugin_version(),
            "note": "q, k, v are [H, S, D] tile copies; idx, num, valid the query tiles' lists from first on; out_kernel is "
                    "JAX's run of the template's text at this geometry (none of the fits saw it), out_reference float32 attention"}
    G.write_fixture(args.out, "vsa_mosaic", tensors, meta)
    print("wrote", os.path.join(args.out, "vsa_mosaic.json.gz"))


if __name__ == "__main__":
    main()
