# Candidate inner loops for VSA's fine kernel (attention/testdata/gen_vsa_triton.py, fine_kernel's walk), timed
# against the committed loop and upstream's Triton forward on the same inputs, interleaved in rounds so
# that the device's drift lands on every variant alike. Nothing here is a kernel the Go graph loads: the
# walk of a variant that wins becomes the generator's walk_class, which then regenerates
# attention/vsa_triton.json and its fixture (and the GPU parity run and bench/clip_row.sh follow,
# BENCHMARKS.md).
#
# Variants (all keep the committed operands, ends/idx grouping by key class and the slot-map store, so the
# Go side would not change):
#   base          the committed walk (walk_class): full tiles unmasked, the other classes' pad columns
#                 masked; max on the raw scores, exp2(s·c - m·c), rescale, second product (session 21's run
#                 of this bench chose folding the scale over scaling the scores first)
#   masked        base with the mask in every class, full tiles too (the walk before session 22)
# at 4 warps and 5 stages (the committed settings). Walks dropped after losing here: two key tiles a step
# (one rescale, two independent products: 25-45 % slower on the H100 and the H200) and a lazy rescale
# (Pallas's Triton backend has no reduce_or).
#
# On the GPU machine, from the repo root, with upstream's block_sparse_attn_triton.py (fastvideo-kernel,
# as gen_vsa_triton.py takes it) in DIR:
#   python3 bench/vsa_fine_variants.py --upstream DIR [--rounds 3] [GEOMETRY ...]
# GEOMETRY: h3 wan0.8 h3_tiling wan_tiling (default: all). Prints each variant's max difference from
# upstream's output (one beyond the generator's 3e-2 is reported and not timed), then each
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

# Each variant is a walk of one class's key tiles (gen_vsa_triton.fine_kernel's hook), in the committed
# kernel around it: the same operands, reads and store, so that a winner moves into the generator as its
# walk alone. Steps read K before the scores and V after the softmax, as the committed step does.


def plain(step_of):
    # One key tile a step.
    return lambda w, c, n, start, end, carry: lax.fori_loop(start, end, step_of(w, c, n), carry)


# name: (walk, warps, stages)
VARIANTS = {
    "base": (G.walk_class, 4, 5),
    "masked": (plain(lambda w, c, n: G.step(w, n, True)), 4, 5),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=20, help="calls timed a round")
    args, cases = parse(ap)
    for c in cases:
        label = c.label
        slots, seq = G.slot_map(None, c.sizes, 0, shuffle=False)  # consecutive rows: draws nothing
        ops = [jnp.asarray(x) for x in G.operands(c.q, c.k, c.v, c.idx, c.num, c.sizes, slots, 0)]
        heads, tiles, want = c.heads, c.tiles, c.want
        valid = slots >= 0
        calls = {"upstream": c.upstream}
        for name, (walk, warps, stages) in VARIANTS.items():
            try:
                f = jax.jit(G.vsa_call(heads, tiles, seq, warps, stages, walk))
                err = float(np.abs(G.tiles_of(f(*ops), slots, heads, 0) - want)[:, valid].max())
            except Exception as e:  # a setting the compiler refuses (shared memory)
                print(f"{label} {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            print(f"{label} {name}: max diff from upstream {err:.3g}", flush=True)
            if err >= 3e-2:
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
