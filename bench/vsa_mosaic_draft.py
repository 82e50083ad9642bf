# VSA's fine stage as a Mosaic GPU kernel (JAX's Pallas, backend="mosaic_gpu"; the kernel itself is
# attention/testdata/gen_vsa_mosaic.py's), timed against upstream's Triton forward and checked against its
# output on the same inputs, in the variants below. Written in session 24 without a device; its first run
# (session 31, an H100) compiled at once and ran at 0.80-0.81x upstream's time at the four geometries, 20 %
# under the committed Triton kernel (BENCHMARKS.md).
#
# Why: the Triton fine kernel (attention/testdata/gen_vsa_triton.py) runs at about half the H200's bf16
# peak; Pallas's Triton backend exposes no warpgroup MMA from shared memory, TMA or warp specialization,
# which is how FlashAttention-3 gets to three quarters of it. A block-sparse attention of 64-row tiles
# fits attention_mgpu's shape: there, a memory warpgroup streams K/V blocks by TMA into a ring of shared
# buffers for two compute warpgroups of 64 query rows each, which share them. Here each compute warpgroup
# takes a query tile of its own (two consecutive query tiles of one head a program) with its own list of
# key tiles, so the memory warpgroup streams two rings, one a warpgroup, reading each step's key tile
# from the list; the compute warpgroups mask the columns past a ragged tile's valid rows.
#
# Where the loops read the lists from (--index-from; both ran in session 31, SMEM 1-2 % the faster):
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
# column mask, online softmax, 1/l) but walks every key tile at 64 rows (no classes) and writes head-major
# rows with their pads rather than through the slot map: the graph would need that scatter, or the kernel
# the slot map, before it could replace the Triton kernel. Here the lists cover every tile (no first).
#
#   python3 bench/vsa_mosaic_draft.py --upstream DIR [--steps 2] [--index-from gmem|smem] [--semantics warpgroup|lane] [--pingpong] [GEOMETRY ...]
#   # GEOMETRY: h3 wan0.8 h3_tiling wan_tiling
import argparse, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "attention", "testdata"))
sys.path.insert(0, os.path.join(HERE, "..", "internal", "xlaext", "testdata"))

import numpy as np
import jax, jax.numpy as jnp

import gen_vsa_triton as G  # noqa: E402
from vsa_inputs import parse  # noqa: E402

# The kernel: attention/testdata/gen_vsa_mosaic.py's (which ships it as a template for the Go graph); lists of
# three (idx, num, valid) list every tile from 0, as upstream's do.
from gen_vsa_mosaic import SEMANTICS, T, staged_table, vsa_mosaic  # noqa: E402


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
