# VSA's pack kernel with MiniMax H3's q/k pass inside it: one pass over q (or k) that normalizes and rotates
# each row, as internal/fusedops's qk_norm_rope does, and writes it straight into the tile copies and the tile
# means the pack kernel makes (gen_vsa_triton.py's vsa_pack), instead of qk_norm_rope writing the rows and
# vsa_pack reading them back. In a FastH3 VSA block the two passes took 0.20 and 0.17 ms for each of q and k
# on an H100 (BENCHMARKS.md, session 33's trace).
#
# Each program reads a tile's rows of a group of heads through the slot map, as vsa_pack does for one head, and
# computes qk_norm_rope's expression on them in the same order (the RMS statistic of the row, the row times w
# and the token's expanded angles, the partner channel read as the row shifted by rot/2), so its rows are
# qk_norm_rope's. Optionally (params[3] != 0) it also writes the rows in the sequence's layout: k's are the
# keys of the prefix rows' dense attention; q needs only its prefix rows, which the graph takes from the copies.
#
# Operands (row-major), as attention/vsa_triton.go passes them:
#   params  int32[4]          heads H, tiles nT, rot (a multiple of 16), write the rows (1) or not (0)
#   slots   int32[nT·64]      the sequence row of each tile slot, -1 for a pad (gen_vsa_triton.py)
#   x       bf16[L·H·128]     the projection, row r = token r/H, head r%H
#   w       bf16[128]         the RMSNorm weight
#   cos, sin f32[L·128]       the token's angle tables (internal/fusedops RotationTables)
#   eps     f32[1]
# Results: bf16[H·nT·64, 128] (head-major tile copies, zero pads), float32[nT·H, 128] (each tile's mean per
# head), bf16[L·H·128] (the rows; with params[3] = 0 unwritten, and the caller may size it 128).
# Grid: (nT, ceil(H / G), 1): a program a tile and G heads (the kernel file's head_group, which --bench picks).
#
#   python3 attention/testdata/gen_vsa_pack_qk.py [--bench] [--out DIR]
#
# Run it on the GPU machine with the JAX whose CUDA plugin the Go binaries load. It checks the kernel against
# qk_norm_rope followed by vsa_pack (both lowered here from their generators) at two geometries, lowers it at
# both and refuses to write unless the IR serves every geometry, and with --bench times it against those two
# passes at FastH3's tiling. Writes DIR/vsa_pack_qk_triton.json (default: attention/, which embeds it).
import argparse, json, os, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "internal", "fusedops", "testdata"))

import numpy as np
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

import gen_fused_triton as F  # noqa: E402  (also captures each lowered module's text)
import gen_vsa_triton as G  # noqa: E402
from gen_triton import lowered_triton_call, pallas_triton, timed  # noqa: E402

T, D = G.T, G.D
f32, bf16 = jnp.float32, jnp.bfloat16
OPERANDS = 7
# Heads a program computes (the grid's second axis is ceil(H / GROUP)); attention/vsa_triton.go reads it
# from the kernel file.
GROUP = 8
# Launch settings tried by --bench (heads a program, warps); without it, those of the committed file.
GROUPS = (1, 2, 4, 8)
WARPS = (4, 8, 16)


def pack_qk_kernel(group_heads):
    # One program a tile and group_heads heads: the tile's slots, the norm weight and its tokens' angles are
    # read once for the group, not once a head.
    def kernel(params_ref, slots_ref, x_ref, w_ref, cos_ref, sin_ref, eps_ref, packed_ref, pooled_ref, rows_ref):
        tile, group = pl.program_id(0), pl.program_id(1)
        heads, tiles = params_ref[0], params_ref[1]
        half = pl.multiple_of(params_ref[2] // 2, 8)
        rot = 2 * half
        slots = slots_ref[pl.ds(tile * T, T)]
        cols = jnp.arange(D, dtype=jnp.int32)
        live = jnp.broadcast_to((slots >= 0)[:, None], (T, D))
        token = jnp.maximum(slots, 0)
        first = jnp.broadcast_to((cols < half)[None, :], (T, D))
        second = jnp.broadcast_to(((cols >= half) & (cols < rot))[None, :], (T, D))
        w = w_ref[...].astype(f32)
        wp = jnp.where(cols < half, plgpu.load(w_ref.at[cols + half], mask=cols < half, other=0.0),
                       plgpu.load(w_ref.at[cols - half], mask=(cols >= half) & (cols < rot), other=0.0)).astype(f32)
        angle_at = token[:, None] * D + cols[None, :]
        c = plgpu.load(cos_ref.at[angle_at], mask=live, other=0.0)
        s = plgpu.load(sin_ref.at[angle_at], mask=live, other=0.0)
        mean_of = G.tile_mean
        for i in range(group_heads):
            head = group * group_heads + i

            @pl.when(head < heads)
            def _():
                # qk_norm_rope's expression (internal/fusedops/testdata/gen_fused_triton.py), term for term.
                at = (token * heads + head)[:, None] * D + cols[None, :]
                x = plgpu.load(x_ref.at[at], mask=live, other=0.0).astype(f32)
                xp = jnp.where(first, plgpu.load(x_ref.at[at + half], mask=live & first, other=0.0),
                               plgpu.load(x_ref.at[at - half], mask=live & second, other=0.0)).astype(f32)
                r = jax.lax.rsqrt(jnp.sum(x * x, axis=1) / D + eps_ref[0])
                out = (x * w[None, :] * c + (xp * wp[None, :]) * s) * r[:, None]
                y = jnp.where(live, out, 0.0).astype(packed_ref.dtype)
                packed_ref[pl.ds((head * tiles + tile) * T, T), :] = y
                pooled_ref[pl.ds(tile * heads + head, 1), :] = mean_of(y, slots)

                @pl.when(params_ref[3] != 0)
                def _():
                    plgpu.store(rows_ref.at[at], y, mask=live)
    return kernel


def pack_qk_call(heads, tiles, rows_elems, warps, stages=1, group_heads=None):
    g = group_heads or GROUP
    return pallas_triton(pack_qk_kernel(g), warps, stages, grid=(tiles, -(-heads // g)),
                         out_shape=(jax.ShapeDtypeStruct((heads * tiles * T, D), bf16),
                                    jax.ShapeDtypeStruct((tiles * heads, D), f32),
                                    jax.ShapeDtypeStruct((rows_elems,), bf16)), name="vsa_pack_qk")


def kept_launch():
    # The committed file's (warps, heads a program), so a run without --bench keeps them; else 8 and GROUP.
    try:
        with open(os.path.join(HERE, "..", "vsa_pack_qk_triton.json")) as fh:
            k = json.load(fh)
        return int(k["num_warps"]), int(k["head_group"])
    except (OSError, KeyError, ValueError):
        return 8, GROUP


class Case:
    # Random inputs on one tiling, and what qk_norm_rope then vsa_pack make of them (one program).
    def __init__(self, rng, heads, sizes, first, rot):
        self.slots, self.seq = G.slot_map(rng, sizes, first)
        self.heads, self.nt, self.rot = heads, len(sizes), rot
        self.label = f"{heads} heads, {self.nt} tiles ({first} prefix), {self.seq} rows, rot {rot}"
        seq, nt = self.seq, self.nt
        self.x = jnp.asarray(rng.standard_normal(seq * heads * D, dtype=np.float32) * 2).astype(bf16)
        self.w = jnp.asarray(rng.standard_normal(D, dtype=np.float32) * 0.2 + 1).astype(bf16)
        angles = rng.uniform(0, 2 * np.pi, (seq, rot)).astype(np.float32)
        self.c, self.s = F.expanded_angles(jnp.asarray(np.cos(angles)), jnp.asarray(np.sin(angles)), rot)
        self.eps, self.js = jnp.asarray([1e-6], f32), jnp.asarray(self.slots)
        qk, pack = F.qk_call(seq * heads, seq, 16, 1), G.pack_call(heads, nt, 8, 1)
        qk_params, pack_params = jnp.asarray([seq * heads, heads, rot], jnp.int32), jnp.asarray([heads, nt], jnp.int32)

        @jax.jit
        def both(x, w, c, s, eps, js):
            # What the graph runs without the fused kernel: the two kernels in one program.
            rows = qk(qk_params, x, w, c, s, eps)
            packed, pooled = pack(pack_params, js, rows.reshape(seq * heads, D))
            return packed, pooled, rows
        self.composed = lambda: both(self.x, self.w, self.c, self.s, self.eps, self.js)

    def ops(self, write):
        return (jnp.asarray([self.heads, self.nt, self.rot, write], jnp.int32), self.js, self.x, self.w, self.c, self.s, self.eps)

    def call(self, write, warps, group_heads):
        return jax.jit(pack_qk_call(self.heads, self.nt, self.seq * self.heads * D if write else D, warps, group_heads=group_heads))


def parity(c, warps, group_heads):
    # The kernel's copies, means and rows against the two kernels' (the copies without the rows too).
    want = [np.asarray(a, np.float32) for a in c.composed()]
    got = [np.asarray(a, np.float32) for a in c.call(1, warps, group_heads)(*c.ops(1))]
    for name, g, wnt in zip(("tile copies", "tile means", "rows"), got, want):
        e = float(np.abs(g - wnt).max())
        steps = float((np.abs(g - wnt) / np.maximum(np.abs(wnt), 1e-30) * 128).max())  # bf16 steps, roughly
        print(f"{c.label}, {group_heads} heads a program: {name} max |fused - qk_norm_rope then vsa_pack| {e:.3g} "
              f"(equal {np.mean(g == wnt) * 100:.3f} %, largest {steps:.2f} bf16 steps)", flush=True)
        assert (name == "tile means" and e < 1e-5) or steps <= 1.0, f"the fused pack's {name} disagree"
    got0 = [np.asarray(a, np.float32) for a in c.call(0, warps, group_heads)(*c.ops(0))[:2]]
    assert all(np.array_equal(a, b) for a, b in zip(got0, got[:2])), "without the rows the copies differ"


def lowered(c, warps, group_heads):
    # The kernel's IR bytes and its module's text, lowered at c's geometry.
    cfg, _, _ = lowered_triton_call(c.call(1, warps, group_heads).lower(*c.ops(1)).as_text(), OPERANDS, "vsa_pack_qk")
    return cfg["ir"], F.LOWERED[-1] if F.LOWERED else ""


def sweep(c):
    # Every (heads a program, warps) with and without the rows, after two seconds of the composed passes (the
    # card idles at a low clock: without them the first timings ran up to 3x slow, session 34), and the
    # composed passes again at the end.
    end = time.perf_counter() + 2
    while time.perf_counter() < end:
        jax.block_until_ready(c.composed())
    timings = {"qk_norm_rope_then_vsa_pack_ms": timed(c.composed, 50) * 1e3}
    for g in GROUPS:
        for wp in WARPS:
            for write, suffix in ((1, ""), (0, "_norows")):
                f, ops = c.call(write, wp, g), c.ops(write)
                timings[f"ours_g{g}_w{wp}{suffix}_ms"] = timed(lambda: f(*ops), 50) * 1e3
    timings["qk_norm_rope_then_vsa_pack_again_ms"] = timed(c.composed, 50) * 1e3
    print(f"{c.label}: " + ", ".join(f"{k} {v:.3f}" for k, v in timings.items()), flush=True)
    return timings


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", action="store_true", help="time the kernel against qk_norm_rope then vsa_pack at FastH3's tiling")
    ap.add_argument("--out", default=os.path.join(HERE, ".."), help="attention/, which embeds the kernel file")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    warps, group_heads = kept_launch()
    # A small tiling with ragged tiles of every class, two prefix segments and more heads than a program
    # computes (the last group partial; with one group Pallas folds the group's program index to 0 and the IR
    # would serve one group only), and FastH3's (56 heads, rotation 96).
    small = Case(rng, 11, G.tile_sizes([40, 70], (5, 6, 7)), 3, 64)
    large = Case(rng, 56, G.tile_sizes([93, 414], (37, 15, 26)), 9, 96)
    timings = {}
    if args.bench:
        timings = sweep(large)
        key = min((k for k in timings if k.startswith("ours_") and not k.endswith("_norows_ms")),
                  key=lambda k: timings[k] + timings[k.replace("_ms", "_norows_ms")])
        group_heads, warps = int(key.split("_g")[1].split("_")[0]), int(key.split("_w")[1].split("_")[0])
        print(f"launch settings: {group_heads} heads a program, {warps} warps")
    for c in (small, large):
        parity(c, warps, group_heads)
    # Both geometries lowered from one line (the IR's debug locations name the caller's line).
    (ir_small, text_small), (ir_large, text_large) = (lowered(c, warps, group_heads) for c in (small, large))
    free, lines = F.geometry_free(text_small, text_large)
    if not free:
        print("\n".join(lines[:40]))
        sys.exit("not written: the IR depends on the geometry")
    if not F.LOWERED:
        sys.exit("not written: the modules' text was not captured, so nothing says the IR serves every geometry")
    record = G.kernel_record("attention/testdata/gen_vsa_pack_qk.py", "vsa_pack_qk", warps, 1, [ir_small, ir_large],
                             {"h3_tiling": timings} if timings else {}, operands=OPERANDS, head_group=group_heads, geometry_free=free)
    path = os.path.join(args.out, "vsa_pack_qk_triton.json")
    with open(path, "w") as fh:
        json.dump(record, fh, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
