# VSA's routing selection as a Triton kernel that a Go graph calls (XLA's `__gpu$xla.gpu.triton` custom call,
# internal/xlaext.TritonCall): each video query tile's key tiles, the top-k of its row of tile scores, laid
# out as the fine kernel walks them (gen_vsa_triton.py: grouped by KEY_BLOCKS class, ascending within a
# class, with the end of each group).
#
# The graph did this as two XLA sorts: the top-k (GoMLX's TopK, a stable sort of each whole row, then a
# slice; attention/vsa.go selectTiles) and the class grouping (a sort of the kept entries; attention/
# vsa_triton.go keyOrder). The first was 0.18 ms of a FastH3 block's 3.63 ms of attention kernels on an
# H100 (BENCHMARKS.md, session 23). This kernel gives the same lists, entry for entry: one program per
# (video query tile, head) finds the row's k-th largest score by a bitwise search over the scores as
# order-preserving int32 keys (31 counts over the row), keeps the scores above it and, of those equal to
# it, the lowest columns (the stable sort's ties), then writes each class's kept columns in ascending
# order at their prefix-sum positions. XLA's comparator calls -0 and +0 equal; so does the key. The row
# lives in registers, as many lanes as a compile-time width: the kernel file holds an IR for each width in
# WIDTHS, and a tiling of more tiles than the widest keeps the XLA sorts (attention/vsa_select.go).
#
# Operands (row-major), as attention/vsa_select.go passes them:
#   params  int32[5]          tiles nT, first video tile P, video query tiles V, kept tiles a row K, exempt (1: the
#                             P prefix tiles are kept first and the top K - P video tiles after them; 0: the
#                             top K of all tiles)
#   classes int32[nT]         each tile's key class (the last KEY_BLOCKS block that holds its valid rows)
#   scores  float32[H·nT·nT]  the routing scores per head, row t column s (attention/vsa.go tileScores)
# Results: idx int32[H·V·K] (the kept tiles of video query tile v of head h at row h·V + v, grouped by class)
# and ends int32[H·V·C] (where each class's group ends). Grid: (V, H, 1).
#
# Run it on the GPU machine, whose JAX has the CUDA plugin the Go binaries load:
#
#   python3 attention/testdata/gen_vsa_select.py [--bench] [--out DIR]
#
# Checks the kernel entry for entry against a NumPy stable sort on cases with heavy ties, signed zeros,
# both modes, one kept tile and every tile kept, and rows of 7 to 1,440 tiles, each at the narrowest width
# that holds it and at the widest; writes attention/vsa_select_triton.json (a list: one kernel record a
# width); with --bench times each width at a geometry it serves, at 1-8 warps, against the same selection
# as XLA sorts (jnp.argsort and jnp.sort, what the Go graph emitted), and keeps the fastest warp count.
import argparse, json, os, sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "internal", "xlaext", "testdata"))
sys.path.insert(0, HERE)

import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from gen_triton import lowered_triton_call, pallas_triton  # noqa: E402
from gen_vsa_triton import KEY_BLOCKS, class_groups, key_class, kernel_record, timed  # noqa: E402

C = len(KEY_BLOCKS)
assert C <= 4, "the kernel writes a row's group ends as one 4-lane store"
INT_MAX, INT_MIN = 2**31 - 1, -2**31
OPERANDS = 3
# Row widths (lanes; a power of two): a row of n tiles takes the narrowest that holds it, and a tiling of
# more tiles than the widest keeps XLA's sorts (attention/vsa_select.go).
WIDTHS = (256, 512, 1024, 2048)


def ordered(s):
    # float32 -> int32 in the same order (-0 taken as +0 first: XLA's comparator calls them equal).
    b = lax.bitcast_convert_type(jnp.where(s == 0, jnp.float32(0), s), jnp.int32)
    return jnp.bitwise_xor(b, jnp.bitwise_and(jnp.right_shift(b, 31), INT_MAX))


def select_kernel(width):
    # The whole row in registers: the search's 31 counts are compares and a reduction, with no loads
    # between them (a version that read the row in chunks each count ran slower on an H100: the loads'
    # latency lay on the search's serial path).
    def kernel(params_ref, class_ref, scores_ref, idx_ref, ends_ref):
        tile, head = pl.program_id(0), pl.program_id(1)
        n, first, tiles, kept, exempt = params_ref[0], params_ref[1], params_ref[2], params_ref[3], params_ref[4]
        row = head * tiles + tile
        cols = lax.broadcasted_iota(jnp.int32, (width,), 0)
        valid = cols < n
        s = plgpu.load(scores_ref.at[pl.ds((head * n + first + tile) * n, width)], mask=valid, other=0.0)
        key = jnp.where(valid, ordered(s), INT_MIN)
        key = jnp.where((cols < first) & (exempt != 0), INT_MAX, key)

        def enough(t):
            return jnp.sum((key >= t).astype(jnp.int32)) >= kept

        def bit(i, t):
            # Bits 30..0 of the largest t with at least kept keys >= t (the sign bit decided before the loop).
            cand = jnp.bitwise_or(t, jnp.left_shift(jnp.int32(1), 30 - i))
            return jnp.where(enough(cand), cand, t)

        t = lax.fori_loop(0, 31, bit, jnp.where(enough(jnp.int32(0)), jnp.int32(0), jnp.int32(INT_MIN)))
        above = key > t
        tied = valid & (key == t)
        room = kept - jnp.sum(above.astype(jnp.int32))
        chosen = valid & (above | (tied & (jnp.cumsum(tied.astype(jnp.int32)) <= room)))
        cls = plgpu.load(class_ref.at[pl.ds(0, width)], mask=valid, other=0)
        lane = lax.broadcasted_iota(jnp.int32, (4,), 0)
        ends, at = jnp.zeros((4,), jnp.int32), jnp.int32(0)
        for c in range(C):
            # Class c's kept columns in ascending order at their prefix-sum positions after the groups before.
            m = chosen & (cls == c)
            plgpu.store(idx_ref.at[row * kept + at + jnp.cumsum(m.astype(jnp.int32)) - 1], cols, mask=m)
            at = at + jnp.sum(m.astype(jnp.int32))
            ends = jnp.where(lane == c, at, ends)
        plgpu.store(ends_ref.at[pl.ds(row * C, 4)], ends, mask=lane < C)
    return kernel


def width_of(n):
    return min(w for w in WIDTHS if w >= n)


def select_call(heads, tiles, kept, warps, width):
    return pallas_triton(select_kernel(width), warps, 1, grid=(tiles, heads),
                         out_shape=(jax.ShapeDtypeStruct((heads * tiles * kept,), jnp.int32),
                                    jax.ShapeDtypeStruct((heads * tiles * C,), jnp.int32)), name="vsa_select")


def classes_of(sizes):
    return np.array([key_class(int(n)) for n in sizes], np.int32)


def operands(scores, sizes, first, kept, exempt):
    n = len(sizes)
    return [np.array([n, first, n - first, kept, int(exempt)], np.int32), classes_of(sizes), scores.reshape(-1)]


def reference(scores, sizes, first, kept, exempt):
    # The Go graph's XLA path in NumPy: a stable descending sort of each video row (of its video columns
    # after the prefix ones in exempt mode), the first kept, then grouped by class, ascending.
    h, n, _ = scores.shape
    cls = classes_of(sizes)
    idx, ends = [], []
    for hh in range(h):
        for t in range(first, n):
            row = scores[hh, t]
            if exempt and first:
                top = list(range(first)) + list(first + np.argsort(-row[first:], kind="stable")[:kept - first])
            else:
                top = list(np.argsort(-row, kind="stable")[:kept])
            top, row_ends = class_groups(top, cls)
            idx += top
            ends += row_ends
    return np.array(idx, np.int32), np.array(ends, np.int32)


def tie_heavy(rng, h, n):
    # Scores on a coarse grid (many ties across the k-th value), with signed zeros among them.
    s = np.round(rng.standard_normal((h, n, n)) * 2).astype(np.float32) / 4
    zeros = s == 0
    s[zeros & (rng.random(s.shape) < 0.5)] = -0.0
    return s


def sizes_with_classes(rng, n):
    # Tile sizes of every class (whole, 17-32 and 1-16 valid rows).
    return rng.choice([64, 64, 64, 40, 27, 12, 1], size=n).astype(np.int32)


# Parity cases: (heads, tiles, prefix tiles, kept, exempt, label).
CASES = [
    (2, 7, 2, 4, True, "tiny, exempt"),
    (2, 7, 2, 4, False, "tiny, compete"),
    (3, 289, 9, 37, True, "FastH3-like, exempt"),
    (3, 289, 9, 37, False, "FastH3-like, compete"),
    (2, 624, 0, 125, True, "Wan-like, no prefix"),
    (2, 40, 3, 1, False, "one tile kept"),
    (2, 40, 3, 40, True, "every tile kept"),
    (1, 1440, 4, 180, True, "Wan 720p-like, distinct scores"),
]


def check_parity(warps):
    # Every case at the narrowest width that holds it and at the widest (warps: each width's).
    rng = np.random.default_rng(0)
    for h, n, first, kept, exempt, label in CASES:
        scores = tie_heavy(rng, h, n)
        if "distinct" in label:
            scores = rng.standard_normal((h, n, n)).astype(np.float32)  # the order alone decides
        sizes = sizes_with_classes(rng, n)
        want_idx, want_ends = reference(scores, sizes, first, kept, exempt)
        for width in sorted({width_of(n), WIDTHS[-1]}):
            f = jax.jit(select_call(h, n - first, kept, warps[width], width))
            idx, ends = (np.asarray(x) for x in f(*operands(scores, sizes, first, kept, exempt)))
            bad = int((idx != want_idx).sum()) + int((ends != want_ends).sum())
            print(f"parity width={width} warps={warps[width]} {label} (H {h}, tiles {n}, prefix {first}, kept {kept}): {bad} entries differ")
            assert bad == 0, "the select kernel disagrees with the stable sort"


def xla_select(scores, classes, first, kept, exempt):
    # The same lists as XLA sorts, as attention/vsa.go and vsa_triton.go emitted them (the bench's baseline).
    h, n, _ = scores.shape
    video = scores[:, first:, :]
    if exempt and first:
        top = first + jnp.argsort(-video[..., first:], axis=-1, stable=True)[..., :kept - first]
        top = jnp.concatenate([jnp.broadcast_to(jnp.arange(first, dtype=top.dtype), top.shape[:2] + (first,)), top], -1)
    else:
        top = jnp.argsort(-video, axis=-1, stable=True)[..., :kept]
    keyed = jnp.sort(classes[top] * n + top, axis=-1)
    ends = jnp.stack([(keyed // n <= c).sum(-1) for c in range(C)], -1)
    return (keyed % n).reshape(-1).astype(jnp.int32), ends.reshape(-1).astype(jnp.int32)


# What --bench times at each width: (label, heads, tiles, prefix tiles, kept) at sparsity 0.9, our FastH3
# and Wan 1.3B tilings at their release sizes (gen_vsa_triton.BENCH_GEOMETRIES), a smaller H3 row and Wan
# 14B at 720x1280x81 (6 x 12 x 20 video tiles).
BENCH = {
    256: ("h3_170_tiles", 56, 170, 10, 26),
    512: ("h3_tiling", 56, 289, 9, 37),
    1024: ("wan_tiling", 12, 624, 0, 125),
    2048: ("wan14b_720p", 40, 1440, 0, 144),
}
# Heads a timed call runs, times the geometry's: one call's dispatch is then a small part of its time.
REPEAT = 8


def bench(rng):
    # Each width at its geometry, each warp count, against XLA's sorts on the same scores; per geometry
    # (a call's time over REPEAT).
    timings = {}
    for width, (label, h, n, first, kept) in BENCH.items():
        hh = h * REPEAT
        scores = rng.standard_normal((hh, n, n), dtype=np.float32)
        sizes = sizes_with_classes(rng, n)
        ops = [jnp.asarray(x) for x in operands(scores, sizes, first, kept, True)]
        js, jc = jnp.asarray(scores), jnp.asarray(classes_of(sizes))
        xf = jax.jit(lambda s, c: xla_select(s, c, first, kept, True))
        row = {"xla_ms": timed(lambda: xf(js, jc), 10) * 1e3 / REPEAT}
        want = [np.asarray(x) for x in xf(js, jc)]
        for warps in (1, 2, 4, 8):
            f = jax.jit(select_call(hh, n - first, kept, warps, width))
            row[f"ours_w{warps}_ms"] = timed(lambda: f(*ops), 10) * 1e3 / REPEAT
            same = all(np.array_equal(np.asarray(a), b) for a, b in zip(f(*ops), want))
            print(f"{label} (width {width}): ours warps={warps} {row[f'ours_w{warps}_ms']:.4f} ms, the same lists as XLA's: {same}")
            assert same, "the select kernel disagrees with XLA's sorts"
        print(f"{label} (width {width}): XLA sorts {row['xla_ms']:.4f} ms")
        timings[label] = row
    return timings


def kept_warps():
    # The committed kernel file's warps per width, so a run without --bench does not silently change them.
    try:
        with open(os.path.join(HERE, "..", "vsa_select_triton.json")) as fh:
            return {int(k["width"]): int(k["num_warps"]) for k in json.load(fh)}
    except (OSError, KeyError, ValueError, TypeError):
        return {w: max(1, w // 512) for w in WIDTHS}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, ".."), help="attention/ (the kernel file)")
    ap.add_argument("--bench", action="store_true", help="time each width against XLA's sorts and keep the fastest warp count")
    args = ap.parse_args()
    warps = kept_warps()
    timings = {}
    if args.bench:
        timings = bench(np.random.default_rng(3))
        for width, (label, *_) in BENCH.items():
            row = timings[label]
            warps[width] = int(min((k for k in row if k.startswith("ours_")), key=row.get).split("_w")[1].split("_")[0])
        print("launch settings (width: warps):", warps)
    check_parity(warps)
    kernels = []
    for width in WIDTHS:
        # One IR for every geometry of a width: lowered at two, compared.
        irs = []
        for h, n, kept in [(2, 7, 4), (56, width // 2 + 1, 37)]:
            shapes = [jax.ShapeDtypeStruct(s, d) for s, d in [((5,), jnp.int32), ((n,), jnp.int32), ((h * n * n,), jnp.float32)]]
            cfg, api, other = lowered_triton_call(jax.jit(select_call(h, n, kept, warps[width], width)).lower(*shapes).as_text(), OPERANDS, "vsa_select")
            irs.append(cfg["ir"])
            print("lowered width", width, "at", h, n, kept, "grid", cfg["grid_x"], cfg["grid_y"], "ir bytes", len(cfg["ir"]), "api", api, "other", other)
        row = timings.get(BENCH[width][0], {})
        kernels.append(kernel_record("attention/testdata/gen_vsa_select.py", "vsa_select", warps[width], 1, irs, row,
                                     key_blocks=list(KEY_BLOCKS), width=width, operands=OPERANDS))
    with open(os.path.join(args.out, "vsa_select_triton.json"), "w") as fh:
        json.dump(kernels, fh, indent=1)
    print("wrote", os.path.join(args.out, "vsa_select_triton.json"))


if __name__ == "__main__":
    main()
