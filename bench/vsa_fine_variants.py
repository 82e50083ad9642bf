# Candidate inner loops for VSA's fine kernel (attention/testdata/gen_vsa_triton.py, fine_kernel's walk), timed
# against the committed loop and upstream's Triton forward on the same inputs, interleaved in rounds so
# that the device's drift lands on every variant alike. Nothing here is a kernel the Go graph loads: the
# walk of a variant that wins becomes the generator's walk_class, which then regenerates
# attention/vsa_triton.json and its fixture (and the GPU parity run and bench/clip_row.sh follow,
# BENCHMARKS.md).
#
# Variants (all keep the committed operands, ends/idx grouping by key class and the slot-map store, so the
# Go side would not change):
#   base          the committed walk (walk_class): raw scores masked, max, exp2(s·c - m·c), rescale, second
#                 product (a session-21 run of this bench chose it over scaling the scores first)
#   base_s3, base_s4, base_s6   the same at 3, 4 and 6 pipeline stages (the committed kernel file's 5 came from the
#                 generator's sequential --bench on an H200 in session 13)
#   nomask64      base without the valid-row mask on the 64-row class: exact only where
#                 every tile of that class is full (the geometries, our Wan tiling), reported as timing
#                 only. Session 23 shipped it as a second IR for those tilings and withdrew it the same day:
#                 with the gated epilogue it ran 3-6 % slower than base on an H100 (BENCHMARKS.md). Session 27
#                 tried the whole tiles as a class of their own, walked unmasked beside the masked classes in one
#                 kernel: 22-36 % slower than base at every geometry (BENCHMARKS.md), so it was not kept
#   pair64        base, and the 64-row class walked two key tiles a step: one running max, one rescale of
#                 the accumulator and two independent products a step (FlashAttention's 128-column key
#                 block out of two 64-row tiles that lie apart); an odd last tile takes one plain step
#   pair_all      the same for every class
#   one_loop      base's step over the whole list at 64 rows a tile in one loop, as upstream walks it: what
#                 the classes' three loops (each pipelined on its own) cost where lists are short (the issue's
#                 H3: 23 a row) against what the ragged classes' smaller blocks save at our tilings;
#                 one_loop_s3, one_loop_s4, one_loop_w8s3 at the launch settings upstream's autotuner picks among
#   mask_row      base with the mask as upstream forms it: one [1, n] row of column indices compared with
#                 the tile's valid count and broadcast, where base compares a [64, n] iota (session 21's
#                 nomask64 put the mask at 5-7 % of the kernel, about the gap to upstream's at the H3)
#   mask_cond     base with the mask only on a tile that has pad columns: a branch on the tile's valid
#                 count (uniform across the program) around the select, one loop body where session 27's
#                 class of whole tiles took a second one
#   mask_cond_row the two together
# at 4 warps and 5 stages (the committed settings) and, for pair64, 4 and 3 stages (two tiles a step
# double the shared memory a stage holds) and 8 warps. With --paired-lists (query tiles 2p and 2p+1 list
# the same key tiles; every variant and upstream run on those inputs), also
#   pairq_w4s3, pairq_w8s3, pairq_w8s4   one program a pair of query tiles: a 128-row query block that
#                 reads each listed K/V tile once for both (the committed kernel reads it once a tile), at
#                 4 or 8 warps and 3 or 4 stages. The fine kernel does 64 FLOP a byte of K/V it reads at
#                 every geometry, so its 5.4-6.2 TB/s of K/V reads (BENCHMARKS.md, session 25) cannot say
#                 whether reading or computing bounds it; at equal FLOPs this variant halves the reads. A
#                 kernel for real lists would read a tile once where both of a pair list it (the prefix
#                 tiles every FastH3 row keeps, neighbours' common choices); this bounds what that gains.
#   store_tiles, gate_tiles, scatter_nogate, epilogue_base   base with other epilogues (epilogue_kernel):
#                 without the gate's loads, with them masked in straight-line code (epilogue_base: the
#                 committed epilogue before session 30, which now loads them in a branch only a gated call
#                 takes), or the tile stored as one head-major block as upstream's is (timing only)
#   qrows         base reading its query tile from the sequence's rows [L·H, D] through the slot map
#                 (gen_vsa_triton.fine_kernel's q_rows) instead of the pack kernel's copy. With it a block
#                 would pack k and v and take only q's means: the bench then also times
#   pack, pool    the pack kernel (copies and means, the committed launch settings) against its means alone
#                 on the same q rows, GB/s counted over what each reads and writes. Session 24's trace put the
#                 packs at 0.249 ms a FastH3 attention in a chain whose k and v packs XLA merged; a block runs
#                 three of about 0.17 ms on an H100 (BENCHMARKS.md, session 26): qrows and pool together say
#                 what copying q costs.
#
# On the GPU machine, from the repo root, with upstream's block_sparse_attn_triton.py (fastvideo-kernel,
# as gen_vsa_triton.py takes it) in DIR:
#   python3 bench/vsa_fine_variants.py --upstream DIR [--rounds 3] [--only base,nomask64] [--paired-lists] [GEOMETRY ...]
# GEOMETRY: h3 wan0.8 h3_tiling wan_tiling (default: all). Prints each variant's max difference from
# upstream's output (an exact one beyond the generator's 3e-2 is reported and not timed), then each
# round's time and the median of the rounds with its TFLOP/s counted at 64 rows a tile.
import argparse, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "attention", "testdata"))
sys.path.insert(0, os.path.join(HERE, "..", "internal", "xlaext", "testdata"))

import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

import gen_vsa_triton as G  # noqa: E402
from vsa_inputs import parse  # noqa: E402

T, SCALE = G.T, G.SCALE
# Each variant is a walk of one class's key tiles (gen_vsa_triton.fine_kernel's hook), in the committed
# kernel around it: the same operands, reads and store, so that a winner moves into the generator as its
# walk alone. Steps read K before the scores and V after the softmax, as the committed step does.


def plain(step_of):
    # One key tile a step.
    return lambda w, c, n, start, end, carry: lax.fori_loop(start, end, step_of(w, c, n), carry)


def scores(w, i, n, cols):
    # The raw scores of the list's i-th key tile (its pad columns masked) and where its rows start.
    valid, at = w.key(i)
    s = jnp.dot(w.q, w.k(at, n).T, preferred_element_type=jnp.float32)
    return jnp.where(cols < valid, s, G.MASKED), at


def pv(w, p, at, n):
    # The second product, p (as bf16, like upstream) by the key tile's V rows, in float32.
    v = w.v(at, n)
    return jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)


def step_pair(w, n, start):
    cols = lax.broadcasted_iota(jnp.int32, (T, n), 1)

    def body(j, carry):
        acc, m, l = carry
        (sa, ata), (sb, atb) = scores(w, start + 2 * j, n, cols), scores(w, start + 2 * j + 1, n, cols)
        m2 = jnp.maximum(m, jnp.maximum(jnp.max(sa, axis=1), jnp.max(sb, axis=1)))
        ms = m2 * SCALE
        pa, pb = jnp.exp2(sa * SCALE - ms[:, None]), jnp.exp2(sb * SCALE - ms[:, None])
        alpha = jnp.exp2(m * SCALE - ms)
        acc = acc * alpha[:, None] + pv(w, pa, ata, n) + pv(w, pb, atb, n)
        return acc, m2, l * alpha + jnp.sum(pa, axis=1) + jnp.sum(pb, axis=1)
    return body


def paired(classes):
    # The given classes two key tiles a step (an odd last tile takes one plain step), the others one.
    def walk(w, c, n, start, end, carry):
        if c not in classes:
            return lax.fori_loop(start, end, G.step(w, n), carry)
        pairs = (end - start) // 2
        carry = lax.fori_loop(0, pairs, step_pair(w, n, start), carry)
        return lax.fori_loop(start + 2 * pairs, end, G.step(w, n), carry)
    return walk


def mask_row(s, valid, n):
    # The pad columns' mask as one [1, n] row broadcast over the query rows, as upstream builds it
    # (tl.arange(0, BLOCK_N) < block_size), where base compares a [64, n] iota element by element.
    return jnp.where((lax.iota(jnp.int32, n) < valid)[None, :], s, G.MASKED)


def mask_iota(s, valid, n):
    # base's form of the mask.
    return jnp.where(lax.broadcasted_iota(jnp.int32, s.shape, 1) < valid, s, G.MASKED)


def only_ragged(mask):
    # The mask only on a tile with pad columns: a whole tile (valid == n, every tile of the packed
    # geometries but the last) takes the branch that leaves its scores as they are.
    return lambda s, valid, n: lax.cond(valid < n, lambda s: mask(s, valid, n), lambda s: s, s)


def masked_by(mask):
    # base with another form of the pad columns' mask.
    return plain(lambda w, c, n: G.step(w, n, mask=mask))


def one_loop(w, c, n, start, end, carry):
    # Every key tile of the list at 64 rows in one loop (upstream's walk), run at the last class, whose end
    # is the list's length; the classes' order within the list changes only the online softmax's order.
    if c < len(G.KEY_BLOCKS) - 1:
        return carry
    return lax.fori_loop(0, end, G.step(w, T), carry)


QP = 2 * T  # the query rows of a program of pairq


def pair_kernel(params_ref, ends_ref, idx_ref, sizes_ref, slots_ref, q_ref, k_ref, v_ref, gate_ref, oc_ref, o_ref):
    # The committed kernel's operands and store (without the gate's epilogue: the bench passes none), one
    # program for query tiles 2p and 2p+1 of a head, walking tile 2p's list (--paired-lists: both's).
    pair, head = pl.program_id(0), pl.program_id(1)
    rows, first, tiles, stride, heads = params_ref[0], params_ref[1], params_ref[2], params_ref[3], params_ref[4]
    tile = 2 * pair
    row = head * tiles + tile
    q = q_ref[pl.ds(head * rows + (first + tile) * T, QP), :]
    acc, l = G.walk_list(G.walk_class, G.Walk(q, idx_ref, sizes_ref, k_ref, v_ref, row * stride, head, rows), ends_ref, row)
    qslots = slots_ref[pl.ds((first + tile) * T, QP)]
    valid = jnp.broadcast_to((qslots >= 0)[:, None], (QP, G.D))
    G.plgpu.store(o_ref.at[G.rows_of(qslots, heads, head), :], (acc / l[:, None]).astype(o_ref.dtype), mask=valid)


def pair_call(heads, tiles, seq, warps, stages):
    return G.pallas_triton(pair_kernel, warps, stages, grid=(tiles // 2, heads),
                           out_shape=jax.ShapeDtypeStruct((seq * heads, G.D), jnp.bfloat16), name="vsa_fwd_pairq")


def pool_kernel(params_ref, slots_ref, x_ref, pooled_ref):
    # The pack kernel's means without its copies (gen_vsa_triton.pack_kernel): what a q read in place by
    # the fine kernel still needs, for the routing scores.
    tile, head = pl.program_id(0), pl.program_id(1)
    heads = params_ref[0]
    x, slots = G.tile_rows(slots_ref, x_ref, tile, heads, head)
    pooled_ref[pl.ds(tile * heads + head, 1), :] = G.tile_mean(x, slots)


def pool_call(heads, tiles, warps, stages):
    return G.pallas_triton(pool_kernel, warps, stages, grid=(tiles, heads),
                           out_shape=jax.ShapeDtypeStruct((tiles * heads, G.D), jnp.float32), name="vsa_pool")


def sequence_rows(x, slots, heads):
    # x in upstream's tile layout [1, H, nT·64, D] as the sequence's rows [L·H, D] (row r of head h at r·H + h)
    # through the slot map: what a block's q is before the pack kernel copies it.
    valid = slots >= 0
    out = np.zeros((int(valid.sum()), heads, G.D), np.asarray(x).dtype)
    out[slots[valid]] = np.asarray(x)[0].transpose(1, 0, 2)[valid]
    return jnp.asarray(out.reshape(-1, G.D))


def epilogue_kernel(gate_mode, tile_store):
    # The committed kernel (walk and operands) with another epilogue, to say what its parts cost where lists
    # are short: gate_mode "masked" loads the gate and oc under the mask valid & gated in straight-line code
    # (the committed epilogue before session 30); "none" drops them (upstream's epilogue has no gate).
    # tile_store writes the query tile as one contiguous head-major block (upstream's O_ptr) instead of each
    # row into the sequence's layout through the slot map: timing only, its output is not in the layout the
    # check reads.
    def kernel(params_ref, ends_ref, idx_ref, sizes_ref, slots_ref, q_ref, k_ref, v_ref, gate_ref, oc_ref, o_ref):
        tile, head = pl.program_id(0), pl.program_id(1)
        rows, first, tiles, stride, heads = params_ref[0], params_ref[1], params_ref[2], params_ref[3], params_ref[4]
        row = head * tiles + tile
        q = q_ref[pl.ds(head * rows + (first + tile) * T, T), :]
        acc, l = G.walk_list(G.walk_class, G.Walk(q, idx_ref, sizes_ref, k_ref, v_ref, row * stride, head, rows), ends_ref, row)
        out = acc / l[:, None]
        qslots = slots_ref[pl.ds((first + tile) * T, T)]
        rows_out = G.rows_of(qslots, heads, head)
        valid = jnp.broadcast_to((qslots >= 0)[:, None], (T, G.D))

        def store(x):
            if tile_store:
                o_ref[pl.ds(row * T, T), :] = x.astype(o_ref.dtype)
            else:
                G.plgpu.store(o_ref.at[rows_out, :], x.astype(o_ref.dtype), mask=valid)

        if gate_mode == "masked":
            gated = params_ref[5] != 0
            gate = G.plgpu.load(gate_ref.at[rows_out, :], mask=valid & gated, other=0.0)
            oc = G.plgpu.load(oc_ref.at[pl.ds((first + tile) * heads + head, 1), :], mask=jnp.broadcast_to(gated, (1, G.D)), other=0.0)
            out = out + gate.astype(jnp.float32) * oc
        store(out)
    return kernel


def epilogue_call(gate_mode, tile_store, heads, tiles, seq):
    size = heads * tiles * T if tile_store else seq * heads
    return G.pallas_triton(epilogue_kernel(gate_mode, tile_store), 4, 5, grid=(tiles, heads),
                           out_shape=jax.ShapeDtypeStruct((size, G.D), jnp.bfloat16), name="vsa_fwd_epilogue")


# name: (gate mode, tile store) of epilogue_kernel; exact where the rows land in the committed layout
EPILOGUES = {"store_tiles": ("none", True), "gate_tiles": ("masked", True), "scatter_nogate": ("none", False),
             "epilogue_base": ("masked", False)}

# name: (warps, stages) of pairq (--paired-lists only)
PAIR_VARIANTS = {"pairq_w4s3": (4, 3), "pairq_w8s3": (8, 3), "pairq_w8s4": (8, 4)}

# name: (walk, warps, stages, exact)
VARIANTS = {
    "base": (G.walk_class, 4, 5, True),
    "base_s4": (G.walk_class, 4, 4, True),
    "base_s6": (G.walk_class, 4, 6, True),
    "base_s3": (G.walk_class, 4, 3, True),
    "nomask64": (plain(lambda w, c, n: G.step(w, n, mask=c != 0)), 4, 5, False),
    "pair64": (paired((0,)), 4, 5, True),
    "pair64_s4": (paired((0,)), 4, 4, True),
    "pair64_s3": (paired((0,)), 4, 3, True),
    "pair64_w8s3": (paired((0,)), 8, 3, True),
    "pair_all_s4": (paired((0, 1, 2)), 4, 4, True),
    "one_loop": (one_loop, 4, 5, True),
    "one_loop_s3": (one_loop, 4, 3, True),
    "one_loop_s4": (one_loop, 4, 4, True),
    "one_loop_w8s3": (one_loop, 8, 3, True),
    "mask_row": (masked_by(mask_row), 4, 5, True),
    "mask_cond": (masked_by(only_ragged(mask_iota)), 4, 5, True),
    "mask_cond_row": (masked_by(only_ragged(mask_row)), 4, 5, True),
}

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=20, help="calls timed a round")
    ap.add_argument("--only", default="", help="comma-separated variants to time (default: all); upstream's always runs")
    args, cases = parse(ap)
    only = set(filter(None, args.only.split(",")))
    for c in cases:
        label = c.label
        slots, seq = G.slot_map(None, c.sizes, 0, shuffle=False)  # consecutive rows: draws nothing
        ops = [jnp.asarray(x) for x in G.operands(c.q, c.k, c.v, c.idx, c.num, c.sizes, slots, 0)]
        heads, tiles, want = c.heads, c.tiles, c.want
        valid = slots >= 0
        calls = {"upstream": c.upstream}
        # name: (build, exact, operands)
        builds = {name: (lambda walk=walk, warps=warps, stages=stages: G.vsa_call(heads, tiles, seq, warps, stages, walk), exact, ops)
                  for name, (walk, warps, stages, exact) in VARIANTS.items()}
        builds.update({name: (lambda g=g, t=t: epilogue_call(g, t, heads, tiles, seq), not t, ops)
                       for name, (g, t) in EPILOGUES.items()})
        q_rows = sequence_rows(c.q, slots, heads)
        builds["qrows"] = (lambda: G.vsa_call(heads, tiles, seq, 4, 5, q_rows=True), True, ops[:5] + [q_rows] + ops[6:])
        if c.paired:
            builds.update({name: (lambda warps=warps, stages=stages: pair_call(heads, tiles, seq, warps, stages), True, ops)
                           for name, (warps, stages) in PAIR_VARIANTS.items()})
        elif args.paired_lists:
            print(f"{label}: {tiles} query tiles, an odd count: lists not paired, pairq not run", flush=True)
        for name, (build, exact, args_of) in builds.items():
            if only and name not in only:
                continue
            try:
                f = jax.jit(build())
                err = float(np.abs(G.tiles_of(f(*args_of), slots, heads, 0) - want)[:, valid].max())
            except Exception as e:  # a setting the compiler refuses (shared memory)
                print(f"{label} {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            print(f"{label} {name}: max diff from upstream {err:.3g}" + ("" if exact else " (timing only)"), flush=True)
            if exact and err >= 3e-2:
                print(f"{label} {name}: DISAGREES with upstream, not timed", flush=True)
                continue
            calls[name] = lambda f=f, a=args_of: f(*a)
        # What each timed call does: attention FLOPs, or the bytes a pack or pool call reads and writes.
        work = {name: (c.flops(), "TFLOP/s", 1e9) for name in calls}
        if not only or only & {"pack", "pool"}:
            pp, sl = jnp.asarray(np.array([heads, tiles], np.int32)), jnp.asarray(slots)
            warps, stages = G.kept_launch_settings("vsa_pack_triton")
            pack, pool = jax.jit(G.pack_call(heads, tiles, warps, stages)), jax.jit(pool_call(heads, tiles, warps, stages))
            diff = float(np.abs(np.asarray(pool(pp, sl, q_rows)) - np.asarray(pack(pp, sl, q_rows)[1])).max())
            print(f"{label} pool: max diff from the pack kernel's means {diff:.3g}", flush=True)
            read, means = q_rows.size * 2, tiles * heads * G.D * 4
            calls["pack"], work["pack"] = lambda: pack(pp, sl, q_rows)[0], (read + heads * tiles * T * G.D * 2 + means, "GB/s", 1e6)
            calls["pool"], work["pool"] = lambda: pool(pp, sl, q_rows), (read + means, "GB/s", 1e6)
        # One untimed round first: the first timed round of the process's first geometry ran our kernel
        # 1.5-1.8x slow (2.781 against 1.815 ms on an H100, 3.384 against 1.876 on an H200, BENCHMARKS.md
        # session 29), a one-time cost of the process that a median of three rounds then carried.
        for call in calls.values():
            G.timed(call, args.calls)
        times = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, call in calls.items():
                times[name].append(G.timed(call, args.calls) * 1e3)
        for name, ms in times.items():
            mid = sorted(ms)[len(ms) // 2]
            amount, unit, per_ms = work[name]
            print(f"{label} {name:12s} " + " / ".join(f"{x:.3f}" for x in ms) +
                  f"  median {mid:.3f} ms ({amount / mid / per_ms:.0f} {unit})", flush=True)


if __name__ == "__main__":
    main()
