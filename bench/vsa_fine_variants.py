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
#   nomask64      base without the valid-row mask on the 64-row class: exact only where
#                 every tile of that class is full (the geometries, our Wan tiling), reported as timing
#                 only. Session 23 shipped it as a second IR for those tilings and withdrew it the same day:
#                 with the gated epilogue it ran 3-6 % slower than base on an H100 (BENCHMARKS.md)
#   pair64        base, and the 64-row class walked two key tiles a step: one running max, one rescale of
#                 the accumulator and two independent products a step (FlashAttention's 128-column key
#                 block out of two 64-row tiles that lie apart); an odd last tile takes one plain step
#   pair_all      the same for every class
# at 4 warps and 5 stages (the committed settings) and, for pair64, 4 and 3 stages (two tiles a step
# double the shared memory a stage holds) and 8 warps.
#
# On the GPU machine, from the repo root, with upstream's block_sparse_attn_triton.py (fastvideo-kernel,
# as gen_vsa_triton.py takes it) in DIR:
#   python3 bench/vsa_fine_variants.py --upstream DIR [--rounds 3] [--only base,nomask64] [GEOMETRY ...]
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


# name: (walk, warps, stages, exact)
VARIANTS = {
    "base": (G.walk_class, 4, 5, True),
    "nomask64": (plain(lambda w, c, n: G.step(w, n, mask=c != 0)), 4, 5, False),
    "pair64": (paired((0,)), 4, 5, True),
    "pair64_s4": (paired((0,)), 4, 4, True),
    "pair64_s3": (paired((0,)), 4, 3, True),
    "pair64_w8s3": (paired((0,)), 8, 3, True),
    "pair_all_s4": (paired((0, 1, 2)), 4, 4, True),
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
        for name, (walk, warps, stages, exact) in VARIANTS.items():
            if only and name not in only:
                continue
            try:
                f = jax.jit(G.vsa_call(heads, tiles, seq, warps, stages, walk))
                err = float(np.abs(G.tiles_of(f(*ops), slots, heads, 0) - want)[:, valid].max())
            except Exception as e:  # a setting the compiler refuses (shared memory)
                print(f"{label} {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            print(f"{label} {name}: max diff from upstream {err:.3g}" + ("" if exact else " (timing only)"), flush=True)
            if exact and err >= 3e-2:
                print(f"{label} {name}: DISAGREES with upstream, not timed", flush=True)
                continue
            calls[name] = lambda f=f: f(*ops)
        times = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, call in calls.items():
                times[name].append(G.timed(call, args.calls) * 1e3)
        flops = c.flops()
        for name, ms in times.items():
            mid = sorted(ms)[len(ms) // 2]
            print(f"{label} {name:12s} " + " / ".join(f"{x:.3f}" for x in ms) +
                  f"  median {mid:.3f} ms ({flops / mid / 1e9:.0f} TFLOP/s)", flush=True)


if __name__ == "__main__":
    main()
