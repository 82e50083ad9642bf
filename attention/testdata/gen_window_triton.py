# Windowed attention (a sliding window with sink tokens) as a Triton kernel that a Go graph calls (XLA's
# `__gpu$xla.gpu.triton` custom call, internal/xlaext.TritonCall), and its GPU parity fixture.
#
# The math is FastVideo's MLX windowed attention (fastvideo/mlx_runtime/windowed_attention.py, called from
# the Wan self-attention in fastvideo/mlx_runtime/fastwan.py): over the flattened token index, query i sees
# key j iff |i - j| <= half or j < sink (half = window // 2; symmetric, non-causal). The kernel is the VSA
# fine stage of gen_vsa_triton.py on another block map: the sequence cut into 64-row tiles, each query tile
# walks its list of key tiles (the sink tiles, then the band that any of its rows reaches), reads each K and
# V tile in place and masks by the element rule above and by the sequence end; online softmax in float32
# with exp2, bf16 probabilities into the second product. A key tile that a row does not reach contributes
# nothing: processed before a tile the row does reach, its masked scores are wiped by that tile's rescale
# (exp2 of the masked value minus a real maximum is 0); every row reaches its own tile.
#
# Operands (row-major), as attention/window_triton.go passes them:
#   params  int32[5]          rows per head R (tiles·64), sequence length S, list stride K, half, sink
#   num     int32[R/64]       key tiles of each query tile (the same for every head)
#   idx     int32[R/64·K]     their indices, ascending, the first num of each row read
#   q, k, v bf16[H·R, 128]    rows zero-padded to R, head-major
# Result: bf16[H·R, 128], the rows of q. Grid: (R/64, H, 1).
#
# Run it on the GPU machine, whose JAX has the CUDA plugin the Go binaries load:
#
#   python3 attention/testdata/gen_window_triton.py [--bench] [--out DIR]
#
# Writes attention/window_triton.json (the kernel) and attention/testdata/window_triton.{json,safetensors}
# (cases with ragged tiles, sink tiles inside and outside the band, a window narrower than a tile; the
# float32 reference of the masked attention and the kernel's own output as JAX runs it), and with --bench times the kernel at the Wan 1.3B geometry.
import argparse, math, os, sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "internal", "xlaext", "testdata"))
sys.path.insert(0, HERE)

import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from gen_triton import lowered_triton_call, pallas_triton  # noqa: E402
from gen_vsa_triton import bf16, kept_launch_settings, kernel_record, plugin_version, timed, write_outputs  # noqa: E402

D, T = 128, 64
LOG2E = math.log2(math.e)
MASKED = -0.7 * float(np.finfo(np.float32).max)


def window_kernel(params_ref, num_ref, idx_ref, q_ref, k_ref, v_ref, o_ref):
    tile, head = pl.program_id(0), pl.program_id(1)
    rows, seq, stride, half, sink = params_ref[0], params_ref[1], params_ref[2], params_ref[3], params_ref[4]
    at_q = head * rows + tile * T
    q = q_ref[pl.ds(at_q, T), :]
    scale = LOG2E / math.sqrt(D)
    qrow = tile * T + lax.broadcasted_iota(jnp.int32, (T, T), 0)
    cols = lax.broadcasted_iota(jnp.int32, (T, T), 1)

    def body(i, carry):
        acc, m, l = carry
        kv = idx_ref[tile * stride + i]
        at = head * rows + kv * T
        k = k_ref[pl.ds(at, T), :]
        s = jnp.dot(q, k.T, preferred_element_type=jnp.float32) * scale
        col = kv * T + cols
        keep = (col < seq) & ((jnp.abs(qrow - col) <= half) | (col < sink))
        s = jnp.where(keep, s, MASKED)
        m2 = jnp.maximum(m, jnp.max(s, axis=1))
        p = jnp.exp2(s - m2[:, None])
        alpha = jnp.exp2(m - m2)
        v = v_ref[pl.ds(at, T), :]
        acc = acc * alpha[:, None] + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        return acc, m2, l * alpha + jnp.sum(p, axis=1)

    init = (jnp.zeros((T, D), jnp.float32), jnp.full((T,), -jnp.inf, jnp.float32), jnp.zeros((T,), jnp.float32))
    acc, _, l = lax.fori_loop(0, num_ref[tile], body, init)
    o_ref[pl.ds(at_q, T), :] = (acc / l[:, None]).astype(o_ref.dtype)


def window_call(heads, rows, warps, stages):
    return pallas_triton(window_kernel, warps, stages, grid=(rows // T, heads),
                         out_shape=jax.ShapeDtypeStruct((heads * rows, D), jnp.bfloat16), name="window_fwd")


def block_map(seq, window, sink):
    # Each query tile's key tiles: the sink tiles and the band its rows reach, ascending (the Go side
    # builds the same lists: attention's window block map).
    half, tiles = window // 2, -(-seq // T)
    lists = []
    for t in range(tiles):
        q0, q1 = t * T, min(seq, t * T + T) - 1
        band = range(max(0, q0 - half) // T, min(seq - 1, q1 + half) // T + 1)
        lists.append(sorted(set(range(-(-sink // T))) | set(band)))
    stride = max(len(x) for x in lists)
    idx = np.zeros((tiles, stride), np.int32)
    for t, x in enumerate(lists):
        idx[t, :len(x)] = x
    return np.array([len(x) for x in lists], np.int32), idx, stride


def operands(q, k, v, window, sink):
    # [1, S, H, D] (the Go graph's BSHD) to the kernel's head-major rows, zero-padded to whole tiles.
    _, s, h, _ = q.shape
    rows = -(-s // T) * T
    num, idx, stride = block_map(s, window, sink)
    pad = lambda x: jnp.pad(jnp.transpose(x[0], (1, 0, 2)), ((0, 0), (0, rows - s), (0, 0))).reshape(h * rows, D)
    params = np.array([rows, s, stride, window // 2, sink], np.int32)
    return [jnp.asarray(params), jnp.asarray(num), jnp.asarray(idx.reshape(-1)), pad(q), pad(k), pad(v)], rows


def unpack(out, s, h, rows):
    return np.ascontiguousarray(np.asarray(out, np.float32).reshape(h, rows, D)[:, :s].transpose(1, 0, 2)[None])


def reference(q, k, v, window, sink):
    # float32 masked attention of the bfloat16 inputs, [1, S, H, D].
    q, k, v = (np.asarray(x, np.float32)[0] for x in (q, k, v))
    s, h, _ = q.shape
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    keep = (np.abs(i - j) <= window // 2) | (j < sink)
    out = np.zeros((s, h, D), np.float32)
    for hh in range(h):
        sc = q[:, hh] @ k[:, hh].T / math.sqrt(D)
        sc = np.where(keep, sc, -np.inf)
        p = np.exp(sc - sc.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
        out[:, hh] = p @ v[:, hh]
    return out[None]


# The parity cases: (name, sequence length, heads, window, sink).
CASES = [
    ("ragged_sink_outside_band", 200, 2, 100, 20),   # 4 tiles, the last of 8 rows; sink tile 0 outside the far bands
    ("narrow_window", 150, 1, 30, 0),                # half 15: a band narrower than a tile
    ("sink_spans_tiles", 200, 1, 64, 70),            # the sink reaches into tile 1
    ("window_covers_all", 100, 1, 1000, 0),          # every tile: the kernel equals dense
]


# Launch settings tried (num_stages: how deep Triton pipelines the K/V tile loads).
CONFIGS = [(4, 2), (4, 3), (4, 4), (4, 5), (4, 6), (8, 3)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, ".."), help="attention/ (the kernel) with testdata/ below it")
    ap.add_argument("--bench", action="store_true", help="time the kernel at the Wan 1.3B geometry against dense SDPA")
    args = ap.parse_args()
    import torch
    bf = lambda x: torch.from_numpy(np.asarray(x, np.float32)).to(torch.bfloat16)
    # The launch settings: the fastest at a window of ±3 frames with --bench, else the committed kernel file's.
    timings = {}
    warps, stages = kept_launch_settings("window_triton")
    if args.bench:
        # Wan 1.3B at 480x832x81: 21 latent frames of 30x52 = 1,560 tokens, S = 32,760, 12 heads.
        s, h = 32760, 12
        q, k, v = (bf16(np.random.default_rng(1), (1, s, h, D)) for _ in range(3))
        tq = [torch.from_numpy(np.asarray(x, np.float32)).cuda().to(torch.bfloat16).transpose(1, 2) for x in (q, k, v)]
        t_dense = timed(lambda: torch.nn.functional.scaled_dot_product_attention(*tq), 10)
        timings["dense_sdpa_ms"] = t_dense * 1e3
        print(f"wan1.3b: torch dense SDPA {t_dense*1e3:.3f} ms")
        for frames in (1, 3, 5):
            window = 2 * frames * 1560
            ops, rows = operands(q, k, v, window, 0)
            num = np.asarray(ops[1])
            flops = 4 * h * int(num.sum()) * T * T * D
            for w, st in CONFIGS:
                try:
                    f = jax.jit(window_call(h, rows, w, st))
                    t = timed(lambda: f(*ops), 20)
                except Exception as e:  # a configuration the compiler refuses (shared memory)
                    print(f"window ±{frames} frames: warps={w} stages={st}: {type(e).__name__}: {str(e)[:200]}")
                    continue
                timings[f"pm{frames}_w{w}_s{st}_ms"] = t * 1e3
                print(f"wan1.3b window ±{frames} frames ({window} tokens): warps={w} stages={st} {t*1e3:.3f} ms "
                      f"({flops/t/1e12:.0f} TFLOP/s on the listed tiles), dense {t_dense/t:.2f}x slower")
        key = min((k for k in timings if k.startswith("pm3_")), key=lambda k: timings[k])
        warps, stages = int(key.split("_w")[1].split("_")[0]), int(key.split("_s")[1].split("_")[0])
        print(f"launch settings: {warps} warps, {stages} stages")

    rng = np.random.default_rng(0)
    tensors, cases = {}, []
    for name, s, h, window, sink in CASES:
        q, k, v = (bf16(rng, (1, s, h, D)) for _ in range(3))
        ops, rows = operands(q, k, v, window, sink)
        ours = unpack(jax.jit(window_call(h, rows, warps, stages))(*ops), s, h, rows)
        want = reference(q, k, v, window, sink)
        err = float(np.abs(ours - want).max())
        print(f"parity {name}: S={s} H={h} window={window} sink={sink}: vs float32 reference {err:.3g}")
        assert err < 3e-2, "the kernel disagrees"
        for key, x in [("q", q), ("k", k), ("v", v), ("out_kernel", ours)]:
            tensors[f"{name}.{key}"] = bf(x)  # exact: the values are bfloat16
        tensors[f"{name}.out_reference"] = torch.from_numpy(want)
        cases.append({"name": name, "seq": s, "heads": h, "window": window, "sink": sink, "kernel_max_err": err})

    # One IR for every geometry: lower at two and compare the bytecode.
    irs = []
    for hh, rows in [(2, 320), (12, 32768)]:
        tiles = rows // T
        shapes = [jax.ShapeDtypeStruct(s, d) for s, d in [((5,), jnp.int32), ((tiles,), jnp.int32), ((tiles * 9,), jnp.int32)]
                  + [((hh * rows, D), jnp.bfloat16)] * 3]
        cfg, api, other = lowered_triton_call(jax.jit(window_call(hh, rows, warps, stages)).lower(*shapes).as_text(), 6, "window")
        irs.append(cfg["ir"])
        print("lowered", hh, rows, "grid", cfg["grid_x"], cfg["grid_y"], "ir bytes", len(cfg["ir"]), "api", api, "other", other)
    print("IR the same at both geometries:", irs[0] == irs[1])

    kernel = kernel_record("attention/testdata/gen_window_triton.py", "window_fwd", warps, stages, irs, timings)
    meta = {"kind": "window_triton", "generator": "attention/testdata/gen_window_triton.py", "head_dim": D, "cases": cases,
            "jax": jax.__version__, "plugin": plugin_version(),
            "note": "per case NAME: NAME.q, .k, .v [1, S, H, D] bfloat16; NAME.out_reference float32 masked attention of them "
                    "(|i-j| <= window//2 or j < sink); NAME.out_kernel the kernel's bfloat16 output (JAX running it)"}
    write_outputs(args.out, "window_triton", kernel, tensors, meta)


if __name__ == "__main__":
    main()
