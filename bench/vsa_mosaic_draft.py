# A draft of VSA's fine stage as a Mosaic GPU kernel (JAX's Pallas, backend="mosaic_gpu"), timed against
# upstream's Triton forward and checked against its output on the same inputs. Not a kernel the Go graph
# loads, and WRITTEN WITHOUT A DEVICE: it has never been compiled; the first session with an H200 runs it,
# after `python3 internal/xlaext/testdata/gen_mosaic_gpu.py --bench` has shown how fast JAX's own
# FlashAttention-3 forward for Hopper (jax/experimental/pallas/ops/gpu/attention_mgpu.py, which this
# follows) runs there, and mends it.
#
# Why: the Triton fine kernel (attention/testdata/gen_vsa_triton.py) runs at about half the H200's bf16
# peak; Pallas's Triton backend exposes no warpgroup MMA from shared memory, TMA or warp specialization,
# which is how FlashAttention-3 gets to three quarters of it. A block-sparse attention of 64-row tiles
# fits attention_mgpu's shape: there, a memory warpgroup streams K/V blocks by TMA into a ring of shared
# buffers for two compute warpgroups of 64 query rows each, which share them. Here each compute warpgroup
# takes a query tile of its own (two consecutive query tiles of one head a program) with its own list of
# key tiles, so the memory warpgroup streams two rings, one a warpgroup, reading each step's key tile
# from the list; the compute warpgroups mask the columns past a ragged tile's valid rows. Lists of one
# length (VSA's top-k, plus the prefix tiles every row keeps) keep the two warpgroups in step.
#
# Operands (row-major): q, k, v [H, S, D] head-major tile copies (S = tiles·64; the pack kernel's layout),
# idx int32 [H, T, K] each query tile's key tiles, num int32 [H, T] how many of them, valid int32 [H, T, K]
# the valid rows of each listed key tile (sizes[idx], gathered by the graph so that a step reads no
# dependent scalar). Result: [H, S, D], query tile t's rows at t·64 (pads and an odd last tile's partner
# left as they are).
#
# Where the loops read the lists from (--index-from), the one thing the kernel's first run is least sure of:
#   gmem  scalar loads straight from the operands in GMEM, as jax/experimental/pallas/ops/gpu/
#         ragged_dot_mgpu.py and transposed_ragged_dot_mgpu.py read their group sizes and offsets;
#   smem  one int32 table a program's query tile (staged_table: the key tiles, their valid rows and the
#         count, padded), copied by TMA into shared memory before the loops, which read it from there.
# Both run under Warpgroup lowering semantics, the default of jax/_src/pallas/mosaic_gpu/core.py's
# CompilerParams since JAX 0.11.0 (attention_mgpu.py relies on that default) and what ragged_dot_mgpu.py
# asks for by name; --semantics lane is the older default, a fallback should the Warpgroup lowering
# reject something here.
#
# Read against JAX 0.11.1's source (jax/_src/pallas/mosaic_gpu/, the FA3 kernel, tests/pallas/mosaic_gpu_test.py
# test_multiple_of, which reads a GMEM int32 and slices a TMA with it under both semantics): every name and
# argument used exists in that form. Against the committed Triton kernel it computes upstream's math (scale,
# column mask, online softmax, 1/l) but walks every key tile at 64 rows (no classes), computes the prefix
# query tiles too, and writes head-major rows with their pads rather than through the slot map: the graph
# would need that scatter, or the kernel the slot map, before it could replace the Triton kernel.
#
#   python3 bench/vsa_mosaic_draft.py --upstream DIR [--steps 2] [--index-from gmem|smem] [--semantics warpgroup|lane] [--pingpong] [GEOMETRY ...]
#   # GEOMETRY: h3 wan0.8 h3_tiling wan_tiling
import argparse, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "attention", "testdata"))
sys.path.insert(0, os.path.join(HERE, "..", "internal", "xlaext", "testdata"))

import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
import jax.experimental.pallas.mosaic_gpu as plgpu

import gen_vsa_triton as G  # noqa: E402
from vsa_inputs import parse  # noqa: E402

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


def vsa_mosaic(q, k, v, lists, steps=2, semantics="warpgroup", pingpong=False):
    # lists: (idx, num, valid), read from GMEM in the loops, or staged_table's table, staged in SMEM.
    # pingpong: the two compute warpgroups take turns on the tensor cores, one's products while the
    # other's softmax, through a barrier both arrive at (attention_mgpu.py's schedule_barrier).
    h, s, d = q.shape
    staged = not isinstance(lists, tuple)
    tiles = lists.shape[1] if staged else lists[0].shape[1]
    assert d == D and s == tiles * T, (q.shape, tiles)
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
            idx_ref, num_ref, valid_ref = list_refs
            fetch_lists = await_lists = lambda w: None
            key_tile = lambda w, j: idx_ref[head, row_of(w), j]
            rows_of = lambda w, j: valid_ref[head, row_of(w), j]
            listed = lambda w: num_ref[head, row_of(w)]

        def count_of(w):
            # A partner past the last query tile has no keys (an odd number of tiles).
            return jnp.where(tile_of(w) < tiles, listed(w), 0)

        def ring(w, step):
            # Warpgroup w's buffers hold its steps round-robin; barriers are numbered w·steps + slot.
            return w * steps + lax.rem(step, jnp.int32(steps))

        @pl.when(wg < 2)
        def _compute():
            plgpu.set_max_registers(232, action="increase")
            t = tile_of(wg)
            q_tile = q_smem.at[wg]
            plgpu.copy_gmem_to_smem(q_ref.at[head, pl.ds(row_of(wg) * T, T)], q_tile, q_ready.at[wg])
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
            counts = [count_of(0), count_of(1)]

            def load(w, j, wait=False):
                # The row offset stays kv·T: the Warpgroup lowering must prove a TMA offset into a tiled
                # ref a multiple of the tiling, which it does for a product by 64 (not for an offset read
                # from a table). On a refill K goes as soon as the step `steps` before has read its K
                # (the first product), and V after its V, as attention_mgpu.py's producer does.
                rows = pl.ds(key_tile(w, j) * T, T)
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
        out_type=jax.ShapeDtypeStruct((h, s, d), dtype),
        grid=(h, (tiles + 1) // 2),
        grid_names=("heads", "pairs"),
        num_threads=3,
        thread_name="wg",
        compiler_params=plgpu.CompilerParams(approx_math=True, lowering_semantics=SEMANTICS[semantics]),
    )(q, k, v, *(lists if not staged else (lists,)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2, help="K/V buffers a warpgroup's ring holds")
    ap.add_argument("--index-from", choices=("gmem", "smem"), default="gmem",
                    help="where the loops read the key lists: the GMEM operands, or a table staged in SMEM")
    ap.add_argument("--semantics", choices=tuple(SEMANTICS), default="warpgroup", help="Mosaic GPU lowering semantics")
    ap.add_argument("--pingpong", action="store_true", help="the compute warpgroups take turns on the tensor cores")
    args, cases = parse(ap)
    for c in cases:
        label = f"{c.label} [{args.index_from}, {args.semantics}{', pingpong' if args.pingpong else ''}]"
        valid_rows = np.arange(c.tiles * T) % T < np.repeat(c.sizes, T)  # the valid slots of every tile
        lists = (jnp.asarray(c.idx[0]), jnp.asarray(c.num[0]), jnp.asarray(c.sizes[c.idx[0]].astype(np.int32)))
        if args.index_from == "smem":
            lists = staged_table(*lists)
        ops = [c.q[0], c.k[0], c.v[0], lists]
        f = jax.jit(lambda *a: vsa_mosaic(*a, steps=args.steps, semantics=args.semantics, pingpong=args.pingpong))
        err = float(np.abs(np.asarray(f(*ops), np.float32) - c.want)[:, valid_rows].max())
        t_up, t = G.timed(c.upstream, 20), G.timed(lambda: f(*ops), 20)
        print(f"{label}: mosaic draft {t * 1e3:.3f} ms ({c.flops() / t / 1e12:.0f} TFLOP/s), upstream Triton {t_up * 1e3:.3f} ms; "
              f"max diff from upstream {err:.3g}", flush=True)

if __name__ == "__main__":
    main()
